"""Operations: /metrics (strictly parsed, and its guard and message values
under faults), /healthz, /readyz, /status, the `baton status` subcommand,
exit statuses, graceful SIGTERM, leader balancing, every shipped
configuration passing --check-config (config/, config/demo/, docker/), and
the Docker image's package lists."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import termdelivery as td  # noqa: E402


def get(port, path, timeout=2.0):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


METRIC_LINE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\})? (-?[0-9.eE+-]+|\+Inf|-Inf|NaN)$')


def parse_metrics(text):
    """A strict Prometheus text-format parser: every sample belongs to a
    declared family, TYPE precedes samples, histograms are cumulative.
    Returns ({family: type}, [(name, labels, value)]) or raises."""
    types, samples = {}, []
    helps = set()
    for n, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        if line.startswith("# HELP "):
            helps.add(line.split(" ")[2])
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) != 4 or parts[3] not in ("counter", "gauge", "histogram", "summary", "untyped"):
                raise ValueError("line %d: bad TYPE line %r" % (n, line))
            if parts[2] in types:
                raise ValueError("line %d: TYPE for %s declared twice" % (n, parts[2]))
            types[parts[2]] = parts[3]
            continue
        if line.startswith("#"):
            raise ValueError("line %d: unexpected comment %r" % (n, line))
        m = METRIC_LINE.match(line)
        if not m:
            raise ValueError("line %d: not a valid sample: %r" % (n, line))
        name = m.group(1)
        family = re.sub(r"_(bucket|sum|count)$", "", name) if re.sub(
            r"_(bucket|sum|count)$", "", name) in types and types[re.sub(
                r"_(bucket|sum|count)$", "", name)] == "histogram" else name
        if family not in types:
            raise ValueError("line %d: sample %s has no TYPE" % (n, name))
        if types[family] == "counter" and not name.endswith("_total"):
            raise ValueError("line %d: counter %s does not end in _total" % (n, name))
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        samples.append((name, labels, float(m.group(4))))
    for fam, t in types.items():
        if fam not in helps:
            raise ValueError("%s has no HELP" % fam)
        if t == "histogram":
            by_ep = {}
            for name, labels, v in samples:
                if name == fam + "_bucket":
                    by_ep.setdefault(labels.get("endpoint"), []).append((labels["le"], v))
            for ep, buckets in by_ep.items():
                vals = [v for _, v in buckets]
                if vals != sorted(vals) or buckets[-1][0] != "+Inf":
                    raise ValueError("%s{endpoint=%s}: buckets not cumulative or no +Inf" % (fam, ep))
    return types, samples


def sample(samples, name, **labels):
    for n, l, v in samples:
        if n == name and all(l.get(k) == val for k, val in labels.items()):
            return v
    return None


ENDPOINT = """name = "orders"; type = "redis_psub"; sink = "out";
host = "127.0.0.1"; port = %d; patterns = [ "orders.*" ];
"""


def test_metrics_health_status(t):
    redis = t.redis()
    mport = h.free_port()
    main = h.main_cfg(redis.port, extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    b = t.baton(main, {"orders.cfg": ENDPOINT % redis.port,
                       "tick.cfg": 'name = "tick"; type = "schedule"; sink = "out"; cron = "* * * * * *";\n'})
    t.require(h.wait_until(lambda: h.port_open(mport), 10), "metrics listener up")
    t.require(h.wait_until(lambda: '"role":"leader"' in get(mport, "/status")[1], 10), "becomes leader")
    pub = redis.client()
    # the leader subscribes just after its promotion: pub/sub keeps nothing
    # published before that (a TSan run lost all 50 in those 18 ms)
    t.require(h.wait_until(lambda: pub.cmd("PUBSUB", "NUMPAT") >= 1, 10), "the leader subscribed")
    for i in range(50):
        pub.cmd("PUBLISH", "orders.x", "m%d" % i)
    h.wait_until(lambda: len(b.poll_records()) >= 0 and
                 sum(1 for r in b.records if r["endpoint"] == "orders") >= 50, 10)
    t.check(sum(1 for r in b.records if r["endpoint"] == "orders") == 50, "50 forwarded")
    h.wait_until(lambda: len(b.poll_records()) >= 0 and any(r["endpoint"] == "tick" for r in b.records), 5)

    code, text = get(mport, "/metrics")
    t.require(code == 200, "/metrics 200, got %d" % code)
    try:
        types, samples = parse_metrics(text)
    except ValueError as e:
        t.require(False, "metrics do not parse: %s" % e)
    expected = {
        "baton_endpoint_leader": "gauge", "baton_lease_epoch": "gauge",
        "baton_promotions_total": "counter", "baton_demotions_total": "counter",
        "baton_lease_renew_failures_total": "counter", "baton_messages_received_total": "counter",
        "baton_messages_forwarded_total": "counter", "baton_messages_dropped_total": "counter",
        "baton_queue_depth": "gauge", "baton_sink_errors_total": "counter",
        "baton_sink_latency_seconds": "histogram", "baton_locker_up": "gauge",
        "baton_build_info": "gauge", "baton_once_allowed_total": "counter",
        "baton_once_skipped_total": "counter", "baton_once_backend_errors_total": "counter",
    }
    for name, typ in expected.items():
        t.check(types.get(name) == typ, "%s is a %s (got %s)" % (name, typ, types.get(name)))
    t.check(sample(samples, "baton_endpoint_leader", endpoint="orders") == 1, "leader gauge 1")
    t.check(sample(samples, "baton_messages_forwarded_total", endpoint="orders") == 50,
            "forwarded_total 50")
    t.check(sample(samples, "baton_messages_received_total", endpoint="orders") == 50,
            "received_total 50")
    t.check(sample(samples, "baton_sink_latency_seconds_count", endpoint="orders") == 50,
            "latency count 50")
    t.check(sample(samples, "baton_locker_up") == 1, "locker up")
    for reason in ("queue_full", "not_leader", "sink_failed"):
        t.check(sample(samples, "baton_messages_dropped_total", endpoint="orders", reason=reason) == 0,
                "dropped{%s} present and 0" % reason)
    epoch = sample(samples, "baton_lease_epoch", endpoint="orders")
    t.check(epoch and epoch > 0, "epoch > 0")
    t.check(all(r["epoch"] == int(epoch) for r in b.records if r["endpoint"] == "orders"),
            "every envelope carries the lease epoch")
    ticks = sum(1 for r in b.records if r["endpoint"] == "tick")
    allowed = sample(samples, "baton_once_allowed_total", endpoint="tick")
    t.check(allowed is not None and allowed >= ticks >= 1,
            "once_allowed_total counts the fired slots (%s >= %d)" % (allowed, ticks))
    t.check(sample(samples, "baton_once_backend_errors_total", endpoint="tick") == 0, "no once backend errors")

    t.check(get(mport, "/healthz")[0] == 200, "/healthz 200")
    code, body = get(mport, "/readyz")
    t.check(code == 200 and json.loads(body)["ready"] is True, "/readyz 200 with redis up: %s" % body)
    st = json.loads(get(mport, "/status")[1])
    ep = [e for e in st["endpoints"] if e["name"] == "orders"][0]
    t.check(ep["name"] == "orders" and ep["role"] == "leader" and ep["forwarded"] == 50,
            "status JSON: %s" % ep)
    t.check(("pid %d" % b.pid) in (ep.get("holder") or ""), "status names the lease holder: %s" % ep)
    tick = [e for e in st["endpoints"] if e["name"] == "tick"]
    t.check(tick and tick[0]["role"] == "once-per-slot", "status JSON: OnceGuard role once-per-slot: %s" % tick)
    t.check(get(mport, "/nope")[0] == 404, "unknown path 404")

    # baton status: asks Redis who leads
    rc, out, err = h.run_baton(["status", "-c", b.cfg])
    t.check(rc == 0, "baton status exit 0 (%s)" % err)
    line = [l for l in out.splitlines() if l.startswith("orders")]
    t.check(line and line[0].split()[3] == "has-leader" and str(int(epoch)) in line[0],
            "status table shows orders has-leader with epoch %d: %r" % (epoch, out))
    line = [l for l in out.splitlines() if l.startswith("tick")]
    t.check(line and line[0].split()[3] == "once-per-slot", "status table shows tick once-per-slot: %r" % out)

    # Redis down: /readyz 503 with a reason, /healthz still 200, locker_up 0.
    # The pages show what the observer thread saw last (at most 1 s old): they
    # never wait for Redis.
    redis.stop()
    last = {}

    def not_ready():
        last["r"] = get(mport, "/readyz", timeout=5)
        return last["r"][0] == 503
    t.check(h.wait_until(not_ready, 3) and "locker" in json.loads(last["r"][1]).get("reason", ""),
            "/readyz 503 naming the locker within 3 s: %s" % (last.get("r"),))
    t.check(get(mport, "/healthz")[0] == 200, "/healthz 200 while redis is down")
    _, samples = parse_metrics(get(mport, "/metrics", timeout=5)[1])
    t.check(sample(samples, "baton_locker_up") == 0, "locker_up 0 while redis is down")
    rc, out, err = h.run_baton(["status", "-c", b.cfg])
    t.check(rc == 69 and "127.0.0.1" in err, "baton status with redis down: exit 69 naming the address (%d %r)"
            % (rc, err))
    t.check(b.alive(), "process survives redis going away")
    t.check(b.term() == 0, "SIGTERM exits 0")


def raw_http(port, data, timeout=3.0):
    """Sends raw bytes, returns everything the listener answers until it closes."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return raw_http_rest(s, timeout)


def raw_http_rest(s, timeout=5.0):
    """Everything the listener still sends on s until it closes."""
    s.settimeout(timeout)
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return out
        out += chunk


def test_listener_protocol_and_slow_clients(t):
    """baton's own HTTP listener: status lines, HEAD, query strings, bad
    requests; silent clients filling every slot (32) do not keep /healthz
    from answering (the oldest silent one is evicted) and do not stay
    connected past the 5 s connection deadline."""
    import socket
    redis = t.redis()
    mport = h.free_port()
    main = h.main_cfg(redis.port, extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    b = t.baton(main, {"orders.cfg": ENDPOINT % redis.port})
    t.require(h.wait_until(lambda: h.port_open(mport), 10), "metrics listener up")

    r = raw_http(mport, b"GET /healthz?probe=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    t.check(r.startswith(b"HTTP/1.1 200 OK\r\n") and r.endswith(b"\r\n\r\nok\n")
            and b"Content-Length: 3\r\n" in r, "GET with a query string: %r" % r[:200])
    r = raw_http(mport, b"HEAD /status HTTP/1.0\r\n\r\n")
    head, _, body = r.partition(b"\r\n\r\n")
    clen = re.search(rb"Content-Length: (\d+)", head)
    t.check(head.startswith(b"HTTP/1.1 200") and body == b"" and clen and int(clen.group(1)) > 10,
            "HEAD: headers with the GET length, no body: %r" % r[:200])
    r = raw_http(mport, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    t.check(r.startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD\r\n" in r, "POST -> 405: %r" % r[:120])
    r = raw_http(mport, b"nonsense\r\n\r\n")
    t.check(r.startswith(b"HTTP/1.1 400"), "malformed request line -> 400: %r" % r[:80])
    r = raw_http(mport, b"GET /nope HTTP/1.1\r\n\r\n")
    t.check(r.startswith(b"HTTP/1.1 404") and b"/metrics" in r, "unknown path -> 404: %r" % r[:120])
    r = raw_http(mport, b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n")
    t.check(r.startswith(b"HTTP/1.1 431"), "9 kB of headers -> 431: %r" % r[:80])

    # 40 silent connections (more than the listener's 32 slots)
    silent = []
    for _ in range(40):
        s = socket.socket()
        s.settimeout(10)
        s.connect(("127.0.0.1", mport))
        silent.append(s)
    t0 = time.monotonic()
    code = None
    while time.monotonic() - t0 < 15 and code != 200:
        try:
            code = get(mport, "/healthz", timeout=10.0)[0]
        except OSError:
            time.sleep(0.2)
    waited = time.monotonic() - t0
    # well under the 5 s deadline: /healthz did not wait for silent clients to time out
    t.check(code == 200 and waited < 4, "/healthz answers despite 40 silent clients (after %.1f s)" % waited)
    print("    /healthz with 40 silent clients answered after %.2f s" % waited)
    closed = 0
    for s in silent:
        try:
            closed += s.recv(1) == b""
        except OSError:
            closed += 1
        s.close()
    t.check(closed == len(silent), "every silent client is closed by its deadline (%d of %d)" % (closed, len(silent)))
    t.check(b.alive(), "baton still running")


def test_listener_out_of_descriptors(t):
    """When accept() fails for want of descriptors, the listener backs off
    (no busy loop), logs it, and answers again once descriptors are free."""
    import resource
    import socket
    redis = t.redis()
    mport = h.free_port()
    main = h.main_cfg(redis.port, extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    b = t.baton(main, {"orders.cfg": ENDPOINT % redis.port})
    t.require(h.wait_until(lambda: h.port_open(mport), 10), "metrics listener up")
    nfd = len(os.listdir("/proc/%d/fd" % b.pid))
    old = resource.prlimit(b.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(b.pid, resource.RLIMIT_NOFILE, (nfd, old[1]))
    socks = []
    try:
        for _ in range(4):  # queued in the backlog; accept() gets EMFILE
            s = socket.create_connection(("127.0.0.1", mport), timeout=2)
            s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            socks.append(s)
        t.require(h.wait_until(lambda: "accept failed" in b.stderr_text(), 5), "EMFILE logged")
        hz = os.sysconf("SC_CLK_TCK")

        def cpu():
            with open("/proc/%d/stat" % b.pid) as f:
                v = f.read().rsplit(")", 1)[1].split()
            return (int(v[11]) + int(v[12])) / hz
        c0, t0 = cpu(), time.monotonic()
        time.sleep(2.0)
        share = (cpu() - c0) / (time.monotonic() - t0)
        print("    CPU while accept() fails with EMFILE: %.1f %% of a core" % (100 * share))
        t.check(share < 0.5, "no busy loop while accept fails: %.0f %% of a core" % (100 * share))
        t.check(b.stderr_text().count("accept failed") <= 2, "the accept error is logged, not flooded")
    finally:
        resource.prlimit(b.pid, resource.RLIMIT_NOFILE, old)
    answered = 0
    for s in socks:
        try:
            answered += raw_http_rest(s).startswith(b"HTTP/1.1 200")
        except OSError:
            pass
        s.close()
    t.check(answered == len(socks), "queued clients answered once descriptors are back (%d of %d)"
            % (answered, len(socks)))
    t.check(get(mport, "/healthz")[0] == 200, "/healthz answers again")
    t.check(b.alive(), "baton still running")


def test_exit_statuses(t):
    rc, out, err = h.run_baton(["--version"])
    t.check(rc == 0 and out.startswith("baton "), "--version")
    rc, out, err = h.run_baton(["--bogus"])
    t.check(rc == 64, "unknown option -> 64, got %d" % rc)
    rc, out, err = h.run_baton([])
    t.check(rc == 64 and "-c" in err, "missing -c -> 64")
    d = h.mktemp()
    bad = os.path.join(d, "bad.cfg")
    with open(bad, "w") as f:
        f.write('sinks = ( { name = "out"; type = "stdout"; } );\nlease = { ttl_ms = 100; renew_ms = 200; };\n')
    rc, out, err = h.run_baton(["-c", bad, "--check-config"])
    t.check(rc == 78 and "bad.cfg:2" in err, "invalid lease -> 78 with file:line: %d %r" % (rc, err))
    rc, out, err = h.run_baton(["-c", os.path.join(d, "missing.cfg"), "--check-config"])
    t.check(rc == 78 and "missing.cfg" in err, "unreadable file -> 78 naming it: %r" % err)
    # metrics address in use -> 69
    port = h.free_port()
    import socket
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(1)
    good = os.path.join(d, "good.cfg")
    with open(good, "w") as f:
        f.write('sinks = ( { name = "out"; type = "stdout"; } );\nmetrics = { listen = "127.0.0.1:%d"; };\n'
                'endpoints_dir = "none.d";\n' % port)
    os.makedirs(os.path.join(d, "none.d"))
    rc, out, err = h.run_baton(["-c", good], timeout=10)
    s.close()
    t.check(rc == 69 and str(port) in err, "metrics address in use -> 69: %d %r" % (rc, err))


def check_dir(t, main_path, env=None):
    rc, out, err = h.run_baton(["-c", main_path, "--check-config"], env=env)
    t.check(rc == 0, "%s passes --check-config: %s%s" % (main_path, out, err))
    return out


def test_shipped_configs_check(t):
    src = h.SOURCE_DIR
    out = check_dir(t, os.path.join(src, "config", "baton.cfg"))
    examples = sorted(f for f in os.listdir(os.path.join(src, "config", "endpoints.d")) if f.endswith(".cfg"))
    t.check(len(examples) >= 1, "example endpoint files exist")
    for f in examples:
        t.check(f in out, "example %s was checked" % f)
    # the demo templates, filled in
    d = h.mktemp()
    os.makedirs(os.path.join(d, "endpoints.d"))
    demo = os.path.join(src, "config", "demo")
    for f in os.listdir(demo):
        if not f.endswith(".cfg"):
            continue
        with open(os.path.join(demo, f)) as fh:
            text = fh.read()
        text = re.sub(r"@[A-Z_]+_PORT@", "6379", text)
        dest = os.path.join(d, f) if f == "baton.cfg" else os.path.join(d, "endpoints.d", f)
        with open(dest, "w") as fh:
            fh.write(text)
    check_dir(t, os.path.join(d, "baton.cfg"))
    # the compose deployment's configuration
    docker_cfg = os.path.join(src, "docker", "config", "baton.cfg")
    if os.path.exists(docker_cfg):
        secret = os.path.join(src, "docker", "secrets", "mysql_repl_password")
        check_dir(t, docker_cfg, env={"BATON_MYSQL_PASSWORD_FILE": secret})
    if shutil.which("docker-compose"):
        p = subprocess.run(["docker-compose", "-f", os.path.join(src, "docker", "compose.yml"), "config", "-q"],
                           capture_output=True, text=True, cwd=os.path.join(src, "docker"))
        t.check(p.returncode == 0, "docker-compose config validates: %s" % p.stderr)
        # with the CI override (tests/compose/run.sh runs the stack with it)
        p = subprocess.run(["docker-compose", "-f", os.path.join(src, "docker", "compose.yml"),
                            "-f", os.path.join(src, "docker", "compose.ci.yml"), "config", "-q"],
                           capture_output=True, text=True, cwd=os.path.join(src, "docker"))
        t.check(p.returncode == 0, "docker-compose config validates with compose.ci.yml: %s" % p.stderr)
    else:
        h.log("docker-compose not installed: compose file not validated")


def _apt_packages(text):
    """Package names of the apt-get install commands in a Dockerfile stage."""
    pkgs = []
    for cmd in re.findall(r"apt-get install([^&]*)", text.replace("\\\n", " ")):
        pkgs += [w for w in cmd.split() if not w.startswith("-")]
    return set(pkgs)


def _shell_array(text, name):
    """The words of a bash array NAME=( ... ) (comments dropped)."""
    m = re.search(r"^%s=\((.*?)^\)" % name, text, re.S | re.M)
    if not m:
        return None
    return set(w for line in m.group(1).splitlines() for w in line.split("#")[0].split())


def test_docker_image_packages(t):
    """The Dockerfile builds and runs what the tree needs: its build stage
    installs every package of .ci/deps.sh's BUILD list (what CMake requires),
    its runtime stage the package of every library the built baton links
    (NEEDED entries, found with dpkg -S) and libcurl4 (loaded on first use)."""
    src = h.SOURCE_DIR
    with open(os.path.join(src, "docker", "Dockerfile")) as f:
        stages = re.split(r"^FROM ", f.read(), flags=re.M)[1:]
    t.require(len(stages) == 2, "docker/Dockerfile has a build and a runtime stage")
    build, runtime = _apt_packages(stages[0]), _apt_packages(stages[1])
    with open(os.path.join(src, ".ci", "deps.sh")) as f:
        wanted = _shell_array(f.read(), "BUILD")
    t.require(wanted, ".ci/deps.sh has a BUILD list")
    t.check(wanted <= build, "docker build stage lacks %r of .ci/deps.sh's BUILD list"
            % sorted(wanted - build))
    p = subprocess.run(["readelf", "-d", h.BATON_BIN], capture_output=True, text=True)
    t.require(p.returncode == 0, "readelf -d baton: %s" % p.stderr)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", p.stdout)
    # a sanitizer build (CI's ASan/TSan stages) links its runtime; the image does not
    needed = [n for n in needed if not re.match(r"lib(a|t|ub|l)san\.so", n)]
    t.require(needed, "baton has NEEDED entries")
    missing = []
    for lib in needed:
        q = subprocess.run(["dpkg", "-S", "*/" + lib], capture_output=True, text=True)
        owners = {ln.split(":")[0] for ln in q.stdout.splitlines() if ":" in ln}
        t.check(owners, "no Debian package owns %s (dpkg -S)" % lib)
        if owners and not owners & (runtime | {"libc6"}):
            missing.append("%s (%s)" % (lib, ", ".join(sorted(owners))))
    t.check(not missing, "docker runtime stage lacks the package of %r" % missing)
    t.check("libcurl4" in runtime, "docker runtime stage lacks libcurl4 (HTTP sink, etcd)")
    h.log("docker stages: build %d packages, runtime %d; baton NEEDs %s"
          % (len(build), len(runtime), " ".join(needed)))



def _dockerignored(patterns, path):
    """Docker's .dockerignore rule for one path relative to the context: a
    pattern matches the path or one of its parent directories; "*" and "?"
    stay within one component, "**" spans any number; the last matching
    pattern decides, "!" re-includes."""
    def rx(pat):
        out, i = "", 0
        while i < len(pat):
            if pat.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pat.startswith("**", i):
                out, i = out + ".*", i + 2
            elif pat[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif pat[i] == "?":
                out, i = out + "[^/]", i + 1
            else:
                out, i = out + re.escape(pat[i]), i + 1
        return re.compile(out + r"\Z")
    parts = path.split("/")
    ignored = False
    for pat in patterns:
        neg = pat.startswith("!")
        r = rx(pat[1:] if neg else pat)
        if any(r.match("/".join(parts[:k])) for k in range(1, len(parts) + 1)):
            ignored = not neg
    return ignored


def test_dockerignore(t):
    """The image is built from the repository root (docker/compose.yml's
    context ".."): .dockerignore keeps build trees, VCS data and objects out
    of the context (a build/ of hundreds of MB otherwise goes to the daemon
    on every build), and keeps in every file the Dockerfile's build uses."""
    src = h.SOURCE_DIR
    with open(os.path.join(src, "docker", "compose.yml")) as f:
        t.check("context: .." in f.read(), "compose builds baton from the repository root")
    path = os.path.join(src, ".dockerignore")
    t.require(os.path.exists(path), ".dockerignore at the build context's root")
    with open(path) as f:
        patterns = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    for out in [".git/HEAD", "build/CMakeCache.txt", "build/baton", "build-asan/tests/x",
                "build-tsan/baton", "bench/__pycache__/x.pyc", "tests/integration/lib/x.o",
                "bench-results/2026.json"]:
        t.check(_dockerignored(patterns, out), ".dockerignore leaves out %s" % out)
    keep = ["CMakeLists.txt", "README.md", "src/main.c", "common/log.c", "guard/locker.c",
            "guard/README.md", "include/baton/guard.h", "endpoints/redis_psub.c",
            "config/baton.cfg", "config/endpoints.d/schedule.cfg",
            "packaging/baton.service.in", "packaging/baton-guard.pc.in",
            "bench/CMakeLists.txt", "docker/Dockerfile"]
    for f in keep:
        t.check(os.path.exists(os.path.join(src, f)), "%s exists" % f)
        t.check(not _dockerignored(patterns, f), ".dockerignore keeps %s" % f)

def test_sighup_logs_status(t):
    redis = t.redis()
    b = t.baton(h.main_cfg(redis.port), {"orders.cfg": ENDPOINT % redis.port})
    h.wait_until(lambda: "consuming as leader" in b.stderr_text(), 10)
    b.signal(signal.SIGHUP)
    t.check(h.wait_until(lambda: "SIGHUP: status" in b.stderr_text(), 5), "SIGHUP logs the status")
    t.check(b.alive(), "SIGHUP does not stop the process")
    t.check(b.term() == 0, "SIGTERM exits 0")
    t.check("released" in b.stderr_text() or "demoted" in b.stderr_text(), "lease released at exit")


def test_redis_unreachable_at_start(t):
    """The process starts without its Redis: guards stay standby, schedule
    ticks are skipped (fail-closed) with warnings, and everything resumes
    once Redis comes up."""
    port = h.free_port()
    mport = h.free_port()
    eps = {"orders.cfg": ENDPOINT % port,
           "tick.cfg": 'name = "tick"; type = "schedule"; sink = "out"; cron = "* * * * * *";\n'}
    b = t.baton(h.main_cfg(port, extra='metrics = { listen = "127.0.0.1:%d"; };' % mport), eps)
    t.require(h.wait_until(lambda: h.port_open(mport), 10), "starts without redis")
    time.sleep(2.5)
    st = json.loads(get(mport, "/status")[1])
    roles = {e["name"]: e["role"] for e in st["endpoints"]}
    t.check(roles.get("orders") == "standby", "guarded endpoint stays standby: %s" % roles)
    b.poll_records()
    t.check(not any(r.get("endpoint") == "tick" for r in b.records), "no tick fired without redis")
    err = b.stderr_text()
    t.check("fail-closed" in err or "skipped" in err, "skipped ticks are logged")
    t.check(get(mport, "/readyz")[0] == 503, "not ready without redis")
    redis = h.RedisServer(port=port)
    t.cleanup(redis.stop)
    t.check(h.wait_until(lambda: '"role":"leader"' in get(mport, "/status")[1], 10), "leads once redis is up")
    t.check(h.wait_until(lambda: any(r.get("endpoint") == "tick" for r in b.poll_records() + b.records), 5),
            "ticks resume once redis is up")
    pub = redis.client()
    t.require(h.wait_until(lambda: pub.cmd("PUBSUB", "NUMPAT") >= 1, 10), "the leader subscribed")
    pub.cmd("PUBLISH", "orders.x", "hello")
    t.check(h.wait_until(lambda: any(r.get("payload") == "hello" for r in b.poll_records() + b.records), 5),
            "forwarding works after the late start")
    t.check(h.wait_until(lambda: get(mport, "/readyz")[0] == 200, 3), "ready once redis is up (within 3 s)")
    t.check(b.term() == 0, "exit 0")


def test_leader_balancing(t):
    """3 replicas, 6 endpoints: leases spread out instead of all landing on
    the first replica to start -- 1/2/3 or 2/2/2 after 10 s, as the README
    says."""
    redis = t.redis()
    eps = {}
    for i in range(6):
        eps["ep%d.cfg" % i] = ('name = "ep%d"; type = "redis_psub"; sink = "out"; host = "127.0.0.1"; '
                               'port = %d; channels = [ "c%d" ];\n' % (i, redis.port, i))
    ports = []
    for _ in range(3):
        mport = h.free_port()
        ports.append(mport)
        t.baton(h.main_cfg(redis.port, extra='metrics = { listen = "127.0.0.1:%d"; };' % mport), eps)
    time.sleep(10)
    counts = []
    for p in ports:
        st = json.loads(get(p, "/status")[1])
        counts.append(sum(1 for e in st["endpoints"] if e["role"] == "leader"))
    h.log("leases per replica after 10 s: %s" % counts)
    t.check(sum(counts) == 6, "every endpoint has exactly one leader: %s" % counts)
    # the README's promise: 1/2/3 or 2/2/2 (every replica leads, none more than half)
    t.check(sorted(counts) in ([1, 2, 3], [2, 2, 2]),
            "leases spread 1/2/3 or 2/2/2 as the README says: %s" % counts)
    # baton status names the holder of each lease
    rc, out, err = h.run_baton(["status", "-c", t.batons[0].cfg])
    holders = [l for l in out.splitlines() if l.startswith("ep")]
    t.check(len(holders) == 6 and all("pid" in l for l in holders), "status names holders: %r" % out)
    pids = {str(b.pid) for b in t.batons}
    t.check(all(any(("pid " + p) in l for p in pids) for l in holders), "holders are our processes")


def test_metrics_under_faults(t):
    """The guard and message metrics hold the values the faults caused, not
    only their types: 2 replicas, one redis_psub endpoint, short lease.
    Start: A leads (promotions 1, leader gauge 1, lease epoch = /status epoch
    = the records' epoch, forwarded = records written); Redis SIGSTOPped past
    the ttl: A's renewals fail (renew failures >= 1), A is demoted (demotions
    1, leader gauge 0); after SIGCONT one replica leads with a higher epoch;
    SIGKILL of that leader: the other is promoted once more; queue depth 0 at
    the end."""
    redis = t.redis()
    lease = {"ttl_ms": 1500, "renew_ms": 500, "retry_ms": 100}
    reps = []
    for name in ("A", "B"):
        mport = h.free_port()
        b = t.baton(h.main_cfg(redis.port, lease=lease,
                               extra='metrics = { listen = "127.0.0.1:%d"; };' % mport),
                    {"orders.cfg": ENDPOINT % redis.port}, name=name)
        reps.append((b, mport))
        if name == "A":
            t.require(h.wait_until(lambda: h.status_endpoints(mport).get("orders", {})
                                   .get("role") == "leader", 10), "A leads")
    (a, pa), (b, pb) = reps
    t.require(h.wait_until(lambda: h.status_endpoints(pb).get("orders", {}).get("role")
                           == "standby", 10), "B is a standby")

    def m(port):
        return td.scrape(port) or {}

    def val(port, name):
        return td.metric(m(port), name, "orders")

    cl = redis.client()
    t.require(h.wait_until(lambda: cl.cmd("PUBSUB", "NUMPAT") >= 1, 10), "A subscribed")
    for i in range(50):
        cl.cmd("PUBLISH", "orders.x", "m%d" % i)
    t.require(h.wait_until(lambda: val(pa, "baton_messages_forwarded_total") == 50, 10),
              "A forwarded 50: %r" % val(pa, "baton_messages_forwarded_total"))
    a.poll_records()
    recs = [r for r in a.records if r.get("endpoint") == "orders"]
    st = h.status_endpoints(pa)["orders"]
    ma = m(pa)
    got = {k: td.metric(ma, k, "orders") for k in (
        "baton_promotions_total", "baton_demotions_total", "baton_endpoint_leader",
        "baton_lease_epoch", "baton_lease_renew_failures_total", "baton_queue_depth")}
    h.log("A after 50 messages: %r, /status epoch %r, records %d" % (got, st.get("epoch"), len(recs)))
    t.check(got["baton_promotions_total"] == 1 and got["baton_demotions_total"] == 0,
            "A: promotions 1, demotions 0: %r" % got)
    t.check(got["baton_endpoint_leader"] == 1, "A: leader gauge 1: %r" % got)
    t.check(got["baton_lease_renew_failures_total"] == 0, "A: no renew failure yet: %r" % got)
    t.check(len(recs) == 50 and all(r.get("epoch") == got["baton_lease_epoch"] for r in recs),
            "A's 50 records carry the metric's epoch %r: %r"
            % (got["baton_lease_epoch"], sorted({r.get("epoch") for r in recs})))
    t.check(st.get("epoch") == got["baton_lease_epoch"], "/status epoch %r != metric %r"
            % (st.get("epoch"), got["baton_lease_epoch"]))
    mb = m(pb)
    t.check(td.metric(mb, "baton_promotions_total", "orders") == 0
            and td.metric(mb, "baton_endpoint_leader", "orders") == 0, "B: never promoted, not leader")
    epoch1 = got["baton_lease_epoch"]

    # Redis paused past the ttl: A cannot renew and is demoted
    os.kill(redis.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(2.5)
        ma = m(pa)
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
    fails = td.metric(ma, "baton_lease_renew_failures_total", "orders")
    h.log("A during the pause: renew failures %r, demotions %r, leader %r" % (
        fails, td.metric(ma, "baton_demotions_total", "orders"),
        td.metric(ma, "baton_endpoint_leader", "orders")))
    t.check(fails >= 1, "A: renew failures counted while Redis was paused: %r" % fails)
    t.check(td.metric(ma, "baton_demotions_total", "orders") == 1
            and td.metric(ma, "baton_endpoint_leader", "orders") == 0,
            "A: demoted once, leader gauge 0 past its deadline")

    def leader():
        ls = [(bb, p) for bb, p in reps if bb.alive()
              and td.metric(m(p), "baton_endpoint_leader", "orders") == 1]
        return ls[0] if len(ls) == 1 else None
    cur = h.wait_until(leader, 10, 0.1)
    t.require(cur is not None, "one leader after Redis resumed")
    epoch2 = val(cur[1], "baton_lease_epoch")
    promos = sum(val(p, "baton_promotions_total") for _, p in reps)
    h.log("after the pause: %s leads, epoch %r (was %r), promotions in total %d"
          % (cur[0].name, epoch2, epoch1, promos))
    t.check(epoch2 > epoch1, "new term's epoch %r not above %r" % (epoch2, epoch1))
    t.check(promos == 2, "promotions in total %d, expected 2" % promos)

    # SIGKILL of the leader: the other one is promoted once more
    other = [(bb, p) for bb, p in reps if bb is not cur[0]][0]
    before = val(other[1], "baton_promotions_total")
    cur[0].proc.kill()
    cur[0].proc.wait(5)
    t.check(h.wait_until(lambda: val(other[1], "baton_endpoint_leader") == 1, 10, 0.1),
            "%s did not take over" % other[0].name)
    mo = m(other[1])
    h.log("%s after the SIGKILL: %r" % (other[0].name, {k: td.metric(mo, k, "orders") for k in (
        "baton_promotions_total", "baton_lease_epoch", "baton_queue_depth")}))
    t.check(td.metric(mo, "baton_promotions_total", "orders") == before + 1,
            "%s promoted exactly once more" % other[0].name)
    t.check(td.metric(mo, "baton_lease_epoch", "orders") > epoch2, "epoch rose at the takeover")
    t.check(td.metric(mo, "baton_queue_depth", "orders") == 0, "queue depth 0 when idle")
    t.check(other[0].term() == 0, "exit 0")


def test_pages_never_wait_for_a_stalled_redis(t):
    """[stalled_redis] Redis SIGSTOPped for 5 s (the lease connection and the
    side connection both hang): the HTTP pages are answered from what the
    observer thread saw last, /healthz within 100 ms, every page within
    500 ms; afterwards the endpoint leads again."""
    redis = t.redis()
    mport = h.free_port()
    b = t.baton(h.main_cfg(redis.port, extra='metrics = { listen = "127.0.0.1:%d"; };' % mport),
                {"orders.cfg": ENDPOINT % redis.port})
    t.require(h.wait_until(lambda: h.port_open(mport) and '"role":"leader"' in get(mport, "/status")[1], 10),
              "leads")
    os.kill(redis.proc.pid, signal.SIGSTOP)
    worst = {}
    try:
        t0 = time.time()
        while time.time() - t0 < 5:
            for path in ("/healthz", "/metrics", "/status", "/readyz"):
                s0 = time.time()
                code, _ = get(mport, path, timeout=5)
                el = (time.time() - s0) * 1000
                worst[path] = max(worst.get(path, 0), el)
            time.sleep(0.05)
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)
    h.log("slowest answers while redis was stalled 5 s (ms): %s" %
          {k: round(v, 1) for k, v in worst.items()})
    t.check(worst["/healthz"] < 100, "/healthz within 100 ms: %.1f ms" % worst["/healthz"])
    t.check(max(worst.values()) < 500, "every page within 500 ms: %s" % worst)
    t.check(h.wait_until(lambda: '"role":"leader"' in get(mport, "/status")[1], 15), "leads again afterwards")
    t.check(b.term() == 0, "exit 0")


if __name__ == "__main__":
    h.main(globals())
