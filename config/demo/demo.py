"""baton demo: 3 replicas of one configuration, live.

Starts, in parallel and on free 127.0.0.1 ports: redis-server (the lease
locker and a pub/sub source), and when installed mosquitto, rabbitmq-server
and mariadbd. Fills the config/demo/*.cfg templates with those ports, runs 3
baton replicas (replica1 first, so it takes every lease; replicas 2 and 3
join as standbys), publishes steady traffic on every source, prints one line
per second (who leads each endpoint, forwarded per replica, published,
duplicates), SIGKILLs the leader of 'orders' and 'orders-replay' at 1/3 of
the run (crash takeover; if no replica leads both, each of their leaders),
SIGTERMs the next leader of 'orders' at 2/3 (graceful handover), then prints
per endpoint what was published, forwarded, duplicated and lost, and why.
'orders' and 'orders-replay' subscribe to the same Redis channels: the first
loses what is published during a takeover (failover "gap", the default), the
second replays it from a standby's ring (failover = "replay").
Everything it started is stopped at the end, also on Ctrl-C or an error.

    python3 config/demo/demo.py [--seconds N] [--quick]

--quick: redis and mosquitto only (no rabbitmq-server / mariadbd).
"""
import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "lib"))
import harness as h  # noqa: E402

h.log = lambda *a: None  # the demo prints its own progress
ABORT = threading.Event()
TTL_MS = 3000  # lease ttl in baton.cfg
RENEW_MS = 1000  # lease renew_ms in baton.cfg
MYSQL_PASSWORD_ENV = "BATON_DEMO_MYSQL_PASSWORD"  # password_env in shop-cdc.cfg


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum, frame):
    ABORT.set()
    raise Interrupted(signum)


for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_s, _on_signal)


def template(name, **vars):
    with open(os.path.join(HERE, name)) as f:
        text = f.read()
    for k, v in vars.items():
        text = text.replace("@%s@" % k, str(v))
    return text


def status(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/status" % port, timeout=0.5) as r:
            return json.loads(r.read())
    except Exception:
        return None


def leads(b):
    """Names of the endpoints replica b leads now (from its /status)."""
    st = status(b.metrics_port) if b.alive() else None
    return [e["name"] for e in (st or {}).get("endpoints", []) if e.get("role") == "leader"]


def ts(r):
    return datetime.strptime(r["received_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=timezone.utc).timestamp()


# --------------------------------------------------------------------------
# brokers, started in parallel

class Broker(threading.Thread):
    """Starts one broker in the background; .srv, .port, .error, .took."""

    def __init__(self, label, starter):
        super().__init__(daemon=False)
        self.label, self.starter = label, starter
        self.srv = self.port = self.error = None
        self.took = None
        self.t0 = time.monotonic()
        self.start()

    def run(self):
        try:
            self.srv = self.starter(self)
            self.port = self.srv.port
            if ABORT.is_set():  # Ctrl-C while starting: stop what just came up
                self.srv.stop()
                self.srv = None
        except Exception as e:  # reported, the demo goes on without it
            self.error = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        self.took = time.monotonic() - self.t0


def _abortable(srv, what):
    """Makes srv.start() return as soon as the demo is interrupted, and fail
    at once if the broker's process exits."""
    ready = srv._ready

    def check():
        if ABORT.is_set():
            return True
        if srv.proc is not None and srv.proc.poll() is not None:
            raise RuntimeError("%s exited with status %s" % (what, srv.proc.returncode))
        return ready()
    srv._ready = check


def start_redis(_b):
    return h.RedisServer()


class Mosquitto:
    def __init__(self):
        self.port = h.free_port()
        self.proc = subprocess.Popen(["mosquitto", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        h._cleanups.append(self.stop)
        if not h.wait_until(lambda: ABORT.is_set() or h.port_open(self.port), 10, 0.05):
            raise RuntimeError("mosquitto did not listen on port %d" % self.port)

    def stop(self):
        h.stop_process(self.proc)


def start_rabbit(_b):
    import rabbitmq as rmq
    srv = rmq.RabbitServer(start=False)
    _abortable(srv, "rabbitmq-server")
    srv.start(timeout=60)
    if not ABORT.is_set():
        c = rmq.Amqp(srv.port)  # the exchange baton binds to, as baton declares it
        c.exchange_declare("payments", "fanout", durable=True)
        c.close()
    return srv


def start_mariadb(b):
    import mariadb as mdb
    srv = mdb.MariaServer(start=False)
    if ABORT.is_set():
        return srv
    _abortable(srv, "mariadbd")
    srv.start()
    if not ABORT.is_set():
        b.password = secrets.token_hex(12)
        srv.sql("CREATE DATABASE shop;\n"
                "CREATE TABLE shop.stock (id INT AUTO_INCREMENT PRIMARY KEY,"
                " item VARCHAR(32) NOT NULL, qty INT NOT NULL);")
        srv.create_user("baton", b.password)
    return srv


# --------------------------------------------------------------------------
# publishers: steady rates, each in its own thread

class Publisher(threading.Thread):
    def __init__(self, rate):
        super().__init__(daemon=True)
        self.rate, self.sent, self.error = rate, 0, None
        self.stop = threading.Event()

    def run(self):
        try:
            self.open()
            t0 = time.monotonic()
            while not self.stop.is_set():
                due = int((time.monotonic() - t0) * self.rate)
                while self.sent < due:
                    self.send(self.sent + 1)
                    self.sent += 1
                time.sleep(0.005)
            self.finish()
        except Exception as e:
            self.error = str(e).strip()[:200]

    def finish(self):
        pass


class OrdersPublisher(Publisher):
    """Redis PUBLISH "seq <n>" on orders.created."""

    def __init__(self, port, rate):
        super().__init__(rate)
        self.port = port

    def open(self):
        self.c = h.Resp(self.port)

    def send(self, n):
        self.c.cmd("PUBLISH", "orders.created", "seq %d" % n)

    def finish(self):
        self.c.close()


class PaymentsPublisher(Publisher):
    """AMQP publish "payment <n>" (message_id pay-<n>) to the payments
    exchange, with publisher confirms: .confirmed = acked by the broker."""

    def __init__(self, port, rate):
        super().__init__(rate)
        self.port, self.confirmed = port, None

    def open(self):
        import rabbitmq as rmq
        self.c = rmq.Amqp(self.port)
        self.c.confirm_select()

    def send(self, n):
        self.c.publish("payments", "", b"payment %d" % n, message_id="pay-%d" % n)

    def finish(self):
        acked, _nacked = self.c.wait_confirms(15)
        self.confirmed = acked
        self.c.close()


class ShopPublisher(Publisher):
    """One INSERT (autocommit) per row into shop.stock, through one mariadb
    client reading statements from a pipe."""

    def __init__(self, srv, rate):
        super().__init__(rate)
        self.srv = srv

    def open(self):
        self.p = subprocess.Popen(self.srv._client(), stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        h._cleanups.append(lambda: self.p.poll() is None and self.p.kill())

    def send(self, n):
        self.p.stdin.write(b"INSERT INTO shop.stock (item, qty) VALUES ('item-%d', %d);\n"
                           % (n, n % 50))
        self.p.stdin.flush()

    def finish(self):
        self.p.stdin.close()
        if self.p.wait(15) != 0:
            raise RuntimeError("mariadb client: %s" % self.p.stderr.read().decode()[:200])


class SensorsPublisher(Publisher):
    """mosquitto_pub -l: one QoS 1 message per line written to it."""

    def __init__(self, port, rate):
        super().__init__(rate)
        self.port = port

    def open(self):
        self.p = subprocess.Popen(["mosquitto_pub", "-p", str(self.port), "-q", "1", "-l",
                                   "-t", "sensors/room1/temp"], stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        h._cleanups.append(lambda: self.p.poll() is None and self.p.kill())

    def send(self, n):
        self.p.stdin.write(b"reading %d\n" % n)
        self.p.stdin.flush()

    def finish(self):
        self.p.stdin.close()
        self.p.wait(10)


# --------------------------------------------------------------------------
# what the replicas forwarded, per endpoint

class Track:
    """Counts one endpoint's envelopes: per replica, by duplicate key (the
    same message forwarded twice) and by distinct key (the message). pub:
    the publisher feeding it (default: the one of the same name); replay:
    failover = "replay", whose repeats must be marked "replayed": true."""

    def __init__(self, name, label, dupkey, distinct, pub=None, replay=False):
        self.name, self.label, self.dupkey, self.distinct = name, label, dupkey, distinct
        self.pub, self.replay = pub or name, replay
        self.fwd = {}
        self.seen = {}
        self.plain = {}  # copies without "replayed": true, by duplicate key
        self.ids = {}    # the "id"s its copies carried, by duplicate key
        self.replayed = 0
        self.keys = set()
        self.epochs = []  # in order of first appearance: term n = index + 1

    def add(self, replica, r):
        self.fwd[replica] = self.fwd.get(replica, 0) + 1
        k = self.dupkey(r)
        self.seen[k] = self.seen.get(k, 0) + 1
        if r.get("replayed"):
            self.replayed += 1
        else:
            self.plain[k] = self.plain.get(k, 0) + 1
        self.ids.setdefault(k, set()).add(r.get("id"))
        self.keys.add(self.distinct(r))

    def dups(self):
        return sum(n - 1 for n in self.seen.values() if n > 1)

    def unmarked(self):
        """Messages forwarded more than once without "replayed": true (at
        most one copy of a message may lack the mark: the first)."""
        return sum(1 for n in self.plain.values() if n > 1)

    def id_mismatch(self):
        """Messages forwarded more than once whose copies differ in "id"."""
        return sum(1 for k, n in self.seen.items() if n > 1 and len(self.ids[k]) > 1)

    def term(self, epoch):
        if epoch not in self.epochs:
            self.epochs.append(epoch)
        return self.epochs.index(epoch) + 1


def seq(r):
    return int(r["payload"].split()[1])


def main():
    ap = argparse.ArgumentParser(description="baton demo: 3 replicas, live failover")
    ap.add_argument("--seconds", type=int, default=30, help="traffic duration (default 30)")
    ap.add_argument("--rate", type=int, default=200, help="orders (redis) messages per second")
    ap.add_argument("--quick", action="store_true", help="redis and mosquitto only")
    args = ap.parse_args()
    if not os.access(h.BATON_BIN, os.X_OK):
        print("baton binary not found at %s (set BATON_BIN)" % h.BATON_BIN)
        return 2

    print("baton demo: three replicas of the same baton configuration; for every guarded")
    print("endpoint exactly one replica (the lease holder in Redis) consumes and forwards.")
    print()
    wanted = [("redis-server", start_redis)]
    skipped = []
    if shutil.which("mosquitto") and shutil.which("mosquitto_pub"):
        wanted.append(("mosquitto", lambda b: Mosquitto()))
    else:
        skipped.append("mosquitto (not installed)")
    for label, binary, fn, note in (("rabbitmq-server", "rabbitmq-server", start_rabbit, "~10 s"),
                                    ("mariadbd", "mariadbd", start_mariadb, "~5 s")):
        if args.quick:
            skipped.append("%s (--quick)" % label)
        elif not shutil.which(binary):
            skipped.append("%s (not installed)" % label)
        else:
            wanted.append((label + " (" + note + ")", fn))
    print("starting in parallel on free 127.0.0.1 ports: %s" % ", ".join(w[0] for w in wanted))
    if skipped:
        print("  skipped: %s" % ", ".join(skipped))
    t0 = time.monotonic()
    brokers = {w[0].split()[0]: Broker(w[0].split()[0], w[1]) for w in wanted}
    pending = dict(brokers)
    while pending:
        for name, b in list(pending.items()):
            if b.is_alive():
                continue
            del pending[name]
            if b.error:
                print("  %-16s FAILED after %.1f s: %s -> continuing without it"
                      % (name, b.took, b.error), flush=True)
            else:
                print("  %-16s up on 127.0.0.1:%-5d in %.1f s" % (name, b.port, b.took), flush=True)
        time.sleep(0.05)
    print("brokers ready in %.1f s" % (time.monotonic() - t0))
    redis = brokers["redis-server"].srv
    if redis is None:
        print("redis-server is required (the lease locker): giving up")
        return 1
    up = {n: b for n, b in brokers.items() if b.srv is not None}
    mqtt = up.get("mosquitto")
    rabbit = up.get("rabbitmq-server")
    maria = up.get("mariadbd")

    # endpoint configuration, the same for every replica
    endpoints = {
        "10-orders.cfg": template("orders.cfg", REDIS_PORT=redis.port),
        "15-orders-replay.cfg": template("orders-replay.cfg", REDIS_PORT=redis.port),
        "20-heartbeat.cfg": template("heartbeat.cfg"),
    }
    if mqtt:
        endpoints["30-sensors.cfg"] = template("sensors.cfg", MQTT_PORT=mqtt.port)
    if rabbit:
        endpoints["40-payments.cfg"] = template("payments.cfg", AMQP_PORT=rabbit.port)
    env = {}
    if maria:
        endpoints["50-shop-cdc.cfg"] = template("shop-cdc.cfg", MYSQL_PORT=maria.port)
        env[MYSQL_PASSWORD_ENV] = maria.password

    tracks = {"orders": Track("orders", "redis pub/sub", lambda r: r["payload"], seq),
              # the same messages (its own subscription to orders.*), replayed at takeover
              "orders-replay": Track("orders-replay", "pub/sub replay", lambda r: r["payload"],
                                     seq, pub="orders", replay=True)}
    if rabbit:
        tracks["payments"] = Track("payments", "rabbitmq group", lambda r: r.get("id"),
                                   lambda r: r.get("id"))
    if maria:
        tracks["shop-cdc"] = Track("shop-cdc", "mariadb binlog CDC", lambda r: r.get("id"),
                                   lambda r: (r.get("after") or r.get("before") or {}).get("id"))
    guarded = list(tracks)
    tracks["heartbeat"] = Track("heartbeat", "cron, OnceGuard", lambda r: r.get("slot"),
                                lambda r: r.get("slot"))
    if mqtt:
        tracks["sensors"] = Track("sensors", "mqtt $share group", lambda r: r["payload"],
                                  lambda r: r["payload"])

    work = h.mktemp("baton-demo-")
    replicas = []

    def start_replica(i):
        mport = h.free_port()
        b = h.Baton(work, template("baton.cfg", REDIS_PORT=redis.port, METRICS_PORT=mport),
                    endpoints, name="replica%d" % i, env=env, start=False)
        b.metrics_port = mport
        b.short = "r%d" % i
        b.start()
        replicas.append(b)
        return b

    print()
    print("endpoints (config/demo/*.cfg): %s" % ", ".join(
        "%s (%s)" % (t.name, t.label) for t in tracks.values()))
    b1 = start_replica(1)
    t1 = time.monotonic()
    ok = h.wait_until(lambda: not b1.alive() or set(guarded) <= set(leads(b1)), 15, 0.1)
    if not b1.alive():
        print("replica1 exited at start (status %s):\n%s" % (b1.proc.returncode, b1.stderr_text()))
        return 1
    print("  replica1 (pid %d, http://127.0.0.1:%d/status) started first: leads %s after %.1f s%s"
          % (b1.pid, b1.metrics_port, ", ".join(sorted(leads(b1))) or "nothing",
             time.monotonic() - t1, "" if ok else " (not every endpoint yet: see its log below)"))
    if not ok:
        print("\n".join(b1.stderr_text().splitlines()[-10:]))
    for i in (2, 3):
        b = start_replica(i)
        print("  replica%d (pid %d, http://127.0.0.1:%d/status) started: standby"
              % (i, b.pid, b.metrics_port))
    time.sleep(0.5)
    for b in replicas:
        if not b.alive():
            print("%s exited at start (status %s):\n%s" % (b.name, b.proc.returncode, b.stderr_text()))
            return 1

    pubs = {"orders": OrdersPublisher(redis.port, args.rate)}
    if rabbit:
        pubs["payments"] = PaymentsPublisher(rabbit.port, 50)
    if maria:
        pubs["shop-cdc"] = ShopPublisher(maria.srv, 20)
    if mqtt:
        pubs["sensors"] = SensorsPublisher(mqtt.port, 5)
    print()
    print("traffic: %s" % ", ".join(
        "%s %d/s" % ({"orders": "PUBLISH orders.created", "payments": "AMQP to exchange payments",
                      "shop-cdc": "INSERT INTO shop.stock", "sensors": "MQTT sensors/room1/temp"}[n],
                     p.rate) for n, p in pubs.items()))
    for p in pubs.values():
        p.start()

    kill_at = args.seconds // 3
    term_at = 2 * args.seconds // 3
    events = []  # (label, replica, wall time, endpoints it led)

    def poll():
        for b in replicas:
            for r in b.poll_records():
                t = tracks.get(r.get("endpoint"))
                if t:
                    t.add(b.short, r)

    def counts(t):
        fwd = "/".join(str(t.fwd.get(b.short, 0)) for b in replicas)
        return "%14s %5d %3d" % (fwd, pubs[t.pub].sent, t.dups())

    def cell(t, leader):
        return "%-5s %s" % (leader, counts(t))

    # sensors: no lease (guard "none", /status role "every-replica"): every
    # replica consumes, the broker hands each message to one of them
    shared = ["sensors"] if "sensors" in tracks else []
    head1 = "      |" + "|".join(" %-30s" % ("%s (%s)" % (n, tracks[n].label))[:30] for n in guarded) + \
        "".join("| %-24s" % ("%s (mqtt $share)" % n) for n in shared)
    head2 = "    t |" + "|".join(" %-5s %14s %5s %3s" % ("lead", "fwd r1/r2/r3", "pub", "dup")
                                 for _ in guarded) + \
        "".join("| %14s %5s %3s" % ("fwd r1/r2/r3", "pub", "dup") for _ in shared) + "| heartbeat slots"
    print()
    print("every second, per endpoint: lead = replica holding its lease (r2:3 = replica 2 holds")
    print("the endpoint's 3rd lease term of this run, counted over all replicas: each takeover")
    print("starts a term with a new epoch; - = none right now); fwd = forwarded by replica 1/2/3;")
    print("pub = published so far; dup = forwarded more than once (orders-replay: repeats")
    print("after a takeover, each marked \"replayed\": true).")
    if shared:
        print("sensors has no lease (every-replica): each replica consumes, the broker spreads the")
        print("shared subscription's messages over the replicas that are connected.")
    print(head1)
    print(head2, flush=True)
    t0 = time.monotonic()
    for sec in range(1, args.seconds + 1):
        time.sleep(max(0.0, t0 + sec - time.monotonic()))
        poll()
        leader = {}
        for b in replicas:
            st = status(b.metrics_port) if b.alive() else None
            for ep in (st or {}).get("endpoints", []):
                if ep.get("role") == "leader" and ep["name"] in tracks:
                    leader[ep["name"]] = "%s:%d" % (b.short, tracks[ep["name"]].term(ep.get("epoch")))
        hb = tracks["heartbeat"]
        print("%4ds |" % sec + "|".join(" " + cell(tracks[n], leader.get(n, "-")) for n in guarded)
              + "".join("| " + counts(tracks[n]) for n in shared)
              + "| %d (dup %d)" % (len(hb.keys), hb.dups()), flush=True)
        if sec == kill_at:
            alive = [b for b in replicas if b.alive()]
            held = {b: set(leads(b)) & set(guarded) for b in alive}

            def most(bs):
                return max(bs, key=lambda b: len(held[b]))
            # the replica leading both orders endpoints (normally replica1, which
            # leads everything); if leader balancing put them on different
            # replicas, each of their leaders, so that both are hit by a crash
            both = [b for b in alive if {"orders", "orders-replay"} <= held[b]]
            victims = [most(both)] if both else []
            for n in ("orders", "orders-replay"):
                hs = [b for b in alive if n in held[b]]
                if hs and not any(n in held[v] for v in victims):
                    victims.append(most(hs))
            if not victims and alive:
                victims = [most(alive)]
            if len(victims) > 1:
                print(">>> no replica leads both orders and orders-replay: SIGKILL the leader of each",
                      flush=True)
            for victim in victims:
                led = sorted(held[victim])
                events.append(("SIGKILL", victim, time.time(), led))
                print(">>> SIGKILL %s (leads %s): a crash, its leases stay until they expire "
                      "(ttl %.0f s after their last renewal, made every %.0f s: %.0f to %.0f s from now), "
                      "then a standby takes each over" %
                      (victim.name, ", ".join(led) or "nothing", TTL_MS / 1000, RENEW_MS / 1000,
                       (TTL_MS - RENEW_MS) / 1000, TTL_MS / 1000), flush=True)
                victim.signal(signal.SIGKILL)
        if sec == term_at:
            alive = [b for b in replicas if b.alive()]
            cand = [(len(leads(b)), b) for b in alive if "orders" in leads(b)]
            if len(alive) < 2:
                print(">>> SIGTERM skipped: only %s is left running" % alive[0].name
                      if alive else ">>> SIGTERM skipped: no replica is left running", flush=True)
            elif cand:
                victim = max(cand, key=lambda c: c[0])[1]
                led = sorted(set(leads(victim)) & set(guarded))
                events.append(("SIGTERM", victim, time.time(), led))
                print(">>> SIGTERM %s (leads %s): a graceful stop, it releases its leases at once"
                      % (victim.name, ", ".join(led)), flush=True)
                victim.signal(signal.SIGTERM)

    for p in pubs.values():
        p.stop.set()
    for p in pubs.values():
        p.join(20)
    # queued (rabbitmq) and binlogged (mariadb) messages may still be on their way
    published = {"orders": pubs["orders"].sent}
    if rabbit:
        published["payments"] = pubs["payments"].confirmed or 0
    shop_ids = set()
    if maria:
        try:
            shop_ids = {int(r[0]) for r in maria.srv.sql("SELECT id FROM shop.stock")}
        except Exception as e:
            print("cannot read shop.stock: %s" % e)
        published["shop-cdc"] = len(shop_ids)
    if mqtt:
        published["sensors"] = pubs["sensors"].sent

    published["orders-replay"] = published["orders"]  # the same messages

    def caught_up():
        poll()
        return all(len(tracks[n].keys) >= published[n] for n in guarded if n != "orders")
    t_drain = time.monotonic()
    h.wait_until(caught_up, 10, 0.2)
    if time.monotonic() - t_drain > 0.5:
        print("(waited %.1f s for the last queued/binlogged messages)" % (time.monotonic() - t_drain))
    for b in replicas:
        if b.alive():
            b.term()
    poll()

    print()
    for n, p in pubs.items():
        if p.error:
            print("publisher for %s failed: %s" % (n, p.error))
    expected = {
        "orders": lambda: set(range(1, published["orders"] + 1)),
        "orders-replay": lambda: set(range(1, published["orders"] + 1)),
        "payments": lambda: {"pay-%d" % i for i in range(1, published["payments"] + 1)},
        "shop-cdc": lambda: shop_ids,
        "sensors": lambda: {"reading %d" % i for i in range(1, published["sensors"] + 1)},
    }
    why = {
        "orders": "pub/sub keeps nothing: published while nobody was subscribed = gone",
        "payments": "the group queue held them until the next leader took over",
        "shop-cdc": "resumed from the locker checkpoint: repeats carry the same position",
        "sensors": "the broker spreads the shared subscription over the replicas",
    }
    # which SIGKILLs hit the leader of which endpoint
    crashes = {n: [v.name for what, v, _at, led in events if what == "SIGKILL" and n in led]
               for n in tracks}
    rt = tracks["orders-replay"]
    notes = []
    if rt.unmarked():
        notes.append("%d delivered twice WITHOUT the replayed mark" % rt.unmarked())
    if rt.id_mismatch():
        notes.append("%d repeated with a different id" % rt.id_mismatch())
    why["orders-replay"] = (
        ("standbys keep a ring: %d replayed at takeovers, the %d duplicates all marked "
         "replayed, same id" % (rt.replayed, rt.dups()) if crashes["orders-replay"]
         else "no SIGKILL hit its leader in this run: nothing had to be replayed")
        if not notes else "; ".join(notes))
    bad = []
    lost = {}
    print("%-34s %9s %9s %10s %5s   why" % ("summary", "published", "forwarded", "duplicates", "lost"))
    for n, t in tracks.items():
        if n == "heartbeat":
            continue
        lost[n] = len(expected[n]() - t.keys)
        print("%-34s %9d %9d %10d %5d   %s" % ("%s (%s)" % (n, t.label), published[n], len(t.keys),
                                             t.dups(), lost[n], why[n]))
        if (n == "orders" and t.dups()) or (n in ("payments", "shop-cdc") and lost[n]) or \
                (t.replay and (lost[n] or t.unmarked() or t.id_mismatch())):
            bad.append(n)
    hb = tracks["heartbeat"]
    print("%-34s %9s %9d %10d %5s   %s" % ("heartbeat (cron */2 s, OnceGuard)", "-", len(hb.keys),
                                         hb.dups(), "-", "each replica runs the clock, the "
                                         "OnceGuard lets one fire each slot"))
    if hb.dups():
        bad.append("heartbeat")
    print("(forwarded = distinct messages; duplicates = extra copies; lost = published, never forwarded)")
    # the replayed copies by term: one count per takeover (the lines below)
    by_epoch = {}
    for b in replicas:
        for r in b.records:
            if r.get("endpoint") == "orders-replay" and r.get("replayed"):
                by_epoch[r.get("epoch")] = by_epoch.get(r.get("epoch"), 0) + 1
    per_takeover = [by_epoch[e] for e in sorted(by_epoch)]
    print("same messages: orders (failover gap) lost %d; orders-replay (failover replay) lost %d, "
          "replayed %d%s, %d delivered twice (%s)" % (
              lost["orders"], lost["orders-replay"], rt.replayed,
              " in all (%s: one count per takeover, below)" % " + ".join(str(c) for c in per_takeover)
              if len(per_takeover) > 1 else "", rt.dups(),
              "the second copy marked \"replayed\": true, with the first copy's id" if not notes
              else "; ".join(notes)))
    print("SIGKILLed leaders: %s" % "; ".join(
        "%s: %s" % (n, ", ".join(crashes[n]) or "none") for n in ("orders", "orders-replay")))

    # each takeover, from the envelopes' received_at
    all_recs = [(b, r) for b in replicas for r in b.records]
    for what, victim, at, led in events:
        parts = []
        for n in led:
            mine = [ts(r) for r in victim.records if r.get("endpoint") == n]
            after = [(ts(r), b) for b, r in all_recs
                     if b is not victim and r.get("endpoint") == n and ts(r) > at]
            if not after:
                parts.append("%s: nobody forwarded after it" % n)
                continue
            first, nb = min(after, key=lambda x: x[0])
            if tracks[n].replay:
                # its new term: what its ring held past the old leader's last
                # mark, replayed, then live (received_at = when it got them)
                t = tracks[n]
                epoch = min((r for b, r in all_recs if b is nb and r.get("endpoint") == n
                             and ts(r) > at), key=ts)["epoch"]
                replayed = [r for r in nb.records if r.get("endpoint") == n
                            and r.get("epoch") == epoch and r.get("replayed")]
                had = {t.dupkey(r) for r in victim.records if r.get("endpoint") == n}
                again = sum(1 for r in replayed if t.dupkey(r) in had)
                parts.append("%s: %s replays %d from its ring (%d of them %s had forwarded), "
                             "then goes live" % (n, nb.name, len(replayed), again, victim.name))
                continue
            gap = first - max(mine) if mine else first - at
            redeliv = sum(1 for b, r in all_recs if b is nb and r.get("endpoint") == n
                          and r.get("redelivered"))
            parts.append("%s: %s forwards after %.1f s%s" % (n, nb.name, gap, (
                " (%d redelivered)" % redeliv) if redeliv else ""))
        note = ""
        if what == "SIGKILL" and led:
            # why less than the ttl: the lease runs ttl from its last renewal
            note = (" (under the %.0f s ttl: a lease expires %.0f s after its last renewal, which "
                    "came up to %.0f s before the crash; a SIGTERM releases and announces it instead)"
                    % (TTL_MS / 1000, TTL_MS / 1000, RENEW_MS / 1000))
        print("%s %s (led %s), takeover: %s%s" % (what, victim.name, ", ".join(led) or "nothing",
                                                  "; ".join(parts) or "it led nothing", note))
    # one message the crash made come twice, both copies
    twice = sorted((k for k, c in rt.seen.items() if c > 1), key=lambda k: int(k.split()[1]))
    if twice:
        copies = [(b, r) for b, r in all_recs
                  if r.get("endpoint") == "orders-replay" and r["payload"] == twice[0]]
        print("e.g. %r, forwarded twice: %s" % (twice[0], " then ".join(
            "%s %s" % (b.name, json.dumps({k: r[k] for k in ("epoch", "replayed", "id") if k in r},
                                          separators=(",", ":")))
            for b, r in sorted(copies, key=lambda c: c[1]["epoch"]))))
    print("logs and outputs were in %s (removed now)" % work)
    if bad:
        print("UNEXPECTED: %s broke its guarantee (see the logs above)" % ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    except Interrupted as e:
        print("\n%s: stopping everything the demo started..." % e, flush=True)
        rc = 128 + e.signum
    finally:
        ABORT.set()
        for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(_s, signal.SIG_IGN)
        t_stop = time.monotonic()
        h._run_cleanups()
        print("stopped every process the demo started (%.1f s)" % (time.monotonic() - t_stop))
    sys.exit(rc)
