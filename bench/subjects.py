"""The Redis pattern subscribers the benchmarks compare (bench_paced.py,
bench_peers.py): each starts one process that PSUBSCRIBEs to "chan.*" on
the source Redis and writes one line per message to a file of its own.

- Baseline: bench_redis_psub_baseline (a bare hiredis loop; "flush" mode
  writes as soon as no further message is already read);
- Baton: one baton leader, redis_psub endpoint -> stdout sink, the lease in
  the locker Redis;
- NodePeer, GoPeer: bench/peers/ (what users would run instead), built into
  <build>/peers by build_peers() when node+npm / go+redigo are installed.

Every subject has .name, .pid, .out (its output file) and .stop().
"""
import os
import shutil
import subprocess
import time

import benchlib
from benchlib import LineCounter, cpu_ns, lines  # noqa: F401 (the benchmarks import them from here)

h = benchlib.harness()
BUILD = os.environ["BATON_BUILD_DIR"]
PEERS_SRC = os.path.join(benchlib.SRC, "bench", "peers")
PEERS_DIR = os.path.join(BUILD, "peers")
BASELINE = os.path.join(BUILD, "bench", "bench_redis_psub_baseline")
NODE_DIR = os.path.join(PEERS_DIR, "node")
GOCODE = "/usr/share/gocode/src/github.com/"
# Each peer: its source file and the Debian packages its build needs
# (Go: the packaged client libraries under /usr/share/gocode; Node.js: the
# npm packages pinned in bench/peers/node/package-lock.json).
GO_PEERS = {
    "go/redigo": ("redis_psub_peer.go", ["gomodule/redigo"],
                  "golang-github-gomodule-redigo-dev"),
    "go/amqp091-go": ("rabbitmq_peer.go", ["gomodule/redigo", "rabbitmq/amqp091-go"],
                      "golang-github-gomodule-redigo-dev golang-github-rabbitmq-amqp091-go-dev"),
    "go/paho.mqtt.golang": ("mqtt_peer.go", ["gomodule/redigo", "eclipse/paho.mqtt.golang"],
                            "golang-github-gomodule-redigo-dev "
                            "golang-github-eclipse-paho.mqtt.golang-dev"),
}
NODE_PEERS = {
    "node/ioredis": ("redis_psub_peer.js", ["ioredis"]),
    "node/amqplib": ("rabbitmq_peer.js", ["ioredis", "amqplib"]),
    "node/mqtt": ("mqtt_peer.js", ["ioredis", "mqtt"]),
    "node/zongji": ("binlog_peer.js", ["ioredis", "@vlasky/zongji"]),
}


def go_peer(name):
    """The binary of a Go peer (GO_PEERS key) in <build>/peers."""
    return os.path.join(PEERS_DIR, GO_PEERS[name][0][:-3] + "_go")


def node_peer(name):
    """The script of a Node.js peer (NODE_PEERS key) in <build>/peers/node."""
    return os.path.join(NODE_DIR, NODE_PEERS[name][0])


def _build_node(missing):
    if not (shutil.which("node") and shutil.which("npm")):
        for name in NODE_PEERS:
            missing[name] = "node and npm are not installed"
        return
    mods = os.path.join(NODE_DIR, "node_modules")
    want = {m for _f, ms in NODE_PEERS.values() for m in ms}
    lock = os.path.join(PEERS_SRC, "node", "package-lock.json")
    stamp = os.path.join(NODE_DIR, "package-lock.json")
    if (not all(os.path.isdir(os.path.join(mods, m)) for m in want) or not os.path.exists(stamp)
            or open(stamp, "rb").read() != open(lock, "rb").read()):
        os.makedirs(NODE_DIR, exist_ok=True)
        for f in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(PEERS_SRC, "node", f), NODE_DIR)
        p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=NODE_DIR,
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            for name in NODE_PEERS:
                missing[name] = "npm ci failed: %s" % (p.stdout + p.stderr)[-300:]
            return
    for name, (f, _ms) in NODE_PEERS.items():
        if os.path.exists(os.path.join(PEERS_SRC, "node", f)):
            shutil.copy(os.path.join(PEERS_SRC, "node", f), NODE_DIR)
        else:
            missing[name] = "bench/peers/node/%s is missing" % f


def _build_go(missing):
    for name, (f, libs, pkgs) in GO_PEERS.items():
        if not shutil.which("go") or not all(os.path.isdir(GOCODE + d) for d in libs):
            missing[name] = "not installed (apt-get install golang-go %s)" % pkgs
            continue
        src, out = os.path.join(PEERS_SRC, "go", f), go_peer(name)
        if not os.path.exists(src):
            missing[name] = "bench/peers/go/%s is missing" % f
            continue
        if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(src):
            continue
        env = dict(os.environ, GOPATH="/usr/share/gocode", GO111MODULE="off", GOFLAGS="",
                   GOCACHE=os.path.join(PEERS_DIR, "gocache"))
        p = subprocess.run(["go", "build", "-o", out, src], env=env, capture_output=True,
                           text=True, timeout=300)
        if p.returncode != 0:
            missing[name] = "go build failed: %s" % p.stderr[-300:]


def build_peers():
    """Builds or installs the peers into <build>/peers (once; npm ci from
    the committed package-lock.json, go build offline against Debian's
    packaged client libraries). Returns {name: reason} for each peer that
    cannot run."""
    missing = {}
    os.makedirs(PEERS_DIR, exist_ok=True)
    _build_node(missing)
    _build_go(missing)
    return missing


class _Process:
    def __init__(self, work, tag, argv, **kw):
        self.out = os.path.join(work, "%s-%d.out" % (tag, time.monotonic_ns()))
        self.f = open(self.out, "ab")
        self.proc = subprocess.Popen(argv, stdout=self.f, stderr=subprocess.DEVNULL, **kw)
        self.pid = self.proc.pid

    def stop(self):
        h.stop_process(self.proc)
        self.f.close()


class Baseline(_Process):
    name = "bare hiredis loop"

    def __init__(self, work, source, locker):
        super().__init__(work, "baseline", [BASELINE, "127.0.0.1", str(source.port), "chan.*", "0",
                                            "flush"])


class NodePeer(_Process):
    name = "node/ioredis"

    def __init__(self, work, source, locker):
        super().__init__(work, "node", ["node", node_peer(self.name),
                                        str(locker.port), str(source.port), "chan.*"])


class GoPeer(_Process):
    name = "go/redigo"

    def __init__(self, work, source, locker):
        super().__init__(work, "go", [go_peer(self.name), str(locker.port), str(source.port),
                                      "chan.*"])


class Baton:
    name = "baton"

    def __init__(self, work, source, locker):
        main = h.main_cfg(redis_port=locker.port, log_level="warn")
        ep = ('name = "bench"; type = "redis_psub"; sink = "out"; host = "127.0.0.1"; port = %d; '
              'patterns = [ "chan.*" ];\n' % source.port)
        self.b = h.Baton(work, main, {"psub.cfg": ep}, name="baton-%d" % time.monotonic_ns())
        self.out = self.b.out_path
        self.pid = self.b.pid

    def stop(self):
        self.b.term()


PEERS = {"node/ioredis": NodePeer, "go/redigo": GoPeer}


def available_peers(log=print, peers=None):
    """The peer classes of `peers` ({name: class}, default the Redis pattern
    subscribers PEERS) that can run here (building them first); logs why the
    others cannot."""
    peers = PEERS if peers is None else peers
    missing = build_peers()
    for name, why in missing.items():
        if name in peers:
            log("peer %s skipped: %s" % (name, why))
    return [cls for name, cls in peers.items() if name not in missing]


def start(cls, work, source, locker, timeout=20):
    """Starts a subject and waits until it is the one pattern subscriber."""
    s = cls(work, source, locker)
    if not h.wait_until(lambda: source.client().cmd("PUBSUB", "NUMPAT") == 1, timeout):
        s.stop()
        raise RuntimeError("%s did not subscribe within %d s" % (cls.name, timeout))
    return s
