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
GO_PEER = os.path.join(PEERS_DIR, "redis_psub_peer_go")
NODE_DIR = os.path.join(PEERS_DIR, "node")
REDIGO = "/usr/share/gocode/src/github.com/gomodule/redigo"


def build_peers():
    """Builds or installs the peers into <build>/peers (once; npm ci from
    the committed package-lock.json, go build offline against Debian's
    packaged redigo). Returns {name: reason} for each peer that cannot run."""
    missing = {}
    os.makedirs(PEERS_DIR, exist_ok=True)
    if shutil.which("node") and shutil.which("npm"):
        if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "ioredis")):
            os.makedirs(NODE_DIR, exist_ok=True)
            for f in ("package.json", "package-lock.json", "redis_psub_peer.js"):
                shutil.copy(os.path.join(PEERS_SRC, "node", f), NODE_DIR)
            p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=NODE_DIR,
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                missing["node/ioredis"] = "npm ci failed: %s" % (p.stdout + p.stderr)[-300:]
        shutil.copy(os.path.join(PEERS_SRC, "node", "redis_psub_peer.js"), NODE_DIR)
    else:
        missing["node/ioredis"] = "node and npm are not installed"
    if shutil.which("go") and os.path.isdir(REDIGO):
        src = os.path.join(PEERS_SRC, "go", "redis_psub_peer.go")
        if not os.path.exists(GO_PEER) or os.path.getmtime(GO_PEER) < os.path.getmtime(src):
            env = dict(os.environ, GOPATH="/usr/share/gocode", GO111MODULE="off", GOFLAGS="",
                       GOCACHE=os.path.join(PEERS_DIR, "gocache"))
            p = subprocess.run(["go", "build", "-o", GO_PEER, src], env=env, capture_output=True,
                               text=True, timeout=300)
            if p.returncode != 0:
                missing["go/redigo"] = "go build failed: %s" % p.stderr[-300:]
    else:
        missing["go/redigo"] = ("not installed (apt-get install golang-go "
                                "golang-github-gomodule-redigo-dev)")
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
        super().__init__(work, "node", ["node", os.path.join(NODE_DIR, "redis_psub_peer.js"),
                                        str(locker.port), str(source.port), "chan.*"])


class GoPeer(_Process):
    name = "go/redigo"

    def __init__(self, work, source, locker):
        super().__init__(work, "go", [GO_PEER, str(locker.port), str(source.port), "chan.*"])


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


def available_peers(log=print):
    """The peer classes that can run here (building them first); logs why
    the others cannot."""
    missing = build_peers()
    for name, why in missing.items():
        log("peer %s skipped: %s" % (name, why))
    return [cls for name, cls in PEERS.items() if name not in missing]


def start(cls, work, source, locker, timeout=20):
    """Starts a subject and waits until it is the one pattern subscriber."""
    s = cls(work, source, locker)
    if not h.wait_until(lambda: source.client().cmd("PUBSUB", "NUMPAT") == 1, timeout):
        s.stop()
        raise RuntimeError("%s did not subscribe within %d s" % (cls.name, timeout))
    return s
