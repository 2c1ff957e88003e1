"""Redis over TLS with real baton processes: a redis-server with only a TLS
port (--port 0 --tls-port P) and test certificates (lib/tlsfiles.py); the
locker AND the redis_psub source of every baton use `tls = { ... }`.

  1. locker and source over TLS: one leader, every message forwarded once;
     `baton status` reads the lease over TLS; a leader SIGKILL hands over
  2. a server requiring client certificates (--tls-auth-clients yes): with
     cert_file/key_file it works; without, a clear error, retried
  3. failures, each a clear error naming host:port, retried (logged more
     than once), the process alive, nothing forwarded: an unrelated CA, a
     wrong server_name, plain text against the TLS port (no tls group), TLS
     against a plain port; for the source as well as for the locker
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
from publisher import Publisher, all_seqs, forwarded  # noqa: E402
from tlsfiles import make_ca, make_tls_files  # noqa: E402

ORDER = ["test_config_check", "test_locker_and_source_over_tls", "test_client_certificate",
         "test_errors"]


TlsRedis = h.TlsRedisServer  # redis-server with only a TLS port


class TlsPublisher(Publisher):
    def __init__(self, server, **kw):
        self.server = server
        Publisher.__init__(self, server.port, **kw)

    def _connect(self):
        try:
            self._conn = self.server.client(2.0)
            return True
        except OSError:
            self._conn = None
            return False


def tls_group(tls, **over):
    """A `tls = { ... }` group: the test CA, plus what over sets (None: left out)."""
    kv = {"ca_file": tls["ca"]}
    kv.update(over)
    return "tls = { %s };" % " ".join('%s = "%s";' % (k, v) for k, v in kv.items() if v is not None)


def main_cfg(port, tls_text, lease=None):
    lock = 'locker = { type = "redis"; host = "127.0.0.1"; port = %d; %s };' % (port, tls_text)
    lease = lease or {"ttl_ms": 3000, "renew_ms": 1000, "retry_ms": 250}
    return "\n".join([
        lock,
        "lease = { %s };" % "; ".join("%s = %s" % kv for kv in lease.items()),
        'sinks = ( { name = "out"; type = "stdout"; } );',
        'log = { level = "info"; };',
    ]) + "\n"


def psub_cfg(port, tls_text):
    return ('name = "psub"; type = "redis_psub"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; patterns = ["chan.*"];\n%s\n' % (port, tls_text))


def wait_subscribed(t, server, timeout=15):
    c = server.client()
    try:
        n = h.wait_until(lambda: c.cmd("PUBLISH", "chan.probe", "probe") == 1, timeout, 0.05)
    finally:
        c.close()
    t.require(n, "no baton subscribed within %ds" % timeout)


def check_all_once(t, batons, total, timeout=20):
    got = h.wait_until(lambda: len(all_seqs(batons)) >= total, timeout, 0.1)
    seqs = all_seqs(batons)
    per = {b.name: len(forwarded(b)) for b in batons}
    dups = h.duplicates(seqs)
    t.check(got, "not all %d messages forwarded within %ds (got %d)" % (total, timeout, len(seqs)))
    t.check(not dups, "duplicates: %d" % len(dups))
    t.check(set(seqs) == set(range(1, total + 1)), "forwarded set differs")
    return per


# --------------------------------------------------------------------------

def test_config_check(t):
    """tls groups pass --check-config in the locker and in a redis_psub file."""
    tls = make_tls_files(h.mktemp())
    d = h.mktemp()
    os.makedirs(os.path.join(d, "endpoints.d"))
    main = os.path.join(d, "baton.cfg")
    with open(main, "w") as f:
        f.write(main_cfg(6380, tls_group(tls, cert_file=tls["client_cert"],
                                         key_file=tls["client_key"], server_name="localhost")))
    with open(os.path.join(d, "endpoints.d", "psub.cfg"), "w") as f:
        f.write(psub_cfg(6380, tls_group(tls)))
    rc, out, err = h.run_baton(["-c", main, "--check-config"])
    t.check(rc == 0 and "configuration OK" in out + err,
            "check-config: %d %s" % (rc, (out + err).strip()[:400]))


def test_locker_and_source_over_tls(t):
    tls = make_tls_files(h.mktemp())
    srv = TlsRedis(tls)
    tg = tls_group(tls)
    main = main_cfg(srv.port, tg)
    batons = [t.baton(main, {"psub.cfg": psub_cfg(srv.port, tg)}) for _ in range(3)]
    wait_subscribed(t, srv)

    total = 20000
    pub = TlsPublisher(srv, rate=5000, count=total)
    t0 = time.monotonic()
    pub.start()
    t.require(pub.wait_done(60), "publisher did not finish within 60 s")
    per = check_all_once(t, batons, total)
    h.log("TLS locker + source: %d messages in %.2f s, per process %s"
          % (total, time.monotonic() - t0, per))
    t.check(sum(1 for n in per.values() if n) == 1, "expected one forwarding process: %s" % per)
    leader = [b for b in batons if per[b.name]][0]

    # baton status reads the lease over TLS
    rc, out, err = h.run_baton(["status", "-c", batons[0].cfg])
    h.log("baton status: rc %d\n%s" % (rc, (out + err).strip()))
    t.check(rc == 0 and "psub" in out and ("leader" in out or "held" in out),
            "baton status over TLS: rc %d: %s" % (rc, (out + err).strip()[:400]))

    # a SIGKILLed leader: a standby takes over over TLS
    leader.kill()
    wait_subscribed(t, srv)
    pub2 = TlsPublisher(srv, rate=2000, count=total + 2000, first_seq=total + 1)
    pub2.start()
    t.require(pub2.wait_done(30), "publisher did not finish")
    rest = [b for b in batons if b is not leader]
    got = h.wait_until(lambda: len([s for s in all_seqs(rest) if s > total]) >= 2000, 20, 0.1)
    t.check(got, "the new leader did not forward the 2,000 messages after the takeover")
    for b in rest:
        t.check(b.alive(), "%s exited" % b.name)
        warn = [ln for ln in b.stderr_text().splitlines() if "WARN" in ln and "TLS:" in ln]
        t.check(not warn, "%s logged a TLS warning: %s" % (b.name, warn[:2]))


def test_client_certificate(t):
    tls = make_tls_files(h.mktemp())
    srv = TlsRedis(tls, auth_clients=True)
    with_cert = tls_group(tls, cert_file=tls["client_cert"], key_file=tls["client_key"])
    good = t.baton(main_cfg(srv.port, with_cert), {"psub.cfg": psub_cfg(srv.port, with_cert)})
    wait_subscribed(t, srv)
    pub = TlsPublisher(srv, rate=2000, count=2000)
    pub.start()
    t.require(pub.wait_done(30), "publisher did not finish")
    check_all_once(t, [good], 2000)

    # without a client certificate: refused by the server, named, retried
    bad = t.baton(main_cfg(srv.port, tls_group(tls)), {"psub.cfg": psub_cfg(srv.port, tls_group(tls))})
    where = "redis 127.0.0.1:%d" % srv.port
    ok = h.wait_until(lambda: bad.stderr_text().count(where) >= 2, 15, 0.1)
    text = bad.stderr_text()
    lines = [ln for ln in text.splitlines() if where in ln]
    h.log("without a client certificate: %s" % (lines[:2],))
    t.check(ok, "no repeated error naming %s: %s" % (where, text[-600:]))
    t.check(re.search(r"certificate required|TLS session", text),
            "the error does not say the TLS session was refused: %s" % text[-600:])
    t.check(bad.alive(), "baton without a client certificate exited")
    t.check(not forwarded(bad), "baton without a client certificate forwarded messages")


def _expect_error(t, b, port, needle, label, timeout=15):
    where = "redis 127.0.0.1:%d" % port
    ok = h.wait_until(lambda: len([ln for ln in b.stderr_text().splitlines()
                                   if where in ln and needle in ln]) >= 2, timeout, 0.1)
    lines = [ln for ln in b.stderr_text().splitlines() if where in ln]
    h.log("%s: %d error lines, e.g. %s" % (label, len(lines), lines[:1]))
    t.check(ok, "%s: no repeated error naming %s with %r: %s"
            % (label, where, needle, b.stderr_text()[-800:]))
    t.check(b.alive(), "%s: baton exited" % label)
    t.check(not forwarded(b), "%s: messages forwarded" % label)


def test_errors(t):
    d = h.mktemp()
    tls = make_tls_files(d)
    other = make_ca(d, "other-ca")
    os.chmod(other[0], 0o644)
    srv = TlsRedis(tls)
    plain = t.redis()  # a plain-text Redis
    good = tls_group(tls)
    cases = [
        ("unrelated CA", tls_group(tls, ca_file=other[0]), srv.port, "TLS: certificate verify failed"),
        ("wrong server_name", tls_group(tls, server_name="redis.example.com"), srv.port,
         "hostname mismatch"),
        ("plain text against the TLS port", "", srv.port, "a TLS port?"),
        ("TLS against a plain port", good, plain.port, "is it a TLS port?"),
    ]
    lease = {"ttl_ms": 3000, "renew_ms": 1000, "retry_ms": 250}
    started = []
    for label, tg, port, needle in cases:
        # the locker misconfigured (the source would be the same)
        b = t.baton(main_cfg(port, tg, lease), {"psub.cfg": psub_cfg(port, tg)})
        started.append(("locker: " + label, b, port, needle))
        # the locker fine, the source misconfigured: the leader cannot subscribe
        b2 = t.baton(main_cfg(srv.port, good, lease), {"psub.cfg": psub_cfg(port, tg)})
        started.append(("source: " + label, b2, port, needle))
    for label, b, port, needle in started:
        _expect_error(t, b, port, needle, label)
    # the Redis itself is fine for a correct client all along
    c = srv.client()
    t.check(c.cmd("PING") == "PONG", "TLS redis does not answer")
    c.close()


if __name__ == "__main__":
    h.main(globals())
