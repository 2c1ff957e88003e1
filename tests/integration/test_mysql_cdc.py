"""mysql_cdc against a real mariadb-server (ROW binlog, FULL metadata) and a
real Redis, with real baton processes.

One MariaDB server per file (started on first use); each test uses its own
database and its own Redis, so checkpoints never leak between tests."""

import base64
import json
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
         "test_filters_ddl_rotation_restart", "test_errors_keep_retrying", "test_tls",
         "test_undelivered_row_ends_the_term", "test_hosts_first_down_all_down",
         "test_primary_switchover_by_gtid"]

_server = None
CDC_USER, CDC_PW = "cdc", "cdc-pw"
LEASE = {"ttl_ms": 1000, "renew_ms": 250, "retry_ms": 100}


def lease_key(name):
    """The ActiveGuard lease key of endpoint `name` (guard/scope.c baton_key,
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


def _kill_run(t, db, extra, n_batons=3, kills=1):
    """2,000 inserts at ~330 rows/s (40 every 120 ms) while `kills` leaders
    are SIGKILLed one after another: 1.2 s into the workload, then each
    time 1.2 s after the next leader streamed (by time: the stdout sink
    writes in batches, row counts arrive in steps). Returns the server, the
    locker, the batons and the rows' expected events."""
    srv = server()
    redis = t.redis()
    create_tables(srv, db)
    batons = start_batons(t, srv, redis.port, n_batons, db, extra)
    wait_streaming(t, batons)
    ids = list(range(1, 2001))
    expected = expected_events(ids, [], [])
    p = srv.sql_background(workload(db, ids, [], [], pace_every=40, pace_s=0.12))
    killed = []
    for _ in range(kills):
        time.sleep(1.2)
        leader = h.wait_until(lambda: leader_of([b for b in batons if b not in killed]), 15, 0.02)
        t.require(leader, "no leader")
        n_before = len(rows_of(batons))
        leader.kill()
        killed.append(leader)
        h.log("SIGKILLed the leader %s after %d row events (workload %s)"
              % (leader.name, n_before, "running" if p.poll() is None else "done"))
        t.check(p.poll() is None, "the workload ended before the kill: the kill tests nothing")
        h.wait_until(lambda: leader_of([b for b in batons if b not in killed]), 15, 0.02)
    p.wait(120)
    t.check(p.returncode == 0, "workload failed: %s" % p.stderr.read()[-300:])
    return srv, redis, batons, expected


# Repeats per failover: rows forwarded after the last checkpoint the killed
# leader wrote. With the default cadence (checkpoint_every_ms = 100) at
# ~500 rows/s that is ~50 plus what the sink took between the last write and
# the kill; REPEATS_PER_FAILOVER leaves room for a loaded machine (the
# checkpoint write waits for the locker) and stays far below the ~500 a
# 1000 ms cadence gave (the figure the old default produced).
REPEATS_PER_FAILOVER = 200


def test_leader_sigkill_no_loss(t):
    kills = 2
    _srv, _redis, batons, expected = _kill_run(t, "failover", "", kills=kills)
    ok = h.wait_until(lambda: set(expected) <= set(key_of(r) for r in rows_of(batons)), 30, 0.2)
    recs = rows_of(batons)
    keys = [key_of(r) for r in recs]
    missing = set(expected) - set(keys)
    dups = len(keys) - len(set(keys))
    h.log("after %d leader kills: %d row events, %d distinct, %d missing, %d repeated = %.0f per "
          "failover (default cadence: checkpoint every 1000 events / 100 ms; bound %d)"
          % (kills, len(keys), len(set(keys)), len(missing), dups, dups / kills,
             REPEATS_PER_FAILOVER))
    t.check(ok and not missing, "%d row events lost, e.g. %r" % (len(missing), sorted(missing)[:3]))
    t.check(dups <= REPEATS_PER_FAILOVER * kills,
            "%d repeats over %d failovers: more than the checkpoint cadence explains" % (dups, kills))
    check_values(t, recs, expected)
    resumed = h.wait_until(lambda: [b for b in batons
                                    if b.alive() and "resuming from checkpoint" in b.stderr_text()],
                           10, 0.1)
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


def vm_hwm_kib(b):
    """Peak resident memory of a baton process (VmHWM), KiB; 0 if gone."""
    try:
        with open("/proc/%d/status" % b.proc.pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, AttributeError):
        pass
    return 0


def test_undelivered_row_ends_the_term(t):
    """A sink that refuses one row (HTTP 400: no retry) holds the checkpoint
    before it. The leader goes on forwarding, but once backlog_max_rows rows
    pile up behind the row it ends the term (gives the lease up); the next
    leader re-reads from the checkpoint and the receiver takes the row. 0
    lost; the backlog and the process's memory stay bounded."""
    srv = server()
    redis = t.redis()
    db = "stuck"
    srv.sql("CREATE DATABASE %s;\nCREATE TABLE %s.t (id INT PRIMARY KEY, v VARCHAR(32));" % (db, db))
    rx = h.HttpReceiver()
    refused = {"n": 0}
    poison = 50

    def judge(body):
        for line in body.split(b"\n"):
            if line.strip() and (json.loads(line).get("after") or {}).get("id") == poison:
                refused["n"] += 1  # judge runs under the receiver's lock
                return 400 if refused["n"] == 1 else None
        return None
    rx.judge = judge
    sinks = ('{ name = "out"; type = "http"; url = "%s"; timeout_ms = 5000; retries = 3; '
             'backoff_ms = 20; batch_max = 20; }' % rx.url)
    main = h.main_cfg(redis.port, lease=LEASE, sinks=sinks)
    bound = 300
    cfg = cdc_cfg(srv, "stuck", db, "backlog_max_rows = %d;\ncheckpoint_every_events = 100;" % bound)
    batons = [t.baton(main, {"cdc.cfg": cfg}, env={"CDC_PW": CDC_PW}) for _ in range(2)]
    wait_streaming(t, batons)
    n = 3000
    srv.sql("".join("INSERT INTO %s.t VALUES (%d, 'v%d');\n" % (db, i, i) for i in range(1, n + 1)),
            timeout=120)

    def ids():
        return [r["after"]["id"] for r in rx.accepted() if r.get("op") == "insert"]
    ok = h.wait_until(lambda: set(range(1, n + 1)) <= set(ids()), 40, 0.2)
    got = ids()
    missing = set(range(1, n + 1)) - set(got)
    ended = [l for b in batons for l in b.stderr_text().splitlines() if "ending the term" in l]
    behind = [int(l.split(" rows behind it")[0].rsplit(" ", 1)[1]) for l in ended
              if " rows behind it" in l]
    hwm = max(vm_hwm_kib(b) for b in batons)
    h.log("row %d refused once (HTTP 400); terms ended: %d, rows behind it then: %s "
          "(backlog_max_rows %d, checked every 100 row events); accepted %d rows, %d distinct, "
          "%d missing; row %d sent %d times; peak RSS %d KiB"
          % (poison, len(ended), behind, bound, len(got), len(set(got)), len(missing), poison,
             refused["n"], hwm))
    t.check(ok and not missing, "%d rows lost, e.g. %r" % (len(missing), sorted(missing)[:5]))
    t.check(ended, "no leader ended its term behind the refused row")
    t.check(behind and max(behind) <= bound + 100,
            "the backlog passed the bound: %s rows (bound %d + one check interval)" % (behind, bound))
    t.check(refused["n"] >= 2 and poison in got, "the refused row was not retried by the next term")
    t.check(all(b.alive() for b in batons), "a baton exited")
    t.check(0 < hwm < 200 * 1024, "peak RSS %d KiB" % hwm)


def test_hosts_first_down_all_down(t):
    """hosts = [a dead port, the server]: the second is used (shown in
    /status "source"); all down: one error naming every host, retried, the
    lease given up after its ttl, the process alive."""
    srv = server()
    redis = t.redis()
    db = "hosts"
    srv.sql("CREATE DATABASE %s;\nCREATE TABLE %s.t (id INT PRIMARY KEY);" % (db, db))
    dead1, dead2 = h.free_port(), h.free_port()
    mport = h.free_port()
    main = h.main_cfg(redis.port, lease=LEASE,
                      extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    hosts = 'hosts = [ "127.0.0.1:%d", "127.0.0.1:%d" ];' % (dead1, srv.port)
    cfg = cdc_cfg(srv, "hosts", db, hosts).replace('host = "127.0.0.1";\n', "")
    b = t.baton(main, {"cdc.cfg": cfg}, env={"CDC_PW": CDC_PW}, name="second")
    wait_streaming(t, [b])
    srv.sql("".join("INSERT INTO %s.t VALUES (%d);\n" % (db, i) for i in range(1, 21)))
    h.wait_until(lambda: len(rows_of([b])) >= 20, 15, 0.1)
    st = h.wait_until(lambda: h.status_endpoints(mport).get("hosts", {}).get("source"), 5, 0.1)
    h.log("first host down: %d of 20 rows; /status source %r" % (len(rows_of([b])), st))
    t.check(len(rows_of([b])) == 20, "rows not streamed through the second host")
    t.check(st == "127.0.0.1:%d" % srv.port, "/status source %r, want the second host" % st)

    cfg2 = cdc_cfg(srv, "alldown", db, 'hosts = [ "127.0.0.1:%d", "[::1]:%d" ];' % (dead1, dead2))
    cfg2 = cfg2.replace('host = "127.0.0.1";\n', "")
    d = t.baton(h.main_cfg(redis.port, lease=LEASE), {"cdc.cfg": cfg2}, env={"CDC_PW": CDC_PW},
                name="alldown")
    ok = h.wait_until(lambda: d.stderr_text().count("promoted to leader") >= 2, 15, 0.1)
    err = d.stderr_text()
    line = next((l for l in err.splitlines() if "no server of 2 accepted" in l), "")
    h.log("all down: %s" % line[line.find("mysql:"):][:300])
    t.check(line and ("127.0.0.1:%d" % dead1) in line and ("[::1]:%d" % dead2) in line,
            "the error does not name both hosts: %r" % line[:300])
    t.check(ok, "not retried (promoted fewer than 2 times)")
    t.check(d.alive() and b.alive(), "a baton exited")
    t.check(not rows_of([d]), "rows forwarded with every host down")


def test_primary_switchover_by_gtid(t):
    """A primary and a GTID replica (log_slave_updates), both started here;
    baton streams from the primary with hosts = [primary, replica] into an
    HTTP receiver. The receiver stalls (the checkpoint stays behind), the
    primary is stopped once the replica caught up, the replica promoted,
    writes go on there. The leader's stream reconnects to the replica and
    resumes by the GTID position of what it had read; then the leader is
    SIGKILLed and the other baton resumes from the checkpoint, written on
    the old primary, by its GTID position. 0 rows lost of those replicated,
    repeats printed."""
    redis = t.redis()
    primary = mdb.MariaServer(extra_args=["--log-slave-updates"])
    t.cleanup(primary.stop)
    replica = mdb.MariaServer(extra_args=["--server-id=2", "--log-slave-updates"])
    t.cleanup(replica.stop)
    primary.sql("CREATE USER 'repl'@'%' IDENTIFIED BY 'repl-pw';\n"
                "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';")
    replica.sql("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='repl', "
                "MASTER_PASSWORD='repl-pw', MASTER_USE_GTID=slave_pos;\nSTART SLAVE;" % primary.port)
    primary.create_user(CDC_USER, CDC_PW)  # replicated, like everything below
    db = "sw"
    primary.sql("CREATE DATABASE %s;\nCREATE TABLE %s.t (id INT PRIMARY KEY, v VARCHAR(16));"
                % (db, db))

    def caught_up():
        pos = primary.sql("SELECT @@gtid_binlog_pos")[0][0]
        return replica.sql("SELECT MASTER_GTID_WAIT('%s', 10)" % pos, timeout=15)[0][0] == "0"
    t.require(caught_up(), "the replica does not replicate")
    rx = h.HttpReceiver()
    sinks = ('{ name = "out"; type = "http"; url = "%s"; timeout_ms = 10000; retries = 20; '
             'backoff_ms = 50; batch_max = 50; }' % rx.url)
    main = h.main_cfg(redis.port, lease=LEASE, sinks=sinks)
    hosts = 'hosts = [ "127.0.0.1:%d", "127.0.0.1:%d" ];' % (primary.port, replica.port)
    cfg = cdc_cfg(primary, "sw", db, hosts + "\nconnect_timeout_ms = 1000;\nheartbeat_ms = 300;\n"
                  "reconnect_backoff_ms = 50;\nreconnect_backoff_max_ms = 300;")
    cfg = cfg.replace('host = "127.0.0.1";\n', "")
    batons = [t.baton(main, {"cdc.cfg": cfg}, env={"CDC_PW": CDC_PW}) for _ in range(2)]
    wait_streaming(t, batons)

    def insert(srv, lo, hi):
        srv.sql("".join("INSERT INTO %s.t VALUES (%d, 'v%d');\n" % (db, i, i)
                        for i in range(lo, hi + 1)))

    def ids():
        return [r["after"]["id"] for r in rx.accepted() if r.get("op") == "insert"]
    insert(primary, 1, 300)
    h.wait_until(lambda: len(ids()) >= 300, 20, 0.1)
    leader = leader_of(batons)
    t.require(leader is not None, "no leader")
    rx.stall_s = 1.5  # the sink hangs: the checkpoint stays at ~300
    insert(primary, 301, 400)
    t.require(caught_up(), "the replica did not catch up")
    primary.stop()
    replica.sql("STOP SLAVE;\nRESET SLAVE ALL;")
    h.log("primary stopped, replica promoted; %d of 400 rows accepted" % len(set(ids())))
    insert(replica, 401, 600)
    by_gtid = h.wait_until(lambda: "resuming by GTID" in leader.stderr_text(), 10, 0.05)
    t.check(by_gtid, "the leader's stream did not resume on the replica by GTID")
    leader.kill()
    rx.stall_s = 0
    want = set(range(1, 601))
    ok = h.wait_until(lambda: want <= set(ids()), 30, 0.2)
    got = ids()
    missing = want - set(got)
    repeats = len(got) - len(set(got))
    other = [b for b in batons if b is not leader][0]
    lines = [l for b in batons for l in b.stderr_text().splitlines() if "resuming by GTID" in l]
    for l in lines:
        h.log("  " + l[l.find("mysql_cdc"):][:260])
    h.log("after the switchover and a leader kill: %d rows accepted, %d distinct, %d missing, "
          "%d repeated" % (len(got), len(set(got)), len(missing), repeats))
    t.check(ok and not missing, "%d rows lost, e.g. %r" % (len(missing), sorted(missing)[:5]))
    t.check("resuming by GTID" in other.stderr_text(),
            "the next leader did not resume from the checkpoint by GTID")
    t.check(repeats <= 400, "%d repeats: more than the rows since the last checkpoint" % repeats)
    new_rows = [r for r in rx.accepted() if r.get("op") == "insert" and r["after"]["id"] > 400]
    t.check(new_rows and all(str(r.get("gtid", "")).split("-")[1:2] == ["2"] for r in new_rows),
            "rows written on the promoted replica do not carry its server id in their GTID")


if __name__ == "__main__":
    h.main(globals())
