"""A real etcd v3 cluster (1 or 3 members) for integration tests, stdlib only;
the C tests start theirs with this too (tests/support/brokers.py etcd).

Every member listens on 127.0.0.1 on free ports (client and peer) with its
own data directory in a temporary directory; the cluster is stopped at the
end of the test (t.cleanup) and in any case at exit (harness cleanups).
Members are started in parallel; start() waits (bounded) until every member
answers /health and the cluster has a raft leader.

    import etcd
    c = etcd.EtcdCluster(t, members=3)          # started, healthy
    c.urls                                      # ["http://127.0.0.1:P1", ...]
    i = c.leader()                              # index of the raft leader member
    c.kill(i); c.restart(i)                     # SIGKILL; same data dir, state existing
    c.pause(i); c.resume(i)                     # SIGSTOP / SIGCONT
    c.stop(i); c.start_member(i)                # SIGTERM; start again
    c.get_prefix("baton")                       # {key: value} (bytes), linearizable read

TLS for clients (peers stay plain http):
    tls = tlsfiles.make_tls_files(h.mktemp())
    c = etcd.EtcdCluster(t, tls=tls)            # https:// client URLs, --client-cert-auth
Auth:
    c = etcd.EtcdCluster(t, auth=("baton", "pw"), auth_prefix="baton")
    # root user (c.root_password), role "baton" with readwrite on the key
    # prefix, user "baton" with that role, then `etcdctl auth enable`.
    # Not both: etcd 3.4's JSON gateway answers HTTP 400 ("CommonName of
    # client sending a request against gateway will be ignored ...") to any
    # request that carries a client certificate while auth is enabled.

c.leader() and the member indexes are ints from 0: with h.wait_until, test
`c.leader() is not None` (index 0 is falsy).
"""

import base64
import json
import os
import signal
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request

import harness as h

ETCD = os.environ.get("ETCD_BIN", "etcd")
ETCDCTL = os.environ.get("ETCDCTL_BIN", "etcdctl")
START_TIMEOUT_S = 20.0


def b64(s):
    if isinstance(s, str):
        s = s.encode()
    return base64.b64encode(s).decode()


def unb64(s):
    return base64.b64decode(s or "")


def prefix_end(prefix):
    """The range end that makes [prefix, end) cover every key under prefix."""
    b = bytearray(prefix.encode() if isinstance(prefix, str) else prefix)
    while b:
        if b[-1] < 0xFF:
            b[-1] += 1
            return bytes(b)
        b.pop()
    return b"\0"


class Member(h.ChildProcess):
    def __init__(self, cluster, index):
        self.cluster = cluster
        self.index = index
        self.name = "m%d" % index
        self.client_port = h.free_port()
        self.peer_port = h.free_port()
        self.data_dir = os.path.join(cluster.dir, self.name + ".etcd")
        self.log_path = os.path.join(cluster.dir, self.name + ".log")
        self.proc = None
        self.paused = False
        self.started_once = False

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.cluster.tls else "http", self.client_port)

    @property
    def peer_url(self):
        return "http://127.0.0.1:%d" % self.peer_port

    def args(self):
        c = self.cluster
        a = [ETCD, "--name", self.name, "--data-dir", self.data_dir,
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
             "--initial-cluster", c.initial_cluster(),
             "--initial-cluster-token", c.token,
             "--initial-cluster-state", "existing" if self.started_once else "new",
             "--heartbeat-interval", str(c.heartbeat_ms),
             "--election-timeout", str(c.election_ms),
             "--logger", "zap", "--log-outputs", "stderr"]
        if c.tls:
            a += ["--cert-file", c.tls["server_cert"], "--key-file", c.tls["server_key"],
                  "--trusted-ca-file", c.tls["ca"], "--client-cert-auth"]
        return a + list(c.extra_args)

    def spawn(self):
        if self.alive():
            return
        log = open(self.log_path, "ab")
        log.write(("---- start %s (%s)\n" % (time.strftime("%H:%M:%S"),
                                            "existing" if self.started_once else "new")).encode())
        log.flush()
        self.proc = subprocess.Popen(self.args(), stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        log.close()
        self.started_once = True
        self.paused = False

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""


class EtcdError(Exception):
    pass


class EtcdCluster:
    def __init__(self, t=None, members=1, tls=None, auth=None, auth_prefix="baton",
                 heartbeat_ms=100, election_ms=1000, extra_args=(), start=True):
        """t: a harness TestContext (the cluster stops at the end of the
        test) or None (stops at exit). tls: a tlsfiles.make_tls_files dict.
        auth: (user, password) of the user baton logs in as; enables auth."""
        assert members in (1, 3, 5)
        self.dir = h.mktemp("baton-etcd-")
        self.tls = tls
        self.token = "baton-it-%d-%d" % (os.getpid(), time.monotonic_ns() % 10 ** 9)
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.extra_args = list(extra_args)
        self.members = [Member(self, i) for i in range(members)]
        self.root_password = "root-pw"
        self.auth = None            # (user, password) once auth is enabled
        self._ssl = None
        h._cleanups.append(self.stop_all)
        if t is not None:
            t.cleanup(self.stop_all)
        if start:
            self.start()
            if auth:
                self.enable_auth(auth[0], auth[1], auth_prefix)

    # -- addresses ---------------------------------------------------------
    @property
    def urls(self):
        return [m.url for m in self.members]

    def initial_cluster(self):
        return ",".join("%s=%s" % (m.name, m.peer_url) for m in self.members)

    def locker_cfg(self, endpoints=None, prefix="baton", extra="", tls=True):
        """The text of a main config's `locker = { backend = "etcd"; ... };`.
        endpoints: URLs (default: every member's, in order)."""
        eps = self.urls if endpoints is None else endpoints
        parts = ['backend = "etcd";',
                 "endpoints = [ %s ];" % ", ".join('"%s"' % u for u in eps),
                 'prefix = "%s";' % prefix]
        if self.tls and tls:
            parts.append('ca_file = "%s"; cert_file = "%s"; key_file = "%s";'
                         % (self.tls["ca"], self.tls["client_cert"], self.tls["client_key"]))
        if extra:
            parts.append(extra)
        return "locker = { %s };" % " ".join(parts)

    # -- lifecycle ---------------------------------------------------------
    def start(self, timeout=START_TIMEOUT_S):
        """Starts every member at once and waits until each is healthy and
        the cluster has a leader."""
        for m in self.members:
            m.spawn()
        self.wait_healthy(timeout=timeout)

    def wait_healthy(self, indexes=None, timeout=START_TIMEOUT_S):
        idx = list(range(len(self.members))) if indexes is None else list(indexes)

        def ok():
            for i in idx:
                m = self.members[i]
                if not m.alive():
                    raise EtcdError("etcd member %s exited with %s:\n%s"
                                    % (m.name, m.proc.returncode if m.proc else None,
                                       m.log_tail()))
                if not self.healthy(i):
                    return False
            return self.leader() is not None
        if not h.wait_until(ok, timeout, 0.1):
            raise EtcdError("etcd members %s not healthy within %.0f s:\n%s"
                            % ([self.members[i].name for i in idx], timeout,
                               "\n".join(self.members[i].log_tail(1500) for i in idx)))

    def stop_all(self):
        threads = []
        for m in self.members:
            if m.proc is not None:
                th = threading.Thread(target=self._stop_member, args=(m,), daemon=True)
                th.start()
                threads.append(th)
        for th in threads:
            th.join(15)

    @staticmethod
    def _stop_member(m):
        if m.alive():
            try:
                m.proc.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
        h.stop_process(m.proc, 5)
        m.paused = False

    def kill(self, i):
        """SIGKILL member i (it stays down until restart)."""
        m = self.members[i]
        m.kill()
        m.paused = False

    def stop(self, i):
        """SIGTERM member i, wait for it (SIGKILL after 5 s)."""
        self._stop_member(self.members[i])

    def pause(self, i):
        self.members[i].signal(signal.SIGSTOP)
        self.members[i].paused = True

    def resume(self, i):
        self.members[i].signal(signal.SIGCONT)
        self.members[i].paused = False

    def start_member(self, i, wait=True, timeout=START_TIMEOUT_S):
        """Starts member i again with its data dir (--initial-cluster-state
        existing). wait: until it is healthy (needs a quorum)."""
        self.members[i].spawn()
        if wait:
            self.wait_healthy([i], timeout)

    def restart(self, i, wait=True, timeout=START_TIMEOUT_S):
        if self.members[i].alive():
            self.stop(i)
        self.start_member(i, wait, timeout)

    # -- HTTP (JSON gateway) -----------------------------------------------
    def _context(self):
        if not self.tls:
            return None
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=self.tls["ca"])
            ctx.load_cert_chain(self.tls["client_cert"], self.tls["client_key"])
            self._ssl = ctx
        return self._ssl

    def _request(self, i, path, body=None, token=None, timeout=1.0):
        url = self.members[i].url + path
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", token)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._context()) as r:
                return json.loads(r.read().decode() or "{}")
        except urllib.error.HTTPError as e:
            try:
                return json.loads(e.read().decode() or "{}")
            except ValueError:
                raise EtcdError("%s: HTTP %d" % (url, e.code))

    def post(self, path, body, i=None, timeout=2.0, auth=True):
        """POSTs to member i (default: the first that answers). With auth
        enabled, as root."""
        order = [i] if i is not None else [k for k, m in enumerate(self.members)
                                           if m.alive() and not m.paused]
        last = None
        for k in order:
            try:
                token = self._token(k) if (auth and self.auth) else None
                r = self._request(k, path, body, token=token, timeout=timeout)
            except (OSError, ValueError, EtcdError) as e:
                last = e
                continue
            if "error" in r and "header" not in r:
                last = EtcdError("%s: %s" % (path, r.get("error") or r.get("message")))
                continue
            return r
        raise EtcdError("no member answered %s: %s" % (path, last))

    def _token(self, i):
        r = self._request(i, "/v3/auth/authenticate",
                          {"name": "root", "password": self.root_password})
        if "token" not in r:
            raise EtcdError("authenticate as root: %r" % r)
        return r["token"]

    def healthy(self, i, timeout=1.0):
        m = self.members[i]
        if not m.alive() or m.paused:
            return False
        try:
            r = self._request(i, "/health", timeout=timeout)
        except (OSError, ValueError, EtcdError):
            return False
        return str(r.get("health")) == "true"

    def member_status(self, i, timeout=0.5):
        """The /v3/maintenance/status answer of member i, or None."""
        m = self.members[i]
        if not m.alive() or m.paused:
            return None
        try:
            r = self._request(i, "/v3/maintenance/status", {}, timeout=timeout)
        except (OSError, ValueError, EtcdError):
            return None
        return r if "header" in r else None

    def leader(self, timeout=0.5):
        """Index of the raft leader member (as the live members report it
        and confirmed by the leader itself), or None."""
        sts = {i: self.member_status(i, timeout) for i in range(len(self.members))}
        ids = {i: str(s["header"].get("member_id")) for i, s in sts.items() if s}
        for i, s in sts.items():
            if s and str(s.get("leader")) == ids[i] and s.get("leader") not in (None, "0"):
                return i
        return None

    def move_leader(self, away_from, timeout=10.0):
        """Moves raft leadership off member away_from (MoveLeader, sent to
        it while it leads) to another live member; returns the new leader's
        index, or None when it did not move within timeout."""
        sts = {i: self.member_status(i) for i in range(len(self.members))}
        to = next((i for i, st in sts.items() if st and i != away_from), None)
        if to is None or sts.get(away_from) is None:
            return None
        try:
            self.post("/v3/maintenance/transfer-leadership",
                      {"targetID": str(sts[to]["header"]["member_id"])}, i=away_from, timeout=5.0)
        except EtcdError:
            return None
        end = time.time() + timeout
        while time.time() < end:
            L = self.leader()
            if L is not None and L != away_from:
                return L
            time.sleep(0.05)
        return None

    def revision(self):
        r = self.post("/v3/kv/range", {"key": b64("\0"), "limit": 1})
        return int(r["header"]["revision"])

    def get_prefix(self, prefix=""):
        """{key (str): value (bytes)} of every key under prefix."""
        body = {"key": b64(prefix or "\0"), "range_end": b64(prefix_end(prefix) if prefix
                                                               else b"\0")}
        r = self.post("/v3/kv/range", body)
        return {unb64(kv["key"]).decode(errors="replace"): unb64(kv.get("value"))
                for kv in r.get("kvs", [])}

    def get_kvs(self, prefix=""):
        """[kv dicts] (key/value decoded, revisions and lease as ints)."""
        body = {"key": b64(prefix or "\0"), "range_end": b64(prefix_end(prefix) if prefix
                                                               else b"\0")}
        r = self.post("/v3/kv/range", body)
        out = []
        for kv in r.get("kvs", []):
            out.append({"key": unb64(kv["key"]).decode(errors="replace"),
                        "value": unb64(kv.get("value")),
                        "create_revision": int(kv.get("create_revision", 0)),
                        "mod_revision": int(kv.get("mod_revision", 0)),
                        "lease": int(kv.get("lease", 0))})
        return out

    def put(self, key, value):
        return self.post("/v3/kv/put", {"key": b64(key), "value": b64(value)})

    def delete_prefix(self, prefix):
        return self.post("/v3/kv/deleterange", {"key": b64(prefix),
                                                "range_end": b64(prefix_end(prefix))})

    # -- etcdctl -----------------------------------------------------------
    def etcdctl(self, *args, user=None, check=True, timeout=15):
        """Runs etcdctl against the live members; returns its stdout."""
        eps = ",".join(m.url for m in self.members if m.alive() and not m.paused)
        a = [ETCDCTL, "--endpoints", eps, "--dial-timeout", "3s", "--command-timeout", "5s"]
        if self.tls:
            a += ["--cacert", self.tls["ca"], "--cert", self.tls["client_cert"],
                  "--key", self.tls["client_key"]]
        if user is None and self.auth:
            user = "root:" + self.root_password
        if user:
            a += ["--user", user]
        env = dict(os.environ, ETCDCTL_API="3")
        p = subprocess.run(a + list(args), capture_output=True, text=True, timeout=timeout,
                           env=env, stdin=subprocess.DEVNULL)
        if check and p.returncode != 0:
            raise EtcdError("etcdctl %s: %s" % (" ".join(args), (p.stderr or p.stdout).strip()))
        return p.stdout

    def endpoint_status(self):
        """`etcdctl endpoint status -w json` of the live members (a list)."""
        return json.loads(self.etcdctl("endpoint", "status", "-w", "json") or "[]")

    def enable_auth(self, user, password, prefix="baton"):
        """root user, a role named after the user with readwrite on the key
        prefix, the user with that role; then auth enable."""
        self.etcdctl("user", "add", "root:" + self.root_password, "--interactive=false")
        # auth enable wants the root user to hold the root role (an error
        # when it exists already or is granted already: ignored)
        self.etcdctl("role", "add", "root", check=False)
        self.etcdctl("user", "grant-role", "root", "root", check=False)
        self.etcdctl("role", "add", user)
        self.etcdctl("role", "grant-permission", user, "--prefix=true", "readwrite", prefix)
        self.etcdctl("user", "add", "%s:%s" % (user, password), "--interactive=false")
        self.etcdctl("user", "grant-role", user, user)
        self.etcdctl("auth", "enable")
        self.auth = (user, password)

    def set_password(self, user, password):
        # etcdctl 3.4 reads the new password from stdin with --interactive=false
        eps = ",".join(m.url for m in self.members if m.alive() and not m.paused)
        a = [ETCDCTL, "--endpoints", eps, "--user", "root:" + self.root_password,
             "user", "passwd", user, "--interactive=false"]
        if self.tls:
            a[1:1] = ["--cacert", self.tls["ca"], "--cert", self.tls["client_cert"],
                      "--key", self.tls["client_key"]]
        p = subprocess.run(a, input=password + "\n", capture_output=True, text=True, timeout=15,
                           env=dict(os.environ, ETCDCTL_API="3"))
        if p.returncode != 0:
            raise EtcdError("etcdctl user passwd: %s" % (p.stderr or p.stdout).strip())
        if self.auth and self.auth[0] == user:
            self.auth = (user, password)
