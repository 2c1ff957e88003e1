"""baton demo: 3 replicas behind one local Redis, live.

Starts a redis-server (the locker and the pub/sub source) and, when
installed, mosquitto on free 127.0.0.1 ports; writes config/demo/*.cfg
templates with those ports into a temp dir; runs 3 baton replicas; publishes
traffic; prints one line per second (who leads, forwarded per replica,
duplicates seen); kills the leader halfway (SIGKILL) to show the takeover,
later stops the new leader gracefully (SIGTERM) to show a handover; then
cleans everything up.

    python3 config/demo/demo.py [--seconds N]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "lib"))
import harness as h  # noqa: E402


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


class Publisher(threading.Thread):
    """Publishes "seq <n>" to orders.created at a steady rate."""

    def __init__(self, port, rate):
        super().__init__(daemon=True)
        self.port, self.rate = port, rate
        self.sent = 0
        self.stop = threading.Event()

    def run(self):
        c = h.Resp(self.port)
        t0 = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while self.sent < due:
                self.sent += 1
                c.cmd("PUBLISH", "orders.created", "seq %d" % self.sent)
            time.sleep(0.005)
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=24)
    ap.add_argument("--rate", type=int, default=200, help="messages per second")
    args = ap.parse_args()

    work = h.mktemp("baton-demo-")
    redis = h.RedisServer()
    mqtt_port = None
    if shutil.which("mosquitto") and shutil.which("mosquitto_pub"):
        mqtt_port = h.free_port()
        mq = subprocess.Popen(["mosquitto", "-p", str(mqtt_port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        h._cleanups.append(lambda: (mq.terminate(), mq.wait()))
        h.wait_until(lambda: h.port_open(mqtt_port), 5)

    print("baton demo: redis-server on 127.0.0.1:%d%s" %
          (redis.port, (", mosquitto on 127.0.0.1:%d" % mqtt_port) if mqtt_port else ""))
    replicas = []
    for i in range(3):
        mport = h.free_port()
        endpoints = {
            "10-orders.cfg": template("orders.cfg", REDIS_PORT=redis.port),
            "20-heartbeat.cfg": template("heartbeat.cfg"),
        }
        if mqtt_port and os.path.exists(os.path.join(HERE, "sensors.cfg")):
            endpoints["30-sensors.cfg"] = template("sensors.cfg", MQTT_PORT=mqtt_port)
        b = h.Baton(work, template("baton.cfg", REDIS_PORT=redis.port, METRICS_PORT=mport),
                    endpoints, name="replica%d" % (i + 1), start=False)
        b.metrics_port = mport
        b.start()
        replicas.append(b)
        print("  started %s: pid %d, status on http://127.0.0.1:%d/status" % (b.name, b.pid, mport))

    time.sleep(0.5)
    for b in replicas:
        if not b.alive():
            print("%s exited at start (status %s):\n%s" % (b.name, b.proc.returncode, b.stderr_text()))
            return 1

    pub = Publisher(redis.port, args.rate)
    pub.start()
    sensors_sent = 0
    kill_at = args.seconds // 3
    term_at = 2 * args.seconds // 3
    killed = termed = None
    seen = {}
    print()
    print("every second: leader of each guarded endpoint | messages forwarded per replica | duplicates")
    t0 = time.monotonic()
    for sec in range(1, args.seconds + 1):
        time.sleep(max(0.0, t0 + sec - time.monotonic()))
        if mqtt_port:
            for _ in range(5):
                sensors_sent += 1
                subprocess.run(["mosquitto_pub", "-p", str(mqtt_port), "-q", "1", "-t",
                                "sensors/room1/temp", "-m", "reading %d" % sensors_sent],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        leaders = {}
        for b in replicas:
            b.poll_records()
            if not b.alive():
                continue
            st = status(b.metrics_port)
            for ep in (st or {}).get("endpoints", []):
                if ep.get("role") == "leader":
                    leaders.setdefault(ep["name"], []).append("%s(epoch %s)" % (b.name, ep.get("epoch")))
        dup = 0
        for b in replicas:
            for r in b.records[seen.get(b.name, 0):]:
                if r.get("endpoint") == "orders":
                    key = r.get("payload")
                elif r.get("endpoint") == "heartbeat":
                    key = "slot %s" % r.get("slot")
                else:
                    continue
                k = (r["endpoint"], key)
                seen[k] = seen.get(k, 0) + 1
            seen[b.name] = len(b.records)
        dup = sum(n - 1 for k, n in seen.items() if isinstance(k, tuple) and n > 1)
        fwd = " ".join("%s=%d" % (b.name, sum(1 for r in b.records if r.get("endpoint") == "orders"))
                       for b in replicas)
        lead = ", ".join("%s: %s" % (n, "/".join(v)) for n, v in sorted(leaders.items())) or "electing..."
        print("t=%2ds  %s | orders published=%d forwarded %s | duplicates=%d" %
              (sec, lead, pub.sent, fwd, dup), flush=True)
        if sec == kill_at:
            for b in replicas:
                st = status(b.metrics_port) if b.alive() else None
                if st and any(e.get("name") == "orders" and e.get("role") == "leader"
                              for e in st.get("endpoints", [])):
                    killed = b
            if killed:
                print(">>> SIGKILL %s (leader of 'orders'): a standby takes over after the lease "
                      "expires (ttl %s ms)" % (killed.name, "3000"), flush=True)
                killed.signal(signal.SIGKILL)
        if sec == term_at:
            for b in replicas:
                st = status(b.metrics_port) if b.alive() else None
                if st and any(e.get("name") == "orders" and e.get("role") == "leader"
                              for e in st.get("endpoints", [])):
                    termed = b
            if termed:
                print(">>> SIGTERM %s (leader of 'orders'): graceful handover, the lease is released "
                      "and announced" % termed.name, flush=True)
                termed.signal(signal.SIGTERM)

    pub.stop.set()
    pub.join()
    time.sleep(0.5)
    for b in replicas:
        if b.alive():
            b.term()
        b.poll_records()
    got = {}
    for b in replicas:
        for r in b.records:
            if r.get("endpoint") == "orders":
                n = int(r["payload"].split()[1])
                got.setdefault(n, []).append(b.name)
    dups = sum(1 for v in got.values() if len(v) > 1)
    lost = [n for n in range(1, pub.sent + 1) if n not in got]
    print()
    print("summary: published %d on orders.created, forwarded %d distinct, duplicates %d, "
          "lost %d (pub/sub keeps nothing while no replica is subscribed: the lost ones fall "
          "in the failover gap after the SIGKILL)" % (pub.sent, len(got), dups, len(lost)))
    # the two failovers, measured from the envelopes' received_at
    def ts(r):
        from datetime import datetime
        return datetime.strptime(r["received_at"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
    for what, old in (("crash takeover (SIGKILL)", killed), ("graceful handover (SIGTERM)", termed)):
        if not old:
            continue
        mine = [r for r in old.records if r.get("endpoint") == "orders"]
        if not mine:
            continue
        last = max(mine, key=ts)
        after = [r for b in replicas if b is not old for r in b.records
                 if r.get("endpoint") == "orders" and ts(r) > ts(last)]
        if after:
            first = min(after, key=ts)
            n_last = int(last["payload"].split()[1])
            n_first = int(first["payload"].split()[1])
            print("%s: last message of %s to first of the new leader: %.0f ms, %d messages "
                  "published in between and lost" %
                  (what, old.name, (ts(first) - ts(last)) * 1000, max(0, n_first - n_last - 1)))
    slots = {}
    for b in replicas:
        for r in b.records:
            if r.get("endpoint") == "heartbeat":
                slots.setdefault(r["slot"], []).append(b.name)
    print("heartbeat (cron every 2 s, OnceGuard): %d slots fired, %d fired twice" %
          (len(slots), sum(1 for v in slots.values() if len(v) > 1)))
    if mqtt_port and os.path.exists(os.path.join(HERE, "sensors.cfg")):
        sens = [r for b in replicas for r in b.records if r.get("endpoint") == "sensors"]
        per = {b.name: sum(1 for r in b.records if r.get("endpoint") == "sensors") for b in replicas}
        print("sensors (MQTT $share group, no guard): published %d, forwarded %d, spread %s" %
              (sensors_sent, len(sens), per))
    print("logs and outputs were in %s (removed now)" % work)
    return 0 if dups == 0 else 1


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        h._run_cleanups()
    sys.exit(rc)
