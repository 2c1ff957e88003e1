"""mysql_cdc against a real mariadb-server (ROW binlog, FULL metadata) and a
real Redis, with real baton processes.

One MariaDB server per file (started on first use); each test uses its own
database and its own Redis, so checkpoints never leak between tests."""

import base64
import datetime
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
import mariadb as mdb  # noqa: E402
from tlsfiles import make_ca, make_tls_files  # noqa: E402

ORDER = ["test_steady_state_exactly_once", "test_leader_sigkill_no_loss",
         "test_checkpoint_none_shows_loss", "test_stale_epoch_checkpoint_rejected",
         "test_legacy_checkpoint_taken_over",
         "test_filters_ddl_rotation_restart", "test_errors_keep_retrying", "test_tls"]

_server = None
CDC_USER, CDC_PW = "cdc", "cdc-pw"
LEASE = {"ttl_ms": 1000, "renew_ms": 250, "retry_ms": 100}


def lease_key(name):
    """The ActiveGuard lease key of endpoint `name` (guard/scope.c guard_key,
    prefix "baton", no owner)."""
    return "baton:active:mysql_cdc:%s" % name


def ckpt_key(name):
    """Where the checkpoint lives: beside the lease, in the locker."""
    return lease_key(name) + ":cdc"


def legacy_ckpt_key(name):
    """Where batons before the locker-held checkpoint kept it."""
    return "baton:cdc:mysql_cdc:%s" % name


def server():
    global _server
    if _server is None:
        _server = mdb.MariaServer()
        _server.create_user(CDC_USER, CDC_PW)
    return _server


def cdc_cfg(srv, name="cdc", db="d", extra=""):
    return ('name = "%s";\ntype = "mysql_cdc";\nsink = "out";\nhost = "127.0.0.1";\n'
            'port = %d;\nuser = "%s";\npassword_env = "CDC_PW";\nserver_id = 4242;\n'
            'tables = [ "%s.*" ];\n%s\n' % (name, srv.port, CDC_USER, db, extra))


def start_batons(t, srv, redis_port, n, db, extra="", name="cdc"):
    main = h.main_cfg(redis_port, lease=LEASE)
    return [t.baton(main, {"cdc.cfg": cdc_cfg(srv, name, db, extra)}, env={"CDC_PW": CDC_PW})
            for _ in range(n)]


def wait_streaming(t, batons, timeout=20):
    ok = h.wait_until(lambda: any("streaming the binlog" in b.stderr_text() for b in batons),
                      timeout, 0.05)
    t.require(ok, "no baton started streaming the binlog within %ss" % timeout)


def leader_of(batons):
    for b in batons:
        if b.alive() and "streaming the binlog" in b.stderr_text():
            return b
    return None


def rows_of(batons):
    out = []
    for b in batons:
        b.poll_records()
        out.extend(r for r in b.records if r.get("op") in ("insert", "update", "delete"))
    return out


# ----------------------------------------------------------- the workload

TABLES = ["ta", "tb", "tc"]
BASE_DT = datetime.datetime(2024, 1, 1)


def expected_row(i, updated=False):
    dt = BASE_DT + datetime.timedelta(seconds=i, milliseconds=123)
    return {
        "id": i,
        "u": 2 ** 63 + i * 7,
        "d": "-%d.500" % i,
        "s": ("upd-%d" % i) if updated else "héllo-%d-€✓" % i,
        "b": {"base64": base64.b64encode(bytes([i % 256, 0, 255])).decode()},
        "dt": dt.strftime("%Y-%m-%dT%H:%M:%S.123"),
        "n": None if (updated or i % 3 == 0) else i,
    }


def create_tables(srv, db):
    stmts = ["CREATE DATABASE %s;" % db]
    for tb in TABLES:
        stmts.append("CREATE TABLE %s.%s (id INT PRIMARY KEY, u BIGINT UNSIGNED, d DECIMAL(12,3), "
                     "s VARCHAR(64), b BLOB, dt DATETIME(3), n INT NULL) "
                     "CHARSET utf8mb4;" % (db, tb))
    srv.sql("\n".join(stmts))


def table_of(i):
    return TABLES[i % 3]


def insert_sql(db, i):
    e = expected_row(i)
    dt = (BASE_DT + datetime.timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S") + ".123"
    return ("INSERT INTO %s.%s VALUES (%d, %d, %s, '%s', x'%02x00ff', '%s', %s);"
            % (db, table_of(i), i, e["u"], e["d"], e["s"], i % 256, dt,
               "NULL" if e["n"] is None else e["n"]))


def workload(db, ids, updates, deletes, pace_every=0, pace_s=0.0):
    out = []
    for k, i in enumerate(ids):
        out.append(insert_sql(db, i))
        if pace_every and k % pace_every == pace_every - 1:
            out.append("DO SLEEP(%s);" % pace_s)
    for i in updates:
        out.append("UPDATE %s.%s SET s = 'upd-%d', n = NULL WHERE id = %d;" % (db, table_of(i), i, i))
    for i in deletes:
        out.append("DELETE FROM %s.%s WHERE id = %d;" % (db, table_of(i), i))
    return "\n".join(out) + "\n"


def expected_events(ids, updates, deletes):
    ev = {}
    for i in ids:
        ev[(table_of(i), "insert", i)] = (None, expected_row(i))
    for i in updates:
        ev[(table_of(i), "update", i)] = (expected_row(i), expected_row(i, True))
    for i in deletes:
        before = expected_row(i, i in updates)
        ev[(table_of(i), "delete", i)] = (before, None)
    return ev


def key_of(r):
    row = r["after"] if r["op"] != "delete" else r["before"]
    return (r["table"], r["op"], row["id"])


def check_values(t, recs, expected, limit=5):
    bad = 0
    for r in recs:
        k = key_of(r)
        if k not in expected:
            continue
        before, after = expected[k]
        if r.get("before") != before or r.get("after") != after:
            bad += 1
            if bad <= limit:
                h.log("value mismatch for %r:\n  got  %r / %r\n  want %r / %r"
                      % (k, r.get("before"), r.get("after"), before, after))
    t.check(bad == 0, "%d row events with wrong before/after values" % bad)


# ----------------------------------------------------------------- tests

def test_steady_state_exactly_once(t):
    srv = server()
    redis = t.redis()
    db = "steady"
    create_tables(srv, db)
    batons = start_batons(t, srv, redis.port, 3, db)
    wait_streaming(t, batons)
    ids, upd, dele = list(range(1, 2001)), list(range(1, 501)), list(range(501, 1001))
    expected = expected_events(ids, upd, dele)
    t0 = time.monotonic()
    srv.sql(workload(db, ids, upd, dele), timeout=120)
    got = h.wait_until(lambda: len(rows_of(batons)) >= len(expected), 60, 0.2)
    recs = rows_of(batons)
    dt = time.monotonic() - t0
    h.log("%d row events forwarded (%d expected) in %.1fs" % (len(recs), len(expected), dt))
    time.sleep(1.0)
    recs = rows_of(batons)
    t.check(got, "only %d of %d row events arrived" % (len(recs), len(expected)))
    per = [len([r for r in b.records if "op" in r]) for b in batons]
    h.log("per baton: %s" % per)
    t.check(sorted(per)[:2] == [0, 0], "more than one baton forwarded rows: %s" % per)
    dups = h.duplicates(r["id"] for r in recs)
    t.check(not dups, "%d duplicate envelope ids, e.g. %r" % (len(dups), list(dups)[:3]))
    keys = [key_of(r) for r in recs]
    missing = set(expected) - set(keys)
    t.check(not missing, "%d row events missing, e.g. %r" % (len(missing), sorted(missing)[:3]))
    t.check(len(set(keys)) == len(keys), "duplicate row events by key")
    check_values(t, recs, expected)
    sample = next(r for r in recs if r["op"] == "update")
    for f in ("gtid", "position", "ts", "epoch", "db", "table"):
        t.check(f in sample, "envelope lacks %s: %r" % (f, sample))
    t.check(sample["id"] == "%s:%d:0" % (sample["position"]["file"], sample["position"]["pos"])
            or sample["id"].startswith(sample["position"]["file"]), "id is not file:pos:index")
    t.check(sample["db"] == db, "db field %r" % sample["db"])
    t.check(str(sample["gtid"]).count("-") == 2, "gtid %r" % sample["gtid"])


def _kill_run(t, db, extra, n_batons=3):
    srv = server()
    redis = t.redis()
    create_tables(srv, db)
    batons = start_batons(t, srv, redis.port, n_batons, db, extra)
    wait_streaming(t, batons)
    ids = list(range(1, 2001))
    expected = expected_events(ids, [], [])
    p = srv.sql_background(workload(db, ids, [], [], pace_every=40, pace_s=0.08))
    h.wait_until(lambda: len(rows_of(batons)) >= 600, 30, 0.05)
    leader = leader_of(batons)
    t.require(leader is not None, "no leader")
    n_before = len(rows_of(batons))
    leader.kill()
    h.log("SIGKILLed the leader %s after %d row events" % (leader.name, n_before))
    p.wait(120)
    t.check(p.returncode == 0, "workload failed: %s" % p.stderr.read()[-300:])
    return srv, redis, batons, expected


def test_leader_sigkill_no_loss(t):
    _srv, _redis, batons, expected = _kill_run(
        t, "failover", 'checkpoint_every_events = 100;\ncheckpoint_every_ms = 200;')
    ok = h.wait_until(lambda: set(expected) <= set(key_of(r) for r in rows_of(batons)), 30, 0.2)
    recs = rows_of(batons)
    keys = [key_of(r) for r in recs]
    missing = set(expected) - set(keys)
    dups = len(keys) - len(set(keys))
    h.log("after failover: %d row events, %d distinct, %d missing, %d duplicates "
          "(checkpoint every 100 events / 200 ms)" % (len(keys), len(set(keys)), len(missing), dups))
    t.check(ok and not missing, "%d row events lost, e.g. %r" % (len(missing), sorted(missing)[:3]))
    t.check(dups <= 400, "%d duplicates: more than the checkpoint interval explains" % dups)
    check_values(t, recs, expected)
    resumed = [b for b in batons if b.alive() and "resuming from checkpoint" in b.stderr_text()]
    t.check(resumed, "no surviving baton resumed from the checkpoint")


def test_checkpoint_none_shows_loss(t):
    _srv, _redis, batons, expected = _kill_run(
        t, "nockpt", 'checkpoint = "none";\nstart = "latest";', n_batons=2)
    time.sleep(3.0)
    recs = rows_of(batons)
    keys = set(key_of(r) for r in recs)
    missing = set(expected) - keys
    h.log("checkpoint = none, start = latest: %d of %d row events lost across the failover "
          "(the reference design's gap)" % (len(missing), len(expected)))
    t.check(len(missing) > 0, "expected the failover gap to lose row events without a checkpoint")


def test_stale_epoch_checkpoint_rejected(t):
    srv = server()
    redis = t.redis()
    db = "stale"
    create_tables(srv, db)
    batons = start_batons(t, srv, redis.port, 1, db, 'checkpoint_every_ms = 100;', name="st")
    wait_streaming(t, batons)
    r = redis.client()
    ckey = ckpt_key("st")
    ekey = lease_key("st") + ":epoch"
    srv.sql(workload(db, range(1, 11), [], []))
    h.wait_until(lambda: len(rows_of(batons)) >= 10, 10, 0.05)
    first = h.wait_until(lambda: (r.cmd("GET", ckey) or b"").decode(), 5, 0.05)
    time.sleep(0.5)
    good = r.cmd("GET", ckey).decode()
    mine = int(r.cmd("GET", ekey))
    t.check(good and first, "no checkpoint written")
    # another leader took over in the meantime (as far as Redis knows)
    r.cmd("SET", ekey, str(mine + 1000))
    srv.sql(workload(db, range(11, 21), [], []))
    h.wait_until(lambda: len(rows_of(batons)) >= 20, 10, 0.05)
    seen = h.wait_until(lambda: "rejected: epoch %d is stale" % mine in batons[0].stderr_text(),
                        5, 0.05)
    t.check(seen, "the stale checkpoint write was not logged as rejected")
    after = r.cmd("GET", ckey).decode()
    h.log("checkpoint before %s, after the stale writes %s" % (good, after))
    t.check(after == good, "a stale leader moved the checkpoint: %s -> %s" % (good, after))
    ttl = int(r.cmd("PTTL", ckey))
    h.log("checkpoint %s ttl %.1f days" % (ckey, ttl / 86400000.0))
    t.check(29 * 86400000 < ttl <= 30 * 86400000, "checkpoint ttl %d ms, not 30 days" % ttl)
    t.check(r.cmd("GET", legacy_ckpt_key("st")) is None, "the legacy key was written")


def test_legacy_checkpoint_taken_over(t):
    """Upgrade: a checkpoint an older baton kept at "<prefix>:cdc:<scope>" is
    taken over when "<lease key>:cdc" is absent: rows committed after it but
    before baton started (which start = "latest" would skip) are forwarded,
    and the next checkpoint goes to the new key."""
    srv = server()
    redis = t.redis()
    db = "legacy"
    create_tables(srv, db)
    f0, p0 = srv.master_status()
    srv.sql(workload(db, range(1, 21), [], []))  # before baton runs
    legacy = "%s:%d" % (f0, p0)
    out = subprocess.run(["redis-cli", "-p", str(redis.port), "SET", legacy_ckpt_key("lg"), legacy],
                         capture_output=True, text=True, timeout=10)
    t.require(out.returncode == 0 and "OK" in out.stdout, "redis-cli SET failed: %r" % (out,))
    batons = start_batons(t, srv, redis.port, 1, db, 'checkpoint_every_ms = 100;', name="lg")
    wait_streaming(t, batons)
    srv.sql(workload(db, range(21, 31), [], []))
    h.wait_until(lambda: len(rows_of(batons)) >= 30, 15, 0.05)
    time.sleep(0.5)
    got = sorted(r["after"]["id"] for r in rows_of(batons))
    h.log("legacy checkpoint %s: %d row events forwarded, ids %s..%s"
          % (legacy, len(got), got[0] if got else "-", got[-1] if got else "-"))
    t.check(got == list(range(1, 31)), "not resumed from the legacy checkpoint: ids %r" % got[:40])
    err = batons[0].stderr_text()
    taken = "checkpoint taken over from legacy key %s = %s" % (legacy_ckpt_key("lg"), legacy)
    t.check(taken in err, "the takeover was not logged")
    r = redis.client()
    new = h.wait_until(lambda: (r.cmd("GET", ckpt_key("lg")) or b"").decode() not in ("", legacy),
                       5, 0.05)
    cur = (r.cmd("GET", ckpt_key("lg")) or b"").decode()
    h.log("checkpoint now %s = %s; legacy key left at %s"
          % (ckpt_key("lg"), cur, (r.cmd("GET", legacy_ckpt_key("lg")) or b"").decode()))
    t.check(new, "the checkpoint did not move on under the new key: %r" % cur)
    t.check((r.cmd("GET", legacy_ckpt_key("lg")) or b"").decode() == legacy,
            "the legacy key was modified")


def test_filters_ddl_rotation_restart(t):
    srv = server()
    redis = t.redis()
    db = "filt"
    srv.sql("CREATE DATABASE %s;\n"
            "CREATE TABLE %s.keep1 (id INT PRIMARY KEY, v VARCHAR(20)) CHARSET utf8mb4;\n"
            "CREATE TABLE %s.keep_not (id INT PRIMARY KEY) CHARSET utf8mb4;\n"
            "CREATE TABLE %s.other (id INT PRIMARY KEY) CHARSET utf8mb4;\n" % ((db,) * 4))
    extra = ('exclude_tables = [ "%s.keep_not" ];\nops = [ "insert", "update" ];\nddl = true;\n'
             'tables = [ "%s.keep*" ];' % (db, db))
    main = h.main_cfg(redis.port, lease=LEASE)
    cfg = cdc_cfg(srv, "filt", db, "").replace('tables = [ "%s.*" ];' % db, extra)
    b = t.baton(main, {"cdc.cfg": cfg}, env={"CDC_PW": CDC_PW})
    wait_streaming(t, [b])
    f0 = srv.master_status()[0]
    srv.sql("INSERT INTO %s.keep1 VALUES (1, 'a'), (2, 'b');\n"
            "INSERT INTO %s.keep_not VALUES (1);\nINSERT INTO %s.other VALUES (1);\n"
            "UPDATE %s.keep1 SET v = 'c' WHERE id = 2;\nDELETE FROM %s.keep1 WHERE id = 1;\n"
            "FLUSH BINARY LOGS;\n"
            "INSERT INTO %s.keep1 VALUES (3, 'after-rotate');\n"
            "CREATE TABLE %s.keep2 (id INT PRIMARY KEY);\n"  # default db empty: not forwarded
            "USE %s;\n"  # DDL is matched on the session's default database
            "ALTER TABLE keep1 ADD COLUMN extra INT DEFAULT 7;\n"
            "INSERT INTO %s.keep1 (id, v) VALUES (4, 'after-ddl');\n" % ((db,) * 9))
    h.wait_until(lambda: len([r for r in (b.poll_records() or b.records)
                              if r.get("after", {}) and r["after"].get("id") == 4]) > 0, 15, 0.05)
    # server restart mid-stream: the endpoint reconnects from its position
    srv.restart()
    srv.sql("INSERT INTO %s.keep1 (id, v) VALUES (5, 'after-restart');" % db)
    h.wait_until(lambda: any(r.get("after") and r["after"].get("id") == 5
                             for r in (b.poll_records() or b.records)), 30, 0.1)
    time.sleep(0.5)
    b.poll_records()
    recs = [r for r in b.records if "op" in r]
    rows = [(r["table"], r["op"], (r["after"] or r["before"])["id"]) for r in recs if r["op"] != "ddl"]
    h.log("forwarded: %s" % rows)
    want = [("keep1", "insert", 1), ("keep1", "insert", 2), ("keep1", "update", 2),
            ("keep1", "insert", 3), ("keep1", "insert", 4), ("keep1", "insert", 5)]
    t.check(rows == want, "filtered rows %r != %r" % (rows, want))
    ddl = [r for r in recs if r["op"] == "ddl"]
    t.check(len(ddl) == 1 and "ADD COLUMN extra" in ddl[0].get("statement", ""),
            "DDL not forwarded once: %r" % ddl)
    r3 = next((r for r in recs if r.get("after") and r["after"].get("id") == 3), None)
    t.check(r3 is not None and r3["position"]["file"] != f0,
            "row after FLUSH BINARY LOGS not in the new file: %r" % (r3 and r3["position"]))
    r4 = next((r for r in recs if r.get("after") and r["after"].get("id") == 4), None)
    t.check(r4 is not None and r4["after"].get("extra") == 7,
            "row after ALTER lacks the new column: %r" % (r4 and r4["after"]))
    t.check(b.alive(), "baton died")
    t.check("reconnecting from" in b.stderr_text(), "no reconnect logged after the server restart")


def test_errors_keep_retrying(t):
    srv = server()
    redis = t.redis()
    srv.create_user("norepl", "pw2", grants="SELECT, REPLICATION CLIENT")
    nolog = mdb.MariaServer(binlog=False)
    nolog.create_user(CDC_USER, CDC_PW)
    t.cleanup(nolog.stop)
    main = h.main_cfg(redis.port, lease=LEASE)
    cases = {
        "badpw": (cdc_cfg(srv, "badpw"), {"CDC_PW": "wrong"}, "Access denied"),
        "nopriv": (cdc_cfg(srv, "nopriv").replace('"%s"' % CDC_USER, '"norepl"'),
                   {"CDC_PW": "pw2"}, "REPLICATION SLAVE"),
        "nobinlog": (cdc_cfg(nolog, "nobinlog"), {"CDC_PW": CDC_PW}, "binary logging is disabled"),
    }
    bs = {}
    for name, (cfg, env, _) in cases.items():
        bs[name] = t.baton(main, {"cdc.cfg": cfg}, env=env, name=name)
    time.sleep(4.0)
    for name, (_, _, needle) in cases.items():
        b = bs[name]
        err = b.stderr_text()
        lines = [l for l in err.splitlines() if "cannot stream the binlog" in l]
        h.log("%s: %s" % (name, lines[0][lines[0].find("cannot"):][:220] if lines else "(no error line)"))
        t.check(b.alive(), "%s: baton exited" % name)
        t.check(any(needle.lower() in l.lower() for l in lines),
                "%s: no clear error mentioning %r" % (name, needle))
        promos = err.count("promoted to leader")
        t.check(promos >= 2, "%s: not retrying (promoted %d times in 4 s)" % (name, promos))


def test_tls(t):
    """ssl = true with a CA and a client certificate against a server whose
    replication user REQUIRE X509 (so a plain connection would be refused):
    rows stream over TLS. An unrelated CA: a clear certificate error, retries,
    nothing forwarded. ssl = false for the same user: access denied."""
    d = h.mktemp("baton-cdc-tls-")
    tls = make_tls_files(d)
    other_ca = make_ca(d, "other-ca")[0]
    srv = mdb.MariaServer(extra_args=["--ssl-ca=" + tls["ca"], "--ssl-cert=" + tls["server_cert"],
                                      "--ssl-key=" + tls["server_key"]])
    t.cleanup(srv.stop)
    srv.sql("CREATE USER 'x509'@'%%' IDENTIFIED BY '%s' REQUIRE X509;\n"
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'x509'@'%%';\n"
            "CREATE DATABASE tls;\nCREATE TABLE tls.t (id INT PRIMARY KEY, v VARCHAR(20));\n"
            % CDC_PW)
    redis = t.redis()
    main = h.main_cfg(redis.port, lease=LEASE)

    def cfg(name, ca=None):
        extra = ('ssl = true; ssl_ca = "%s"; ssl_cert = "%s"; ssl_key = "%s";'
                 % (ca, tls["client_cert"], tls["client_key"])) if ca else "ssl = false;"
        return cdc_cfg(srv, name, "tls", extra).replace('"%s"' % CDC_USER, '"x509"')
    env = {"CDC_PW": CDC_PW}
    good = t.baton(main, {"cdc.cfg": cfg("good", tls["ca"])}, env=env, name="good")
    wrong = t.baton(main, {"cdc.cfg": cfg("wrongca", other_ca)}, env=env, name="wrongca")
    plain = t.baton(main, {"cdc.cfg": cfg("plain")}, env=env, name="plain")
    wait_streaming(t, [good])
    srv.sql("".join("INSERT INTO tls.t VALUES (%d, 'tls-%d');\n" % (i, i) for i in range(1, 101)))
    h.wait_until(lambda: len(rows_of([good])) >= 100, 20, 0.1)
    time.sleep(1.0)
    got = sorted(r["after"]["id"] for r in rows_of([good]))
    h.log("over TLS: %d of 100 row events forwarded" % len(got))
    t.check(got == list(range(1, 101)), "TLS endpoint forwarded %d of 100 rows" % len(got))
    for b, needle in ((wrong, "certificate"), (plain, "Access denied")):
        err = b.stderr_text()
        lines = [l for l in err.splitlines() if "cannot stream the binlog" in l]
        h.log("%s: %s" % (b.name, lines[0][lines[0].find("cannot"):][:240] if lines else "(no error line)"))
        t.check(b.alive(), "%s: baton exited" % b.name)
        t.check(any(needle.lower() in l.lower() for l in lines),
                "%s: no clear error mentioning %r" % (b.name, needle))
        t.check(err.count("promoted to leader") >= 2, "%s: not retrying" % b.name)
        t.check(not rows_of([b]), "%s forwarded rows" % b.name)


if __name__ == "__main__":
    h.main(globals())
