"""The etcd locker against a hostile or broken etcd (issue 39): a fake etcd
JSON gateway (tests/support/fake_etcd.py, honest by default) answers one
request kind otherwise, and a real baton process (one schedule endpoint
with guard "active", ttl 2000 ms, drain_timeout_ms 1000) must never take a
leadership the server did not grant, must say what is wrong naming the
field and the server, must stay small and alive, and must exit within
drain_timeout_ms + 1 s of SIGTERM.

  succeeded_string   the acquire txn answered "succeeded":"false" (a
                     string) without running: no promotion, an error naming
                     "succeeded" and the endpoint, the leases revoked.
  revision_overflow  the acquire txn ran but its revision is
                     "99999999999999999999": refused, no promotion, the key
                     deleted again (its lease revoked).
  revision_space     the same with " 12".
  negative_revision  the same with "-5": "negative revision -5 in the answer".
  watch_endless      /v3/watch answers "created", then a JSON string that never
                     ends; baton is a standby (the key held by "another
                     replica"): RSS stays below 64 MiB (under ASan: its RSS
                     after start + 64 MiB) for 6 s, the stream is aborted
                     with a warning naming the endpoint and the key, and
                     re-created.
  huge_ttl           /v3/lease/timetolive answers TTL 9223372036854775807 for
                     the holder's lease: no crash (UBSan aborted here
                     before), a clear message naming "TTL", no promotion;
                     `baton status` refuses with the same message instead
                     of crashing.
  long_header        /v3/kv/range answered with a 200 kB header line: curl's
                     "Out of memory" reads "answer header line too long or
                     malformed", with the endpoint; no promotion.

Run standalone: BATON_BIN=/path/baton python3 tests/integration/test_hostile_etcd.py [test_name ...]
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import harness as h  # noqa: E402
import fake_etcd  # noqa: E402

DRAIN_MS = 1000
LEASE_KEY = "baton:active:schedule:tick"
OBSERVE_S = 3.0
RSS_LIMIT_KB = 64 * 1024


def main_cfg(url, mport):
    return ('locker = { backend = "etcd"; endpoints = [ "%s" ]; prefix = "baton"; };\n'
            "lease = { ttl_ms = 2000; renew_ms = 500; retry_ms = 200; };\n"
            'sinks = ( { name = "out"; type = "stdout"; } );\n'
            'log = { level = "info"; };\n'
            'metrics = { listen = "127.0.0.1:%d"; };\n'
            "shutdown = { drain_timeout_ms = %d; };\n" % (url, mport, DRAIN_MS))


TICK = ('name = "tick"; type = "schedule"; sink = "out"; cron = "* * * * * *";\n'
        'guard = "active";\n')


def start(t, fake):
    mport = h.free_port()
    b = t.baton(main_cfg(fake.url, mport), {"tick.cfg": TICK})
    ok = h.wait_until(lambda: h.status_endpoints(mport).get("tick"), 15, 0.05)
    t.require(ok, "baton's /status did not answer within 15 s")
    return b, mport


def fake(t):
    f = fake_etcd.FakeEtcd()
    t.cleanup(f.close)
    return f


def never_leads(t, b, mport, seconds=OBSERVE_S):
    """Polls /status for seconds: never leader; no promotion logged."""
    roles = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        r = h.status_endpoints(mport).get("tick", {}).get("role")
        roles.add(r)
        t.check(r != "leader", "baton reports leader in /status")
        if r == "leader":
            break
        time.sleep(0.1)
    t.check("promoted" not in b.stderr_text(), "baton logged a promotion: %s"
            % [l for l in b.stderr_text().splitlines() if "promoted" in l][:2])
    t.check(b.alive(), "baton exited (status %s)" % (b.proc.poll(),))
    return roles


def logged(b, *needles):
    return [l for l in b.stderr_text().splitlines() if all(n in l for n in needles)]


def term_in_time(t, b):
    t0 = time.monotonic()
    try:
        rc = b.term(DRAIN_MS / 1000.0 + 5)
    except AssertionError as e:
        t.check(False, str(e))
        return
    dt = time.monotonic() - t0
    h.log("SIGTERM -> exit %s in %.2f s" % (rc, dt))
    t.check(rc == 0, "exit status %s after SIGTERM" % rc)
    t.check(dt <= DRAIN_MS / 1000.0 + 1.0, "exit took %.2f s after SIGTERM (drain_timeout_ms "
            "%d + 1 s)" % (dt, DRAIN_MS))


def acquire_attempts(f):
    return [r for r in f.requests("/v3/kv/txn") if fake_etcd.is_acquire(r)]


# --------------------------------------------------------------------------

def test_succeeded_string(t):
    f = fake(t)

    def lie(req, honest):
        if not fake_etcd.is_acquire(req):
            return honest()
        # the compare failed (another replica won): nothing ran
        return {"header": f.header(), "succeeded": "false", "responses": []}
    f.on("/v3/kv/txn", lie)
    b, mport = start(t, f)
    never_leads(t, b, mport)
    n = len(acquire_attempts(f))
    t.check(n >= 2, "only %d acquire attempts in %.0f s" % (n, OBSERVE_S))
    errs = logged(b, 'field \\"succeeded\\"', f.url) or logged(b, 'field "succeeded"', f.url)
    t.check(errs, "no error naming the field succeeded and %s: %s"
            % (f.url, b.stderr_text()[-600:]))
    h.log("logged: %s" % (errs[:1],))
    # each attempt's lease was revoked: none left granted
    grants, revokes = f.count("/v3/lease/grant"), f.count("/v3/lease/revoke")
    h.log("grants %d, revokes %d" % (grants, revokes))
    t.check(revokes >= grants - 1, "leases granted %d, revoked %d" % (grants, revokes))
    term_in_time(t, b)


def _bad_revision(t, value, needle):
    f = fake(t)

    def lie(req, honest):
        a = honest()
        if fake_etcd.is_acquire(req) and a.get("succeeded") is True:
            a["header"]["revision"] = value
        return a
    f.on("/v3/kv/txn", lie)
    b, mport = start(t, f)
    never_leads(t, b, mport)
    t.check(len(acquire_attempts(f)) >= 2, "fewer than 2 acquire attempts")
    errs = logged(b, needle, f.url)
    t.check(errs, "no error with %r naming %s: %s" % (needle, f.url, b.stderr_text()[-600:]))
    h.log("logged: %s" % (errs[:1],))
    # the put ran: revoking its lease deleted the key again
    ok = h.wait_until(lambda: f.kv(LEASE_KEY) is None, 2, 0.05)
    t.check(ok, "the lease key is still in the fake etcd: %s" % (f.kv(LEASE_KEY),))
    term_in_time(t, b)


def test_revision_overflow(t):
    _bad_revision(t, "99999999999999999999", 'out of')


def test_revision_space(t):
    _bad_revision(t, " 12", 'is not a decimal integer')


def test_negative_revision(t):
    _bad_revision(t, "-5", "negative revision -5 in the answer")


def asan_build():
    try:
        out = subprocess.run(["ldd", h.BATON_BIN], capture_output=True, text=True).stdout
    except OSError:
        return False
    return "asan" in out


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def test_watch_endless(t):
    f = fake(t)
    f.hold(lambda k: k == LEASE_KEY)      # baton stays a standby, watching
    f.on("/v3/watch", lambda req, honest: fake_etcd.Stream(fake_etcd.endless_string()))
    mport = h.free_port()
    asan = asan_build()
    env = {}
    if asan:
        # ASan keeps freed memory in quarantine (256 MiB by default): each
        # aborted stream's buffer would stay resident in it and measure ASan
        env["ASAN_OPTIONS"] = ":".join(o for o in (os.environ.get("ASAN_OPTIONS", ""),
                                                   "quarantine_size_mb=8") if o)
    b = t.baton(main_cfg(f.url, mport), {"tick.cfg": TICK}, env=env)
    time.sleep(0.3)
    base = rss_kb(b.pid) or 0
    limit = base + RSS_LIMIT_KB if asan else RSS_LIMIT_KB
    peak = base
    end = time.monotonic() + 6.0
    while time.monotonic() < end and b.alive():
        r = rss_kb(b.pid)
        if r:
            peak = max(peak, r)
        time.sleep(0.1)
    streams = f.count("/v3/watch")
    h.log("RSS at start %d KiB, peak %d KiB over 6 s (limit %d KiB%s); %d watch streams"
          % (base, peak, limit, ", ASan build" if asan else "", streams))
    t.check(b.alive(), "baton exited (status %s)" % (b.proc.poll(),))
    t.check(peak < limit, "RSS peaked at %d KiB (limit %d KiB)" % (peak, limit))
    t.check(streams >= 2, "the watch stream was not re-created (%d)" % streams)
    warns = logged(b, "WARN", f.url, "watch " + LEASE_KEY, "more than 4194304 bytes")
    t.check(warns, "no warning naming the endpoint and the key: %s" % b.stderr_text()[-600:])
    t.check(len(warns) <= 2, "%d warnings in 6 s (rate limit)" % len(warns))
    h.log("warned: %s" % (warns[:1],))
    t.check(h.status_endpoints(mport).get("tick", {}).get("role") == "standby",
            "not a standby: %s" % h.status_endpoints(mport).get("tick"))
    term_in_time(t, b)


def test_huge_ttl(t):
    f = fake(t)
    f.hold(lambda k: k == LEASE_KEY)

    def huge(req, honest):
        return {"header": f.header(), "ID": str(req.get("ID")), "TTL": "9223372036854775807",
                "grantedTTL": "3600"}
    f.on("/v3/lease/timetolive", huge)
    b, mport = start(t, f)
    never_leads(t, b, mport)
    t.check(f.count("/v3/lease/timetolive") >= 2, "timetolive asked %d times"
            % f.count("/v3/lease/timetolive"))
    errs = logged(b, 'field "TTL"', f.url)
    t.check(errs, "no error naming the field TTL and %s: %s" % (f.url, b.stderr_text()[-600:]))
    h.log("logged: %s" % (errs[:1],))
    rc, out, err = h.run_baton(["status", "-c", b.cfg], timeout=20)
    h.log("baton status: exit %d\n%s%s" % (rc, out, err))
    t.check(rc >= 0 and rc not in (134, 139) and "runtime error" not in err
            and "Sanitizer" not in err, "baton status crashed: exit %d: %s" % (rc, err[-400:]))
    t.check('field "TTL"' in err and f.url in err,
            "baton status does not say what is wrong: %r" % err)
    term_in_time(t, b)


def test_long_header(t):
    f = fake(t)

    def padded(req, honest):
        a = honest()
        return fake_etcd.Raw(json.dumps(a), headers=[("X-Pad", "a" * 200000)])
    f.on("/v3/kv/range", padded)
    b, mport = start(t, f)
    never_leads(t, b, mport, 2.0)
    errs = logged(b, f.url, "answer header line too long or malformed")
    t.check(errs, "no clear message for a 200 kB header line: %s" % b.stderr_text()[-600:])
    t.check(not logged(b, "Out of memory"), "curl's 'Out of memory' is shown: %s"
            % logged(b, "Out of memory")[:1])
    h.log("logged: %s" % (errs[:1],))
    term_in_time(t, b)


ORDER = ["test_succeeded_string", "test_revision_overflow", "test_revision_space",
         "test_negative_revision", "test_watch_endless", "test_huge_ttl", "test_long_header"]

if __name__ == "__main__":
    h.main(globals())
