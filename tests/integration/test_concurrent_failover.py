"""Concurrent delivery across leader failovers (issue 36: requests in flight
together belong to their message's lease term; an ended term aborts them and
settles its messages by the source's semantics). Real processes: Redis,
rabbitmq-server, mariadbd, several baton replicas each, and a slow HTTP
receiver in a process of its own (lib/slowreceiver.py) that records every
request in arrival and acceptance order with its X-Baton-Epoch. The three
tests share nothing and run in parallel threads (slowreceiver.parallel_main).

  5. paused_leaders: 3 replicas, redis_psub over 100 channels -> http sink,
     max_in_flight = 64, ordering = "key", receiver 40 ms per request, lease
     ttl 1000 ms; 800 msg/s for 30 s while every 3 s the leader is
     SIGSTOPped for 2 x ttl (lib/termdelivery.py's LeaderPauser, as in
     test_term_delivery.py). 0 requests accepted with an epoch lower than
     one already accepted (checked in acceptance order, and at arrival);
     0 duplicates; within each epoch, per channel, acceptance order =
     publish order; never two requests of a channel at the receiver at
     once. Pub/sub loses what is published during a gap: printed, not
     asserted.
  6a. rabbitmq_group_sigkill: rabbitmq `group` mode, 2 replicas,
     max_in_flight = 64, receiver 20 ms; 3,000 messages at 300 msg/s over 20
     routing keys (the ordering key) with publisher confirms; the leader is
     SIGKILLed 3 s in. 0 lost; every copy after the first is marked
     "redelivered"; within each epoch, per routing key, acceptance order =
     publish order; no stale epoch.
  6b. cdc_sigkill: mysql_cdc (checkpoint in the locker), 2 replicas,
     max_in_flight = 64, receiver 20 ms; 2,400 single-row UPDATEs at
     ~330 rows/s over 40 rows of 2 tables (each sets v to the statement's
     number, so v grows per row); the leader is SIGKILLed 2 s in. 0 row
     events lost; repeats <= 200 per failover (test_mysql_cdc.py's
     REPEATS_PER_FAILOVER); within each epoch, per row (schema, table,
     primary key: the ordering key), v increases in acceptance order; no
     stale epoch; the survivor resumed from the checkpoint.

Each test prints "CONCURRENT scenario=... result=PASS|FAIL ..." with its
figures; a stale request is explained by a line giving its arrival against
the SIGSTOP and SIGCONT of the replica whose term it belongs to.

To see the order checks fail: BATON_IT_ORDERING=none python3
test_concurrent_failover.py (ordering = "none" instead of "key").
"""
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import slowreceiver as sr  # noqa: E402
import termdelivery as td  # noqa: E402

TTL = 1000
LEASE = {"ttl_ms": TTL, "retry_ms": 100}
CDC_LEASE = {"ttl_ms": TTL, "renew_ms": 250, "retry_ms": 100}  # test_mysql_cdc.py's
REPEATS_PER_FAILOVER = 200  # test_mysql_cdc.py's bound
KEY_ORDERING = os.environ.get("BATON_IT_ORDERING", "key")


def http_sink(url):
    return ('{ name = "hook"; type = "http"; url = "%s"; batch_max = 1; max_in_flight = 64; }'
            % url)


def stale_checks(t, recs):
    """No request accepted with an epoch lower than one accepted before it
    (acceptance order), none arriving after a higher epoch had been
    accepted; X-Baton-Epoch = the envelope's epoch. Returns (stale at
    acceptance, stale at arrival, epoch mismatches)."""
    sk = [r for r in recs if r.sk]
    sa = [r for r in recs if r.sa]
    mism = [r for r in recs if any(e.get("epoch") != r.ep for e in r.envs)]
    t.check(not sk, "%d requests accepted with an epoch lower than one already accepted, e.g. "
            "%r" % (len(sk), sk[:3]))
    t.check(not sa, "%d requests arrived after a higher epoch had been accepted, e.g. %r"
            % (len(sa), sa[:3]))
    t.check(not mism, "%d requests whose X-Baton-Epoch differs from the envelope's epoch"
            % len(mism))
    return sk, sa, mism


def explain_stale(name, recs, pauses):
    """For each stale request: when it arrived, against the SIGSTOP and
    SIGCONT of the replica whose term it belongs to and the first request
    of the newer epoch."""
    first = {}
    for r in recs:
        first.setdefault(r.ep, r.ta)
    for r in [r for r in recs if r.sa or r.sk][:20]:
        ev = [e for e in pauses if e[3] == r.ep]
        newer = [ta for ep, ta in first.items() if ep > r.ep]
        where = ("%s SIGSTOP at %+.1f ms, SIGCONT at %+.1f ms"
                 % (ev[0][2], 1000 * (ev[0][0] - r.ta), 1000 * (ev[0][1] - r.ta))
                 if ev else "no pause of its replica recorded")
        sr.say(name, "stale request #%d epoch %s payload %s: arrived %.1f ms after the newer "
               "epoch's first request; relative to its arrival: %s; answered after %.1f ms"
               % (r.i, r.ep, [e.get("payload") for e in r.envs],
                  1000 * (r.ta - min(newer)) if newer else float("nan"), where,
                  1000 * (r.td - r.ta)))


def overlap_check(t, recs, what):
    ov = [r for r in recs if r.ov]
    t.check(not ov, "%d requests arrived while one of the same %s was being processed, e.g. %r"
            % (len(ov), what, ov[:3]))
    return ov


def epoch_order(t, items, what):
    """items: ((epoch, key), seq) in acceptance order: per epoch and key,
    seq increases."""
    bad = sr.order_violations(items)
    t.check(not bad, "%d %s order violations within an epoch ((epoch, key), previous, next), "
            "e.g. %r" % (len(bad), what, bad[:5]))
    return bad


def throughput(pairs):
    if len(pairs) < 2:
        return 0.0
    return len(pairs) / max(max(r.td for r, _ in pairs) - min(r.ta for r, _ in pairs), 1e-3)


def alive_check(t, reps, skip=()):
    for r in reps:
        if r not in skip:
            t.check(r.b.alive(), "%s exited" % r.name)


# --------------------------------------------------------------------------

def test_paused_leaders(t):
    name = "paused_leaders"
    redis = t.redis()
    rx = sr.SlowReceiver(t, delay_s=0.040, key_mode="channel", name=name)
    cfg = ('name = "orders"; type = "redis_psub"; sink = "hook";\n'
           'host = "127.0.0.1"; port = %d; patterns = [ "ch.*" ]; ordering = "%s";\n'
           % (redis.port, KEY_ORDERING))
    reps = [td.Replica(t, "r%d" % (i + 1), redis.port, http_sink(rx.url), {"orders.cfg": cfg},
                       lease=LEASE) for i in range(3)]
    probes = td.probe_subscribed(redis.port, "ch.probe")
    t.require(probes and probes[-1][1] == 1, "no single subscriber within 15 s")
    t.require(td.wait_leader(reps, "orders") is not None, "no single leader")
    rate, secs = 800, 30
    pub = sr.MultiPublisher(redis.port, ["ch.%03d" % i for i in range(100)], rate,
                            rate * secs).start()
    pauser = td.LeaderPauser(reps, "orders", every_s=3.0, pause_s=2 * TTL / 1000.0).start()
    t.cleanup(pauser.halt)
    t.require(pub.join(secs + 30), "publisher still running after %d s" % (secs + 30))
    pauser.halt()
    # what is in flight lands; the last leader drains its queue
    h.wait_until(lambda: all((r.metrics() or {}).get('baton_queue_depth{endpoint="orders"}', 0)
                             == 0 for r in reps), 15, 0.2)
    time.sleep(1.0)
    recs = rx.records()
    pairs = [(r, e) for r, e in sr.accepted_in_order(recs) if e.get("channel") != "ch.probe"]
    parsed = [(r, e, sr.parse_payload(e.get("payload"))) for r, e in pairs]
    parsed = [x for x in parsed if x[2] is not None]
    t.check(pub.error is None, "publisher: %r" % pub.error)
    gseqs = [p[1] for _, _, p in parsed]
    dups = h.duplicates(gseqs)
    reached = {e[0] for e in pub.entries if e[3]}
    multi = [e for e in pub.entries if (e[3] or 0) > 1]
    lost = len(reached - set(gseqs))
    sk, sa, mism = stale_checks(t, recs)
    ov = overlap_check(t, recs, "channel")
    bad = epoch_order(t, [((r.ep, e.get("channel")), p[0]) for r, e, p in parsed], "per-channel")
    t.check(not dups, "%d messages accepted more than once, e.g. %r"
            % (len(dups), sorted(dups.items())[:5]))
    t.check(len(pauser.events) >= 5, "only %d leader pauses (misses %d)"
            % (len(pauser.events), pauser.misses))
    cmax, cmean = sr.concurrency_profile(recs)
    t.check(cmax > 1, "the receiver never saw two requests at once")
    drops = {}
    for r in reps:
        for k, v in td.drops(r.metrics(), "orders").items():
            drops[k] = drops.get(k, 0) + v
    epochs = sorted({r.ep for r in recs})
    alive_check(t, reps)
    sr.result_line(name, "PASS" if not t.failures else "FAIL", ordering=KEY_ORDERING,
                   published=len(pub.entries), reached_subscriber=len(reached),
                   accepted=len(gseqs), lost_in_gaps=lost, duplicates=len(dups),
                   requests=len(recs), stale_accepted=len(sk), stale_at_arrival=len(sa),
                   epoch_mismatch=len(mism), order_violations_in_epoch=len(bad),
                   same_channel_overlaps=len(ov), pauses=len(pauser.events),
                   epochs=len(epochs), drops=td.fmt_drops(drops),
                   publishes_to_two_subscribers=len(multi),
                   receiver_concurrency_max=cmax, receiver_concurrency_mean="%.1f" % cmean,
                   throughput_msg_s="%.0f" % throughput(pairs))
    sr.say(name, "pauses: %s" % ", ".join("%s(epoch %s)" % (e[2], e[3]) for e in pauser.events))
    explain_stale(name, recs, pauser.events)
    per_epoch = {}
    for r in recs:
        per_epoch[r.ep] = per_epoch.get(r.ep, 0) + 1
    sr.say(name, "requests per epoch: %s" % sorted(per_epoch.items()))


# ----------------------------------------------------------- rabbitmq group

class AmqpKeyedPublisher(threading.Thread):
    """count messages at rate/s to a fanout exchange with publisher
    confirms, each with a routing key picked at random (seeded) from keys;
    body {"seq": global seq, "k": routing key, "kseq": seq on that key}."""

    def __init__(self, port, exchange, keys, count, rate, seed=36):
        import rabbitmq as rmq
        super().__init__(daemon=True)
        self.c = rmq.Amqp(port)
        self.c.confirm_select()
        self.exchange, self.keys, self.count, self.rate = exchange, keys, count, float(rate)
        self.rng = random.Random(seed)
        self.error = None
        self.sent = 0

    def run(self):
        try:
            t0 = time.monotonic()
            kseq = {}
            batch = max(1, int(self.rate // 50))
            i = 0
            while i < self.count:
                d = t0 + i / self.rate - time.monotonic()
                if d > 0:
                    time.sleep(d)
                items = []
                for j in range(i, min(self.count, i + batch)):
                    k = self.rng.choice(self.keys)
                    kseq[k] = kseq.get(k, 0) + 1
                    items.append((self.exchange, k,
                                  json.dumps({"seq": j, "k": k, "kseq": kseq[k]}).encode(),
                                  {"message_id": "c-%d" % j}))
                self.c.publish_many(items)
                i += len(items)
                self.sent = i
            self.c.wait_confirms(60)
        except Exception as e:  # reported by the test
            self.error = e


def test_rabbitmq_group_sigkill(t):
    import rabbitmq as rmq
    name = "rabbitmq_group_sigkill"
    srv = rmq.RabbitServer()
    t.cleanup(srv.stop)
    redis = t.redis()
    c = rmq.Amqp(srv.port)
    c.exchange_declare("cgrp", "fanout")
    c.close()
    rx = sr.SlowReceiver(t, delay_s=0.020, key_mode="routing_key", name=name)
    cfg = ('name = "grp"; type = "rabbitmq"; sink = "hook"; ordering = "%s";\n'
           'host = "127.0.0.1"; port = %d; exchange = "cgrp"; mode = "group";\n'
           % (KEY_ORDERING, srv.port))
    reps = [td.Replica(t, "r%d" % (i + 1), redis.port, http_sink(rx.url), {"grp.cfg": cfg},
                       lease=LEASE) for i in range(2)]
    t.require(td.wait_leader(reps, "grp", 30) is not None, "no single leader")
    t.require(h.wait_until(lambda: any("consuming from" in r.b.stderr_text() for r in reps),
                           30, 0.1), "nobody consumes")
    total, rate = 3000, 300
    pub = AmqpKeyedPublisher(srv.port, "cgrp", ["k%02d" % i for i in range(20)], total, rate)
    pub.start()
    time.sleep(3.0)
    old = td.leader(reps, "grp")
    t.require(old is not None, "no single leader 3 s in")
    n_before = sum(1 for r in rx.records() if r.ok)
    t_kill = time.monotonic()
    old.b.kill()
    survivors = [r for r in reps if r is not old]
    new = td.wait_leader(survivors, "grp", 15)
    takeover = time.monotonic() - t_kill
    t.require(new is not None, "no new leader within 15 s of the SIGKILL")
    pub.join(total / rate + 60)
    t.check(pub.error is None, "publisher: %r" % pub.error)
    t.check(pub.c.acked == total, "broker confirmed %d/%d" % (pub.c.acked, total))

    def by_seq():
        out = {}
        for r, e in sr.accepted_in_order(rx.records()):
            try:
                b = json.loads(e["payload"])
            except (KeyError, TypeError, ValueError):
                continue
            out.setdefault(b["seq"], []).append((r, e, b))
        return out
    ok = h.wait_until(lambda: len(set(by_seq()) & set(range(total))) >= total, 90, 0.25)
    time.sleep(1.0)  # late duplicates would show now
    recs = rx.records()
    by = by_seq()
    missing = sorted(set(range(total)) - set(by))
    dup_deliveries = sum(len(v) - 1 for v in by.values())
    bad_dups = sorted(s for s, v in by.items()
                      if not all(e.get("redelivered") for _, e, _ in v[1:]))
    redelivered = sum(1 for v in by.values() for _, e, _ in v if e.get("redelivered"))
    pairs = [(r, e, b) for r, e in sr.accepted_in_order(recs)
             for b in [json.loads(e["payload"])]]
    t.check(ok and not missing, "%d lost, e.g. %r" % (len(missing), missing[:10]))
    t.check(not bad_dups, "%d messages with a copy not marked redelivered, e.g. %r"
            % (len(bad_dups), bad_dups[:10]))
    t.check(n_before > 0, "nothing accepted before the SIGKILL: the kill tests nothing")
    sk, sa, mism = stale_checks(t, recs)
    ov = overlap_check(t, recs, "routing key")
    bad = epoch_order(t, [((r.ep, b["k"]), b["kseq"]) for r, e, b in pairs], "per-routing-key")
    cmax, cmean = sr.concurrency_profile(recs)
    t.check(cmax > 1, "the receiver never saw two requests at once")
    epochs = sorted({r.ep for r in recs})
    alive_check(t, reps, skip=(old,))
    sr.result_line(name, "PASS" if not t.failures else "FAIL", ordering=KEY_ORDERING,
                   published=total, delivered=len(by), lost=len(missing),
                   duplicate_deliveries=dup_deliveries, dups_not_redelivered=len(bad_dups),
                   redelivered_marked=redelivered, accepted_before_kill=n_before,
                   takeover_s="%.2f" % takeover, requests=len(recs), epochs=len(epochs),
                   stale_accepted=len(sk), stale_at_arrival=len(sa),
                   order_violations_in_epoch=len(bad), same_key_overlaps=len(ov),
                   receiver_concurrency_max=cmax, receiver_concurrency_mean="%.1f" % cmean,
                   throughput_msg_s="%.0f" % throughput([(r, e) for r, e, _ in pairs]))


# ------------------------------------------------------------------- CDC

def test_cdc_sigkill(t):
    import mariadb as mdb
    name = "cdc_sigkill"
    srv = mdb.MariaServer()
    t.cleanup(srv.stop)
    srv.create_user("cdc", "cdc-pw")
    redis = t.redis()
    db, tables, rows = "cc", ["t0", "t1"], 20
    stmts = ["CREATE DATABASE %s;" % db]
    for tb in tables:
        stmts.append("CREATE TABLE %s.%s (id INT PRIMARY KEY, v INT NOT NULL);" % (db, tb))
        stmts.append("INSERT INTO %s.%s VALUES %s;"
                     % (db, tb, ",".join("(%d, 0)" % i for i in range(rows))))
    srv.sql("\n".join(stmts))
    pwfile = os.path.join(t.workdir, "cdc.pw")
    with open(pwfile, "w") as f:
        f.write("cdc-pw\n")
    os.chmod(pwfile, 0o600)
    rx = sr.SlowReceiver(t, delay_s=0.020, key_mode="cdc", name=name)
    cfg = ('name = "cdc"; type = "mysql_cdc"; sink = "hook"; ordering = "%s";\n'
           'host = "127.0.0.1"; port = %d; user = "cdc"; password_file = "%s";\n'
           'server_id = 4343; tables = [ "%s.*" ];\n' % (KEY_ORDERING, srv.port, pwfile, db))
    reps = [td.Replica(t, "r%d" % (i + 1), redis.port, http_sink(rx.url), {"cdc.cfg": cfg},
                       lease=CDC_LEASE) for i in range(2)]
    t.require(h.wait_until(lambda: any("streaming the binlog" in r.b.stderr_text() for r in reps),
                           30, 0.05), "no replica streams the binlog")
    rng = random.Random(36)
    n = 2400
    expected = set()
    script = []
    for g in range(1, n + 1):
        tb, i = rng.choice(tables), rng.randrange(rows)
        script.append("UPDATE %s.%s SET v = %d WHERE id = %d;" % (db, tb, g, i))
        expected.add((tb, i, g))
        if g % 40 == 0:
            script.append("DO SLEEP(0.12);")
    p = srv.sql_background("\n".join(script) + "\n")
    time.sleep(2.0)
    old = td.leader(reps, "cdc")
    t.require(old is not None, "no single leader 2 s in")
    n_before = sum(1 for r in rx.records() if r.ok)
    t.check(p.poll() is None, "the workload ended before the kill: the kill tests nothing")
    t_kill = time.monotonic()
    old.b.kill()
    survivors = [r for r in reps if r is not old]
    new = td.wait_leader(survivors, "cdc", 15)
    takeover = time.monotonic() - t_kill
    t.require(new is not None, "no new leader within 15 s of the SIGKILL")
    p.wait(120)
    t.check(p.returncode == 0, "workload failed: %s" % p.stderr.read()[-300:])

    def events():
        out = []
        for r, e in sr.accepted_in_order(rx.records()):
            if e.get("op") == "update" and e.get("db") == db:
                out.append((r, e, (e["table"], e["after"]["id"], e["after"]["v"])))
        return out
    ok = h.wait_until(lambda: expected <= {x[2] for x in events()}, 60, 0.25)
    time.sleep(1.0)
    recs = rx.records()
    evs = events()
    keys = [x[2] for x in evs]
    missing = sorted(expected - set(keys))
    repeats = len(keys) - len(set(keys))
    t.check(ok and not missing, "%d row events lost, e.g. %r" % (len(missing), missing[:5]))
    t.check(repeats <= REPEATS_PER_FAILOVER,
            "%d repeats over 1 failover (bound %d: rows since the last checkpoint)"
            % (repeats, REPEATS_PER_FAILOVER))
    t.check(n_before > 0, "nothing accepted before the SIGKILL: the kill tests nothing")
    sk, sa, mism = stale_checks(t, recs)
    ov = overlap_check(t, recs, "row")
    bad = epoch_order(t, [((r.ep, k[0], k[1]), k[2]) for r, _, k in evs], "per-row")
    cmax, cmean = sr.concurrency_profile(recs)
    t.check(cmax > 1, "the receiver never saw two requests at once")
    resumed = h.wait_until(lambda: "resuming from checkpoint" in new.b.stderr_text(), 10, 0.1)
    t.check(resumed, "the new leader did not resume from the checkpoint")
    alive_check(t, reps, skip=(old,))
    sr.result_line(name, "PASS" if not t.failures else "FAIL", ordering=KEY_ORDERING,
                   row_events=n, accepted=len(keys), distinct=len(set(keys)),
                   lost=len(missing), repeats=repeats, repeat_bound=REPEATS_PER_FAILOVER,
                   accepted_before_kill=n_before, takeover_s="%.2f" % takeover,
                   requests=len(recs), epochs=len({r.ep for r in recs}),
                   stale_accepted=len(sk), stale_at_arrival=len(sa),
                   order_violations_in_epoch=len(bad), same_row_overlaps=len(ov),
                   receiver_concurrency_max=cmax, receiver_concurrency_mean="%.1f" % cmean,
                   throughput_msg_s="%.0f" % throughput([(r, e) for r, e, _ in evs]))


if __name__ == "__main__":
    sr.parallel_main(globals())
