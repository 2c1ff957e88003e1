#!/usr/bin/env python3
"""Benchmark: baton's rabbitmq endpoint against what users would run instead
(bench/peers/, the RabbitMQ workload).

    bench/bench_peers_rabbitmq.py [BUILD_DIR]
        (default: $BATON_BUILD_DIR or <source>/build-bench)

The same job for each subject, one at a time, never side by side, on one
rabbitmq-server and one redis-server (the locker) that the script starts on
free loopback ports in temporary directories (both stopped on every exit
path): a Redis lease and, as leader, a server-named exclusive auto-delete
queue bound to the durable fanout exchange "bench", consumed with auto ack
and no prefetch limit, one JSON line per message (baton's envelope fields)
written to a file.

- baton: one leader (rabbitmq endpoint, private mode, stdout sink), its
  lease in the locker (ttl_ms 60000, renew_ms 2000, as bench_rabbitmq.sh);
- the peers of bench/peers/ when their toolchains are installed: Go with
  amqp091-go + redigo (Debian's packages), Node.js with amqplib + ioredis
  (npm, pinned); lease ttl PEER_TTL_MS=60000, renewed every 20 s;
- for information, the bare rabbitmq-c loop (bench_rabbitmq_baseline
  consume: payload lines only, no lease): the broker's ceiling here.

The long lease for everyone keeps the pause below inside one term.

Workload: bench_rabbitmq.sh's backlog drain. The subject starts; once it
consumes (its stderr names its queue; `rabbitmqctl list_bindings` then shows
that queue, alone, bound to the exchange) it is SIGSTOPped; NPUB (default 2)
bench_rabbitmq_baseline publish processes send COUNT (default 100,000)
messages of SIZE (default 100) bytes; `rabbitmqctl list_queues` reads how
many wait in its queue (the rest are in the sockets' buffers); SIGCONT; the
drain ends when its output file holds COUNT lines (polled every 10 ms).
Per subject: msg/s (COUNT / time from SIGCONT to the last line), CPU per
message (its threads' run time, /proc/<pid>/task/*/schedstat, over the same
window), peak RSS (VmHWM after the drain). Best of ROUNDS (default 2) rounds
by throughput; the order of the subjects is reversed every other round.

Who set the pace: as in bench_rabbitmq.sh, the subject's busiest thread's
share of the drain on a CPU plus runnable-but-waiting for one; under 80 %,
it mostly waited for the broker ("paced_by": "broker"), and the throughput
ratio then says baton keeps up with what the broker hands out, not how far
above it baton could go (CPU per message and RSS still compare the
consumers). For the Go peer, whose goroutines move between threads, the
busiest thread understates its load; its total cores are printed too. With
the broker setting the pace, the rates of every subject move by up to a
third from run to run on a shared 2-core machine (the broker's own CPU
share varies); CPU per message and peak RSS are the steadier comparisons.

Targets (issue 22), baton against each peer: throughput >= the peer's; CPU
per message <= 1/3 of the peer's; peak RSS <= 1/5 of the peer's. Prints
RESULT {json} lines (bench/run's contract). Every wait is bounded; the whole
run is stopped with an error after BUDGET_S (default 240) seconds; about
85-90 s on 2 cores.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

if len(sys.argv) <= 1:
    os.environ.setdefault("BATON_BUILD_DIR", os.path.join(benchlib.SRC, "build-bench"))
h = benchlib.harness()
import rabbitmq as rmq  # noqa: E402  (tests/integration/lib, on the path now)
import subjects  # noqa: E402
from subjects import LineCounter, cpu_ns  # noqa: E402

COUNT = int(os.environ.get("COUNT", "100000"))
SIZE = int(os.environ.get("SIZE", "100"))
NPUB = max(1, int(os.environ.get("NPUB", "2")))
ROUNDS = max(1, int(os.environ.get("ROUNDS", "2")))
BUDGET_S = int(os.environ.get("BUDGET_S", "240"))
WAIT_S = 60            # bound of the drain and of the publishers
START_S = 20           # bound of a subject's start (leader, queue bound)
EXCHANGE = "bench"
PEER_TTL_MS = 60000
PUBLISHER = os.path.join(subjects.BUILD, "bench", "bench_rabbitmq_baseline")
PEER_KEY = "peer:lease:bench"
srv = None  # the rabbitmq-server (main)


def say(*a):
    print(*a, flush=True)


class _Process:
    """A subject run as a plain child process: stdout to its output file,
    stderr to a log that names its queue (queue_re)."""
    queue_re = None

    def __init__(self, work, argv, env=None, stdin=subprocess.DEVNULL):
        stamp = time.monotonic_ns()
        self.out = os.path.join(work, "%s-%d.out" % (self.tag, stamp))
        self.err = os.path.join(work, "%s-%d.err" % (self.tag, stamp))
        with open(self.out, "ab") as o, open(self.err, "ab") as e:
            self.proc = subprocess.Popen(argv, stdout=o, stderr=e, stdin=stdin,
                                         env=dict(os.environ, **(env or {})))
        self.pid = self.proc.pid
        h._cleanups.append(self.kill)

    def stderr_text(self):
        with open(self.err, errors="replace") as f:
            return f.read()

    def queue(self):
        """The name of its queue once it consumes, else None."""
        if self.proc.poll() is not None:
            raise RuntimeError("%s exited %s: %s" % (self.name, self.proc.returncode,
                                                     self.stderr_text()[-1000:]))
        m = re.search(self.queue_re, self.stderr_text())
        return m.group(1) if m else None

    def still_leads(self):
        return True

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
        h.stop_process(self.proc)


class _Peer(_Process):
    queue_re = r"consuming from queue (\S+)"
    envelope = True

    def __init__(self, work, srv, locker, argv):
        self.locker = locker
        super().__init__(work, argv + [str(locker.port), str(srv.port), EXCHANGE],
                         env={"PEER_TTL_MS": str(PEER_TTL_MS)})

    def still_leads(self):
        return self.locker.c.cmd("EXISTS", PEER_KEY) == 1


class GoAmqpPeer(_Peer):
    name = "go/amqp091-go"
    tag = "go"

    def __init__(self, work, srv, locker):
        super().__init__(work, srv, locker, [subjects.go_peer(self.name)])


class NodeAmqplibPeer(_Peer):
    name = "node/amqplib"
    tag = "node"

    def __init__(self, work, srv, locker):
        super().__init__(work, srv, locker, ["node", subjects.node_peer(self.name)])


class Baseline(_Process):
    name = "bare rabbitmq-c loop"
    tag = "baseline"
    queue_re = r"ready (\S+)"
    envelope = False

    def __init__(self, work, srv, locker):
        # "hold": it stays until its stdin closes, for VmHWM after the drain
        super().__init__(work, [PUBLISHER, "consume", str(srv.port), EXCHANGE, str(COUNT),
                                "hold"], stdin=subprocess.PIPE)

    def stop(self):
        self.proc.stdin.close()
        super().stop()


class Baton:
    name = "baton"
    envelope = True

    def __init__(self, work, srv, locker):
        self.mport = h.free_port()
        cfg = h.main_cfg(redis_port=locker.port, lease={"ttl_ms": 60000, "renew_ms": 2000},
                         extra='metrics = { listen = "127.0.0.1:%d"; };' % self.mport)
        ep = ('name = "bench"; type = "rabbitmq"; sink = "out"; host = "127.0.0.1"; port = %d;\n'
              'exchange = "%s";\n' % (srv.port, EXCHANGE))
        self.b = h.Baton(work, cfg, {"bench.cfg": ep}, name="baton-%d" % time.monotonic_ns())
        self.out, self.pid, self.epoch = self.b.out_path, self.b.pid, None

    def queue(self):
        if not self.b.alive():
            raise RuntimeError("baton exited %s:\n%s" % (self.b.proc.returncode,
                                                         self.b.stderr_text()[-2000:]))
        m = re.search(r'consuming from private queue "([^"]+)"', self.b.stderr_text())
        st = h.status_endpoints(self.mport).get("bench", {})
        if not m or st.get("role") != "leader":
            return None
        self.epoch = st.get("epoch")
        return m.group(1)

    def still_leads(self):
        st = h.status_endpoints(self.mport).get("bench", {})
        return st.get("role") == "leader" and st.get("epoch") == self.epoch

    def stop(self):
        if self.b.alive():
            os.kill(self.pid, signal.SIGCONT)
        rc = self.b.term()
        if rc != 0:
            raise RuntimeError("baton exited %s:\n%s" % (rc, self.b.stderr_text()[-2000:]))


def thread_sched(pid):
    """{tid: (ns on a CPU, ns runnable but waiting for a CPU)}."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                v = f.read().split()
            out[tid] = (int(v[0]), int(v[1]))
        except (OSError, IndexError, ValueError):
            pass
    return out


def bound_alone(qname, timeout=10):
    """Waits until qname is the one queue bound to the exchange (the previous
    subject's is gone once the broker has handled its connection's close:
    normally by the first look); returns the queues bound at the last look."""
    deadline = time.monotonic() + timeout
    while True:
        bound = srv.bound_queues(EXCHANGE)
        if bound == [qname] or time.monotonic() > deadline:
            return bound
        time.sleep(0.2)


def publish():
    """NPUB publishers, COUNT messages in all; waits for them; seconds taken."""
    per, pubs = COUNT // NPUB, []
    t0 = time.monotonic()
    for i in range(NPUB):
        n = per if i < NPUB - 1 else COUNT - per * (NPUB - 1)
        p = subprocess.Popen([PUBLISHER, "publish", str(srv.port), EXCHANGE, str(n), str(SIZE),
                              str(i * per)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
        h._cleanups.append(lambda p=p: p.poll() is None and p.kill())
        pubs.append(p)
    for p in pubs:
        try:
            err = p.communicate(timeout=WAIT_S)[1]
        except subprocess.TimeoutExpired:
            raise RuntimeError("a publisher did not finish within %d s" % WAIT_S)
        if p.returncode != 0:
            raise RuntimeError("publisher exited %s: %s" % (p.returncode, err.strip()))
    return time.monotonic() - t0


def measure(cls, work, locker):
    """One round of one subject: a dict of its figures."""
    s = cls(work, srv, locker)
    try:
        qname = h.wait_until(s.queue, START_S, 0.05)
        if not qname:
            raise RuntimeError("%s did not consume within %d s" % (cls.name, START_S))
        bound = bound_alone(qname)
        if bound != [qname]:
            raise RuntimeError("%s: queues bound to %s: %r, expected only %s"
                               % (cls.name, EXCHANGE, bound, qname))
        time.sleep(0.5)  # start-up work done
        lines = LineCounter(s.out)
        base = lines()
        os.kill(s.pid, signal.SIGSTOP)
        pub_s = publish()
        depth = sum(q["messages"] for q in srv.list_queues() if q["name"] == qname)
        if lines() != base:
            raise RuntimeError("%s wrote while stopped" % cls.name)
        beam = srv.beam_pid()
        b0 = cpu_ns(beam) if beam else 0
        c0, th0 = cpu_ns(s.pid), thread_sched(s.pid)
        t0 = time.monotonic()
        os.kill(s.pid, signal.SIGCONT)
        first = None
        while True:  # polled every 10 ms
            n = lines() - base
            now = time.monotonic()
            if first is None and n > 0:
                first = now - t0
            if n >= COUNT or now - t0 > WAIT_S:
                break
            time.sleep(0.01)
        done, secs = n >= COUNT, now - t0
        c1, th1 = cpu_ns(s.pid), thread_sched(s.pid)
        b1 = cpu_ns(beam) if beam else 0
        hwm = benchlib.status_kb(s.pid, "VmHWM")
        if not done:
            raise RuntimeError("%s: %d of %d lines after %d s" % (cls.name, lines() - base, COUNT,
                                                                  WAIT_S))
        if lines() - base != COUNT:
            raise RuntimeError("%s wrote %d lines for %d messages" % (cls.name, lines() - base,
                                                                      COUNT))
        if not s.still_leads():
            raise RuntimeError("%s lost its lease (or its term changed) during the drain"
                               % cls.name)
        if cls.envelope:
            with open(s.out, "rb") as f:
                f.seek(max(0, os.path.getsize(s.out) - 4096))
                last = json.loads(f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1])
            if last.get("type") != "rabbitmq" or last.get("exchange") != EXCHANGE:
                raise RuntimeError("%s: unexpected envelope %r" % (cls.name, last))
        run, wait = max((th1[t][0] - th0.get(t, (0, 0))[0], th1[t][1] - th0.get(t, (0, 0))[1])
                        for t in th1)
        return {"rate": COUNT / secs, "cpu_us": (c1 - c0) / 1e3 / COUNT, "hwm_kb": hwm,
                "secs": secs, "first": first, "depth": depth, "pub_s": pub_s,
                "cores": (c1 - c0) / 1e9 / secs,
                "busiest": run / 1e9 / secs, "starved": wait / 1e9 / secs,
                "broker_cores": (b1 - b0) / 1e9 / secs, "threads": len(th1)}
    finally:
        s.stop()
        locker.c.cmd("FLUSHALL")  # no lease left over for the next subject


def main():
    try:
        return bench()
    except (RuntimeError, TimeoutError, OSError) as e:
        say("FAILED: %s" % e)
        return 1


def bench():
    global srv
    for f in (h.BATON_BIN, PUBLISHER):
        if not os.path.exists(f):
            print("missing %s (build bench_programs)" % f, file=sys.stderr)
            return 2
    peers = subjects.available_peers(log=say, peers={"go/amqp091-go": GoAmqpPeer,
                                                     "node/amqplib": NodeAmqplibPeer})
    if not peers:
        say("no peer can run here (see above): nothing to compare")
        return 0
    work = h.mktemp("baton-bench-peers-rmq-")
    locker = h.RedisServer()
    locker.c = locker.client()
    srv = rmq.RabbitServer(start=False)
    srv.start(timeout=60)
    c = rmq.Amqp(srv.port)
    c.exchange_declare(EXCHANGE, "fanout", durable=True)  # as baton and the peers declare it
    c.close()
    say("rabbitmq peers benchmark: backlog drain of %d x %d B, fanout exchange, %d publisher(s); "
        "broker 127.0.0.1:%d, redis locker 127.0.0.1:%d" % (COUNT, SIZE, NPUB, srv.port,
                                                              locker.port))
    best = {}
    for rnd in range(ROUNDS):
        order = [Baton] + peers + [Baseline]
        for cls in order if rnd % 2 == 0 else order[::-1]:  # no subject always first
            r = measure(cls, work, locker)
            say("  round %d %-20s %7.0f msg/s (%.2f s, first line at %.3f s)  %5.2f us/msg  "
                "peak RSS %6.1f MiB; queue depth %d, published in %.2f s; %.2f cores, busiest "
                "thread %.0f%% + waiting for a CPU %.0f%% (%d threads); broker %.2f cores"
                % (rnd + 1, cls.name, r["rate"], r["secs"], r["first"], r["cpu_us"],
                   r["hwm_kb"] / 1024.0, r["depth"], r["pub_s"], r["cores"], r["busiest"] * 100,
                   r["starved"] * 100, r["threads"], r["broker_cores"]))
            if cls.name not in best or r["rate"] > best[cls.name]["rate"]:
                best[cls.name] = r
    paced = {n: "consumer" if r["busiest"] + r["starved"] >= 0.8 else "broker"
             for n, r in best.items()}
    bt, fl = best[Baton.name], best[Baseline.name]
    for n, r in best.items():
        if paced[n] == "broker":
            say("NOTE: %s mostly waited for the broker: its busiest thread ran %.0f%% (and waited "
                "for a CPU %.0f%%) of its drain" % (n, r["busiest"] * 100, r["starved"] * 100))
    broker_bound = paced[Baton.name] == "broker"
    wl0 = "rabbitmq backlog drain %d x %d B" % (COUNT, SIZE)
    results = []
    for cls in peers:
        p = best[cls.name]
        w = "%s, baton / %s" % (wl0, cls.name)
        note = (" (baton paced by the broker: keeps up with what it delivers)"
                if broker_bound and paced[cls.name] == "broker" else "")
        results.append({"workload": w + ": throughput" + note, "baton": round(bt["rate"]),
                        "baseline": round(p["rate"]), "unit": "msg/s",
                        "ratio": round(bt["rate"] / p["rate"], 2), "target": ">= 1.0",
                        "pass": bt["rate"] / p["rate"] >= 1.0,
                        "paced_by": {"baton": paced[Baton.name], cls.name: paced[cls.name]}})
        results.append({"workload": w + ": CPU per message", "baton": round(bt["cpu_us"], 2),
                        "baseline": round(p["cpu_us"], 2), "unit": "us/msg",
                        "ratio": round(bt["cpu_us"] / p["cpu_us"], 2), "target": "<= 0.33",
                        "pass": bt["cpu_us"] / p["cpu_us"] <= 0.34})
        results.append({"workload": w + ": peak RSS", "baton": round(bt["hwm_kb"] / 1024.0, 1),
                        "baseline": round(p["hwm_kb"] / 1024.0, 1), "unit": "MiB",
                        "ratio": round(bt["hwm_kb"] / p["hwm_kb"], 2), "target": "<= 0.2",
                        "pass": bt["hwm_kb"] / p["hwm_kb"] <= 0.2})
        results.append({"workload": w + ": CPU per message of the bare rabbitmq-c loop / the peer "
                        "(the floor, info)", "baton": round(fl["cpu_us"], 2),
                        "baseline": round(p["cpu_us"], 2), "unit": "us/msg",
                        "ratio": round(fl["cpu_us"] / p["cpu_us"], 2), "target": None,
                        "pass": None})
    results.append({"workload": "%s, baton / bare rabbitmq-c loop (info%s)"
                    % (wl0, "; both paced by the broker" if broker_bound
                       and paced[Baseline.name] == "broker" else ""),
                    "baton": round(bt["rate"]), "baseline": round(fl["rate"]), "unit": "msg/s",
                    "ratio": round(bt["rate"] / fl["rate"], 2), "target": None, "pass": None,
                    "paced_by": paced})
    for r in results:
        print("RESULT " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    benchlib.run(main, BUDGET_S)
