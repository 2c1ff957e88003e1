"""Fault suite, mysql_cdc: 3 real baton replicas, one real mariadb-server for
the whole file (started once), a writer inserting ~200 rows/s (one
transaction each, the row carries its sequence number and send time), one
fault per scenario, one CHAOS summary line each.

What the design promises (docs/endpoints/mysql_cdc.md, README "What each endpoint
loses") with `checkpoint = redis`: **no row lost**, across any failover; rows
forwarded after the last checkpoint are forwarded again by the next leader
(at-least-once, bounded by the checkpoint interval plus the queue), with the
same envelope `id` (`file:pos:row`) so a consumer can deduplicate. So each
scenario asserts: every committed row forwarded (the truth is read back from
the table at the end), every duplicate carries the same `id` each time, at
most DUP_BOUND duplicates (0 where no failover happens), no process exited,
one leader at the end.

The integration test already covers leader SIGKILL with a checkpoint (no
loss), `checkpoint = none` (loss), a stale-epoch checkpoint write and a
server restart under a single baton, so this file covers:

  leader_sigstop       leader paused 2 x ttl, then SIGCONT: the resumed
                       process forwards nothing stale; no loss
  locker_unreachable   the lease Redis SIGSTOPped for 2 x ttl (the leader
                       cannot renew, nobody can acquire): no loss
  locker_restart       the lease Redis restarted without persistence: the
                       lease and the checkpoint are gone with its data
  sink_http_500        HTTP sink answering 500 for 2 s: retried, no loss, no
                       duplicate
  source_restart       mariadbd restarted (~4 s) under 3 replicas while the
                       writer runs: no loss (runs last)

Short lease (ttl 1500 ms) from lib/chaos.py; checkpoint every 100 row events
or 200 ms.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import chaos as c  # noqa: E402
from chaos import h  # noqa: E402
import mariadb as mdb  # noqa: E402

RATE = 200
DUP_BOUND = 400
CDC_USER, CDC_PW = "cdc", "cdc-pw"
ORDER = ["test_leader_sigstop", "test_locker_unreachable", "test_locker_restart",
         "test_sink_http_500", "test_source_restart"]

_server = None
_pwfile = None


def server():
    global _server, _pwfile
    if _server is None:
        _server = mdb.MariaServer()
        _server.create_user(CDC_USER, CDC_PW)
        d = h.mktemp("baton-chaos-cdc-")
        _pwfile = os.path.join(d, "pw")
        with open(_pwfile, "w") as f:
            f.write(CDC_PW + "\n")
        os.chmod(_pwfile, 0o600)  # baton refuses a secret file others can read
    return _server


class Writer(c.BackgroundWorker):
    """Inserts rows (seq, sent_ms) into db.t at a steady rate, one
    autocommitted INSERT per row, a batch of statements per client run.
    Failed batches (server down) are simply counted: the truth is what the
    table holds at the end (rows())."""

    def __init__(self, srv, db, rate=RATE):
        self.srv, self.db, self.rate = srv, db, float(rate)
        self.seq = 1
        self.failed_batches = 0
        super().__init__()

    join_s = 30

    def _run(self):
        batch = max(1, int(self.rate / 8))
        interval = batch / self.rate
        next_t = time.monotonic()
        while not self._stop.is_set():
            now = c.now_ms()
            stmts = ["INSERT INTO %s.t VALUES (%d, %d);" % (self.db, s, now)
                     for s in range(self.seq, self.seq + batch)]
            self.seq += batch
            try:
                self.srv.sql("\n".join(stmts) + "\n", timeout=10)
            except (mdb.SqlError, OSError, Exception):  # down: some rows may have committed
                self.failed_batches += 1
                time.sleep(0.1)
            next_t = self.pace(next_t, interval)

    def rows(self):
        """[(seq, sent_ms, 1)] of every committed row."""
        out = []
        for r in self.srv.sql("SELECT id, sent_ms FROM %s.t ORDER BY id;" % self.db):
            out.append((int(r[0]), int(r[1]), 1))
        return out


def pick_for(db):
    def pick(rec):
        if rec.get("type") != "mysql_cdc" or rec.get("op") != "insert" or rec.get("db") != db:
            return None
        a = rec.get("after") or {}
        return (a.get("id"), a.get("sent_ms")) if "id" in a else None
    return pick


def ids_by_seq(reps, rx, pick):
    """{seq: set of envelope ids} over everything forwarded."""
    recs = rx.accepted() if rx is not None else []
    for r in reps:
        r.b.poll_records()
        recs = recs + r.b.records
    out = {}
    for rec in recs:
        p = pick(rec)
        if p:
            out.setdefault(p[0], set()).add(rec.get("id"))
    return out


def ep_cfg(srv, name, db, server_id):
    return ('name = "%s"; type = "mysql_cdc"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; user = "%s"; password_file = "%s";\n'
            'server_id = %d; tables = [ "%s.*" ];\n'
            'checkpoint_every_events = 100; checkpoint_every_ms = 200;\n'
            'connect_timeout_ms = 1000; heartbeat_ms = 300;\n'
            'reconnect_backoff_ms = 50; reconnect_backoff_max_ms = 300;\n'
            % (name, srv.port, CDC_USER, _pwfile, server_id, db))


def streaming(reps):
    return [r for r in reps if r.b.alive() and "streaming the binlog" in r.b.stderr_text()]


_ids = [5000]


def run(t, name, short, fault, sinks=None, rx=None, allowed_dups=DUP_BOUND, expect_loss=False):
    """fault(srv, locker, reps, leader) -> (t_from_ms, t_to_ms, extra dict)."""
    srv = server()
    locker = t.redis()
    db = "chaos_" + short
    ep = "cdc_" + short
    _ids[0] += 1
    srv.sql("CREATE DATABASE %s;\nCREATE TABLE %s.t (id INT PRIMARY KEY, sent_ms BIGINT);\n"
            % (db, db))
    reps = [c.Replica(t, sinks, {"cdc.cfg": ep_cfg(srv, ep, db, _ids[0])}, "r%d" % (i + 1),
                      locker.port) for i in range(3)]
    t.require(h.wait_until(lambda: streaming(reps), 20, 0.05), "nobody streams within 20 s")
    leader = c.wait_leader(reps, ep)
    t.require(leader is not None, "no single leader within 15 s")
    w = Writer(srv, db).start()
    pick = pick_for(db)

    def recs():
        return c.picked_records(reps, rx, pick)
    time.sleep(1.0)
    t_from, t_to, extra = fault(srv, locker, reps, leader)
    recovered = c.wait_recovered(recs, t_to)
    time.sleep(1.5)
    w.stop()
    truth = w.rows()
    want = {e[0] for e in truth}
    h.wait_until(lambda: want <= {r[0] for r in recs()}, 10 if not expect_loss else 3, 0.2)
    time.sleep(0.5)
    o = c.Outcome(truth, recs(), t_from, t_to)
    ids = ids_by_seq(reps, rx, pick)
    split = sorted(s for s in o.dup_seqs if len(ids.get(s, ())) != 1)
    c.verdict(t, name, o, reps, ep, recovered_ms=(recovered - t_to) if recovered else None,
              expect_no_loss=not expect_loss, allowed_dups=allowed_dups,
              dup_why=": rows after the last checkpoint" if allowed_dups else "",
              failed_write_batches=w.failed_batches, **extra)
    t.check(not split, "duplicates with different envelope ids (cannot be deduplicated): %r"
            % [(s, sorted(ids[s])) for s in split[:5]])
    return reps, o


# --------------------------------------------------------------------------

def test_leader_sigstop(t):
    state = {}

    def fault(srv, locker, reps, leader):
        t0 = c.now_ms()
        leader.b.signal(signal.SIGSTOP)
        time.sleep(2 * c.TTL / 1000.0)
        state["t_cont"] = c.now_ms()
        state["old"] = leader
        leader.b.signal(signal.SIGCONT)
        return t0, state["t_cont"], {"stopped_ms": 2 * c.TTL, "stopped": leader.name}
    run(t, "mysql_cdc.leader_sigstop", "sig", fault)
    old = state["old"]
    t.check(h.wait_until(lambda: old.role("cdc_sig") == "standby", 10, 0.1),
            "the resumed leader is not a standby: %r" % old.role("cdc_sig"))
    stale = c.stale_after(old, state["t_cont"], pick_for("chaos_sig"))
    h.log("resumed %s: %d rows read after SIGCONT forwarded (must be 0); dropped counter %r"
          % (old.name, len(stale), (old.endpoint("cdc_sig") or {}).get("dropped")))
    t.check(not stale, "the resumed process forwarded %d stale rows" % len(stale))


def test_locker_unreachable(t):
    def fault(srv, locker, reps, leader):
        return c.pause_redis(locker)
    run(t, "mysql_cdc.locker_unreachable", "unr", fault)


def test_locker_restart(t):
    def fault(srv, locker, reps, leader):
        return c.restart_redis(locker)
    reps, o = run(t, "mysql_cdc.locker_restart", "lrs", fault)
    if o.lost:
        starts = [ln.split("Z ", 1)[-1] for r in reps for ln in r.b.stderr_text().splitlines()
                  if "no checkpoint yet" in ln]
        t.check(False, "KNOWN GAP (endpoints/mysql_cdc.c, promotion: the checkpoint lives only "
                "in the locker Redis): the Redis restart lost the lease and the checkpoint with "
                "its data, so the next leader found no checkpoint and started at start = "
                "\"latest\", skipping %d committed rows (seqs %d..%d); README/mysql_cdc.md "
                "promise no loss with checkpoint = redis. Log: %r"
                % (o.lost, o.lost_seqs[0], o.lost_seqs[-1], starts[-2:]))


def test_sink_http_500(t):
    rx = h.HttpReceiver(fail_status=500)

    def fault(srv, locker, reps, leader):
        return c.sink_http_500(rx)
    run(t, "mysql_cdc.sink_http_500", "http", fault, sinks=c.http_sink(rx), rx=rx, allowed_dups=0)


def test_source_restart(t):
    def fault(srv, locker, reps, leader):
        t0 = c.now_ms()
        srv.restart()
        return t0, c.now_ms(), {"down_ms": c.now_ms() - t0}
    run(t, "mysql_cdc.source_restart", "src", fault)


if __name__ == "__main__":
    h.main(globals())
