#!/usr/bin/env python3
"""Integration tests of the mqtt endpoint against a real mosquitto (and a
real redis-server for the ActiveGuard lease), with real baton processes."""

import os
import re
import signal
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
from mosquitto import Mosquitto  # noqa: E402
from tlsfiles import make_ca, make_tls_files  # noqa: E402

LEASE = {"ttl_ms": 1500, "renew_ms": 500, "retry_ms": 250}
SUBSCRIBED = "subscribed to"


def ep_cfg(name, port, topics, extra="", sink="out"):
    return ('name = "%s"; type = "mqtt"; sink = "%s";\n'
            'server = "tcp://127.0.0.1:%d";\n'
            'topics = [%s];\n%s\n') % (name, sink, port, ", ".join('"%s"' % x for x in topics), extra)


def subscribed(b, name=None):
    tag = "mqtt[%s]" % name if name else "mqtt["
    return any(tag in line and SUBSCRIBED in line for line in b.stderr_text().splitlines())


def wait_records(batons, n, timeout):
    def total():
        for b in batons:
            b.poll_records()
        return sum(len(b.records) for b in batons) >= n
    h.wait_until(total, timeout, 0.1)
    return sum(len(b.records) for b in batons)


def recs(b):
    b.poll_records()
    return b.records


def metric(port, name, endpoint):
    try:
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + "{") and 'endpoint="%s"' % endpoint in line:
            return float(line.rsplit(" ", 1)[1])
    return None


# --------------------------------------------------------------------------

def test_shared_group_exactly_once(t):
    """3 processes with shared_group, 3,000 QoS 1 messages -> each forwarded
    exactly once across the three, load spread over more than one."""
    mq = Mosquitto()
    cfg = ep_cfg("shared", mq.port, ["load/#"], 'shared_group = "workers"; qos = 1;')
    bs = [t.baton(h.main_cfg(), {"mqtt.cfg": cfg}) for _ in range(3)]
    t.require(h.wait_until(lambda: all(subscribed(b) for b in bs), 15, 0.1),
              "not every baton subscribed within 15 s")
    n = 3000
    t0 = time.monotonic()
    mq.publish_lines("load/x", ["m-%d" % i for i in range(n)], qos=1)
    got = wait_records(bs, n, 60)
    dt = time.monotonic() - t0
    time.sleep(1.0)  # anything extra (a duplicate) would show up now
    for b in bs:
        b.poll_records()
    payloads = [r["payload"] for b in bs for r in b.records]
    per = [len(b.records) for b in bs]
    h.log("forwarded %d of %d in %.1fs, per process %s" % (len(payloads), n, dt, per))
    dups = h.duplicates(payloads)
    missing = set("m-%d" % i for i in range(n)) - set(payloads)
    t.check(not dups, "duplicates: %d (e.g. %s)" % (len(dups), list(dups.items())[:3]))
    t.check(not missing, "missing: %d (e.g. %s)" % (len(missing), sorted(missing)[:3]))
    t.check(sum(1 for c in per if c > 0) > 1, "load not spread: per process %s" % per)
    rec = bs[0].records[0] if bs[0].records else (bs[1].records or bs[2].records)[0]
    t.check(rec.get("type") == "mqtt" and rec.get("topic") == "load/x" and rec.get("qos") == 1
            and rec.get("epoch") == 0 and rec.get("id", "").startswith("g"), "envelope (an id generated: QoS 1 gives none): %r" % rec)
    for b in bs:
        t.check(b.term() == 0, "%s did not exit 0 on SIGTERM" % b.name)


def test_active_guard_failover(t):
    """3 processes, plain subscription + ActiveGuard: each message exactly once,
    by the leader; leader SIGKILL -> a standby takes over within
    ttl + retry + 1 s, no duplicates."""
    mq = Mosquitto()
    redis = t.redis()
    cfg = ep_cfg("plain", mq.port, ["bc/+"], "qos = 1;")
    main = h.main_cfg(redis.port, lease=LEASE)
    bs = [t.baton(main, {"mqtt.cfg": cfg}) for _ in range(3)]
    t.require(h.wait_until(lambda: sum(subscribed(b) for b in bs) == 1, 15, 0.1),
              "no leader subscribed within 15 s")
    time.sleep(1.0)
    t.check(sum(subscribed(b) for b in bs) == 1, "more than one baton subscribed")
    leader = next(b for b in bs if subscribed(b))
    n = 300
    mq.publish_lines("bc/1", ["a-%d" % i for i in range(n)], qos=1)
    wait_records(bs, n, 30)
    time.sleep(0.5)
    for b in bs:
        b.poll_records()
    per = {b.name: len(b.records) for b in bs}
    h.log("before failover: per process %s (leader %s)" % (per, leader.name))
    t.check(len(leader.records) == n and all(len(b.records) == 0 for b in bs if b is not leader),
            "not exactly once by the leader: %s" % per)
    t.check(not h.duplicates(r["payload"] for r in leader.records), "duplicates before failover")

    # Publish a numbered message every 20 ms across the kill.
    stop = threading.Event()
    sent = []

    def publisher():
        i = 0
        while not stop.is_set() and i < 1000:
            mq.publish("bc/2", "f-%d" % i, qos=1)
            sent.append(("f-%d" % i, time.monotonic()))
            i += 1
            time.sleep(0.02)

    th = threading.Thread(target=publisher, daemon=True)
    th.start()
    time.sleep(1.0)
    t_kill = time.monotonic()
    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait()
    others = [b for b in bs if b is not leader]

    def new_leader_record():
        for b in others:
            b.poll_records()
            if b.records:
                return b
        return None
    nb = h.wait_until(new_leader_record, 15, 0.02)
    t_take = time.monotonic()
    time.sleep(1.0)
    stop.set()
    th.join(30)
    time.sleep(1.0)
    for b in bs:
        if b is not leader:
            b.poll_records()
    leader.poll_records()
    bound = (LEASE["ttl_ms"] + LEASE["retry_ms"]) / 1000.0 + 1.0
    t.require(nb is not None, "no standby forwarded anything within 15 s of the kill")
    takeover = t_take - t_kill
    f_all = [r["payload"] for b in bs for r in b.records if r["topic"] == "bc/2"]
    h.log("takeover after SIGKILL: %.2fs (bound %.2fs); failover messages: sent %d, forwarded %d "
          "(lost in the gap %d: broadcast, no session), by %s" %
          (takeover, bound, len(sent), len(f_all), len(sent) - len(set(f_all)), nb.name))
    t.check(takeover <= bound, "takeover %.2fs > %.2fs" % (takeover, bound))
    dups = h.duplicates(f_all + [r["payload"] for b in bs for r in b.records if r["topic"] == "bc/1"])
    t.check(not dups, "duplicates across the failover: %s" % list(dups.items())[:5])
    t.check(sum(1 for b in others if any(r["topic"] == "bc/2" and r["_t"] > t_kill for r in b.records)) == 1,
            "more than one standby forwarded after the kill")
    t.check(all(r["epoch"] > leader.records[0]["epoch"] for r in nb.records),
            "the new leader's epoch is not above the old one")


def test_qos2_shared_exactly_once(t):
    """QoS 2 (exactly-once handshake PUBREC/PUBREL/PUBCOMP) over a $share
    group of 3 processes: 1,000 messages, each forwarded once, qos 2 in the
    envelope, acknowledged after the sink."""
    mq = Mosquitto()
    cfg = ep_cfg("q2", mq.port, ["q2/#"], 'shared_group = "g"; qos = 2;')
    bs = [t.baton(h.main_cfg(), {"mqtt.cfg": cfg}) for _ in range(3)]
    t.require(h.wait_until(lambda: all(subscribed(b) for b in bs), 15, 0.1), "not all subscribed")
    n = 1000
    t0 = time.monotonic()
    mq.publish_lines("q2/x", ["q2-%d" % i for i in range(n)], qos=2)
    got = wait_records(bs, n, 30)
    dt = time.monotonic() - t0
    time.sleep(0.5)
    allrecs = [r for b in bs for r in recs(b)]
    payloads = [r["payload"] for r in allrecs]
    per = [len(recs(b)) for b in bs]
    h.log("QoS 2: forwarded %d of %d in %.1fs, per process %s" % (got, n, dt, per))
    t.check(sorted(payloads) == sorted("q2-%d" % i for i in range(n)),
            "not each message exactly once: %d records, %d distinct" % (len(payloads), len(set(payloads))))
    t.check(all(r.get("qos") == 2 for r in allrecs), "envelope qos is not 2")
    for b in bs:
        t.check(b.term() == 0, "baton did not exit 0")


def test_qos1_sink_down(t):
    """QoS 1 with the HTTP sink down for 5 s: everything is delivered once it
    recovers (acknowledged to the broker only after the sink accepted)."""
    mq = Mosquitto()
    recv = h.HttpReceiver()
    recv.down = True
    sinks = '{ name = "web"; type = "http"; url = "%s"; retries = 2; backoff_ms = 100; backoff_max_ms = 500; }' % recv.url
    cfg = ep_cfg("down", mq.port, ["sd/#"], 'shared_group = "g"; qos = 1;', sink="web")
    b = t.baton(h.main_cfg(sinks=sinks), {"mqtt.cfg": cfg})
    t.require(h.wait_until(lambda: subscribed(b), 15, 0.1), "not subscribed within 15 s")
    n = 200
    mq.publish_lines("sd/x", ["d-%d" % i for i in range(n)], qos=1)
    time.sleep(5.0)
    during = len(recv.accepted())
    attempts = len(recv.requests)
    recv.down = False
    t0 = time.monotonic()
    h.wait_until(lambda: len(set(r["payload"] for r in recv.accepted())) >= n, 60, 0.1)
    dt = time.monotonic() - t0
    time.sleep(0.5)
    acc = [r["payload"] for r in recv.accepted()]
    missing = set("d-%d" % i for i in range(n)) - set(acc)
    h.log("sink down 5 s: %d accepted while down, %d refused attempts; after recovery %d accepted "
          "(%d distinct, %d duplicates) in %.1fs; missing %d" %
          (during, attempts, len(acc), len(set(acc)), len(acc) - len(set(acc)), dt, len(missing)))
    t.check(during == 0, "accepted while down?")
    t.check(not missing, "lost: %d (e.g. %s)" % (len(missing), sorted(missing)[:5]))
    t.check(b.term() == 0, "baton did not exit 0")


def test_wildcards_retained_v311_binary(t):
    """Wildcards + and #, retained messages, MQTT 3.1.1 mode, a binary
    payload, MQTT 5 properties and the message id property."""
    mq = Mosquitto()
    mq.publish("ret/a", "kept", qos=1, retain=True)
    v5 = ep_cfg("v5", mq.port, ["w/+/x", "h/#", "ret/+"], 'qos = 1; id_property = "message-id";')
    v3 = ep_cfg("v3", mq.port, ["w/+/x", "ret/+"], 'qos = 1; protocol = "3.1.1";')
    b = t.baton(h.main_cfg(), {"a.cfg": v5, "b.cfg": v3})
    t.require(h.wait_until(lambda: subscribed(b, "v5") and subscribed(b, "v3"), 15, 0.1),
              "not both subscribed within 15 s")
    blob = bytes(range(256))
    mq.publish("w/1/x", "plus-match")
    mq.publish("w/1/y", "no-match")
    mq.publish("w/1/2/x", "no-match-deep")
    mq.publish("h", "hash-parent")
    mq.publish("h/a/b", "hash-deep")
    mq.publish("w/bin/x", blob)
    mq.publish("w/p/x", "props", props=[("user-property", "message-id", "m-77"),
                                         ("user-property", "k", "v"),
                                         ("content-type", "text/plain"),
                                         ("correlation-data", "corr-1")])
    mq.publish("w/3/x", "from-311", v5=False, qos=0)

    def by_ep(name):
        b.poll_records()
        return [r for r in b.records if r["endpoint"] == name]
    h.wait_until(lambda: len(by_ep("v5")) >= 7 and len(by_ep("v3")) >= 5, 15, 0.1)
    time.sleep(0.5)
    r5, r3 = by_ep("v5"), by_ep("v3")
    t5 = sorted(r["topic"] for r in r5)
    h.log("v5 topics %s; v3 topics %s" % (t5, sorted(r["topic"] for r in r3)))
    t.check(t5 == sorted(["ret/a", "w/1/x", "h", "h/a/b", "w/bin/x", "w/p/x", "w/3/x"]),
            "v5 topics: %s" % t5)
    t.check(not any(r["topic"] in ("w/1/y", "w/1/2/x") for r in r5 + r3), "non-matching topic forwarded")
    ret = [r for r in r5 + r3 if r["topic"] == "ret/a"]
    t.check(len(ret) == 2 and all(r["retained"] is True and r["payload"] == "kept" for r in ret),
            "retained: %r" % ret)
    t.check(all(r["retained"] is False for r in r5 + r3 if r["topic"] != "ret/a"), "retained flag on live msgs")
    binr = [r for r in r5 + r3 if r["topic"] == "w/bin/x"]
    t.check(len(binr) == 2 and all(r.get("payload_encoding") == "base64" and h.payload_bytes(r) == blob
                                   for r in binr), "binary payload: %r" % binr[:1])
    p = [r for r in r5 if r["topic"] == "w/p/x"]
    t.check(len(p) == 1 and p[0].get("id") == "m-77" and p[0].get("content_type") == "text/plain"
            and p[0].get("correlation_data") == "corr-1"
            and p[0].get("user_properties") == {"message-id": "m-77", "k": "v"},
            "MQTT 5 properties: %r" % p)
    p3 = [r for r in r3 if r["topic"] == "w/p/x"]
    t.check(len(p3) == 1 and "user_properties" not in p3[0] and p3[0].get("id", "").startswith("g"),
            "3.1.1 endpoint carries no properties: %r" % p3)
    q0 = [r for r in r5 + r3 if r["topic"] == "w/3/x"]
    t.check(len(q0) == 2 and all(r["qos"] == 0 and "packet_id" not in r for r in q0), "qos 0: %r" % q0)
    t.check(all(r["qos"] == 1 and r["packet_id"] > 0 for r in r5 if r["topic"] == "w/1/x"), "qos 1 fields")
    t.check(b.term() == 0, "baton did not exit 0")


def test_broker_down_and_bad_credentials(t):
    """Broker down at start and wrong credentials: clear errors, retries in
    the background, the other endpoints of the process unaffected."""
    good = Mosquitto(users={"baton": "right"})
    late_port = h.free_port()
    secret_dir = h.mktemp()
    with open(os.path.join(secret_dir, "pw"), "w") as f:
        f.write("right\n")
    os.chmod(os.path.join(secret_dir, "pw"), 0o600)  # baton refuses a secret file others can read
    cfgs = {
        "a-good.cfg": ep_cfg("good", good.port, ["ok/#"], 'shared_group = "g"; user = "baton"; '
                             'password_file = "%s";' % os.path.join(secret_dir, "pw")),
        "b-badpw.cfg": ep_cfg("badpw", good.port, ["ok/#"], 'shared_group = "g2"; user = "baton"; '
                              'password_env = "MQTT_BAD_PW"; reconnect_max_ms = 500;'),
        "c-late.cfg": ep_cfg("late", late_port, ["late/#"], 'shared_group = "g"; reconnect_max_ms = 500;'),
    }
    mport = h.free_port()
    main = h.main_cfg(extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    b = t.baton(main, cfgs, env={"MQTT_BAD_PW": "wrong"})
    t.require(h.wait_until(lambda: subscribed(b, "good"), 15, 0.1), "good endpoint not subscribed")
    for i in range(20):
        good.publish("ok/1", "g-%d" % i, user="baton", password="right")
    h.wait_until(lambda: len([r for r in recs(b) if r["endpoint"] == "good"]) >= 20, 10, 0.1)
    time.sleep(2.0)
    err = b.stderr_text()
    bad_lines = [l for l in err.splitlines() if "mqtt[badpw]" in l]
    late_lines = [l for l in err.splitlines() if "mqtt[late]" in l]
    h.log("badpw: %s" % (bad_lines[:1]))
    h.log("late: %s" % (late_lines[:1]))
    t.check(any(re.search(r"bad user name or password|not authorized", l, re.I) for l in bad_lines),
            "no clear credentials error")
    t.check(any("127.0.0.1:%d" % late_port in l and "retrying" in l for l in late_lines),
            "no clear broker-down error")
    bad_err = metric(mport, "baton_source_errors_total", "badpw")
    late_err = metric(mport, "baton_source_errors_total", "late")
    h.log("source errors so far: badpw %s, late %s" % (bad_err, late_err))
    t.check(bad_err is not None and bad_err >= 2, "badpw did not retry (source_errors %s)" % bad_err)
    t.check(late_err is not None and late_err >= 2, "late did not retry (source_errors %s)" % late_err)
    good_recs = [r for r in b.records if r["endpoint"] == "good"]
    t.check(len(good_recs) == 20, "good endpoint forwarded %d of 20" % len(good_recs))

    # the broker of the 'late' endpoint comes up: it connects by itself
    late = Mosquitto(port=late_port)
    t.check(h.wait_until(lambda: subscribed(b, "late"), 15, 0.1), "late endpoint never subscribed")
    late.publish("late/x", "finally")
    h.wait_until(lambda: any(r["endpoint"] == "late" for r in recs(b)), 10, 0.1)
    t.check(any(r["endpoint"] == "late" and r["payload"] == "finally" for r in b.records),
            "late endpoint forwarded nothing")
    t.check(not subscribed(b, "badpw"), "badpw subscribed with a wrong password?")
    t.check(b.term() == 0, "baton did not exit 0")


def test_servers_list(t):
    """servers: paho tries them in order from the first on every connect.
    [dead port, broker] -> subscribes on the broker, /status "source" is the
    broker's URI (also for a single server); [dead, dead] -> an error naming
    both servers, the lease released, retries, the process carries on."""
    mq = Mosquitto()
    redis = t.redis()
    dead = [h.free_port() for _ in range(3)]
    mport = h.free_port()
    good = ["tcp://127.0.0.1:%d" % dead[0], "tcp://127.0.0.1:%d" % mq.port]
    bad = ["tcp://127.0.0.1:%d" % dead[1], "mqtt://127.0.0.1:%d" % dead[2]]

    def cfg(name, servers, topic, extra=""):
        return ('name = "%s"; type = "mqtt"; sink = "out"; servers = [%s];\n'
                'topics = ["%s"];\n%s\n' % (name, ", ".join('"%s"' % x for x in servers), topic, extra))
    cfgs = {"a-multi.cfg": cfg("multi", good, "hs/#", "qos = 1;"),
            "b-down.cfg": cfg("down", bad, "hd/#", "reconnect_max_ms = 500;"),
            "c-single.cfg": ep_cfg("single", mq.port, ["hx/#"], 'shared_group = "g";')}
    b = t.baton(h.main_cfg(redis.port, lease=LEASE,
                           extra='metrics = { listen = "127.0.0.1:%d"; };' % mport), cfgs)
    t0 = time.monotonic()
    t.require(h.wait_until(lambda: subscribed(b, "multi") and subscribed(b, "single"), 10, 0.05),
              "multi/single not subscribed: %s" % [l for l in b.stderr_text().splitlines()
                                                   if "mqtt[" in l][:4])
    h.log("multi subscribed %.2fs after start (first server dead)" % (time.monotonic() - t0))
    n = 50
    mq.publish_lines("hs/1", ["s-%d" % i for i in range(n)], qos=1)
    wait_records([b], n, 10)
    got = sorted(r["payload"] for r in recs(b) if r["endpoint"] == "multi")
    t.check(got == sorted("s-%d" % i for i in range(n)), "multi forwarded %d of %d" % (len(got), n))
    st = h.status_endpoints(mport)
    src = {k: st.get(k, {}).get("source") for k in ("multi", "down", "single")}
    h.log("/status source: %s" % src)
    t.check(src["multi"] == good[1], "/status multi source %r, expected %r" % (src["multi"], good[1]))
    t.check(src["single"] == "tcp://127.0.0.1:%d" % mq.port, "/status single source %r" % src["single"])
    t.check(src["down"] is None, "/status down source %r" % src["down"])
    t.check(any("mqtt[multi]" in l and ("connected to %s" % good[1]) in l
                for l in b.stderr_text().splitlines()), "the log does not name the server in use")

    def down_errors():
        return [l for l in b.stderr_text().splitlines()
                if "mqtt[down]" in l and bad[0] in l and bad[1] in l]
    t.check(h.wait_until(down_errors, 5, 0.05), "no error naming both servers of 'down'")
    h.log("down: %s" % down_errors()[:1])

    def releases():
        return [l for l in b.stderr_text().splitlines() if "[down]" in l and
                "starting the consumer failed; releasing" in l]
    h.wait_until(lambda: len(releases()) >= 2, 5, 0.05)
    h.log("down: the guard released the lease %d times" % len(releases()))
    t.check(len(releases()) >= 2, "the guard did not release and retry: %d" % len(releases()))
    t.check(b.alive(), "process exited")
    t.check(b.term() == 0, "baton did not exit 0")


def test_tls_mutual(t):
    """ssl:// with a CA file and a client certificate against a mosquitto TLS
    listener that requires one: subscribes and forwards. A CA that did not sign
    the broker's certificate: no subscription, a clear TLS error, retries."""
    d = h.mktemp("baton-mqtt-tls-")
    tls = make_tls_files(d)
    other_ca = make_ca(d, "other-ca")[0]
    os.chmod(other_ca, 0o644)
    b = Mosquitto(tls=tls)

    def tls_cfg(name, ca, topic):
        return ('name = "%s"; type = "mqtt"; sink = "out"; shared_group = "g";\n'
                'server = "ssl://127.0.0.1:%d"; topics = ["%s"]; reconnect_max_ms = 500;\n'
                'ca_file = "%s"; cert_file = "%s"; key_file = "%s";\n'
                % (name, b.tls_port, topic, ca, tls["client_cert"], tls["client_key"]))
    cfgs = {"a-tls.cfg": tls_cfg("tls", tls["ca"], "secure/#"),
            "b-wrongca.cfg": tls_cfg("wrongca", other_ca, "secure/#")}
    x = t.baton(h.main_cfg(), cfgs)
    t.require(h.wait_until(lambda: subscribed(x, "tls"), 20, 0.1),
              "tls endpoint not subscribed: %s" % x.stderr_text()[-1500:])
    for i in range(50):
        b.publish("secure/%d" % (i % 3), "tls-%d" % i)  # plain listener; delivered over TLS
    h.wait_until(lambda: len([r for r in recs(x) if r["endpoint"] == "tls"]) >= 50, 15, 0.1)
    got = sorted(r["payload"] for r in x.records if r["endpoint"] == "tls")
    h.log("over TLS: %d of 50 forwarded" % len(got))
    t.check(got == sorted("tls-%d" % i for i in range(50)), "TLS endpoint forwarded %d of 50" % len(got))
    time.sleep(1.5)
    wrong = [l for l in x.stderr_text().splitlines() if "mqtt[wrongca]" in l]
    h.log("wrong CA: %s" % wrong[:1])
    t.check(not subscribed(x, "wrongca"), "subscribed although the broker's CA was not trusted")
    t.check(any("127.0.0.1:%d" % b.tls_port in l and "certificate verify failed" in l
                and "retrying" in l for l in wrong),
            "no clear error for the untrusted broker certificate")
    t.check(not any(r["endpoint"] == "wrongca" for r in x.records), "wrongca forwarded messages")
    t.check(x.term() == 0, "baton did not exit 0")


def test_check_config(t):
    """--check-config accepts the example file and refuses a guard on $share."""
    d = h.mktemp()
    os.makedirs(os.path.join(d, "endpoints.d"))
    with open(os.path.join(d, "baton.cfg"), "w") as f:
        f.write(h.main_cfg())
    with open(os.path.join(d, "endpoints.d", "m.cfg"), "w") as f:
        f.write(ep_cfg("m", 1883, ["a/#"], 'shared_group = "g"; guard = "active";'))
    rc, out, err = h.run_baton(["-c", os.path.join(d, "baton.cfg"), "--check-config"])
    h.log("guard on $share: rc %d: %s" % (rc, (err or out).strip().splitlines()[-1:]))
    t.check(rc != 0 and "at-most-once" in err and "m.cfg" in err, "guard on $share not refused: %s" % err)
    with open(os.path.join(d, "endpoints.d", "m.cfg"), "a") as f:
        f.write("force_guard = true;\n")
    rc, out, err = h.run_baton(["-c", os.path.join(d, "baton.cfg"), "--check-config"])
    t.check(rc == 0, "force_guard not honoured: %s" % err)
    example = os.path.join(h.SOURCE_DIR, "config", "endpoints.d", "mqtt.cfg")
    os.remove(os.path.join(d, "endpoints.d", "m.cfg"))
    with open(example) as src, open(os.path.join(d, "endpoints.d", "mqtt.cfg"), "w") as dst:
        dst.write(src.read())
    rc, out, err = h.run_baton(["-c", os.path.join(d, "baton.cfg"), "--check-config"])
    t.check(rc == 0, "example mqtt.cfg refused: %s" % err)


if __name__ == "__main__":
    h.main(globals())
