"""[partition] A real network partition (issue 13): replicas and Redis in
their own network namespaces, made by this test (ip netns + veth + bridges,
addresses in 10.213.0.0/16 private to the namespaces; nothing touches the
host's own network), one replica cut off from the locker's Redis while it
keeps its source.

    ns hub:  bridges brl (locker net 10.213.1.0/24) and brs (source net 10.213.2.0/24)
    ns lk:   redis-server (locker)   10.213.1.1
    ns src:  redis-server (source)   10.213.2.1, and the publisher (a thread of this test)
    ns rN:   baton replica N         10.213.1.1N (locker net), 10.213.2.1N (source net)

Every replica runs one redis_psub endpoint (stdout sink: each record has the
epoch and the receive time); lease ttl 1000, renew 300, retry 100. The test
starts r1 first (it leads), then r2 and r3; publishes 500 msg/s with unique
sequence numbers; cuts r1's locker link (the hub end of its veth pair set
down: packets are dropped silently, like a real partition, so its renewals
time out) for 2 x ttl while its source link stays up; then brings it back.

Checks: zero duplicates; r1 delivers nothing received after its lease
deadline (bounded above by cut + ttl - margin, since its last successful
renewal was sent before the cut) and nothing published after cut + ttl;
another replica is promoted within ttl + retry + 500 ms of the cut; r1 logs
its demotion; after the link is back r1 is a standby (its /status, read from
inside its namespace, says so and it is not promoted again), and once the
other two are killed it takes the lease (it competes again).

Skips (prints "SKIP: ..." and exits 77, shown as skipped by ctest) only when network namespaces cannot
be created here (not root, no ip, no veth/bridge support). The namespaces
are deleted in every case (finally, atexit, signals).
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
from publisher import Publisher, forwarded, rfc3339_ms  # noqa: E402

TTL, RENEW, RETRY = 1000, 300, 100
MARGIN = max(TTL // 20, 10)
PREFIX = "bt13p%d" % os.getpid()
NET = "10.213"
LOCKER_IP, SOURCE_IP = NET + ".1.1", NET + ".2.1"
REDIS_PORT = 6379
METRICS_PORT = 9100  # inside each replica's own namespace

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def ip(*args, check=True):
    p = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=20)
    if check and p.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), p.stderr.strip()))
    return p


def ns_name(short):
    return "%s-%s" % (PREFIX, short)


def enter_netns(short):
    """Moves the calling thread into namespace `short` (sockets it creates
    afterwards live there)."""
    fd = os.open("/run/netns/%s" % ns_name(short), os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns %s" % short)
    finally:
        os.close(fd)


def in_netns(short, fn, timeout=10):
    """Runs fn() on a fresh thread inside namespace `short`; returns its
    result (re-raises its exception)."""
    out = {}

    def run():
        try:
            enter_netns(short)
            out["v"] = fn()
        except BaseException as e:  # handed to the caller
            out["e"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(timeout)
    if "e" in out:
        raise out["e"]
    return out.get("v")


class Net:
    """The namespaces, bridges and veth pairs of this test."""

    def __init__(self, replicas):
        self.names = []
        self.replicas = replicas
        self.up = False

    def add_ns(self, short):
        ip("netns", "add", ns_name(short))
        self.names.append(short)
        ip("-n", ns_name(short), "link", "set", "lo", "up")

    def veth(self, short, hub_if, ns_if, bridge, addr):
        ip("link", "add", hub_if, "netns", ns_name("hub"), "type", "veth",
           "peer", "name", ns_if, "netns", ns_name(short))
        ip("-n", ns_name("hub"), "link", "set", hub_if, "master", bridge)
        ip("-n", ns_name("hub"), "link", "set", hub_if, "up")
        ip("-n", ns_name(short), "addr", "add", addr + "/24", "dev", ns_if)
        ip("-n", ns_name(short), "link", "set", ns_if, "up")

    def create(self):
        self.add_ns("hub")
        for br in ("brl", "brs"):
            ip("-n", ns_name("hub"), "link", "add", br, "type", "bridge")
            ip("-n", ns_name("hub"), "link", "set", br, "up")
        self.add_ns("lk")
        self.veth("lk", "lk", "eth0", "brl", LOCKER_IP)
        self.add_ns("src")
        self.veth("src", "src", "eth0", "brs", SOURCE_IP)
        for i in range(1, self.replicas + 1):
            r = "r%d" % i
            self.add_ns(r)
            self.veth(r, "l-" + r, "vl", "brl", "%s.1.1%d" % (NET, i))
            self.veth(r, "s-" + r, "vs", "brs", "%s.2.1%d" % (NET, i))
        self.up = True

    def set_locker_link(self, replica, up):
        ip("-n", ns_name("hub"), "link", "set", "l-" + replica, "up" if up else "down")

    def destroy(self):
        for short in reversed(self.names):
            ip("netns", "del", ns_name(short), check=False)
        self.names = []


def namespaces_available():
    """None when namespaces with veth pairs and a bridge can be made here,
    else the reason."""
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN)"
    probe = ns_name("probe")
    try:
        ip("netns", "add", probe)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return "cannot create a network namespace: %s" % e
    try:
        ip("-n", probe, "link", "add", "pb0", "type", "bridge")
        ip("-n", probe, "link", "add", "pa", "type", "veth", "peer", "name", "pz")
        fd = os.open("/run/netns/%s" % probe, os.O_RDONLY)
        os.close(fd)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return "namespaces without veth/bridge support: %s" % e
    finally:
        ip("netns", "del", probe, check=False)
    return None


# --------------------------------------------------------------------------
# processes inside namespaces

class NsRedis:
    def __init__(self, t, short, addr):
        self.short, self.addr = short, addr
        self.dir = h.mktemp("baton-nsredis-")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns_name(short), "redis-server", "--port", str(REDIS_PORT),
             "--bind", addr, "--protected-mode", "no", "--save", "", "--appendonly", "no", "--dir", self.dir,
             "--logfile", os.path.join(self.dir, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        t.cleanup(self.stop)
        h._cleanups.append(self.stop)
        if not h.wait_until(self.ping, 10, 0.1):
            raise RuntimeError("redis-server in %s did not start" % short)

    def ping(self):
        def f():
            c = h.Resp(REDIS_PORT, host=self.addr, timeout=0.5)
            try:
                return c.cmd("PING") == "PONG"
            finally:
                c.close()
        try:
            return in_netns(self.short, f)
        except (OSError, ConnectionError, h.RedisError):
            return False

    def stop(self):
        h.stop_process(self.proc)


class NsBaton(h.Baton):
    """A baton process inside namespace self.ns (ip netns exec execs in
    place: the pid is baton's)."""

    def __init__(self, workdir, ns, *a, **kw):
        self.ns = ns
        super().__init__(workdir, *a, **kw)

    def start(self):
        self.out = open(self.out_path, "ab")
        self.err = open(self.err_path, "ab")
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns_name(self.ns), h.BATON_BIN, "-c", self.cfg]
                                     + self.args, stdout=self.out, stderr=self.err, env=self.env,
                                     stdin=subprocess.DEVNULL)
        self.out.close()
        self.err.close()
        return self

    def status(self):
        def f():
            with urllib.request.urlopen("http://127.0.0.1:%d/status" % METRICS_PORT, timeout=2) as r:
                return json.loads(r.read().decode())
        try:
            st = in_netns(self.ns, f)
        except (OSError, ValueError):
            return {}
        return {e["name"]: e for e in (st or {}).get("endpoints", [])}


class NsPublisher(Publisher):
    """The harness publisher, on a thread inside the source's namespace."""

    def __init__(self, ns, host, *a, **kw):
        self.ns, self.host = ns, host
        super().__init__(*a, **kw)

    def _connect(self):
        try:
            self._conn = h.Resp(self.port, host=self.host, timeout=2.0)
            return True
        except OSError:
            self._conn = None
            return False

    def _run(self):
        enter_netns(self.ns)
        super()._run()


def rnd(ts, base):
    return None if ts is None else int(round(ts - base))


def log_times(b, needle):
    out = []
    for line in b.stderr_text().splitlines():
        if needle in line:
            try:
                out.append((rfc3339_ms(line.split(" ", 1)[0]), line))
            except (ValueError, IndexError):
                pass
    return out


def records(b):
    """[(seq, sent_ms, received_ms, epoch)] of b's forwarded messages."""
    b.poll_records()
    out = []
    for r in b.records:
        p = r.get("payload", "")
        try:
            a, c = p.split(":", 1)
            out.append((int(a), int(c), rfc3339_ms(r["received_at"]), r["epoch"]))
        except (ValueError, KeyError, AttributeError):
            pass
    return out


# --------------------------------------------------------------------------

def test_partition(t):
    """[partition] see the module docstring."""
    net = Net(3)
    t.cleanup(net.destroy)        # runs after the processes are stopped
    h._cleanups.append(net.destroy)
    try:
        net.create()
        _partition(t, net)
    finally:
        for b in t.batons:
            b.kill()
        net.destroy()


def _partition(t, net):
    locker = NsRedis(t, "lk", LOCKER_IP)
    source = NsRedis(t, "src", SOURCE_IP)
    main = ('locker = { type = "redis"; host = "%s"; port = %d; connect_timeout_ms = 300; };\n'
            'lease = { ttl_ms = %d; renew_ms = %d; retry_ms = %d; };\n'
            'sinks = ( { name = "out"; type = "stdout"; } );\n'
            'log = { level = "info"; };\n'
            'metrics = { listen = "127.0.0.1:%d"; };\n'
            % (LOCKER_IP, REDIS_PORT, TTL, RENEW, RETRY, METRICS_PORT))
    ep = ('name = "psub"; type = "redis_psub"; sink = "out"; host = "%s"; port = %d;\n'
          'patterns = ["chan.*"];\n' % (SOURCE_IP, REDIS_PORT))

    def start(i):
        b = NsBaton(t.workdir, "r%d" % i, main, {"psub.cfg": ep}, name="r%d" % i)
        t.batons.append(b)
        t.cleanup(b.kill)
        return b
    r1 = start(1)
    t.require(h.wait_until(lambda: log_times(r1, "promoted to leader"), 10, 0.05),
              "r1 did not lead within 10 s: %s" % r1.stderr_text()[-800:])
    others = [start(2), start(3)]
    t.require(h.wait_until(lambda: all("competing for the lease" in b.stderr_text() for b in others),
                           10, 0.05), "r2/r3 did not start")
    pub = NsPublisher("src", SOURCE_IP, REDIS_PORT, rate=500).start()
    t.require(h.wait_until(lambda: len(records(r1)) >= 200, 10, 0.05),
              "r1 forwarded nothing (the source link?)")
    epoch1 = records(r1)[-1][3]

    # the cut: r1's locker link down for 2 x ttl; its source link stays
    t_cut0 = time.time() * 1000
    net.set_locker_link("r1", False)
    t_cut1 = time.time() * 1000
    time.sleep(2 * TTL / 1000.0)
    t_up0 = time.time() * 1000
    net.set_locker_link("r1", True)
    new_ls = [b for b in others if log_times(b, "promoted to leader")]

    # r1 back: a standby (not promoted again), then it competes again
    time.sleep(3.0)
    st = r1.status().get("psub", {})
    promoted_again = [ts for ts, _l in log_times(r1, "promoted to leader") if ts >= t_cut0]
    pub.stop()
    time.sleep(0.5)

    t_kill = time.time() * 1000
    for b in others:
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(5)
    rejoined = h.wait_until(lambda: [ts for ts, _l in log_times(r1, "promoted to leader")
                                     if ts >= t_kill], TTL / 1000.0 + 5, 0.05)

    # --- figures
    recs1 = records(r1)
    recs_o = [(b.name, r) for b in others for r in records(b)]
    deadline_bound = t_cut1 + TTL - MARGIN
    late_recv = [r for r in recs1 if r[3] == epoch1 and r[2] >= deadline_bound]
    late_pub = [r for r in recs1 if r[3] == epoch1 and r[1] >= t_cut1 + TTL]
    after_cut_r1 = [r for r in recs1 if r[2] >= t_cut0 and r[3] == epoch1]
    dups = h.duplicates([r[0] for r in recs1] + [r[0] for _n, r in recs_o])
    prom = sorted((ts, b.name) for b in others for ts, _l in log_times(b, "promoted to leader")
                  if ts >= t_cut0)
    takeover = (prom[0][0] - t_cut0) if prom else None
    first_new = min((r[2] for _n, r in recs_o), default=None)
    demoted = [(ts, l.split(": ", 2)[-1]) for ts, l in log_times(r1, "demoted from leader")
               if ts >= t_cut0]
    last_r1 = max((r[2] for r in after_cut_r1), default=None)
    drops = [l for _ts, l in log_times(r1, "dropped message")]
    entries = pub.snapshot()
    bound = TTL + RETRY + 500
    got = {r[0] for r in recs1} | {r[0] for _n, r in recs_o}
    lost = [e[0] for e in entries if e[0] not in got and e[1] < t_kill]
    lost_outside = [s_ for s_ in lost if not (last_r1 and first_new and
                                              last_r1 - 1000 <= next(e[1] for e in entries if e[0] == s_)
                                              <= first_new)]
    h.log("partition: r1 led with epoch %d; locker link down %d ms (2 x ttl), source link up; "
          "r1's deadline <= cut + %d ms; r1 forwarded %d received after the cut, the last %s ms "
          "after it; received at or after the deadline bound: %d; published after cut + ttl: %d; "
          "r1 demoted %s ms after the cut (%s); takeover by %s %s ms after the cut (bound %d), "
          "its first message %s ms after the cut; duplicates %d; published %d, r1 %d, others %d, "
          "lost %d (outside the leaderless gap: %d); "
          "r1's drop warnings %d; after the link came back: r1 role %s (promotions %s, demotions %s), "
          "promoted again before the others died: %d; others killed -> r1 promoted %s ms later"
          % (epoch1, t_up0 - t_cut0, TTL - MARGIN, len(after_cut_r1), rnd(last_r1, t_cut0),
             len(late_recv), len(late_pub), rnd(demoted[0][0] if demoted else None, t_cut0),
             demoted[0][1][:80] if demoted else "-", prom[0][1] if prom else None,
             rnd(prom[0][0] if prom else None, t_cut0), bound, rnd(first_new, t_cut0), len(dups),
             len(entries), len(recs1), len(recs_o), len(lost), len(lost_outside), len(drops),
             st.get("role"), st.get("promotions"), st.get("demotions"), len(promoted_again),
             rnd(min(rejoined) if rejoined else None, t_kill)))
    t.check(len(dups) == 0, "duplicates: %d, e.g. %r" % (len(dups), list(dups.items())[:5]))
    t.check(not late_recv, "r1 delivered %d messages received after its lease deadline (<= %d), "
            "e.g. %r" % (len(late_recv), deadline_bound, late_recv[:3]))
    t.check(not late_pub, "r1 delivered %d messages published after cut + ttl" % len(late_pub))
    t.check(last_r1 is None or first_new is None or last_r1 < first_new,
            "r1 was still delivering (last received %s ms after the cut) when the new leader "
            "started (%s ms after the cut)" % (rnd(last_r1, t_cut0), rnd(first_new, t_cut0)))
    t.check(takeover is not None and takeover <= bound,
            "takeover %s ms after the cut > ttl + retry + 500 = %d ms" % (takeover, bound))
    t.check(len(new_ls) == 1 or len(prom) >= 1, "a standby took over")
    t.check(len({n for _ts, n in prom[:1]}) == 1 and
            len({n for n, r in recs_o if r[2] < t_kill}) <= 1,
            "exactly one new leader: %r" % prom)
    t.check(bool(demoted), "r1 did not log its demotion")
    t.check(st.get("role") == "standby", "r1 is not a standby after the link came back: %r" % st)
    t.check(not promoted_again, "r1 was promoted again while another replica held the lease")
    t.check(bool(rejoined), "r1 did not take the lease once the others were gone (not competing?)")
    t.check(r1.alive(), "r1 exited")


if __name__ == "__main__":
    why = namespaces_available()
    if why:
        print("SKIP: test_partition: %s" % why, flush=True)
        sys.exit(h.SKIP_EXIT)  # ctest shows it as skipped, not passed
    h.main(globals())
