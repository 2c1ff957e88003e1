"""Fault suite, rabbitmq: 3 real baton replicas, one real rabbitmq-server for
the whole file (started once), a sequenced publisher with confirms at
300 msg/s, one fault per scenario, one CHAOS summary line each.

What the design promises (docs/endpoints/rabbitmq.md, README "What each endpoint
loses"):
  private mode: no duplicate ever; loss only of what is published while no
      private queue is bound (the failover gap).
  group mode: nothing lost (the durable queue keeps it); the only duplicates
      are deliveries the sink accepted whose ack never reached the broker,
      redelivered with "redelivered": true, at most `prefetch` of them.

The endpoint's own integration test already covers private-mode SIGKILL
(gap, no duplicates), group-mode SIGKILL (no loss) and a private-mode broker
restart with 2 replicas, so this file covers what it does not:

  private_leader_sigstop  leader paused 2 x ttl with its queue still bound and
                          filling its socket; on SIGCONT it forwards nothing
                          stale; no duplicates; loss only in the window
  group_leader_sigstop    the paused leader holds `prefetch` unacked
                          deliveries; they come back once it lets go: no loss,
                          nothing stale forwarded by the resumed process
  group_locker_restart    the lease Redis restarted (data lost): the leader
                          demotes, someone leads again: no loss
  group_sink_http_500     HTTP sink answering 500 for 2 s (ack after the
                          sink): retried, no loss, no duplicate
  group_broker_restart    rabbitmq-server SIGKILLed and restarted (persistent
                          messages, durable queue): every confirmed message
                          forwarded; duplicates only redeliveries (runs last)

Short lease (ttl 1500 ms) from lib/chaos.py.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import chaos as c  # noqa: E402
from chaos import h  # noqa: E402
import rabbitmq as rmq  # noqa: E402

RATE = 300
PREFETCH = 50
ORDER = ["test_private_leader_sigstop", "test_group_leader_sigstop", "test_group_locker_restart",
         "test_group_sink_http_500", "test_group_broker_restart"]

def broker():
    return rmq.shared_server()


class AmqpPublisher(c.ConfirmedPublisher):
    """c.ConfirmedPublisher with publisher confirms: a batch is confirmed
    when the broker nacked none of it."""

    failures = (OSError, rmq.AmqpError)

    def __init__(self, port, exchange, rate=RATE, persistent=False):
        self.port, self.exchange = port, exchange
        self.kw = {"delivery_mode": 2} if persistent else {}
        self._conn = None
        super().__init__(rate)

    def _connected(self):
        return self._conn is not None

    def _connect(self):
        self._conn = rmq.Amqp(self.port, timeout=2.0)
        self._conn.confirm_select()

    def _close(self):
        if self._conn:
            self._conn.close()
            self._conn = None

    def _publish(self, seqs, now, confirmed):
        self._conn.publish_many((self.exchange, "", b"%d:%d" % (s, now), self.kw) for s in seqs)
        _acked, nacked = self._conn.wait_confirms(5)
        if nacked == 0:
            confirmed += seqs


def pick(rec):
    if rec.get("type") != "rabbitmq":
        return None
    return c.parse_payload(rec.get("payload"))


def redelivered_seqs(reps=None, rx=None):
    recs = []
    if rx is not None:
        recs = rx.accepted()
    for r in reps or []:
        r.b.poll_records()
        recs += r.b.records
    out = set()
    for rec in recs:
        p = pick(rec)
        if p and rec.get("redelivered"):
            out.add(p[0])
    return out


def consuming(reps):
    return [r for r in reps if r.b.alive() and "consuming from" in r.b.stderr_text()]


def ep_cfg(port, name, exchange, group):
    mode = ('mode = "group"; prefetch = %d; ack_drain_ms = 500;' % PREFETCH) if group else ""
    return ('name = "%s"; type = "rabbitmq"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; exchange = "%s";\n'
            'connect_timeout_ms = 500; rpc_timeout_ms = 2000; heartbeat = 30;\n'
            'reconnect_min_ms = 50; reconnect_max_ms = 300;\n%s\n'
            % (name, port, exchange, mode))


def run(t, name, short, fault, group, sinks=None, rx=None, persistent=False, killed=(),
        run_no=1):
    """fault(srv, locker, reps, leader) -> (t_from_ms, t_to_ms, extra dict).
    Returns (reps, outcome). run_no: see c.replica_name."""
    srv = broker()
    locker = t.redis()
    ep = "amqp_" + short
    exchange = "chaos." + short
    a = rmq.Amqp(srv.port)
    a.exchange_declare(exchange, "fanout", durable=True)
    a.close()
    if group:
        t.cleanup(lambda: _delete_queue(srv.port, "baton.%s" % ep))
    reps = [c.Replica(t, sinks, {"a.cfg": ep_cfg(srv.port, ep, exchange, group)},
                      c.replica_name(i, run_no), locker.port) for i in (1, 2, 3)]
    leader = c.wait_leader(reps, ep)
    t.require(leader is not None, "no single leader within 15 s")
    t.require(h.wait_until(lambda: consuming(reps), 15, 0.05), "nobody consumes within 15 s")
    pub = AmqpPublisher(srv.port, exchange, persistent=persistent).start()
    time.sleep(1.0)
    leader = c.wait_leader(reps, ep)
    t.require(leader is not None, "no single leader before the fault")

    def recs():
        return c.picked_records(reps, rx, pick)
    t_from, t_to, extra = fault(srv, locker, reps, leader)
    recovered = c.wait_recovered(recs, t_to)
    time.sleep(1.5)
    pub.stop()
    if group:  # the durable queue still holds what is not forwarded yet
        want = {e[0] for e in pub.snapshot()}
        h.wait_until(lambda: want <= {r[0] for r in recs()}, 15, 0.2)
    time.sleep(0.8)
    o = c.Outcome(pub.snapshot(), recs(), t_from, t_to)
    redel = redelivered_seqs(reps, rx)
    dups_not_redelivered = [s for s in o.dup_seqs if s not in redel]
    survivors = [r for r in reps if r.name not in set(killed)]
    c.verdict(t, name, o, survivors, ep, recovered_ms=(recovered - t_to) if recovered else None,
              expect_no_loss=group, allowed_dups=PREFETCH if group else 0,
              dup_why=": redelivered unacked deliveries, at most prefetch" if group else "",
              unconfirmed=pub.unconfirmed, redelivered=len(redel), **extra)
    if group:
        t.check(not dups_not_redelivered, "duplicates that are not redeliveries: %r"
                % dups_not_redelivered[:10])
    return reps, o


def _delete_queue(port, name):
    try:
        a = rmq.Amqp(port, timeout=2.0)
    except (OSError, rmq.AmqpError):
        return
    try:
        a.queue_delete(name)
    except (OSError, rmq.AmqpError):
        pass
    finally:
        a.close()


def sigstop_fault(t, state):
    def fault(srv, locker, reps, leader):
        t0 = c.now_ms()
        leader.b.signal(signal.SIGSTOP)
        time.sleep(2 * c.TTL / 1000.0)
        t_cont = c.now_ms()
        leader.b.signal(signal.SIGCONT)
        state["old"], state["t_cont"] = leader, t_cont
        return t0, t_cont, {"stopped_ms": 2 * c.TTL, "stopped": leader.name}
    return fault


def check_resumed(t, state, ep, last):
    old = state["old"]
    t.check(h.wait_until(lambda: old.role(ep) == "standby", 10, 0.1),
            "the resumed leader is not a standby: %r" % old.role(ep))
    stale = c.stale_after(old, state["t_cont"], pick)
    h.log("resumed %s: %d records received after SIGCONT forwarded (must be 0)"
          % (old.name, len(stale)))
    cnt = c.check_resumed_counted(t, old, ep, require_stale=last)
    t.check(not stale, "the resumed process forwarded %d stale messages, e.g. %r"
            % (len(stale), [s.get("payload") for s in stale[:5]]))
    return cnt


# --------------------------------------------------------------------------

def test_private_leader_sigstop(t):
    def one(attempt, last):
        state = {}
        short = "psig" if attempt == 1 else "psig%d" % attempt  # a fresh exchange per run
        reps, _o = run(t, "rabbitmq.private_leader_sigstop", short,
                           sigstop_fault(t, state), group=False, run_no=attempt)
        cnt = check_resumed(t, state, "amqp_" + short, last)
        # the resumed process let go of its private queue: one queue bound
        bound = h.wait_until(lambda: len(broker().bound_queues("chaos." + short)) == 1, 10, 0.5)
        t.check(bound, "queues bound after the resumed leader stood down: %r"
                % broker().bound_queues("chaos." + short))
        return reps, cnt
    c.resumed_attempts(one)


def test_group_leader_sigstop(t):
    def one(attempt, last):
        state = {}
        short = "gsig" if attempt == 1 else "gsig%d" % attempt  # a fresh group queue per run
        reps, _o = run(t, "rabbitmq.group_leader_sigstop", short,
                           sigstop_fault(t, state), group=True, run_no=attempt)
        return reps, check_resumed(t, state, "amqp_" + short, last)
    c.resumed_attempts(one)


def test_group_locker_restart(t):
    def fault(srv, locker, reps, leader):
        return c.restart_redis(locker)
    reps, o = run(t, "rabbitmq.group_locker_restart", "glock", fault, group=True)
    if o.lost:
        rc, out, _e = broker().ctl("list_queues", "name", "messages_unacknowledged", "consumers")
        stuck = [ln for ln in out.splitlines() if ln.startswith("baton.amqp_glock")]
        drops = {r.name: (r.endpoint("amqp_glock") or {}).get("dropped") for r in reps}
        t.check(False, "KNOWN BUG (guard/active_guard.c active_guard_run/lead + "
                "endpoints/rabbitmq_util.c rmq_ack_action_for): the replica promoted on a "
                "locker connection that try_lock had just re-established starts consuming while "
                "active_guard_is_leader_now() is still false (gen0 was read before the "
                "reconnect, so gen_changed() holds until the W_GEN verify); the deliveries of "
                "that window are dropped as not_leader and, in group mode, left unacked "
                "(RMQ_LEAVE) on a connection that does not close, so they stay unacked for the "
                "whole term of the new leader, and once `prefetch` of them pile up the broker "
                "delivers nothing more: %d messages not forwarded (queue, unacked, consumers: "
                "%s; dropped per replica %r)"
                % (o.lost, stuck, drops))


def test_group_sink_http_500(t):
    rx = h.HttpReceiver(fail_status=500)

    def fault(srv, locker, reps, leader):
        return c.sink_http_500(rx)
    reps, o = run(t, "rabbitmq.group_sink_http_500", "ghttp", fault, group=True,
                  sinks=c.http_sink(rx), rx=rx)
    t.check(o.duplicates == 0, "%d duplicates although no process died" % o.duplicates)


def test_group_broker_restart(t):
    def fault(srv, locker, reps, leader):
        t0 = c.now_ms()
        srv.kill()
        time.sleep(0.5)
        srv.start()
        t1 = c.now_ms()
        return t0, t1, {"down_ms": t1 - t0}
    run(t, "rabbitmq.group_broker_restart", "gbrk", fault, group=True, persistent=True)


if __name__ == "__main__":
    h.main(globals())
