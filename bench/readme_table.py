#!/usr/bin/env python3
"""The benchmark table of docs/benchmarks.md, from one bench/run.

    bench/readme_table.py RESULTS.json [--write docs/benchmarks.md]

Reads the JSON `bench/run` wrote (every RESULT line of every script) and
prints the "Benchmarks" part of docs/benchmarks.md's "Measured figures": a
heading and paragraph naming the run (date, results file, length) and one
table row per benchmark, each figure taken from that run. With --write it
replaces the text between the two marker lines in that file instead:

    <!-- bench/readme_table.py: begin -->
    <!-- bench/readme_table.py: end -->

A row whose figures the run does not hold (a benchmark skipped, a peer
whose toolchain was missing) says so instead of a figure. The words
around the figures (what is measured, the target, the command) live here,
next to the lookups, so the table and its source cannot drift apart; the
"Why the misses" prose under the table is written by hand.
"""
import argparse
import json
import re
import sys

BEGIN = "<!-- bench/readme_table.py: begin -->"
END = "<!-- bench/readme_table.py: end -->"


class Missing(Exception):
    pass


class Run:
    def __init__(self, doc):
        self.doc = doc
        self.results = [r for s in doc["scripts"] for r in s.get("results", [])]

    def get(self, prefix):
        """The one result whose workload starts with prefix."""
        hits = [r for r in self.results if r["workload"].startswith(prefix)]
        exact = [r for r in hits if r["workload"] == prefix]
        if exact:  # "...: CPU per message", beside "...: CPU per message of the bare loop"
            hits = exact
        if len(hits) != 1:
            raise Missing("%d results start with %r" % (len(hits), prefix))
        return hits[0]

    def b(self, prefix):
        return self.get(prefix)["baton"]

    def base(self, prefix):
        return self.get(prefix)["baseline"]

    def ratio(self, prefix):
        return self.get(prefix)["ratio"]


def num(x, d=0):
    """1234.5 -> '1,235' (d decimals, thousands separated)."""
    return "{:,.{d}f}".format(x, d=d)


def rate(x):
    """msg/s for prose: 45026 -> '45.0k', 1568476 -> '1.57M'."""
    if x >= 1e6:
        return "%.2fM" % (x / 1e6)
    if x >= 1e3:
        return "%.1fk" % (x / 1e3)
    return "%.0f" % x


def paren(workload):
    """The text in the last parentheses of a workload name."""
    m = re.findall(r"\(([^()]*)\)", workload)
    return m[-1] if m else ""


def verdict(*results):
    """**met** when every one passed, **missed** when any failed."""
    passes = [r["pass"] for r in results if r.get("pass") is not None]
    if not passes:
        return "—"
    return "**met**" if all(passes) else "**missed**"


def triple(R, pattern, peers, what=("throughput", "CPU per message", "peak RSS")):
    """For each of what: the results of pattern % (peer, what) for every peer."""
    return [[R.get(pattern % (p, w)) for p in peers] for w in what]


def rows(R):
    """(what, figure, target, command) of each row, as functions of the run."""
    out = []

    def row(what, command):
        def deco(fn):
            out.append((what, fn, command))
            return fn
        return deco

    @row("crash takeover: leader SIGKILLed (3 replicas, default lease ttl 3000 / retry 250, 20 "
         "trials, traffic in flight)", "`bench/run --only failover`")
    def _():
        p99 = R.get("failover SIGKILL takeover p99")
        return ("p50 %s ms, p99 %s ms" % (num(R.b("failover SIGKILL takeover p50")), num(p99["baton"])),
                "p99 ≤ ttl + retry + 100 ms (%s) %s; asserted ≤ ttl + retry + 500 ms per takeover "
                "(`test_redis_psub.py`, `test_redis_psub_faults.py`)" % (p99["target"].split()[-1],
                                                                          verdict(p99)))

    @row("graceful handover: leader SIGTERMed (same)", "same")
    def _():
        p99 = R.get("failover SIGTERM handover p99")
        return ("p50 %.1f ms, p99 %.1f ms; the leader's queue was non-empty at %d of 20 signals; "
                "delivery gap at the sink p50 %.1f, p99 %.1f ms; %d duplicates; %d messages received "
                "by a replica but never delivered, and %s published while no replica was subscribed "
                "(pub/sub keeps nothing)"
                % (R.b("failover SIGTERM handover p50"), p99["baton"],
                   R.b("failover SIGTERM: queue non-empty"), R.b("failover SIGTERM: delivery gap p50"),
                   R.b("failover SIGTERM: delivery gap p99"), R.b("failover SIGTERM: duplicates"),
                   R.b("failover SIGTERM: lost, received"), num(R.b("failover SIGTERM: lost, published"))),
                "p99 ≤ 100 ms %s; 0 duplicates %s; the test over 200 handovers with 3 replicas "
                "(`test_guard_faults.py`) asserts p99 ≤ 500 ms (a missed release announcement costs "
                "1-3 s; the 100 ms target is the benchmark's)"
                % (verdict(p99), verdict(R.get("failover SIGTERM: duplicates"))))

    @row("the same with the **etcd** locker (1 member, ttl 2000 / retry 250)",
         "`bench/run --only failover`")
    def _():
        k99, t99 = R.get("failover etcd SIGKILL takeover p99"), R.get("failover etcd SIGTERM handover p99")
        return ("SIGKILL p50 %s ms, p99 %s ms; SIGTERM p50 %.1f ms, p99 %.1f ms, %d duplicates, %d "
                "received but undelivered"
                % (num(R.b("failover etcd SIGKILL takeover p50")), num(k99["baton"]),
                   R.b("failover etcd SIGTERM handover p50"), t99["baton"],
                   R.b("failover etcd SIGTERM: duplicates"), R.b("failover etcd SIGTERM: lost, received")),
                "SIGKILL p99 ≤ ttl + retry + 600 ms (etcd expires leases in 500 ms sweeps) %s; SIGTERM "
                "p99 ≤ 100 ms %s; asserted ≤ ttl + retry + 1000 ms (`test_etcd.py`)"
                % (verdict(k99), verdict(t99)))

    @row("locker round trips, etcd vs Redis (same machine, same run)", "`bench/run --only locker`")
    def _():
        a = R.get("locker acquisitions/s")
        p50, p99 = R.get("locker renew round trip p50"), R.get("locker renew round trip p99")
        return ("acquisitions/s (try_lock + unlock) %s vs %s; renew p50 %.2f vs %.3f ms, p99 %.2f vs "
                "%.3f ms" % (num(a["baton"]), num(a["baseline"]), p50["baton"], p50["baseline"],
                             p99["baton"], p99["baseline"]),
                "— (informational: a consensus store pays fsync and Raft per write)")

    @row("cost against endpoints per replica (3 replicas, N redis_psub endpoints each, default "
         "lease), N = 1 / 10 / 100 / 1,000", "`SCALE_NS=1,10,100,1000 python3 bench/bench_scale.py BUILD`")
    def _():
        ns = (1, 10, 100, 1000)

        def series(fmt, prefix, d=1):
            return " / ".join(fmt % R.b(prefix % n) for n in ns)
        rss = R.get("peak RSS per replica, 1000 endpoints")
        cpu = R.get("idle CPU per replica, 1000 endpoints")
        tk = R.get("takeover of 1000 endpoints after SIGKILL")
        return ("peak RSS per replica %s MiB; leader threads %s; idle CPU per replica %s %%; locker "
                "round trips/s of a leader %s, of a standby %s (Redis commands per replica %s per "
                "s: one script per lease, sent in one round trip); takeover of every endpoint after "
                "the leader's SIGKILL %s s"
                % (series("%.1f", "peak RSS per replica, %d endpoints"),
                   " / ".join(num(R.b("threads, leader of %d endpoints" % n)) for n in ns),
                   series("%.2f", "idle CPU per replica, %d endpoints"),
                   series("%.1f", "locker round trips/s, leader of %d endpoints"),
                   series("%.1f", "locker round trips/s, standby of %d endpoints"),
                   " / ".join(num(R.b("locker commands/s per replica, %d endpoints" % n)) for n in ns),
                   " / ".join("%.2f" % (R.b("takeover of %d endpoints after SIGKILL" % n) / 1000.0)
                              for n in ns)),
                "at 1,000: RSS < 64 MiB %s; idle CPU < 2 %% %s; lease round trips growing "
                "with the renew interval, not with endpoints (the round trips/s above); every "
                "endpoint led again ≤ ttl + retry + 1 s (4.25 s) %s"
                % (verdict(rss), verdict(cpu), verdict(tk)))

    @row("redis_psub leader → stdout vs a bare hiredis loop, saturated (500,000 PUBLISH, "
         "`redis-benchmark -c 4 -P 32`), rounds in which the subjects take turns at going first; "
         "for information, the same loop writing baton's envelope (like for like)", "`bench/bench_redis_psub.sh`")
    def _():
        t = R.get("redis_psub -> stdout, 500000 msgs, median")
        c = R.get("redis_psub CPU per message, best round")
        floor = R.get("redis_psub 500000 msgs, baton / bare hiredis loop")
        text = ("**%.2f**, the median of the per-round ratios (%s); best rounds %s vs %s msg/s; CPU per "
                "message in the best rounds %.2f vs %.2f µs (**%.2f×**). The same workload inside "
                "`bench_peers.py`: %.2f (%s vs %s msg/s)"
                % (t["ratio"], ", ".join(paren(t["workload"]).split()), rate(t["baton"]),
                   rate(t["baseline"]), c["baton"], c["baseline"], c["ratio"], floor["ratio"],
                   rate(floor["baton"]), rate(floor["baseline"])))
        try:
            lt = R.get("redis_psub -> stdout like for like")
            lc = R.get("redis_psub CPU per message like for like")
            text += (". Like for like, against the loop writing baton's envelope: %.2f (%s), CPU per "
                     "message %.2f vs %.2f µs (%.2f×)"
                     % (lt["ratio"], ", ".join(paren(lt["workload"]).split()), lc["baton"],
                        lc["baseline"], lc["ratio"]))
        except Missing:
            text += ". (Like for like: not in this run.)"
        return (text, "≥ 0.95 and ≤ 1.5× the CPU — %s / %s" % (verdict(t), verdict(c)))

    @row("redis_psub CPU per message at the rates users run: a paced publisher (one PUBLISH per "
         "message, even spacing), one leader with its renewals and status work included", "`bench/bench_paced.py`")
    def _():
        rs = [R.get("redis_psub CPU per message at %d msg/s paced, baton / bare loop" % n)
              for n in (1000, 10000, 50000)]
        return ("baton / bare loop **%s×** at 1k / 10k / 50k msg/s (%s µs against %s)"
                % (" / ".join("%.2f" % r["ratio"] for r in rs),
                   " / ".join("%#.3g" % r["baton"] for r in rs),
                   " / ".join("%#.3g" % r["baseline"] for r in rs)),
                "≤ 1.5× at every rate %s" % verdict(*rs))

    @row("baton against what users would run instead, Redis pattern subscription (`bench/peers/`: "
         "the same lease loop + PSUBSCRIBE → JSON lines, in Node.js/ioredis 6.1 and Go/redigo)",
         "`bench/bench_peers.py`, `bench/bench_paced.py`")
    def _():
        peers = ("node/ioredis", "go/redigo")
        t, c, m = triple(R, "redis_psub 500000 msgs, baton / %s: %s", peers)
        paced = {p: [R.get("redis_psub CPU per message at %d msg/s paced, baton / %s" % (n, p))
                     for n in (1000, 10000, 50000)] for p in peers}
        return ("saturated: throughput %.2f× Node's, %.2f× Go's (%s vs %s / %s msg/s); CPU per message "
                "%.2f / %.2f (%.2f vs %.2f / %.2f µs); peak RSS %.2f / %.2f (%.1f vs %.1f / %.1f MiB). "
                "Paced at 1k / 10k / 50k msg/s, CPU per message against Node %s, against Go %s"
                % (t[0]["ratio"], t[1]["ratio"], rate(t[0]["baton"]), rate(t[0]["baseline"]),
                   rate(t[1]["baseline"]), c[0]["ratio"], c[1]["ratio"], c[0]["baton"],
                   c[0]["baseline"], c[1]["baseline"], m[0]["ratio"], m[1]["ratio"], m[0]["baton"],
                   m[0]["baseline"], m[1]["baseline"],
                   " / ".join("%.2f" % r["ratio"] for r in paced[peers[0]]),
                   " / ".join("%.2f" % r["ratio"] for r in paced[peers[1]])),
                "throughput ≥ each peer's %s; CPU ≤ ⅓ saturated %s, paced %s; RSS ≤ ⅕ against Node %s, "
                "against Go %s" % (verdict(*t), verdict(*c), verdict(*paced[peers[0]], *paced[peers[1]]),
                                   verdict(m[0]), verdict(m[1])))

    @row("baton against the RabbitMQ peers (private queue on a fanout exchange, auto ack, JSON "
         "lines: Go/amqp091-go 1.5, Node.js/amqplib 2.3), each draining a 100,000 × 100 B backlog",
         "`bench/bench_peers_rabbitmq.py`")
    def _():
        peers = ("go/amqp091-go", "node/amqplib")
        t, c, m, f = triple(R, "rabbitmq backlog drain 100000 x 100 B, baton / %s: %s", peers,
                            ("throughput", "CPU per message", "peak RSS", "CPU per message of the bare"))
        return ("throughput %.2f× Go's, %.2f× Node's (%s vs %s / %s msg/s); CPU per message %.2f / %.2f "
                "(%.2f vs %.1f / %.1f µs; the bare rabbitmq-c loop: %.2f µs, %.2f / %.2f); peak RSS "
                "%.2f / %.2f (%.1f vs %.1f / %.1f MiB)"
                % (t[0]["ratio"], t[1]["ratio"], rate(t[0]["baton"]), rate(t[0]["baseline"]),
                   rate(t[1]["baseline"]), c[0]["ratio"], c[1]["ratio"], c[0]["baton"],
                   c[0]["baseline"], c[1]["baseline"], f[0]["baton"], f[0]["ratio"], f[1]["ratio"],
                   m[0]["ratio"], m[1]["ratio"], m[0]["baton"], m[0]["baseline"], m[1]["baseline"]),
                "throughput %s; CPU ≤ ⅓ against Go %s, against Node %s; RSS ≤ ⅕ against Go %s, "
                "against Node %s" % (verdict(*t), verdict(c[0]), verdict(c[1]), verdict(m[0]),
                                     verdict(m[1])))

    @row("baton against the MQTT peers (plain subscription, persistent session, JSON lines: "
         "Go/paho.mqtt.golang 1.1, Node.js/MQTT.js 5.16), each draining a backlog",
         "`bench/bench_peers_mqtt.py`")
    def _():
        peers = ("go/paho.mqtt.golang", "node/mqtt")
        q0 = "mqtt plain QoS 0, backlog of 200000 msgs, baton / %s: %s"
        q1 = "mqtt plain QoS 1 (baton ack=on_receive), backlog of 20000 msgs, baton / %s: %s"
        q1s = "mqtt plain QoS 1 (baton ack=after_sink, info), backlog of 20000 msgs, baton / %s: %s"
        t0, c0, m0 = triple(R, q0, peers)
        t1, c1 = triple(R, q1, peers, ("throughput", "CPU per message"))
        s1 = R.get(q1s % (peers[0], "throughput"))
        s1c = R.get(q1s % (peers[0], "CPU per message"))
        return ("QoS 0 (200,000): throughput %.2f× Go's, %.2f× Node's (%s vs %s / %s msg/s); CPU per "
                "message %.2f / %.2f (%.1f vs %.1f / %.1f µs); peak RSS %.2f / %.2f (%.1f vs %.1f / "
                "%.1f MiB). QoS 1 (20,000), baton acknowledging on receipt as the peers do: %.2f× / "
                "%.2f× (%s vs %s / %s msg/s), CPU %.2f / %.2f (%.1f vs %.1f / %.1f µs); with its "
                "default `after_sink` (info) %s msg/s, %.1f µs"
                % (t0[0]["ratio"], t0[1]["ratio"], rate(t0[0]["baton"]), rate(t0[0]["baseline"]),
                   rate(t0[1]["baseline"]), c0[0]["ratio"], c0[1]["ratio"], c0[0]["baton"],
                   c0[0]["baseline"], c0[1]["baseline"], m0[0]["ratio"], m0[1]["ratio"], m0[0]["baton"],
                   m0[0]["baseline"], m0[1]["baseline"], t1[0]["ratio"], t1[1]["ratio"],
                   rate(t1[0]["baton"]), rate(t1[0]["baseline"]), rate(t1[1]["baseline"]),
                   c1[0]["ratio"], c1[1]["ratio"], c1[0]["baton"], c1[0]["baseline"],
                   c1[1]["baseline"], rate(s1["baton"]), s1c["baton"]),
                "throughput QoS 0 %s, QoS 1 %s; CPU ≤ ⅓ %s; RSS ≤ ⅕ against Go %s, against Node %s"
                % (verdict(*t0), verdict(*t1), verdict(*c0, *c1), verdict(m0[0]), verdict(m0[1])))

    @row("baton against the binlog peer (Node.js/@vlasky/zongji 0.9 + ioredis, one JSON line per "
         "row), 1,000,000 rows from a recorded file:pos", "`bench/bench_peers_mysql_cdc.py`")
    def _():
        w = "mysql_cdc 1000000 rows (5 columns) streamed from a recorded file:pos, baton / node/zongji: %s"
        t, c, m = R.get(w % "throughput"), R.get(w % "CPU per row"), R.get(w % "peak RSS")
        return ("throughput %.1f× (%s vs %s rows/s); CPU per row %.2f (%.2f vs %.1f µs); peak RSS "
                "%.2f (%.1f vs %.1f MiB); baton with its defaults, the fenced checkpoint included"
                % (t["ratio"], rate(t["baton"]), rate(t["baseline"]), c["ratio"], c["baton"],
                   c["baseline"], m["ratio"], m["baton"], m["baseline"]),
                "throughput %s; CPU ≤ ⅓ %s; RSS ≤ ⅕ %s" % (verdict(t), verdict(c), verdict(m)))

    @row("redis_psub → HTTP sink (keep-alive) vs a bare libcurl loop posting baton's own envelope in "
         "the same batches with the same headers, both to one fast C receiver (epoll, 204); for "
         "information, like for like: the loop that also receives (hiredis PSUBSCRIBE, baton's "
         "envelope code, one thread) from the same publish", "`bench/bench_http_sink.py`")
    def _():
        a, ac = R.get("redis_psub -> http sink, batch_max 1,"), R.get("http sink CPU per message, batch_max 1 ")
        b, bc = R.get("redis_psub -> http sink, batch_max 64,"), R.get("http sink CPU per message, batch_max 64")
        text = ("batch_max 1: **%.2f** (%s vs %s msg/s; CPU %.1f vs %.1f µs per message); batch_max "
                "64: **%.2f** (%s vs %s msg/s; %.2f vs %.2f µs): at 64 baton's figure includes its Redis "
                "pub/sub source, the loop has none"
                % (a["ratio"], rate(a["baton"]), rate(a["baseline"]), ac["baton"], ac["baseline"],
                   b["ratio"], rate(b["baton"]), rate(b["baseline"]), bc["baton"], bc["baseline"]))
        try:
            parts = []
            for n in (1, 64):
                t = R.get("redis_psub -> http sink like for like, batch_max %d:" % n)
                c = R.get("http sink CPU per message like for like, batch_max %d " % n)
                parts.append("%.2f at %d (%s vs %s msg/s; CPU %.2f vs %.2f µs)"
                             % (t["ratio"], n, rate(t["baton"]), rate(t["baseline"]), c["baton"], c["baseline"]))
            text += ". Like for like, against the loop that receives too: " + "; ".join(parts)
        except Missing:
            text += ". (Like for like: not in this run.)"
        return (text, "≥ 0.9 at 1 %s, at 64 %s" % (verdict(a), verdict(b)))

    @row("redis_stream sink (issue 38): 200,000 envelopes in batches of 64 through the sink "
         "(in process, unguarded) vs a bare hiredis loop running the same Lua script by EVALSHA "
         "per batch, one redis-server", "`bench/bench_redis_stream.py`")
    def _():
        a = R.get("redis_stream sink, batch 64,")
        c = R.get("redis_stream sink client CPU per message, batch 64")
        return ("**%.2f** (%s vs %s msg/s; client CPU %.2f vs %.2f µs per message)"
                % (a["ratio"], rate(a["baton"]), rate(a["baseline"]), c["baton"], c["baseline"]),
                "≥ 0.9 %s" % verdict(a))

    @row("redis_psub → postgresql sink (queue_batch_max 64: one transaction per 64 rows, the fence "
         "and one INSERT ... jsonb_array_elements) vs a bare blocking libpq loop doing the same "
         "transaction per batch of 64; both measured by the server's clock",
         "`bench/bench_postgresql_sink.py`")
    def _():
        a = R.get("redis_psub -> postgresql sink, transactions of 64")
        return ("**%.2f** (%s vs %s rows/s)" % (a["ratio"], rate(a["baton"]), rate(a["baseline"])),
                "≥ 0.9 %s" % verdict(a))

    @row("HTTP sink requests in flight together: redis_psub → http sink, batch_max 1, "
         "to a receiver that answers every POST after 20 ms (`http_receiver_bench.c --latency-ms`, "
         "epoll + timerfd), offered 1.5× the limit over 1,024 channels, steady state; against the "
         "limit max_in_flight / latency; `auto` against a receiver of capacity 32 (503 beyond)",
         "`bench/run --only concurrency`")
    def _():
        a = R.get("concurrency: max_in_flight 16, receiver latency")
        b = R.get("concurrency: max_in_flight 64, receiver latency")
        ca = R.get("concurrency: max_in_flight 16 vs a closed-loop client")
        cb = R.get("concurrency: max_in_flight 64 vs a closed-loop client")
        au = R.get("concurrency: auto vs a receiver of capacity")
        lim = R.get("concurrency: auto, the limit it used")
        def hold(r):
            m = re.search(r"receiver hold ([0-9.]+) ms, ([0-9.]+) of", r["workload"])
            return "the receiver held each %s ms: %s of that limit" % m.groups() if m else "?"

        text = ("max_in_flight 16: **%.2f** (%s of %s msg/s; %s); 64: **%.2f** (%s of %s msg/s; %s), "
                "ordering %s; a closed-loop client with as many connections gets %s / %s msg/s from "
                "the same receiver (baton / client %.2f / %.2f); `auto` against capacity 32: **%.2f** "
                "(%s of %s msg/s; %s), the limit it used %.1f on average (%s)"
                % (a["ratio"], num(a["baton"]), num(a["baseline"]), hold(a), b["ratio"],
                   num(b["baton"]), num(b["baseline"]), hold(b),
                   b["workload"].split("(ordering ")[1].split(",")[0], num(ca["baseline"]),
                   num(cb["baseline"]), ca["ratio"], cb["ratio"], au["ratio"], num(au["baton"]),
                   num(au["baseline"]), hold(au), lim["baton"], paren(lim["workload"])[6:]))
        k = R.get("concurrency: max_in_flight 64, ordering ")
        text += ("; at 64 with `ordering = \"%s\"` (info) %s msg/s (%s)"
                 % (k["workload"].split("ordering ")[1].split(",")[0], num(k["baton"]),
                    paren(k["workload"])[6:]))
        return (text, "≥ 0.9 %s; `auto` ≥ 0.8 %s" % (verdict(a, b), verdict(au)))

    @row("HTTP sink CPU per message with 64 in flight vs one at a time (`ordering = \"strict\"`) "
         "at the same delivered rate; peak RSS with 1,024 in flight "
         "(receiver latency 200 ms)", "same")
    def _():
        c = R.get("concurrency: CPU per message, max_in_flight 64")
        sl = R.get("concurrency: CPU per message at a slow rate")
        m = R.get("concurrency: peak RSS with max_in_flight 1024")
        f = R.get("concurrency: requests in flight seen")
        return ("CPU **%.2f×** (%.1f vs %.1f µs per message at 400 msg/s to a 1 ms receiver; at 40 "
                "msg/s to a 20 ms one %.2f×, info); peak RSS **%.1f MiB** with up to %d in flight "
                "(%s; the same load one at a time %.1f MiB)"
                % (c["ratio"], c["baton"], c["baseline"], sl["ratio"], m["baton"], f["baton"],
                   paren(f["workload"])[6:], m["baseline"]),
                "CPU ≤ 1.2× %s; RSS < 32 MiB %s" % (verdict(c), verdict(m)))

    @row("rabbitmq leader (Redis locker) → stdout vs a bare rabbitmq-c loop, each draining a "
         "100,000-message backlog, one after the other", "`bench/bench_rabbitmq.sh`")
    def _():
        t = R.get("rabbitmq leader (with locker) -> stdout vs bare rabbitmq-c loop, run one after the "
                  "other, 100000 x 100 B drained")
        live = R.get("rabbitmq leader (with locker) -> stdout vs bare rabbitmq-c loop, run one after the "
                     "other, 100000 x 100 B published")
        c = R.get("rabbitmq CPU per message draining")
        return ("**%.2f** (%s vs %s msg/s); CPU per message %.1f vs %.1f µs; publishing while "
                "consuming (info) %.2f" % (t["ratio"], rate(t["baton"]), rate(t["baseline"]),
                                           c["baton"], c["baseline"], live["ratio"]),
                "≥ 0.8 %s (the broker paces both)" % verdict(t))

    @row("OnceGuard decisions/s vs the same pipelined `SET NX PX` + `TYPE` in a bare hiredis loop, "
         "1 client", "`bench/bench_onceguard.sh`")
    def _():
        r = R.get("OnceGuard decisions/s")
        return ("%.2f (%s vs %s decisions/s)" % (r["ratio"], rate(r["baton"]), rate(r["baseline"])),
                "≥ 0.8 %s" % verdict(r))

    @row("mysql_cdc rows → stdout vs the same bare `mariadb_rpl_fetch` loop decoding with baton's "
         "decoder into the same JSON envelope, written to a file (like for like), 1,000,000 rows, "
         "first to last line", "`bench/bench_mysql_cdc.sh`")
    def _():
        r = R.get("mysql_cdc 1000000 rows, baton vs bare loop + same JSON")
        c = R.get("mysql_cdc 1000000 rows, CPU per row")
        d = R.get("mysql_cdc 1000000 rows, baton vs bare decode-only")
        return ("**%.2f**, the best round of each (%s vs %s rows/s; %s); CPU per row, median of the "
                "rounds, %.2f vs %.2f µs; against a decode-only loop that writes nothing %.2f (info)"
                % (r["ratio"], rate(r["baton"]), rate(r["baseline"]), paren(r["workload"]),
                   c["baton"], c["baseline"], d["ratio"]),
                "≥ 0.9 like for like %s" % verdict(r))

    @row("mqtt `$share` QoS 0 → stdout vs a bare paho loop (the same MQTTAsync library, payloads to "
         "a file), each started on a queued backlog of 200,000", "`bench/bench_mqtt.sh`")
    def _():
        r = R.get("mqtt $share QoS 0 -> stdout, first to last line, baton / bare paho loop,")
        c = R.get("mqtt $share QoS 0 -> stdout, CPU per message")
        s = R.get("mqtt $share QoS 0 -> stdout, first to last line, baton / mosquitto_sub")
        m = re.search(r"median of \d+ rounds \(([^)]*)\)", r["workload"])
        return ("**%.2f**, the median of the rounds (%s; %s vs %s msg/s); CPU per message "
                "%.2f× (%.1f vs %.1f µs); against mosquitto_sub %.2f (info)"
                % (r["ratio"], m.group(1) if m else "?", rate(r["baton"]), rate(r["baseline"]),
                   c["ratio"], c["baton"], c["baseline"], s["ratio"]),
                "≥ 0.9 of bare paho %s" % verdict(r))

    @row("mqtt QoS 1 `after_sink` (ack only after the sink)", "same")
    def _():
        a = R.get("mqtt $share QoS 1 ack=after_sink -> stdout, first to last line, baton / bare paho")
        o = R.get("mqtt $share QoS 1 ack=on_receive -> stdout, first to last line, baton / bare paho")
        return ("%s msg/s first to last line (%.2f of a bare paho loop's %s); `ack = \"on_receive\"` "
                "%s (%.2f)" % (rate(a["baton"]), a["ratio"], rate(a["baseline"]), rate(o["baton"]),
                               o["ratio"]),
                "—")

    @row("peak RSS and idle CPU, one redis_psub endpoint", "`bench/bench_redis_psub.sh`")
    def _():
        m, s = R.get("redis_psub leader peak RSS"), R.get("redis_psub idle standby CPU")
        return ("leader %.1f MiB (VmHWM) after the saturated rounds; idle standby CPU %.3f %% over 30 s "
                "(idle leader %.3f %%)" % (m["baton"], s["baton"], R.b("redis_psub idle leader CPU")),
                "< 10 MiB %s; < 0.5 %% %s" % (verdict(m), verdict(s)))

    @row("peak RSS, leader / standby with all five endpoint types (stdout sinks)", "`bench/bench_footprint.py`")
    def _():
        a, b = R.get("peak RSS, leader, 5 endpoint types"), R.get("peak RSS, standby, 5 endpoint types")
        return ("%.2f / %.2f MiB" % (a["baton"], b["baton"]), "< 10 MiB %s" % verdict(a, b))

    @row("idle standby CPU, five types, 30 s", "same")
    def _():
        s = R.get("idle standby CPU over 30 s")
        return ("%.3f %% (idle leader %.3f %%)" % (s["baton"], R.b("idle leader CPU over 30 s")),
                "< 0.5 %% %s" % verdict(s))

    @row("replay cost (`failover = \"replay\"`, 500,000 messages, 30-byte payload): leader msg/s on "
         "vs off / standby CPU per message vs leader's / ring", "`bench/bench_replay.py`")
    def _():
        on = R.get("replay leader msg/s, on vs off (best")
        med = R.get("replay leader msg/s, on vs off (median")
        sl = R.get("replay standby vs leader CPU per msg")
        d16 = R.get("replay ring 16 MiB (default): peak ring bytes")
        return ("on / off **%.3f** (best of 5; median %.2f); standby / leader **%.2f** (%.3f vs %.3f "
                "µs); %.0f ring bytes per message; the default 16 MiB ring held %.1f MiB at most on "
                "both replicas (standby RSS %.1f MiB); a 256 MiB ring: standby RSS %.1f MiB"
                % (on["ratio"], med["ratio"], sl["ratio"], sl["baton"], sl["baseline"],
                   R.b("replay ring: bytes per message"), d16["baton"],
                   R.b("replay ring 16 MiB (default): standby peak RSS"),
                   R.b("replay ring 256 MiB: standby peak RSS")),
                "on / off ≥ 0.9 %s; standby / leader ≤ 0.5 %s; the ring within `replay.max_bytes` %s"
                % (verdict(on), verdict(sl), verdict(d16)))

    table = []
    for what, fn, command in out:
        try:
            figure, target = fn()
        except Missing as e:
            figure, target = "not in this run (%s)" % e, "—"
        table.append("| %s | %s | %s | %s |" % (what, figure, target, command))
    return table


def render(doc, path):
    R = Run(doc)
    date = doc["date"]
    day = "%s-%s-%s" % (date[0:4], date[4:6], date[6:8])
    head = [
        "### Benchmarks: one `bench/run`, %s" % day,
        "",
        "Every row below comes from one `bench/run`%s (%s, %d cores, %.0f s%s). "
        "Its results are in `%s` in the source tree; the table is made from them by "
        "`python3 bench/readme_table.py %s --write docs/benchmarks.md`."
        % (" of a tree with uncommitted changes" if doc.get("git_dirty") else "", doc["build_type"],
           doc["cpus"], doc["seconds"], ", quick" if doc.get("quick") else "", path, path),
        "",
        "| what | figure | target | command |",
        "|---|---|---|---|",
    ]
    return "\n".join(head + rows(R)) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="the JSON bench/run wrote")
    ap.add_argument("--write", metavar="docs/benchmarks.md",
                    help="replace the table between the markers in this file")
    a = ap.parse_args()
    try:
        with open(a.results) as f:
            doc = json.load(f)
        text = render(doc, a.results)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("%s: not a bench/run results file: %s" % (a.results, e), file=sys.stderr)
        return 2
    if not a.write:
        sys.stdout.write(text)
        return 0
    try:
        with open(a.write) as f:
            readme = f.read()
    except OSError as e:
        print("%s: %s" % (a.write, e), file=sys.stderr)
        return 2
    i, j = readme.find(BEGIN), readme.find(END)
    if i < 0 or j < i:
        print("%s: the markers %r and %r are not there" % (a.write, BEGIN, END), file=sys.stderr)
        return 1
    readme = readme[:i + len(BEGIN)] + "\n" + text + readme[j:]
    with open(a.write, "w") as f:
        f.write(readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
