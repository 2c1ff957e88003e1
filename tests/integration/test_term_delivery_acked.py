"""Term-scoped delivery for acknowledged sources (issue 12; DESIGN.md
"Term-scoped, lease-bounded delivery"): when a term ends, what the old
leader still holds is nacked/requeued (RabbitMQ group) or left
unacknowledged (MQTT QoS 1 after_sink), so the broker redelivers it to the
next leader: nothing is lost. Real processes: rabbitmq-server (one for the
file), mosquitto, redis-server, 3 baton replicas each, and an HTTP receiver
in this process recording (arrival order, X-Baton-Epoch, message).

  1. rabbitmq_group_leader_paused: mode "group" -> HTTP sink (batch_max 1),
     receiver 40 ms per request, lease ttl 1000 ms; 40 msg/s for 12 s with
     publisher confirms (faster than the receiver: the leader holds a
     backlog); for 20 s, every 3 s the leader is SIGSTOPped for 2 x ttl.
     0 lost; every duplicate delivery is marked "redelivered": true; no
     request with an epoch below one the receiver had already accepted.
  2. mqtt_qos1_after_sink_leader_paused: plain subscription (ActiveGuard),
     QoS 1, ack after_sink, one client id shared by the replicas and
     clean_start = false (the session, and what the broker queued for it,
     survives the failover: docs/endpoints/mqtt.md); receiver 10 ms per request;
     20 msg/s for 20 s; same pauses. 0 lost; no stale request.

Each scenario prints one line "TERM scenario=... result=PASS|FAIL ...".
"""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import termdelivery as td  # noqa: E402

ORDER = ["test_rabbitmq_group_leader_paused", "test_mqtt_qos1_after_sink_leader_paused"]

TTL = 1000
LEASE = {"ttl_ms": TTL, "retry_ms": 100}


def http_sink(url):
    return '{ name = "hook"; type = "http"; url = "%s"; batch_max = 1; }' % url


def accepted_by_key(rx):
    """{key: [envelope, ...]} of accepted envelopes, in arrival order."""
    out = {}
    for r in rx.snapshot():
        if r.status is None or not (200 <= r.status < 300):
            continue
        for e in r.envs:
            out.setdefault(rx.key(e), []).append(e)
    return out


def report_common(t, reps, rx, pauser, ep):
    per_rep = []
    total = {}
    for r in reps:
        m = r.metrics()
        d = td.drops(m, ep) if m is not None else None
        per_rep.append("%s[%s]" % (r.name, "unreachable" if d is None else td.fmt_drops(d)))
        for k, v in (d or {}).items():
            total[k] = total.get(k, 0) + v
    h.log("drops by replica: %s" % " ".join(per_rep))
    h.log("pauses: %s" % ", ".join("%s(epoch %s)" % (e[2], e[3]) for e in pauser.events))
    return total


# --------------------------------------------------------------------------

def broker():
    import rabbitmq as rmq
    return rmq.shared_server()


def test_rabbitmq_group_leader_paused(t):
    import rabbitmq as rmq
    srv = broker()
    redis = t.redis()
    c = rmq.Amqp(srv.port)
    c.exchange_declare("tdgrp", "fanout")
    c.close()
    rx = td.EpochReceiver(delay_s=0.040,
                          key=lambda e: json.loads(e["payload"])["seq"] if "payload" in e else None)
    cfg = ('name = "grp"; type = "rabbitmq"; sink = "hook";\n'
           'host = "127.0.0.1"; port = %d; exchange = "tdgrp"; mode = "group";\n' % srv.port)
    reps = [td.Replica(t, "r%d" % (i + 1), redis.port, http_sink(rx.url), {"grp.cfg": cfg},
                       lease=LEASE) for i in range(3)]
    t.require(td.wait_leader(reps, "grp", 20) is not None, "no single leader")
    t.require(h.wait_until(lambda: any(re.search(r'consuming from \w+ queue', r.b.stderr_text())
                                       for r in reps), 20, 0.1), "nobody consumes")
    # faster than the receiver (25/s): the leader always holds a backlog
    total, rate = 480, 40
    pub = td.AmqpSteadyPublisher(srv.port, "tdgrp", total, rate, prefix="g")
    pub.start()
    pauser = td.LeaderPauser(reps, "grp", every_s=3.0, pause_s=2 * TTL / 1000.0).start()
    t.cleanup(pauser.halt)
    time.sleep(20.0)
    pauser.halt()
    pub.join(60)
    t.check(pub.error is None, "publisher: %r" % pub.error)
    t.check(pub.c.acked == total, "broker confirmed %d/%d" % (pub.c.acked, total))
    got = h.wait_until(lambda: len(set(accepted_by_key(rx)) & set(range(total))) >= total,
                       90, 0.2)
    time.sleep(2.0)  # late duplicates would show up now
    by = accepted_by_key(rx)
    missing = sorted(set(range(total)) - set(by))
    dups = {k: v for k, v in by.items() if len(v) > 1}
    dup_deliveries = sum(len(v) - 1 for v in dups.values())
    # every copy after the first must be a broker redelivery
    bad_dups = sorted(k for k, v in dups.items() if not all(e.get("redelivered") for e in v[1:]))
    redelivered = sum(1 for v in by.values() for e in v if e.get("redelivered"))
    s = rx.summary()
    drops = report_common(t, reps, rx, pauser, "grp")
    try:
        q = [x for x in srv.list_queues() if x["name"] == "baton.grp"]
    except RuntimeError:
        q = []
    left = q[0]["messages"] if q else None
    ok = (bool(got) and not missing and not bad_dups and s["stale"] == 0
          and len(pauser.events) >= 3)
    td.summary_line("rabbitmq_group_leader_paused", "PASS" if ok else "FAIL",
                    published=total, delivered=len(by), lost=len(missing),
                    duplicate_deliveries=dup_deliveries, dups_not_redelivered=len(bad_dups),
                    redelivered_marked=redelivered, requests=s["requests"], stale=s["stale"],
                    stale_seen=s["stale_seen"], stale_max_ms=s["stale_max_ms"],
                    pauses=len(pauser.events), drops=td.fmt_drops(drops), queue_left=left)
    if s["stale_examples"]:
        h.log("first stale requests: %r" % s["stale_examples"])
    t.check(len(pauser.events) >= 3, "only %d leader pauses" % len(pauser.events))
    t.check(not missing, "%d lost, e.g. %r" % (len(missing), missing[:10]))
    t.check(not bad_dups, "%d duplicated messages with a copy not marked redelivered, e.g. %r"
            % (len(bad_dups), bad_dups[:10]))
    t.check(s["stale"] == 0, "%d requests carried an epoch lower than one the receiver had "
            "already accepted (up to %d ms)" % (s["stale"], s["stale_max_ms"]))
    for r in reps:
        t.check(r.b.alive(), "%s exited" % r.name)


def test_mqtt_qos1_after_sink_leader_paused(t):
    from mosquitto import Mosquitto
    mq = Mosquitto()
    redis = t.redis()
    rx = td.EpochReceiver(delay_s=0.010, key=lambda e: e.get("payload"))
    cfg = ('name = "mq"; type = "mqtt"; sink = "hook";\n'
           'server = "tcp://127.0.0.1:%d"; topics = ["td/#"]; qos = 1; ack = "after_sink";\n'
           'client_id = "baton-%%n"; clean_start = false; session_expiry = 600;\n' % mq.port)
    reps = [td.Replica(t, "r%d" % (i + 1), redis.port, http_sink(rx.url), {"mq.cfg": cfg},
                       lease=LEASE) for i in range(3)]
    t.require(td.wait_leader(reps, "mq", 20) is not None, "no single leader")
    t.require(h.wait_until(lambda: any("subscribed to" in r.b.stderr_text() for r in reps),
                           20, 0.1), "nobody subscribed")
    total, rate = 400, 20
    pub = td.MqttLinePublisher(mq.port, "td/x", total, rate, qos=1)
    t.cleanup(pub.halt)
    pub.start()
    pauser = td.LeaderPauser(reps, "mq", every_s=3.0, pause_s=2 * TTL / 1000.0).start()
    t.cleanup(pauser.halt)
    pub.join(total / rate + 30)
    pauser.halt()
    prc = pub.finish(30)
    t.check(pub.error is None and prc == 0, "publisher: %r, mosquitto_pub exit %r"
            % (pub.error, prc))
    want = {"m-%d" % i for i in range(total)}
    got = h.wait_until(lambda: want <= set(accepted_by_key(rx)), 60, 0.2)
    time.sleep(2.0)
    by = accepted_by_key(rx)
    missing = sorted(want - set(by), key=lambda k: int(k.split("-")[1]))
    dups = {k: v for k, v in by.items() if len(v) > 1}
    dup_deliveries = sum(len(v) - 1 for v in dups.values())
    dup_flagged = sum(1 for v in dups.values() for e in v[1:] if e.get("dup"))
    s = rx.summary()
    drops = report_common(t, reps, rx, pauser, "mq")
    kicked = sum(r.b.stderr_text().count("connection lost") for r in reps)
    ok = bool(got) and not missing and s["stale"] == 0 and len(pauser.events) >= 3
    td.summary_line("mqtt_qos1_after_sink_leader_paused", "PASS" if ok else "FAIL",
                    published=total, delivered=len(set(by) & want), lost=len(missing),
                    duplicate_deliveries=dup_deliveries, dup_copies_flagged_dup=dup_flagged,
                    requests=s["requests"], stale=s["stale"], stale_seen=s["stale_seen"],
                    stale_max_ms=s["stale_max_ms"], pauses=len(pauser.events),
                    drops=td.fmt_drops(drops), connection_lost_lines=kicked)
    if s["stale_examples"]:
        h.log("first stale requests: %r" % s["stale_examples"])
    t.check(len(pauser.events) >= 3, "only %d leader pauses" % len(pauser.events))
    t.check(not missing, "%d lost, e.g. %r" % (len(missing), missing[:10]))
    t.check(s["stale"] == 0, "%d requests carried an epoch lower than one the receiver had "
            "already accepted (up to %d ms)" % (s["stale"], s["stale_max_ms"]))
    for r in reps:
        t.check(r.b.alive(), "%s exited" % r.name)


if __name__ == "__main__":
    h.main(globals())
