"""redis_psub under faults, with 3 real baton processes and real
redis-servers (see test_redis_psub.py for scenarios 1-3):

  4. leader SIGSTOP for 2 x ttl, then SIGCONT while publishing continues: the
     resumed process forwards nothing published after its lease deadline
     (zero duplicates), demotes, and rejoins as a standby
  5. Redis restart (stop, start again on the same port): exactly one leader
     afterwards, no process exits, no duplicates
  6. source Redis separate from the locker's Redis, and the source goes down:
     the leader gives up its lease after the lease ttl and says so; consumption
     resumes when the source comes back
  7. 20 endpoints on one source Redis, which is then SIGSTOPped (no FIN):
     while idle, the process PINGs the source about once per ping interval
     in all (not once per endpoint: endpoints/redis_probe.h); when the source
     stops answering, every endpoint's connection is dropped within about
     two intervals ("no answer to PING"), each gives up its lease after the
     ttl, and every endpoint consumes again once the source is continued
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
sys.path.insert(0, os.path.dirname(__file__))
import harness as h  # noqa: E402
from publisher import (Publisher, all_seqs, forwarded, leaders_since, log_times,  # noqa: E402
                       now_ms, wait_single_leader, wait_subscribed)
from test_redis_psub import TTL, RETRY, start_cluster  # noqa: E402

ORDER = ["test_leader_sigstop", "test_redis_restart", "test_source_redis_down",
         "test_source_redis_paused"]


def recent_receivers(pub, n):
    """PUBLISH receiver counts of the last n published messages."""
    return [e[2] for e in pub.snapshot()[-n:]]


def test_leader_sigstop(t):
    redis = t.redis()
    batons = start_cluster(t, redis.port, redis.port)
    wait_subscribed(t, redis.port)
    pub = Publisher(redis.port, rate=1000).start()
    time.sleep(0.5)
    old = wait_single_leader(t, batons)
    others = [b for b in batons if b is not old]
    time.sleep(1.0)

    t_stop = now_ms()
    old.signal(signal.SIGSTOP)
    new_ls = h.wait_until(lambda: leaders_since(others, t_stop), TTL / 1000.0 + 5, 0.05)
    t.require(new_ls, "no standby took over while the leader was stopped")
    new = new_ls[0]
    takeover = min(r[2] for r in forwarded(new) if r[2] >= t_stop) - t_stop
    time.sleep(max(0.0, (t_stop + 2 * TTL - now_ms()) / 1000.0))
    t_cont = now_ms()
    old.signal(signal.SIGCONT)
    # the resumed process must notice its lease is gone and stop consuming
    demoted = h.wait_until(lambda: [x for x in log_times(old, "stopped consuming") if x >= t_cont],
                           10, 0.1)
    time.sleep(2.0)  # publishing goes on; the old leader must stay silent

    # rejoin as a standby: once the other two die, it takes over
    t_k2 = now_ms()
    for b in others:
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(5)
    rejoined = h.wait_until(lambda: leaders_since([old], t_k2), TTL / 1000.0 + 5, 0.05)
    time.sleep(0.5)
    pub.stop()
    time.sleep(0.5)

    old_recs = forwarded(old)
    before = [r for r in old_recs if r[2] < t_k2]          # its first term, plus any stale output
    stale = [r for r in before if r[2] >= t_cont]           # received after SIGCONT, before rejoining
    late = [r for r in before if r[1] >= t_stop + TTL]      # published after its deadline
    new_seqs = {r[0] for b in others for r in forwarded(b)}
    overlap = sorted({r[0] for r in before} & new_seqs)
    dups = h.duplicates(all_seqs(batons))
    not_leader = [l for l in old.stderr_text().splitlines() if "not_leader" in l]
    h.log("SIGSTOP %d ms: takeover by %s %d ms after SIGSTOP; old leader forwarded %d before "
          "stop, %d after SIGCONT while standby, %d published after its deadline; overlap "
          "with the new leader %d; duplicates %d; demoted %s ms after SIGCONT; "
          "not_leader drop lines %d (last: %s); rejoined and led again %s"
          % (t_cont - t_stop, new.name, takeover, len(before), len(stale), len(late),
             len(overlap), len(dups), (min(demoted) - t_cont) if demoted else None,
             len(not_leader), not_leader[-1].split(": ", 1)[-1] if not_leader else "-",
             bool(rejoined)))
    t.check(takeover <= TTL + RETRY + 500,
            "takeover %d ms > ttl + retry + 500 ms" % takeover)
    t.check(not stale, "resumed process forwarded %d messages after SIGCONT, e.g. %r"
            % (len(stale), stale[:5]))
    t.check(not late, "resumed process forwarded %d messages published after its deadline"
            % len(late))
    t.check(not overlap, "old and new leader both forwarded %d seqs, e.g. %r"
            % (len(overlap), overlap[:10]))
    t.check(len(dups) == 0, "duplicates: %d" % len(dups))
    t.check(bool(demoted), "resumed process did not log its demotion after SIGCONT")
    t.check(old.alive(), "resumed process exited")
    t.check(bool(rejoined), "resumed process did not take over after the others died "
            "(did it rejoin as a standby?)")


def test_redis_restart(t):
    redis = t.redis()
    batons = start_cluster(t, redis.port, redis.port)
    wait_subscribed(t, redis.port)
    pub = Publisher(redis.port, rate=1000).start()
    time.sleep(0.5)
    wait_single_leader(t, batons)
    time.sleep(1.0)

    t_down = now_ms()
    redis.restart(down_s=1.0)
    t_up = now_ms()
    # settled: the last 500 published messages each reached exactly one subscriber
    settled = h.wait_until(lambda: (pub.last_seq() and
                                    [e for e in pub.snapshot() if e[1] >= t_up][500:] and
                                    recent_receivers(pub, 500) == [1] * 500),
                           20, 0.1)
    t_settled = now_ms()
    time.sleep(2.0)
    pub.stop()
    time.sleep(0.5)

    entries = pub.snapshot()
    after = [e for e in entries if e[1] >= t_settled]
    fwd_after = {b.name: [r for r in forwarded(b) if r[1] >= t_settled] for b in batons}
    leaders_after = [n for n, rs in fwd_after.items() if rs]
    seqs_after = {r[0] for rs in fwd_after.values() for r in rs}
    missing_after = [e[0] for e in after if e[2] == 1 and e[0] not in seqs_after]
    dups = h.duplicates(all_seqs(batons))
    first_new = [r[2] for b in batons for r in forwarded(b) if r[1] >= t_up]
    max_recv = max((e[2] or 0) for e in entries)
    h.log("redis down %d ms; first message forwarded %s ms after it came back; settled %d ms "
          "after; leaders afterwards %s; after settling: published %d, forwarded %d, missing "
          "%d; duplicates %d; max PUBLISH receivers %d; unknown (connection broke) %d"
          % (t_up - t_down, (min(first_new) - t_up) if first_new else None, t_settled - t_up,
             leaders_after, len(after), len(seqs_after), len(missing_after), len(dups),
             max_recv, sum(1 for e in entries if e[2] is None)))
    t.check(bool(settled), "no single subscriber within 20 s after the restart")
    t.check(len(leaders_after) == 1, "expected exactly one leader afterwards, got %r"
            % leaders_after)
    t.check(not missing_after, "%d messages lost after settling" % len(missing_after))
    t.check(len(dups) == 0, "duplicates: %d, e.g. %r" % (len(dups), list(dups.items())[:5]))
    for b in batons:
        t.check(b.alive(), "%s exited" % b.name)


def test_source_redis_down(t):
    ttl = 1000
    locker = t.redis()
    source = t.redis()
    lease = {"ttl_ms": ttl, "renew_ms": 300, "retry_ms": 100}
    extra = ("connect_timeout_ms = 200; command_timeout_ms = 200; ping_interval_ms = 200;\n"
             "reconnect_backoff_ms = 50; reconnect_backoff_max_ms = 200;")
    batons = start_cluster(t, locker.port, source.port, lease=lease, extra=extra)
    wait_subscribed(t, source.port)
    pub = Publisher(source.port, rate=500).start()
    time.sleep(0.5)
    old = wait_single_leader(t, batons)
    time.sleep(0.5)

    t_down = now_ms()
    source.stop()
    gave_up = h.wait_until(lambda: [x for x in log_times(old, "giving up the lease")
                                    if x >= t_down], 10, 0.1)
    time.sleep(max(0.0, (t_down + 3 * ttl - now_ms()) / 1000.0))
    t_up = now_ms()
    source.start()
    resumed = h.wait_until(lambda: [r[2] for b in batons for r in forwarded(b) if r[1] >= t_up],
                           15, 0.1)
    time.sleep(2.0)
    t_end = now_ms()
    settle = h.wait_until(lambda: recent_receivers(pub, 200) == [1] * 200, 5, 0.1)
    pub.stop()
    time.sleep(0.5)

    entries = pub.snapshot()
    dups = h.duplicates(all_seqs(batons))
    give_up_ms = (min(gave_up) - t_down) if gave_up else None
    resume_ms = (min(resumed) - t_up) if resumed else None
    tail = [e for e in entries if t_end - 1500 <= e[1] < t_end - 500]
    seqs = set(all_seqs(batons))
    missing_tail = [e[0] for e in tail if e[0] not in seqs]
    reports = [l for b in batons for l in b.stderr_text().splitlines()
               if "giving up the lease" in l]
    h.log("source down %d ms; leader %s gave up the lease %s ms after (ttl %d ms); "
          "%d give-up reports in all; consumption resumed %s ms after the source came back; "
          "duplicates %d; lost in the last steady second %d; first report: %s"
          % (t_up - t_down, old.name, give_up_ms, ttl, len(reports), resume_ms, len(dups),
             len(missing_tail), reports[0].split(": ", 1)[-1] if reports else "-"))
    t.check(give_up_ms is not None, "the leader did not report giving up the lease")
    if give_up_ms is not None:
        t.check(ttl - 50 <= give_up_ms <= ttl + 2000,
                "gave up %d ms after the source went down (expected ttl %d .. ttl + 2000)"
                % (give_up_ms, ttl))
    t.check(resume_ms is not None and resume_ms <= 10000,
            "consumption did not resume within 10 s after the source came back")
    t.check(bool(settle), "not exactly one subscriber after the source came back")
    t.check(len(dups) == 0, "duplicates: %d" % len(dups))
    t.check(not missing_tail and tail, "%d of %d messages lost after resuming"
            % (len(missing_tail), len(tail)))
    for b in batons:
        t.check(b.alive(), "%s exited" % b.name)


def test_source_redis_paused(t):
    n, interval, ttl = 20, 200, 1000
    locker = t.redis()
    source = t.redis()
    lease = {"ttl_ms": ttl, "renew_ms": 300, "retry_ms": 100}
    eps = {"p%02d.cfg" % i: ('name = "p%02d"; type = "redis_psub"; sink = "out";\n'
                             'host = "127.0.0.1"; port = %d; patterns = ["ch%02d.*"];\n'
                             'connect_timeout_ms = 200; command_timeout_ms = 200; '
                             'ping_interval_ms = %d;\n'
                             'reconnect_backoff_ms = 50; reconnect_backoff_max_ms = 200;\n'
                             % (i, source.port, i, interval)) for i in range(n)}
    b = t.baton(h.main_cfg(redis_port=locker.port, lease=lease), eps)
    c = source.client()
    t.require(h.wait_until(lambda: c.cmd("PUBSUB", "NUMPAT") == n, 20, 0.1),
              "the %d endpoints did not all subscribe" % n)
    time.sleep(1.0)

    # idle: PINGs from the whole process, against one per endpoint per interval
    c.cmd("CONFIG", "RESETSTAT")
    t0 = time.monotonic()
    time.sleep(3.0)
    info = c.cmd("INFO", "commandstats")
    window = time.monotonic() - t0
    pings = 0
    for line in (info.decode() if isinstance(info, bytes) else info).splitlines():
        if line.startswith("cmdstat_ping:"):
            pings = int(line.split("calls=")[1].split(",")[0])
    intervals = window * 1000.0 / interval
    h.log("idle %.1f s, %d endpoints, ping_interval %d ms: %d PINGs reached the source "
          "(%.1f intervals; one PING per endpoint per silent interval would be ~%d)"
          % (window, n, interval, pings, intervals, int(n * intervals / 2)))
    t.check(pings >= intervals / 3, "the source was hardly PINGed while idle: %d PINGs" % pings)
    t.check(pings <= intervals * 1.5 + 2, "%d PINGs in %.1f intervals: more than one per "
            "interval for the process" % (pings, intervals))

    source.proc.send_signal(signal.SIGSTOP)
    t_stop = now_ms()
    try:
        def dropped():
            return [x for x in log_times(b, "no answer to PING") if x >= t_stop]
        got = h.wait_until(lambda: len(dropped()) >= n, 10, 0.05)
        times = dropped()
        first = (min(times) - t_stop) if times else None
        last = (sorted(times)[n - 1] - t_stop) if len(times) >= n else None
        gave = h.wait_until(lambda: len([x for x in log_times(b, "giving up the lease")
                                         if x >= t_stop]) >= n, 10, 0.1)
        h.log("source SIGSTOPped: %d 'no answer to PING' lines, first %s ms, %d-th %s ms after "
              "the stop (interval %d ms); every endpoint gave up its lease: %s"
              % (len(times), first, n, last, interval, bool(gave)))
        t.check(got, "not every endpoint noticed the stopped source: %d of %d" % (len(times), n))
        if last is not None:
            t.check(last <= 3 * interval + 1000, "the last connection was dropped %d ms after "
                    "the stop (interval %d ms)" % (last, interval))
        t.check(gave, "not every endpoint gave up its lease after the ttl")
    finally:
        source.proc.send_signal(signal.SIGCONT)

    # every endpoint consumes again
    def all_back():
        for i in range(n):
            c.cmd("PUBLISH", "ch%02d.x" % i, "back")
        b.poll_records()
        return len({r.get("endpoint") for r in b.records
                    if r.get("payload") == "back"}) == n
    t.check(h.wait_until(all_back, 20, 0.5), "not every endpoint consumed again after SIGCONT")
    t.check(b.alive(), "baton exited")


if __name__ == "__main__":
    h.main(globals())
