"""The PostgreSQL locker backend (`locker = { backend = "postgresql"; ... }`,
guard/locker_pg.c) with a real PostgreSQL 15 (lib/postgres.py: started on
127.0.0.1 as the `postgres` user), a real redis-server (the redis_psub
source only) and real baton processes, each with a stdout sink. Every test
but db_restart runs in a database of its own on one shared server;
db_restart has a server of its own (it kills it).

  1. config_check: `backend = "postgresql"` with a conninfo passes
     --check-config; no conninfo, a conninfo holding a password (key=value
     and URI forms), a Redis-only setting (`host`) and an etcd-only one
     (`endpoints`) are configuration errors (exit 78) naming the problem;
     `--init-locker` prints the DDL (baton_leases ...), `--apply` creates
     the tables and the sequence and is idempotent (run twice); `--apply`
     against nothing listening exits 69 naming host and port;
     `--init-locker` with a Redis locker is a usage error (64).
  2. leader_sigkill: 3 replicas, default lease (ttl 3000, retry 250), 1,000
     msg/s (publisher.failover): SIGKILL the leader; a standby forwards
     within ttl + retry + 1000 ms of the kill, 0 duplicates, losses only
     inside the gap, one new leader, a larger epoch; every epoch owned by
     one replica, terms not overlapping. 3 rounds (BATON_PG_SIGKILL_ROUNDS),
     each with fresh replicas on the same lease row: the epoch also grows
     across rounds (the row is kept when released).
  3. graceful_handover: 3 replicas, 200 msg/s; the leader SIGTERMed 50
     times (BATON_HANDOVERS; at most BATON_HANDOVER_BUDGET_S, default 90 s),
     restarted each time so there are always 3. Per handover: the old
     leader exits 0, exactly one other replica is promoted, with a larger
     epoch. Gap = the old leader's demotion line (its release: UPDATE +
     pg_notify) to the new leader's promotion line (NOTIFY wakes the
     standbys). p50/p90/p99/max printed; asserted p99 <= 1000 ms (the
     target is 100 ms); 0 duplicates; epochs strictly increasing and terms
     not overlapping in the forwarded records.
  4. db_restart: 3 replicas (metrics listeners), 200 msg/s. (A) The server
     SIGKILLed (postmaster and backends: a crash) and started again after
     2 s: exactly one leader by /status within ttl + retry + 1 s of the
     server answering again, and only one in every sample for 3 s; every
     message published once the leader is back is forwarded. (B) Then a
     restart with a fast shutdown (~0.3 s down): the leader keeps its term
     (same replica, same epoch, no promotion or demotion anywhere), nothing
     lost, exactly one leader from 1.5 s after it. Throughout: never two
     leaders in any /status sample (every 100 ms); epochs strictly
     increasing across terms, each owned by one replica, terms not
     overlapping in the forwarded records; 0 duplicates; per replica,
     received = forwarded + dropped (nothing vanishes uncounted); no
     replica exits.
  5. missing_tables: 2 replicas pointed at a database without the tables:
     they run, log an error naming `--init-locker`, neither leads nor
     crashes (4 s); after `--init-locker --apply` exactly one leads within
     ttl + retry + 1 s and consumes; both exit 0 on SIGTERM.

Run standalone: BATON_BIN=/path/baton python3 tests/integration/test_pg_locker.py [test_name ...]
"""
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import postgres as pg  # noqa: E402
from publisher import (Publisher, failover, log_events, now_ms, wait_single_leader,  # noqa: E402
                       wait_subscribed)
# the epoch / term checks and the /status watcher of the etcd suite, backend-neutral
from test_etcd import Watcher, check_epochs, records, role  # noqa: E402

ORDER = ["test_config_check", "test_missing_tables", "test_leader_sigkill",
         "test_graceful_handover", "test_db_restart"]

TTL, RETRY = 3000, 250      # the default lease (renew 1000)
SIGKILL_ROUNDS = int(os.environ.get("BATON_PG_SIGKILL_ROUNDS", "3"))
HANDOVERS = int(os.environ.get("BATON_HANDOVERS", "50"))
HANDOVER_BUDGET_S = float(os.environ.get("BATON_HANDOVER_BUDGET_S", "90"))

PROMOTED = re.compile(r"promoted to leader of (\S+) \(epoch (\d+)\)")
DEMOTED = re.compile(r"demoted from leader of (\S+) \(epoch (\d+)\): (.*)$")
STARTED = re.compile(r"main: baton \S+ started \(pid")
SINKS = 'sinks = ( { name = "out"; type = "stdout"; } );'


# --------------------------------------------------------------------------
# set-up

def server(t):
    """The file's shared PostgreSQL (skips the test when it cannot run here)."""
    why = pg.available()
    if why:
        t.skip(why)
    return h.shared("pg", pg.PgServer)


def fresh_db(srv, name):
    """A new, empty database name on srv."""
    srv.sql("DROP DATABASE IF EXISTS %s" % name)
    srv.sql("CREATE DATABASE %s" % name)
    return name


def db_sql(srv, db, text):
    return srv.sql("\\c %s\n%s" % (db, text))


def locker_line(srv, db, extra=""):
    return 'locker = { backend = "postgresql"; conninfo = "%s"; %s };' % (srv.conninfo(dbname=db), extra)


def main_cfg(srv, db, mport=None, lease=None):
    extra = locker_line(srv, db)
    if mport:
        extra += '\nmetrics = { listen = "127.0.0.1:%d"; };' % mport
    return h.main_cfg(None, extra=extra, lease=lease)


def psub_cfg(port, name="psub"):
    return ('name = "%s"; type = "redis_psub"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; patterns = ["chan.*"];\n' % (name, port))


def init_locker(t, cfg_path):
    rc, out, err = h.run_baton(["-c", cfg_path, "--init-locker", "--apply"])
    t.require(rc == 0, "--init-locker --apply: exit %d: %s %s" % (rc, out, err))


def cluster(t, srv, db, redis_port, n=3, mports=None, init=True, prefix="r"):
    """n replicas (not started until the tables exist when init)."""
    mports = mports or [None] * n
    bs = [t.baton(main_cfg(srv, db, mp), {"psub.cfg": psub_cfg(redis_port)},
                  name="%s%d" % (prefix, i + 1), start=False) for i, mp in enumerate(mports)]
    for b, mp in zip(bs, mports):
        b.mport = mp
    if init:
        init_locker(t, bs[0].cfg)
    for b in bs:
        b.start()
    return bs


def leaders(batons):
    """The replicas whose /status says leader of psub."""
    return [b for b in batons if b.alive() and role(b.mport) == "leader"]


def pct(values, p):
    """Nearest-rank percentile."""
    v = sorted(values)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, max(0, -(-len(v) * p // 100) - 1))]


# --------------------------------------------------------------------------

def test_config_check(t):
    srv = server(t)
    d = h.mktemp()
    os.makedirs(os.path.join(d, "endpoints.d"))
    main = os.path.join(d, "baton.cfg")
    with open(os.path.join(d, "endpoints.d", "psub.cfg"), "w") as f:
        f.write(psub_cfg(6379))
    db = fresh_db(srv, "lk_config")
    ci = srv.conninfo(dbname=db)
    pgl = 'locker = { backend = "postgresql"; %s };\n'
    cases = [
        (pgl % ('conninfo = "%s";' % ci), 0, "configuration OK"),
        (pgl % ('conninfo = "%s"; connect_timeout_ms = 500; command_timeout_ms = 800;' % ci), 0,
         "configuration OK"),
        (pgl % "", 78, "needs conninfo"),
        (pgl % ('conninfo = "%s password=x";' % ci), 78, "holds a password"),
        (pgl % 'conninfo = "postgresql://postgres:x@127.0.0.1/postgres";', 78, "holds a password"),
        (pgl % ('conninfo = "%s"; host = "127.0.0.1";' % ci), 78, "'host'"),
        (pgl % ('conninfo = "%s"; endpoints = [ "http://127.0.0.1:2379" ];' % ci), 78, "'endpoints'"),
        (pgl % 'conninfo = "host=127.0.0.1 = x";', 78, "not a libpq connection string"),
    ]
    for text, want, needle in cases:
        with open(main, "w") as f:
            f.write(text + SINKS + "\n")
        rc, out, err = h.run_baton(["-c", main, "--check-config"])
        msg = (out + err).strip()
        h.log("check-config %-75s -> %d %s" % (text.strip()[:75], rc, msg.splitlines()[0][:150] if msg else ""))
        t.check(rc == want and needle in msg and (want == 0 or "baton.cfg:" in err),
                "check-config: expected %d with %r, got %d: %s" % (want, needle, rc, msg[:300]))
        t.check("password=x" not in msg and "postgres:x@" not in msg, "the password is echoed: %s" % msg)

    # --init-locker: the DDL, then --apply (twice)
    with open(main, "w") as f:
        f.write(pgl % ('conninfo = "%s";' % ci) + SINKS + "\n")
    rc, out, err = h.run_baton(["-c", main, "--init-locker"])
    t.check(rc == 0 and "CREATE TABLE IF NOT EXISTS baton_leases" in out,
            "--init-locker: exit %d, DDL %r %s" % (rc, out[:200], err))
    t.check(not db_sql(srv, db, "SELECT 1 FROM pg_tables WHERE tablename LIKE 'baton%'"),
            "--init-locker without --apply created something")
    want_tables = [("baton_claims",), ("baton_leases",), ("baton_shared",)]
    for i in range(2):
        rc, out, err = h.run_baton(["-c", main, "--init-locker", "--apply"])
        tables = db_sql(srv, db, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                 "AND tablename LIKE 'baton%' ORDER BY 1")
        seq = db_sql(srv, db, "SELECT sequencename FROM pg_sequences WHERE sequencename = 'baton_epoch_seq'")
        h.log("--init-locker --apply #%d: exit %d (%s); tables %s; sequence %s"
              % (i + 1, rc, out.strip(), [x[0] for x in tables], seq))
        t.check(rc == 0, "--init-locker --apply #%d: exit %d: %s" % (i + 1, rc, err))
        t.check(tables == want_tables and seq == [("baton_epoch_seq",)],
                "after --apply #%d: tables %r, sequence %r" % (i + 1, tables, seq))
    # the DDL printed is the DDL applied: running it through psql changes nothing
    rc, out, _err = h.run_baton(["-c", main, "--init-locker"])
    db_sql(srv, db, out)

    # --apply against nothing listening: exit 69 naming the server
    dead = h.free_port()
    with open(main, "w") as f:
        f.write(pgl % ('conninfo = "%s";' % srv.conninfo(port=dead)) + SINKS + "\n")
    rc, out, err = h.run_baton(["-c", main, "--init-locker", "--apply"])
    h.log("--init-locker --apply, nothing on port %d: exit %d: %s" % (dead, rc, err.strip()[:200]))
    t.check(rc == 69 and ("127.0.0.1:%d" % dead) in err,
            "--apply against a dead port: exit %d: %s" % (rc, err))

    # a Redis locker needs nothing: usage error
    with open(main, "w") as f:
        f.write(h.main_cfg(6379))
    rc, out, err = h.run_baton(["-c", main, "--init-locker"])
    h.log("--init-locker with a redis locker: exit %d: %s" % (rc, err.strip()))
    t.check(rc == 64 and "redis" in err, "--init-locker with a redis locker: exit %d: %s" % (rc, err))


def test_missing_tables(t):
    srv = server(t)
    db = fresh_db(srv, "lk_missing")
    redis = t.redis()
    bs = cluster(t, srv, db, redis.port, n=2, mports=[h.free_port(), h.free_port()], init=False)
    time.sleep(4.0)
    for b in bs:
        text = b.stderr_text()
        named = [l for l in text.splitlines() if "--init-locker" in l]
        errs = [l for l in text.splitlines() if " ERROR " in l or " WARN " in l]
        acq = [l for l in errs if "acquiring" in l]
        h.log("%s without tables: alive %s; /status role %s; %d warn/error lines in 4 s, %d naming "
              "--init-locker (of the %d acquisition warnings: %d); first: %s"
              % (b.name, b.alive(), role(b.mport), len(errs), len(named), len(acq),
                 sum(1 for l in acq if "--init-locker" in l), named[0][:240] if named else "-"))
        t.check(b.alive(), "%s exited without the tables: %s" % (b.name, text[-600:]))
        t.check(bool(named), "%s: no log line names --init-locker: %s" % (b.name, text[-800:]))
        t.check(any("baton_leases" in l for l in named), "%s: the error does not name the table" % b.name)
        t.check(not acq or any("--init-locker" in l for l in acq),
                "%s: the acquisition warnings do not name --init-locker: %s" % (b.name, acq[:1]))
        t.check(role(b.mport) != "leader" and not log_events(b, PROMOTED),
                "%s leads without the tables" % b.name)
        t.check(len(errs) <= 100, "%s: %d warn/error lines in 4 s (a log flood)" % (b.name, len(errs)))
    t_fix = now_ms()
    init_locker(t, bs[0].cfg)
    bound = TTL + RETRY + 1000
    ok = h.wait_until(lambda: len(leaders(bs)) == 1, bound / 1000.0, 0.05)
    took = now_ms() - t_fix
    h.log("--init-locker --apply: a replica leads %d ms later (bound %d)" % (took, bound))
    t.check(ok, "no single leader within %d ms of --init-locker --apply: %s"
            % (bound, [role(b.mport) for b in bs]))
    wait_subscribed(t, redis.port, 10)
    time.sleep(1.2)
    t.check(len(leaders(bs)) == 1, "not exactly one leader: %s" % [role(b.mport) for b in bs])
    for b in bs:
        t.check(b.term(15) == 0, "%s did not exit 0 on SIGTERM" % b.name)


def test_leader_sigkill(t):
    srv = server(t)
    db = fresh_db(srv, "lk_sigkill")
    redis = t.redis()
    bound = TTL + RETRY + 1000
    takeovers, last_epoch = [], 0
    for rnd in range(SIGKILL_ROUNDS):
        batons = cluster(t, srv, db, redis.port, init=(rnd == 0), prefix="k%d_" % (rnd + 1))
        r = failover(t, batons, redis.port, "kill", TTL, records=records, subscribe_timeout=20,
                     label=" (postgresql, round %d)" % (rnd + 1))
        old_ep = {rec[3] for rec in r.old_recs}
        new_ep = {rec[3] for rec in r.new_recs}
        proms = check_epochs(t, batons)
        h.log("round %d: takeover %d ms (bound %d); epochs of the old leader %s, of the new %s; "
              "promotions %s" % (rnd + 1, r.takeover, bound, sorted(old_ep), sorted(new_ep),
                                 [(n, e) for _ts, e, n in proms]))
        takeovers.append(r.takeover)
        t.check(r.takeover <= bound, "round %d: takeover took %d ms > ttl + retry + 1000 = %d ms"
                % (rnd + 1, r.takeover, bound))
        t.check(old_ep and new_ep and max(old_ep) < min(new_ep),
                "round %d: the new leader's epochs %s are not above the old leader's %s"
                % (rnd + 1, sorted(new_ep), sorted(old_ep)))
        t.check(old_ep and min(old_ep) > last_epoch,
                "round %d: epoch %s not above the previous round's %d"
                % (rnd + 1, sorted(old_ep), last_epoch))
        last_epoch = max(old_ep | new_ep | {last_epoch})
        # the survivors release the lease for the next round's replicas
        for b in batons:
            if b.alive():
                t.check(b.term(15) == 0, "round %d: %s did not exit 0 on SIGTERM" % (rnd + 1, b.name))
    h.log("SIGKILL takeovers (ms): %s; max %d (bound %d)" % (takeovers, max(takeovers), bound))
    rows = db_sql(srv, db, "SELECT key, token IS NULL, epoch FROM baton_leases")
    h.log("lease rows afterwards: %s" % rows)
    t.check(len(rows) == 1 and rows[0][1] == "t", "after every replica's release: rows %r" % rows)


def test_graceful_handover(t):
    srv = server(t)
    db = fresh_db(srv, "lk_handover")
    redis = t.redis()
    bs = cluster(t, srv, db, redis.port)
    first = h.wait_until(lambda: [b for b in bs if log_events(b, PROMOTED)], 10, 0.05)
    t.require(first and len(first) == 1, "expected one leader, got %r" % [b.name for b in first or []])
    leader = first[0]
    wait_subscribed(t, redis.port, 10)
    pub = Publisher(redis.port, rate=200).start()
    starts = {b.name: 1 for b in bs}
    epochs = [int(log_events(leader, PROMOTED)[0][1].group(2))]
    gaps, lat_sig, slow = [], [], []
    t0 = time.monotonic()
    done = 0
    while done < HANDOVERS and time.monotonic() - t0 < HANDOVER_BUDGET_S:
        if not h.wait_until(lambda: all(b.alive() and len(log_events(b, STARTED)) >= starts[b.name]
                                        for b in bs), 10, 0.01):
            t.check(False, "handover %d: not all 3 replicas running (started)" % done)
            break
        time.sleep(0.1 + 0.1 * (done % 3))
        others = [b for b in bs if b is not leader]
        mark = {b.name: len(log_events(b, PROMOTED)) for b in bs}
        mark_d = len(log_events(leader, DEMOTED))
        t_sig = now_ms()
        leader.signal(signal.SIGTERM)
        new = h.wait_until(lambda: [b for b in others if len(log_events(b, PROMOTED)) > mark[b.name]],
                           10, 0.005)
        if not new:
            t.check(False, "handover %d: no promotion within 10 s of SIGTERM" % done)
            break
        try:
            rc = leader.wait(15)
        except Exception:
            rc = None
        t.check(rc == 0, "handover %d: %s exited %r" % (done, leader.name, rc))
        time.sleep(0.05)  # a second promotion would show now
        new = [b for b in others if len(log_events(b, PROMOTED)) > mark[b.name]]
        if len(new) != 1:
            t.check(False, "handover %d: %d promotions %r" % (done, len(new), [b.name for b in new]))
            break
        nb = new[0]
        t_prom, m = log_events(nb, PROMOTED)[mark[nb.name]]
        epochs.append(int(m.group(2)))
        rel = log_events(leader, DEMOTED)[mark_d:]
        if rel:
            gaps.append(t_prom - rel[0][0])
        else:
            t.check(False, "handover %d: %s logged no demotion" % (done, leader.name))
        lat_sig.append(t_prom - t_sig)
        if gaps and gaps[-1] > 100:
            slow.append((done, gaps[-1], nb.name))
        leader.start()
        starts[leader.name] += 1
        leader = nb
        done += 1
    wall = time.monotonic() - t0
    time.sleep(0.5)
    pub.stop()
    time.sleep(0.5)
    t.require(gaps, "no handover measured")
    seqs = [r[0] for b in bs for r in records(b)]
    dups = h.duplicates(seqs)
    entries = pub.snapshot()
    lost = len({e[0] for e in entries} - set(seqs))
    proms = check_epochs(t, bs)
    h.log("graceful handover (postgresql): %d handovers in %.1f s (asked %d, budget %.0f s); release "
          "(old leader's demotion) -> new leader's promotion: p50 %d ms, p90 %d ms, p99 %d ms, max "
          "%d ms; SIGTERM -> promotion: p50 %d ms, p99 %d ms; over 100 ms: %d %s; published %d, "
          "forwarded %d, lost %d (handover gaps), duplicates %d; promotions %d"
          % (done, wall, HANDOVERS, HANDOVER_BUDGET_S, pct(gaps, 50), pct(gaps, 90), pct(gaps, 99),
             max(gaps), pct(lat_sig, 50), pct(lat_sig, 99), len(slow), slow[:10], len(entries),
             len(set(seqs)), lost, len(dups), len(proms)))
    print("RESULT pg_handover_p50_ms %d" % pct(gaps, 50))
    print("RESULT pg_handover_p99_ms %d" % pct(gaps, 99))
    t.check(pct(gaps, 99) <= 1000, "handover p99 %d ms > 1000 ms (target 100)" % pct(gaps, 99))
    t.check(done >= min(HANDOVERS, 20), "only %d handovers within the budget" % done)
    t.check(not dups, "duplicates: %d, e.g. %r" % (len(dups), list(dups.items())[:5]))
    t.check(all(a < b for a, b in zip(epochs, epochs[1:])),
            "the terms' epochs are not strictly increasing: %r" % epochs)
    t.check(all(b.alive() for b in bs), "a replica is not running")


def status_of(b):
    return h.status_endpoints(b.mport).get("psub", {})


def test_db_restart(t):
    why = pg.available()
    if why:
        t.skip(why)
    srv = pg.PgServer()
    t.cleanup(srv.stop)
    redis = t.redis()
    mports = [h.free_port() for _ in range(3)]
    bs = cluster(t, srv, "postgres", redis.port, mports=mports)
    wait_subscribed(t, redis.port, 20)
    w = Watcher(bs, mports).start()
    t.cleanup(w.stop)
    pub = Publisher(redis.port, rate=200).start()
    time.sleep(0.5)
    wait_single_leader(t, bs, records=records)
    time.sleep(1.5)
    before = [(b.name, status_of(b).get("epoch")) for b in leaders(bs)]

    # (A) a crash: SIGKILL to the postmaster and its backends, started again 2 s later
    t_kill = now_ms()
    srv.kill()
    t_dead = now_ms()
    time.sleep(max(0.0, (t_kill + 2000 - now_ms()) / 1000.0))
    t_start = now_ms()
    srv.start()
    t_up = now_ms()
    bound = TTL + RETRY + 1000
    ok = h.wait_until(lambda: len(leaders(bs)) == 1, (bound + 3000) / 1000.0, 0.05)
    t_lead = now_ms()
    after = [(b.name, status_of(b).get("epoch")) for b in leaders(bs)]
    time.sleep(3.0)
    t_steady = now_ms()

    # (B) a restart with a fast shutdown (pg_ctl -m fast: the backends send
    # FATAL 57P01 and close): down well under the ttl, so the leader renews
    # again before its deadline and keeps its term (docs/lockers.md)
    lb = leaders(bs)
    ep_b = status_of(lb[0]).get("epoch") if lb else None
    t_g = now_ms()
    srv.restart()
    t_g_up = now_ms()
    time.sleep(3.0)
    t_end = now_ms()
    la = leaders(bs)
    ep_a = status_of(la[0]).get("epoch") if la else None
    pub.stop()
    time.sleep(0.7)
    w.stop()

    wrecs = {b.name: w.records(b) for b in bs}
    seqs = [r[0] for rs in wrecs.values() for r in rs]
    dups = h.duplicates(seqs)
    got = set(seqs)
    entries = pub.snapshot()
    proms = check_epochs(t, bs)
    demos = sorted((ts - t_kill, b.name, m.group(3)[:120]) for b in bs for ts, m in log_events(b, DEMOTED))
    recs = sorted((r for rs in wrecs.values() for r in rs), key=lambda r: r[2])
    gap, prev = 0, t_kill
    for r in recs:
        if t_kill <= r[2] < t_steady:
            gap = max(gap, r[2] - prev)
            prev = r[2]
    lost_a = [e[0] for e in entries if e[1] < t_up and e[0] not in got]
    late = [e[0] for e in entries if t_lead + 500 <= e[1] < t_g and e[0] not in got]
    lost_b = [e[0] for e in entries if t_g <= e[1] and e[0] not in got]
    samples = [(ts, [bs[i].name for i, ro in enumerate(roles) if ro == "leader"])
               for ts, roles, _e in w.samples]
    multi = [(ts - t_kill, ls) for ts, ls in samples if len(ls) > 1]
    steady = [(ts - t_kill, ls) for ts, ls in samples if t_lead + 1100 <= ts < t_g]
    # (B): while the renewal that met the closed connection is re-verified
    # the leader is "unsure" (/status: standby, the forwarder holds)
    unsure_b = [ts for ts, ls in samples if t_g <= ts <= t_end and not ls]
    steady_b = [(ts - t_kill, ls) for ts, ls in samples if t_g_up + 1500 <= ts <= t_end]
    proms_b = [(n, e) for ts, e, n in proms if ts >= t_g]
    demos_b = [d for d in demos if d[0] >= t_g - t_kill]
    failed_b = [l for b in bs for l in b.stderr_text().splitlines()
                if "terminating connection due to administrator command" in l and " WARN " in l]
    h.log("db_restart (A, SIGKILL): leader before %s; server killed in %d ms, started again %d ms "
          "after the kill, answering %d ms later; one leader by /status %d ms after that (bound %d): "
          "%s; %s the term across the crash; demotions (ms after the kill, replica, why): %s; "
          "promotions (replica, epoch, ms after the kill): %s"
          % (before, t_dead - t_kill, t_start - t_kill, t_up - t_start, t_lead - t_up, bound, after,
             "kept" if before == after else "lost", demos,
             [(n, e, ts - t_kill) for ts, e, n in proms if ts >= t_kill - 5000]))
    h.log("db_restart (A): published %d, forwarded %d, duplicates %d, lost %d (published before "
          "the server answered again), lost after the leader was back %d; longest forwarding gap "
          "from the kill %d ms; /status samples with two leaders %d"
          % (len(entries), len(got), len(dups), len(lost_a), len(late), gap, len(multi)))
    h.log("db_restart (B, fast-shutdown restart, %d ms): leader %s epoch %s before, %s epoch %s "
          "after; promotions %s, demotions %s since; lost %d; %d calls failed on connections the "
          "restart had closed (\"terminating connection due to administrator command\"); /status "
          "samples without a leader (the leader unsure, 100 ms apart) %d"
          % (t_g_up - t_g, [b.name for b in lb], ep_b, [b.name for b in la], ep_a, proms_b,
             demos_b, len(lost_b), len(failed_b), len(unsure_b)))
    t.check(ok and t_lead - t_up <= bound, "no single leader within %d ms of the server answering "
            "again (%d ms): %s" % (bound, t_lead - t_up, [role(mp) for mp in mports]))
    t.check(steady and all(len(ls) == 1 for _ts, ls in steady),
            "not exactly one leader in every /status sample afterwards: %r"
            % [x for x in steady if len(x[1]) != 1][:5])
    t.check(steady_b and all(len(ls) == 1 for _ts, ls in steady_b),
            "(B) not exactly one leader in every /status sample from 1.5 s after the restart: %r"
            % [x for x in steady_b if len(x[1]) != 1][:5])
    t.check(not multi, "/status showed two leaders at once (ms after the kill, replicas): %r" % multi[:5])
    t.check(not dups, "duplicates: %d, e.g. %r" % (len(dups), list(dups.items())[:5]))
    t.check(not late, "%d messages published after the leader was back were not forwarded, e.g. %r"
            % (len(late), late[:5]))
    t.check(len(lb) == 1 and [b.name for b in la] == [lb[0].name] and ep_a == ep_b
            and not proms_b and not demos_b,
            "(B) the leader did not keep its term across a fast-shutdown restart: %s epoch %s -> "
            "%s epoch %s; promotions %s; demotions %s"
            % ([b.name for b in lb], ep_b, [b.name for b in la], ep_a, proms_b, demos_b))
    t.check(not lost_b, "(B) %d messages lost across a restart the leader kept its term through, "
            "e.g. %r" % (len(lost_b), lost_b[:5]))

    # every message a replica received was forwarded or counted as dropped
    def counts():
        return {b.name: {k: status_of(b).get(k) for k in ("received", "forwarded", "dropped", "queue_depth")}
                for b in bs}
    balanced = h.wait_until(lambda: all(c["received"] == (c["forwarded"] or 0) + (c["dropped"] or 0)
                                        and c["queue_depth"] == 0 for c in counts().values()), 3, 0.1)
    h.log("counters by /status: %s" % counts())
    t.check(balanced, "received != forwarded + dropped (a message neither delivered nor counted): %s"
            % counts())
    for b in bs:
        t.check(b.alive(), "%s exited" % b.name)


if __name__ == "__main__":
    h.main(globals())
