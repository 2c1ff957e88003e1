"""Credentials never shown (issue 39, items 5 and 6): a password written in
every place a password can be written is found in none of the places baton
shows things: its log, /status, /readyz, /metrics, `baton status` and
`--check-config` output. Each output is checked to be non-empty, and to show
the masked form (user:***@) where it names a URL, so the test fails if an
output is missing instead of passing on an empty string.

  1. redis: a password-protected Redis (requirepass = the marker). The
     locker's password_file, a redis_psub source's password_file, an http
     sink whose URL carries user:marker@ and points at a refused port (every
     POST fails and is logged), an mqtt endpoint whose server URI carries
     user:marker@ (a refused port: its connect errors are logged), and
     rabbitmq / mysql_cdc endpoints with password files (disabled: validated,
     never connected). A schedule endpoint feeds the http sink once a second.
  2. etcd: the etcd locker with the marker as the password of an endpoint
     URL's user information: first an endpoint nobody listens on (its
     errors are logged, `baton status` fails naming it), then a real etcd
     (/status locker_endpoint, /metrics, `baton status`). etcd answers a
     request carrying HTTP Basic credentials with 401 "invalid auth token"
     unless baton authenticates (user + password_file): the replica never
     leads here, which this test does not need.
  3. secret_files: a password file others can read is refused (exit 78,
     file:line, chmod hint), a file over 64 KiB too; 'password' written in
     the locker group is refused without echoing it.

Run standalone: BATON_BIN=/path/baton python3 tests/integration/test_secrets.py [test_name ...]
"""
import os
import shutil
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

MARKER = "Pw-s3cr3t-XYZ"


def get(port, path, timeout=2.0):
    """(status, body) of GET path on the ops listener, 4xx/5xx included."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError:
        return None, ""


def secret_file(d, name, text=MARKER):
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(text + "\n")
    os.chmod(p, 0o600)
    return p


def no_marker(t, what, text, must_have=()):
    """text is non-empty, holds every string of must_have and not MARKER."""
    t.check(text.strip() != "", "%s is empty" % what)
    t.check(MARKER not in text, "%s shows the password: %r" % (
        what, [l for l in text.splitlines() if MARKER in l][:3]))
    for m in must_have:
        t.check(m in text, "%s does not show %r: %s" % (what, m, text[-600:]))


def test_redis(t):
    redis = t.redis()
    redis.client().cmd("CONFIG", "SET", "requirepass", MARKER)
    admin = redis.client(password=MARKER)
    sec = h.mktemp("baton-secrets-")
    pw = secret_file(sec, "redis-pw")
    refused = h.free_port()        # nobody listens: every POST fails
    mqtt_port = h.free_port()      # nor here
    mport = h.free_port()
    sink_url = "http://hook:%s@127.0.0.1:%d/in" % (MARKER, refused)
    main = "\n".join([
        'locker = { host = "127.0.0.1"; port = %d; password_file = "%s"; };' % (redis.port, pw),
        'sinks = ( { name = "out"; type = "stdout"; },',
        '          { name = "hook"; type = "http"; url = "%s"; retries = 0;' % sink_url,
        '            timeout_ms = 500; connect_timeout_ms = 200; } );',
        'metrics = { listen = "127.0.0.1:%d"; };' % mport,
        'log = { level = "debug"; };',
    ]) + "\n"
    eps = {
        "psub.cfg": 'name = "psub"; type = "redis_psub"; sink = "out"; host = "127.0.0.1"; port = %d;\n'
                    'password_file = "%s"; patterns = [ "sec.*" ];\n' % (redis.port, pw),
        "tick.cfg": 'name = "tick"; type = "schedule"; sink = "hook"; cron = "* * * * * *";\n',
        "mq.cfg": 'name = "mq"; type = "mqtt"; sink = "out"; server = "tcp://dev:%s@127.0.0.1:%d";\n'
                  'user = "dev"; password_file = "%s"; topics = [ "a/#" ]; shared_group = "g";\n'
                  'reconnect_max_ms = 500;\n' % (MARKER, mqtt_port, pw),
        "amqp.cfg": 'name = "amqp"; type = "rabbitmq"; sink = "out"; enabled = false;\n'
                    'host = "127.0.0.1"; port = %d; user = "app"; password_file = "%s";\n'
                    'exchange = "ev"; exchange_type = "fanout";\n' % (h.free_port(), pw),
        "cdc.cfg": 'name = "cdc"; type = "mysql_cdc"; sink = "out"; enabled = false;\n'
                   'host = "127.0.0.1"; port = %d; user = "cdc"; password_file = "%s";\n'
                   'server_id = 4242; tables = [ "shop.*" ];\n' % (h.free_port(), pw),
    }
    b = t.baton(main, eps, start=False)
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    h.log("--check-config (exit %d): %s%s" % (rc, out, err))
    t.check(rc == 0, "--check-config exit %d: %s" % (rc, err[-400:]))
    no_marker(t, "--check-config output", out + err, ["configuration OK"])

    b.start()
    # the leader of psub consumes; a published message reaches stdout
    ok = h.wait_until(lambda: h.status_endpoints(mport).get("psub", {}).get("role") == "leader", 15, 0.05)
    t.require(ok, "psub does not lead within 15 s: %s" % h.status_endpoints(mport))
    got = h.wait_until(lambda: (admin.cmd("PUBLISH", "sec.1", "hello") and False)
                       or any(r.get("endpoint") == "psub" for r in b.poll_records()), 10, 0.2)
    t.check(got, "nothing published on sec.1 reached the stdout sink (source login failed?)")
    # POST failures of the http sink are logged (each second's tick)
    posted = h.wait_until(lambda: "sink 'hook': POST" in b.stderr_text(), 10, 0.1)
    t.check(posted, "no POST failure of sink 'hook' logged within 10 s")
    time.sleep(1.2)  # /status and /readyz are refreshed every second

    code, status = get(mport, "/status")
    h.log("/status (%s): %s" % (code, status[:500]))
    no_marker(t, "/status", status, ['"psub"', "127.0.0.1:%d" % redis.port])
    code, ready = get(mport, "/readyz")
    h.log("/readyz (%s): %s" % (code, ready[:400]))
    no_marker(t, "/readyz", ready, ["hook:***@127.0.0.1:%d" % refused])
    code, metrics = get(mport, "/metrics")
    no_marker(t, "/metrics", metrics, ["baton_"])
    rc, out, err = h.run_baton(["status", "-c", b.cfg])
    h.log("baton status (exit %d):\n%s%s" % (rc, out, err))
    t.check(rc == 0, "baton status exit %d: %s" % (rc, err[-400:]))
    no_marker(t, "baton status output", out + err, ["psub", "has-leader"])

    rc = b.term()
    t.check(rc == 0, "exit %s after SIGTERM" % rc)
    log = b.stderr_text()
    h.log("log lines naming a masked URL: %s" % [l for l in log.splitlines() if ":***@" in l][:4])
    no_marker(t, "the log", log, ["POST http://hook:***@127.0.0.1:%d/in" % refused,
                                  "tcp://dev:***@127.0.0.1:%d" % mqtt_port])


def etcd_main(endpoint, mport, auth=""):
    return "\n".join([
        'locker = { backend = "etcd"; endpoints = [ "%s" ]; prefix = "baton"; %s};' % (endpoint, auth),
        'lease = { ttl_ms = 2000; };',
        'sinks = ( { name = "out"; type = "stdout"; } );',
        'metrics = { listen = "127.0.0.1:%d"; };' % mport,
        'log = { level = "debug"; };',
    ]) + "\n"


TICK = {"tick.cfg": 'name = "tick"; type = "schedule"; sink = "out"; cron = "* * * * * *";\n'}
# plus an ActiveGuard endpoint (disabled: never connects) whose lease
# `baton status` asks the locker about
ETCD_EPS = dict(TICK, **{"amqp.cfg": 'name = "amqp"; type = "rabbitmq"; sink = "out"; enabled = false;\n'
                                     'exchange = "ev"; exchange_type = "fanout";\n'})


def test_etcd(t):
    # a password in an etcd endpoint URL is refused (etcd's gateway answers
    # Basic credentials 401): by --check-config, baton status and the
    # daemon, each naming the line and never echoing the URL
    down = h.free_port()
    url = "http://root:%s@127.0.0.1:%d" % (MARKER, down)
    b = t.baton(etcd_main(url, h.free_port()), ETCD_EPS, name="url", start=False)
    for what, args in (("--check-config", ["-c", b.cfg, "--check-config"]),
                       ("baton status", ["status", "-c", b.cfg]),
                       ("the daemon", ["-c", b.cfg])):
        rc, out, err = h.run_baton(args)
        h.log("%s, user info in the etcd URL (exit %d): %s" % (what, rc, (out + err).strip()[-300:]))
        t.check(rc == 78, "%s: exit %d, expected 78 (configuration error)" % (what, rc))
        no_marker(t, "%s output (etcd URL)" % what, out + err,
                  ["%s:1:" % b.cfg, "user information in its URL", "password_file"])

    # user + password_file towards a real etcd (auth not enabled there):
    # the password goes in the authenticate request's body only
    if not shutil.which("etcd"):
        t.skip("etcd is not installed: the running part of the etcd case cannot run")
    import etcd as etcdlib  # noqa: E402
    cluster = etcdlib.EtcdCluster(t, members=1)
    port = int(cluster.urls[0].rsplit(":", 1)[1])
    pw = secret_file(h.mktemp("baton-secrets-"), "etcd.pw")
    mport = h.free_port()
    b = t.baton(etcd_main("http://127.0.0.1:%d" % port, mport,
                          'user = "root"; password_file = "%s"; ' % pw), ETCD_EPS, name="up")
    ok = h.wait_until(lambda: h.http_status(mport) is not None, 15, 0.1)
    t.require(ok, "no /status within 15 s: %s" % b.stderr_text()[-800:])
    time.sleep(1.2)
    code, status = get(mport, "/status")
    h.log("/status (%s): %s" % (code, status[:400]))
    no_marker(t, "/status (etcd)", status, ['"locker_endpoint":"http://127.0.0.1:%d"' % port])
    code, metrics = get(mport, "/metrics")
    no_marker(t, "/metrics (etcd)", metrics, ["baton_"])
    code, ready = get(mport, "/readyz")
    t.check(MARKER not in ready, "/readyz shows the password: %r" % ready[:300])
    rc, out, err = h.run_baton(["status", "-c", b.cfg])
    h.log("baton status, etcd up (exit %d):\n%s%s" % (rc, out, err))
    no_marker(t, "baton status output (etcd up)", out + err, ["127.0.0.1:%d" % port])
    t.check(b.term() == 0, "etcd replica: exit status after SIGTERM")
    no_marker(t, "the log (etcd up)", b.stderr_text(), ["started"])


def test_secret_files(t):
    sec = h.mktemp("baton-secrets-")
    pw = secret_file(sec, "pw")
    main = ('locker = { host = "127.0.0.1"; port = 6379;\n'
            '  password_file = "%s"; };\n'
            'sinks = ( { name = "out"; type = "stdout"; } );\n' % pw)
    b = t.baton(main, TICK, start=False)
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    t.check(rc == 0, "mode 0600: --check-config exit %d: %s" % (rc, err[-300:]))
    os.chmod(pw, 0o640)
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    t.check(rc == 0, "mode 0640: --check-config exit %d: %s" % (rc, err[-300:]))
    os.chmod(pw, 0o644)
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    h.log("mode 0644 (exit %d): %s" % (rc, err.strip()))
    t.check(rc == 78 and ("%s:2:" % b.cfg) in err and "readable by others (mode 0644)" in err
            and "chmod 600 %s" % pw in err,
            "mode 0644: exit 78 naming file:line, the mode and chmod: exit %d: %s" % (rc, err))
    no_marker(t, "the mode error", err)
    # in $CREDENTIALS_DIRECTORY the mode is systemd's business
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"], env={"CREDENTIALS_DIRECTORY": sec})
    t.check(rc == 0, "mode 0644 in $CREDENTIALS_DIRECTORY: exit %d: %s" % (rc, err[-300:]))
    os.chmod(pw, 0o600)
    with open(pw, "a") as f:
        f.write("x" * (64 * 1024))
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    h.log("over 64 KiB (exit %d): %s" % (rc, err.strip()))
    t.check(rc == 78 and "limited to 64 KiB" in err and pw in err,
            "a file over 64 KiB: exit 78 naming it and the limit: exit %d: %s" % (rc, err))
    # 'password' itself in the config: refused without being echoed
    with open(b.cfg, "w") as f:
        f.write('locker = { host = "127.0.0.1"; password = "%s"; };\n'
                'sinks = ( { name = "out"; type = "stdout"; } );\n' % MARKER)
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    t.check(rc == 78, "'password' in the locker group: exit %d" % rc)
    no_marker(t, "the 'password' error", err, ["password_file"])


def test_http_header_too_long(t):
    """Issue 39 item 8: a receiver whose answer has a header line over
    libcurl's limit got "Out of memory" in the log; now one line saying what
    it is, URL masked."""
    import socket
    import threading
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            try:
                c.settimeout(2)
                c.recv(65536)
                c.sendall(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * (300 * 1024) + b"\r\n\r\n")
            except OSError:
                pass
            finally:
                c.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    t.cleanup(lambda: (stop.set(), th.join(2), srv.close()))
    main = h.main_cfg(sinks='{ name = "hook"; type = "http"; url = "http://hook:%s@127.0.0.1:%d/in"; '
                            'retries = 0; }' % (MARKER, port))
    b = t.baton(main, {"tick.cfg": 'name = "tick"; type = "schedule"; sink = "hook"; '
                                   'cron = "* * * * * *";\n'})
    ok = h.wait_until(lambda: "header line too long" in b.stderr_text(), 10, 0.1)
    b.term()
    log = b.stderr_text()
    lines = [l for l in log.splitlines() if "header line too long" in l]
    h.log("lines: %s" % lines[:2])
    t.check(ok, "no 'header line too long' line within 10 s: %s" % log[-800:])
    t.check("ut of memory" not in log.replace("(curl: out of memory", ""),
            "a bare 'out of memory' is still logged: %s" % log[-600:])
    no_marker(t, "the log", log, ["POST http://hook:***@127.0.0.1:%d/in rejected, not retried: receiver's "
                                  "answer has a header line too long or malformed (curl: out of memory"
                                  % port])


if __name__ == "__main__":
    h.main(globals())
