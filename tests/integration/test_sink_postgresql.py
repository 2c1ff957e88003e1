"""The postgresql sink against a real PostgreSQL 15 (started by the test on
127.0.0.1 as the `postgres` user; lib/postgres.py), with real baton
processes and a real redis-server (locker and source):

  1. bad input: a conninfo libpq cannot parse (file:line, exit 78), a table
     that was never created (exit 69 naming --init-sink), a user statement
     with a syntax error (exit 69 with the server's message); --init-sink
     prints the DDL, --apply creates it and is idempotent
  2. delivery: every message once, a statement run once per id, a
     non-retryable error in the statement dead-letters that message only
  3. PostgreSQL restarted mid-stream, and a COMMIT whose answer is lost (a
     fault proxy cuts the connection right after COMMIT went out): with a
     statement that increments a counter per id, every counter is exactly 1
"""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
import postgres as pg  # noqa: E402
from publisher import Publisher  # noqa: E402
from test_replay import wait_subscribers  # noqa: E402,F401

ORDER = ["test_bad_input", "test_delivery", "test_password_file", "test_restart_and_lost_commit"]

TTL = 1000
LEASE = {"ttl_ms": TTL, "renew_ms": 300, "retry_ms": 100}
CHAOS_S = int(os.environ.get("BATON_PG_CHAOS_S", "40"))


def server():
    why = pg.available()
    if why:
        return None, why
    return h.shared("pg", pg.PgServer), None


def pg_or_skip(t):
    srv, why = server()
    if srv is None:
        t.skip(why)
    return srv


def sink_cfg(srv, name="db", table=None, statement=None, conninfo=None, port=None):
    parts = ['name = "%s"' % name, 'type = "postgresql"',
             'conninfo = "%s"' % (conninfo or srv.conninfo(port=port))]
    if table:
        parts.append('table = "%s"' % table)
    if statement:
        parts.append('statement = "%s"' % statement.replace('"', '\\"'))
    return "{ %s; }" % "; ".join(parts)


def psub_cfg(port, sink="db", replay=True, name="orders"):
    return ('name = "%s"; type = "redis_psub"; sink = "%s";\n'
            'host = "127.0.0.1"; port = %d; patterns = ["chan.*"];\n%s'
            % (name, sink, port, 'failover = "replay";\n' if replay else ""))


def init_tables(t, b_cfg, sink="db"):
    rc, out, err = h.run_baton(["-c", b_cfg, "--init-sink", sink, "--apply"])
    t.require(rc == 0, "--init-sink --apply failed (%d): %s" % (rc, err))


def rows(srv, table, endpoint="orders"):
    """[(seq, id, epoch, payload text)] in seq order."""
    return [(int(r[0]), r[1], int(r[2]), r[3]) for r in srv.sql(
        "SELECT seq, id, epoch, payload #>> '{}' FROM %s WHERE endpoint = '%s' ORDER BY seq"
        % (table, endpoint))]


def analyse(t, name, srv, table, pub):
    published = {e[0] for e in pub.snapshot() if e[2]}
    got = rows(srv, table)
    seqs = {}
    for (_s, _id, _epoch, payload) in got:
        try:
            n = int(payload.split(":", 1)[0])
        except (ValueError, AttributeError):
            continue
        seqs[n] = seqs.get(n, 0) + 1
    missing = sorted(published - set(seqs))
    dups = {n: c for n, c in seqs.items() if c > 1}
    drops = [(a, b) for a, b in zip(got, got[1:]) if b[2] < a[2]]
    epochs = sorted({r[2] for r in got})
    h.log("%s: published %d, rows %d, missing %d, duplicates %d, epoch decreases %d, epochs %d"
          % (name, len(published), len(got), len(missing), len(dups), len(drops), len(epochs)))
    print("RESULT pg_%s_missing %d" % (name, len(missing)))
    print("RESULT pg_%s_duplicates %d" % (name, len(dups)))
    t.check(not missing, "%d published messages have no row, e.g. %r" % (len(missing), missing[:10]))
    t.check(not dups, "%d messages have several rows, e.g. %r" % (len(dups), list(dups.items())[:5]))
    t.check(not drops, "the epoch decreases along seq %d times, e.g. %r" % (len(drops), drops[:3]))
    return got


def leader(batons, ep="orders"):
    for b in batons:
        if b.alive() and b.proc.poll() is None and getattr(b, "mport", None):
            if h.status_endpoints(b.mport, 0.5).get(ep, {}).get("role") == "leader":
                return b
    return None


def cluster(t, srv, redis, n=3, table="t_chaos", statement=None, lease=None):
    batons = []
    for i in range(n):
        mport = h.free_port()
        main = h.main_cfg(redis_port=redis.port, lease=lease or LEASE,
                          sinks=sink_cfg(srv, table=table, statement=statement),
                          extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
        b = t.baton(main, {"orders.cfg": psub_cfg(redis.port)}, name="r%d" % i, start=False)
        b.mport = mport
        batons.append(b)
    init_tables(t, batons[0].cfg)
    for b in batons:
        b.start()
    return batons


# ---------------------------------------------------------------------------

def test_bad_input(t):
    srv = pg_or_skip(t)
    redis = t.redis()
    ep = {"orders.cfg": psub_cfg(redis.port, replay=False)}

    # a conninfo libpq cannot parse: the config's file:line, exit 78
    b = t.baton(h.main_cfg(sinks=sink_cfg(srv, conninfo="host=127.0.0.1 bogus_key=1")), ep,
                name="badconn", start=False)
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    t.check(rc == 78, "bad conninfo: --check-config exit %d, want 78" % rc)
    t.check("baton.cfg:" in err and "conninfo" in err and "bogus_key" in err,
            "bad conninfo: no file:line and libpq's reason: %r" % err)

    # libpq is loaded only for a postgresql sink; missing: a clear refusal
    b = t.baton(h.main_cfg(sinks=sink_cfg(srv)), ep, name="nolibpq", start=False)
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"],
                               env={"BATON_LIBPQ": "/nonexistent/libpq.so.5"})
    t.check(rc == 78 and "libpq" in err and "/nonexistent/libpq.so.5" in err,
            "libpq missing: %d %r" % (rc, err[-400:]))
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    t.check(rc == 0, "a good postgresql sink: --check-config %d %r" % (rc, err[-400:]))

    # host/dbname and conninfo together; both password sources
    for bad, want in (('host = "127.0.0.1"; conninfo = "dbname=x";', "not both"),
                      ('host = "127.0.0.1"; password_env = "P"; password_file = "/f";',
                       "password_env or password_file"),
                      ('host = "127.0.0.1"; sslmode = "sometimes";', "'sslmode'")):
        b = t.baton(h.main_cfg(sinks='{ name = "db"; type = "postgresql"; %s }' % bad), ep,
                    name="bad%d" % len(t.batons), start=False)
        rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
        t.check(rc == 78 and want in err and "baton.cfg:" in err, "%s: %d %r" % (bad, rc, err))

    # a table name that is not an identifier
    b = t.baton(h.main_cfg(sinks=sink_cfg(srv, table="x; DROP TABLE y")), ep, name="badtable",
                start=False)
    rc, out, err = h.run_baton(["-c", b.cfg, "--check-config"])
    t.check(rc == 78 and "'table'" in err, "bad table: exit %d: %r" % (rc, err))

    # a table that was never created: no silent CREATE, a clear error at start
    b = t.baton(h.main_cfg(sinks=sink_cfg(srv, table="never_created")), ep, name="missing")
    rc = b.wait(30)
    err = b.stderr_text()
    t.check(rc == 69, "missing table: exit %s, want 69" % rc)
    t.check("missing tables never_created, baton_fence" in err and "--init-sink db" in err,
            "missing table: the error does not say what to do: %r" % err[-600:])
    t.check(not srv.sql("SELECT to_regclass('never_created')")[0][0],
            "the sink created the table by itself")

    # --init-sink prints the DDL, --apply creates the tables, twice is fine
    rc, out, err = h.run_baton(["-c", b.cfg, "--init-sink", "db"])
    t.check(rc == 0 and "CREATE TABLE IF NOT EXISTS never_created" in out
            and "CREATE TABLE IF NOT EXISTS baton_fence" in out,
            "--init-sink did not print the DDL (%d): %r %r" % (rc, out, err))
    t.check(not srv.sql("SELECT to_regclass('never_created')")[0][0],
            "--init-sink without --apply created the table")
    for i in range(2):
        rc, out, err = h.run_baton(["-c", b.cfg, "--init-sink", "db", "--apply"])
        t.check(rc == 0, "--init-sink --apply (run %d) failed (%d): %s" % (i + 1, rc, err))
    t.check(srv.sql("SELECT to_regclass('never_created') IS NOT NULL")[0][0] == "t",
            "--apply did not create the table")
    rc, out, err = h.run_baton(["-c", b.cfg, "--init-sink", "nosuch"])
    t.check(rc == 78 and "nosuch" in err, "--init-sink of an unknown sink: %d %r" % (rc, err))
    rc, out, err = h.run_baton(["-c", b.cfg, "--apply"])
    t.check(rc == 64, "--apply without --init-sink: exit %d" % rc)

    # a user statement with a syntax error: the server's message at start
    b = t.baton(h.main_cfg(sinks=sink_cfg(srv, table="never_created",
                                          statement="INSRT INTO nowhere VALUES ($1)")),
                ep, name="badstmt")
    rc = b.wait(30)
    err = b.stderr_text()
    t.check(rc == 69, "statement with a syntax error: exit %s, want 69" % rc)
    t.check("42601" in err and "syntax error" in err and "INSRT" in err,
            "statement with a syntax error: no server message: %r" % err[-600:])

    # a server that does not answer is no start error: /readyz says so
    port = h.free_port()
    mport = h.free_port()
    b = t.baton(h.main_cfg(sinks=sink_cfg(srv, port=port),
                           extra='metrics = { listen = "127.0.0.1:%d"; };' % mport), ep,
                name="down")
    ok = h.wait_until(lambda: h.readyz(mport)[0] == 503, 15, 0.2)
    code, body = h.readyz(mport)
    t.check(ok and "cannot connect" in body, "/readyz with the server down: %s %r" % (code, body))
    t.check(b.proc.poll() is None, "baton exited although only the server was down")


def test_delivery(t):
    srv = pg_or_skip(t)
    redis = t.redis()
    srv.sql("DROP TABLE IF EXISTS counters; CREATE TABLE counters (id text PRIMARY KEY, "
            "n int NOT NULL, epoch bigint, payload text, ep text, src text, at timestamptz, "
            "env jsonb, CHECK (payload <> 'poison'))")
    stmt = ("INSERT INTO counters VALUES ($1, 1, $2, $3 #>> '{}', $4, $5, $6, $7) "
            "ON CONFLICT (id) DO UPDATE SET n = counters.n + 1")
    dl = os.path.join(t.workdir, "dead.jsonl")
    sinks = sink_cfg(srv, table="t_delivery", statement=stmt)[:-3] + \
        '; dead_letter = "dl"; }, { name = "dl"; type = "file"; path = "%s"; }' % dl
    b = t.baton(h.main_cfg(redis_port=redis.port, lease=LEASE, sinks=sinks),
                {"orders.cfg": psub_cfg(redis.port)}, start=False)
    init_tables(t, b.cfg)
    b.start()
    wait_subscribers(t, redis.port, 1)
    c = h.Resp(redis.port)
    for i in range(200):
        c.cmd("PUBLISH", "chan.x", "poison" if i == 100 else "m%d" % i)
    c.close()
    x = "env->>'channel' = 'chan.x'"
    ok = h.wait_until(lambda: int(srv.sql("SELECT count(*) FROM counters WHERE " + x)[0][0]) >= 199,
                      15, 0.1)
    t.check(ok, "the statement did not run for 199 messages")
    got = srv.sql("SELECT count(*), max(n), min(n), count(DISTINCT epoch) FROM counters WHERE "
                  + x)[0]
    t.check(got[0] == "199" and got[1] == "1" and got[2] == "1",
            "counters: %r (want 199 rows, every n = 1)" % (got,))
    row = srv.sql("SELECT id, ep, src, at IS NOT NULL, env->>'channel' FROM counters "
                  "WHERE payload = 'm0'")
    t.check(row and row[0][1] == "orders" and row[0][2] == "redis_psub" and row[0][3] == "t"
            and row[0][4] == "chan.x", "parameters $4..$7: %r" % row)
    n = int(srv.sql("SELECT count(*) FROM t_delivery WHERE payload #>> '{}' <> 'probe'")[0][0])
    t.check(n == 199, "t_delivery holds %d rows, want 199 (the poison one rolled back)" % n)
    ok = h.wait_until(lambda: os.path.exists(dl) and "poison" in open(dl).read(), 10, 0.1)
    t.check(ok, "the message the statement refused did not reach the dead-letter sink")
    dead = [json.loads(line) for line in open(dl) if line.strip()] if ok else []
    t.check(dead and dead[0]["dead_letter"]["reason"] == "rejected"
            and dead[0]["dead_letter"]["body"].startswith("SQLSTATE 23514"),
            "the dead letter does not carry the server's answer: %r" % dead[:1])
    err = b.stderr_text()
    t.check("23514" in err and "counters_payload_check" in err,
            "the server's message for the refused message is not logged: %r" % err[-800:])
    t.check(b.term() == 0, "baton did not exit 0 on SIGTERM")


def _close(*socks):
    for x in socks:
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        x.close()


def test_password_file(t):
    """host/port/dbname/user with password_file against a role that must
    authenticate (scram-sha-256 for it in pg_hba.conf): --init-sink --apply
    and delivery work; a wrong password is refused by the server."""
    srv = pg_or_skip(t)
    redis = t.redis()
    srv.sql("DROP DATABASE IF EXISTS pwdb; CREATE ROLE pwuser LOGIN PASSWORD 'pw-38-secret'")
    srv.sql("CREATE DATABASE pwdb OWNER pwuser")
    hba = os.path.join(srv.datadir, "pg_hba.conf")
    with open(hba) as f:
        text = f.read()
    with open(hba, "w") as f:
        f.write("host all pwuser 127.0.0.1/32 scram-sha-256\n" + text)
    srv.sql("SELECT pg_reload_conf()")
    pw = os.path.join(t.workdir, "pg.pass")
    with open(pw, "w") as f:
        f.write("pw-38-secret\n")
    os.chmod(pw, 0o600)
    bad = os.path.join(t.workdir, "bad.pass")
    with open(bad, "w") as f:
        f.write("wrong\n")
    os.chmod(bad, 0o600)

    def sink(pfile):
        return ('{ name = "db"; type = "postgresql"; host = "127.0.0.1"; port = %d; '
                'dbname = "pwdb"; user = "pwuser"; password_file = "%s"; sslmode = "disable"; }'
                % (srv.port, pfile))
    ep = {"orders.cfg": psub_cfg(redis.port, replay=False)}
    b = t.baton(h.main_cfg(sinks=sink(bad)), ep, name="badpw", start=False)
    rc, out, err = h.run_baton(["-c", b.cfg, "--init-sink", "db", "--apply"])
    t.check(rc == 69 and "password authentication failed" in err and "wrong" not in err,
            "a wrong password: %d %r" % (rc, err[-300:]))
    b = t.baton(h.main_cfg(sinks=sink(pw)), ep, name="goodpw", start=False)
    rc, out, err = h.run_baton(["-c", b.cfg, "--init-sink", "db", "--apply"])
    t.require(rc == 0, "--init-sink --apply with password_file: %d %r" % (rc, err[-300:]))
    b.start()
    wait_subscribers(t, redis.port, 1)
    c = h.Resp(redis.port)
    for i in range(20):
        c.cmd("PUBLISH", "chan.x", "p%d" % i)
    c.close()
    q = "SELECT count(*) FROM baton_messages WHERE payload #>> '{}' ~ '^p[0-9]+$'"
    ok = h.wait_until(lambda: srv.sql("\\c pwdb\n" + q)[-1][0] == "20", 10, 0.1)
    t.check(ok, "20 rows through a password-authenticated connection: %r"
            % srv.sql("\\c pwdb\n" + q))
    t.check("pw-38-secret" not in b.stderr_text(), "the password is in the log")


class CommitCutter:
    """A TCP proxy to PostgreSQL that, when armed, cuts the client's
    connection right after it forwarded a simple-query COMMIT to the server
    (so the server commits, and the client never sees the answer)."""

    def __init__(self, target_port):
        self.target = target_port
        self.armed = threading.Event()
        self.cuts = 0
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.stop_ev = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()
        h._cleanups.append(self.close)

    def close(self):
        self.stop_ev.set()
        try:
            self.ls.close()
        except OSError:
            pass

    def _accept(self):
        while not self.stop_ev.is_set():
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            st = {"dead": False}
            threading.Thread(target=self._up, args=(c, s, st), daemon=True).start()
            threading.Thread(target=self._down, args=(s, c, st), daemon=True).start()

    def _up(self, c, s, st):
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                cut = self.armed.is_set() and b"Q\x00\x00\x00\x0bCOMMIT\x00" in d
                if cut:
                    st["dead"] = True  # the answer never reaches the client
                s.sendall(d)
                if cut:
                    self.armed.clear()
                    self.cuts += 1
                    time.sleep(0.05)  # the server commits
                    break
        except OSError:
            pass
        _close(c, s)

    def _down(self, s, c, st):
        try:
            while True:
                d = s.recv(65536)
                if not d or st["dead"]:
                    break
                c.sendall(d)
        except OSError:
            pass
        _close(c, s)


def test_restart_and_lost_commit(t):
    srv = pg_or_skip(t)
    redis = t.redis()
    proxy = CommitCutter(srv.port)
    srv.sql("DROP TABLE IF EXISTS cnt; CREATE TABLE cnt (id text PRIMARY KEY, n int NOT NULL)")
    stmt = "INSERT INTO cnt VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET n = cnt.n + 1"
    b = t.baton(h.main_cfg(redis_port=redis.port, lease=LEASE,
                           sinks=sink_cfg(srv, table="t_lost", statement=stmt, port=proxy.port)),
                {"orders.cfg": psub_cfg(redis.port)}, start=False)
    init_tables(t, b.cfg)
    b.start()
    wait_subscribers(t, redis.port, 1)
    pub = Publisher(redis.port, rate=500).start()
    time.sleep(1.5)
    for _ in range(3):  # COMMIT answers lost
        proxy.armed.set()
        h.wait_until(lambda: not proxy.armed.is_set(), 5, 0.01)
        time.sleep(0.7)
    srv.restart(down_s=1.0)  # PostgreSQL restarted mid-stream
    time.sleep(2)
    pub.stop()
    published = {e[0] for e in pub.snapshot() if e[2]}
    h.wait_until(lambda: int(srv.sql("SELECT count(*) FROM t_lost")[0][0]) >= len(published),
                 15, 0.25)
    time.sleep(0.5)
    t.check(proxy.cuts == 3, "the proxy cut %d COMMITs, want 3" % proxy.cuts)
    got = srv.sql("SELECT count(*), coalesce(max(n), 0), coalesce(min(n), 0) FROM cnt")[0]
    h.log("lost commit: %d published, counters %r, readbacks logged %d" % (
        len(published), got, b.stderr_text().count("had gone through")))
    t.check(int(got[1]) == 1 and int(got[2]) == 1, "a counter is not exactly 1: %r" % (got,))
    n_rows = int(srv.sql("SELECT count(*) FROM t_lost")[0][0])  # the probes included
    t.check(int(got[0]) == n_rows, "%s counters for %d rows" % (got[0], n_rows))
    analyse(t, "lost_commit", srv, "t_lost", pub)
    t.check("COMMIT's answer was lost" in b.stderr_text(), "the lost COMMIT was not noticed")


if __name__ == "__main__":
    h.main(globals())
