"""A real rabbitmq-server for integration tests, plus a small AMQP 0-9-1
client (stdlib sockets) to declare exchanges and publish.

RabbitServer starts the Debian rabbitmq-server as a plain process on
127.0.0.1: free AMQP and distribution ports, a node name unique to this
broker, its own epmd on a free port (ERL_EPMD_PORT), mnesia and logs in a
temporary directory chowned to the rabbitmq user (the server script switches
to it). stop() ends the broker's process group and its own epmd only, so
other brokers on the machine are untouched. Startup takes ~7 s: start one
broker per test file, not per test.

    import rabbitmq as rmq
    srv = rmq.RabbitServer()              # started; registered for cleanup
    c = rmq.Amqp(srv.port)                # guest/guest
    c.exchange_declare("ev", "fanout")
    c.publish("ev", "", b"hello", message_id="m1", headers={"k": 1})
    srv.list_queues()  -> [{"name":..., "messages":..., "consumers":..., ...}]
    srv.list_bindings()-> [{"source":..., "destination":..., "routing_key":...}]

    srv = rmq.RabbitServer(tls=make_tls_files(dir))  # plus a TLS listener on srv.tls_port

With tls (a tlsfiles.make_tls_files dict), a rabbitmq.conf (RABBITMQ_CONFIG_FILE)
adds an AMQPS listener on 127.0.0.1:srv.tls_port that verifies clients and
requires a client certificate signed by tls["ca"] (mutual TLS). The plain
listener on srv.port stays: the tests publish there and rabbitmqctl needs no
TLS. The files must be readable by the rabbitmq user (tlsfiles makes them
world-readable).
"""

import os
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import time

import harness as h

CTL = "rabbitmqctl"


class RabbitServer:
    def __init__(self, start=True, tls=None):
        self.port = h.free_port()
        self.dist_port = h.free_port()
        self.epmd_port = h.free_port()
        self.node = "baton%d@localhost" % self.port
        self.dir = h.mktemp("baton-rabbit-")
        os.chmod(self.dir, 0o755)
        self.pidfile = os.path.join(self.dir, "rabbit.pid")
        plugins = os.path.join(self.dir, "enabled_plugins")
        with open(plugins, "w") as f:
            f.write("[].\n")
        for sub in ("mnesia", "log"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        self.tls_port = None
        conf = None
        if tls:
            # new-style (sysctl) config: a second listener, TLS with client
            # certificates; the plain one comes from RABBITMQ_NODE_PORT
            self.tls_port = h.free_port()
            conf = os.path.join(self.dir, "rabbitmq.conf")
            with open(conf, "w") as f:
                f.write("listeners.ssl.default = 127.0.0.1:%d\n"
                        "ssl_options.cacertfile = %s\n"
                        "ssl_options.certfile = %s\n"
                        "ssl_options.keyfile = %s\n"
                        "ssl_options.verify = verify_peer\n"
                        "ssl_options.fail_if_no_peer_cert = true\n"
                        % (self.tls_port, tls["ca"], tls["server_cert"], tls["server_key"]))
        try:
            pw = pwd.getpwnam("rabbitmq")
            for root, dirs, files in os.walk(self.dir):
                os.chown(root, pw.pw_uid, pw.pw_gid)
                for n in files:
                    os.chown(os.path.join(root, n), pw.pw_uid, pw.pw_gid)
        except KeyError:
            pass
        self.env = dict(os.environ)
        self.env.update({
            "RABBITMQ_MNESIA_BASE": os.path.join(self.dir, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(self.dir, "log"),
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_PID_FILE": self.pidfile,
            "RABBITMQ_ENABLED_PLUGINS_FILE": plugins,
            "RABBITMQ_FEATURE_FLAGS_FILE": os.path.join(self.dir, "feature_flags"),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        })
        if conf:
            self.env["RABBITMQ_CONFIG_FILE"] = conf
        self.proc = None
        h._cleanups.append(self.stop)
        if start:
            self.start()

    def start(self, timeout=90):
        try:
            os.unlink(self.pidfile)
        except FileNotFoundError:
            pass
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            ["rabbitmq-server"], env=self.env, stdin=subprocess.DEVNULL,
            stdout=open(os.path.join(self.dir, "stdout.log"), "ab"),
            stderr=subprocess.STDOUT, start_new_session=True, cwd=self.dir)
        ok = h.wait_until(self._ready, timeout, 0.25)
        if not ok:
            tail = self.log_tail()
            self.stop()
            raise RuntimeError("rabbitmq-server did not start on port %d:\n%s" % (self.port, tail))
        h.log("rabbitmq-server %s on 127.0.0.1:%d%s up in %.1fs"
              % (self.node, self.port, " (tls %d)" % self.tls_port if self.tls_port else "",
                 time.monotonic() - t0))

    def _ready(self):
        if self.proc.poll() is not None:
            return False
        if not h.port_open(self.port):
            return False
        if self.tls_port and not h.port_open(self.tls_port):
            return False
        rc, _out, _err = self.ctl("await_startup", timeout=30)
        return rc == 0

    def log_tail(self, n=30):
        out = []
        for root, _d, files in os.walk(os.path.join(self.dir, "log")):
            for f in files:
                try:
                    with open(os.path.join(root, f), errors="replace") as fh:
                        out += fh.read().splitlines()[-n:]
                except OSError:
                    pass
        try:
            with open(os.path.join(self.dir, "stdout.log"), errors="replace") as fh:
                out += fh.read().splitlines()[-n:]
        except OSError:
            pass
        return "\n".join(out)

    def ctl(self, *args, timeout=30):
        """Runs rabbitmqctl against this node; returns (rc, stdout, stderr)."""
        try:
            p = subprocess.run([CTL, "-n", self.node, "-q"] + list(args), env=self.env,
                               capture_output=True, text=True, timeout=timeout,
                               stdin=subprocess.DEVNULL)
            return p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            return -1, "", "timeout"

    def _table(self, args, cols):
        rc, out, err = self.ctl(*args)
        if rc != 0:
            raise RuntimeError("rabbitmqctl %s: %s" % (" ".join(args), err.strip() or out.strip()))
        rows = []
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) != len(cols) or parts == cols:
                continue
            rows.append(dict(zip(cols, parts)))
        return rows

    def list_queues(self, vhost="/"):
        cols = ["name", "messages", "consumers", "exclusive", "auto_delete", "durable"]
        rows = self._table(["list_queues", "-p", vhost, "--no-table-headers"] + cols, cols)
        for r in rows:
            r["messages"] = int(r["messages"])
            r["consumers"] = int(r["consumers"])
        return rows

    def list_bindings(self, vhost="/"):
        cols = ["source_name", "destination_name", "destination_kind", "routing_key"]
        rows = self._table(["list_bindings", "-p", vhost, "--no-table-headers"] + cols, cols)
        return [{"source": r["source_name"], "destination": r["destination_name"],
                 "kind": r["destination_kind"], "routing_key": r["routing_key"]} for r in rows]

    def bound_queues(self, exchange, vhost="/"):
        return sorted({b["destination"] for b in self.list_bindings(vhost)
                       if b["source"] == exchange and b["kind"] == "queue"})

    def beam_pid(self):
        try:
            with open(self.pidfile) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def stop(self, kill=False):
        """Stops this broker only: its process group (su, sh, beam and
        beam's children), the beam pid from its pid file, then its epmd."""
        pid = self.beam_pid()
        if self.proc is not None:
            sig = signal.SIGKILL if kill else signal.SIGTERM
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            if pid:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
            if pid:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and _alive(pid):
                    time.sleep(0.05)
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
            self.proc = None
        self._kill_epmd()

    def kill(self):
        self.stop(kill=True)

    def restart(self, down_s=0.0):
        self.stop(kill=True)
        if down_s:
            time.sleep(down_s)
        self.start()

    def _kill_epmd(self):
        # the epmd started for this broker listens on self.epmd_port only
        subprocess.run(["epmd", "-port", str(self.epmd_port), "-kill"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        for pid in _pids_named("epmd"):
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if ("ERL_EPMD_PORT=%d" % self.epmd_port).encode() in env:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def shared_server():
    """The test file's one RabbitServer, started on first use (h.shared)."""
    return h.shared("rabbitmq", RabbitServer)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def _pids_named(name):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/comm" % d) as f:
                    if f.read().strip() == name:
                        out.append(int(d))
            except OSError:
                pass
    return out


# --------------------------------------------------------------------------
# AMQP 0-9-1 client: just enough to declare and publish (with confirms).

class AmqpError(Exception):
    pass


FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8


def _shortstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("B", len(b)) + b


def _longstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">I", len(b)) + b


class Decimal:
    def __init__(self, decimals, value):
        self.decimals, self.value = decimals, value


class Timestamp(int):
    pass


def _field(v):
    if v is None:
        return b"V"
    if isinstance(v, bool):
        return b"t" + struct.pack("B", 1 if v else 0)
    if isinstance(v, Timestamp):
        return b"T" + struct.pack(">Q", v)
    if isinstance(v, int):
        if -2**31 <= v < 2**31:
            return b"I" + struct.pack(">i", v)
        return b"l" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"d" + struct.pack(">d", v)
    if isinstance(v, Decimal):
        return b"D" + struct.pack(">BI", v.decimals, v.value)
    if isinstance(v, str):
        return b"S" + _longstr(v)
    if isinstance(v, (bytes, bytearray)):
        return b"x" + _longstr(bytes(v))
    if isinstance(v, dict):
        return b"F" + _table(v)
    if isinstance(v, (list, tuple)):
        body = b"".join(_field(x) for x in v)
        return b"A" + struct.pack(">I", len(body)) + body
    raise TypeError("cannot encode %r in an AMQP table" % (v,))


def _table(d):
    body = b"".join(_shortstr(k) + _field(v) for k, v in (d or {}).items())
    return struct.pack(">I", len(body)) + body


class Amqp:
    """A blocking AMQP connection with channel 1 open."""

    def __init__(self, port, host="127.0.0.1", user="guest", password="guest", vhost="/",
                 timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.frame_max = 131072
        self.confirming = False
        self.next_seq = 1
        self.acked = 0
        self.nacked = 0
        self._low = 1          # every tag below it is confirmed
        self._above = set()    # confirmed tags >= _low
        self.out = []
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self._expect(0, 10, 10)  # connection.start
        resp = b"\x00" + user.encode() + b"\x00" + password.encode()
        self._method(0, 10, 11, _table({"product": "baton-tests"}) + _shortstr("PLAIN") +
                     _longstr(resp) + _shortstr("en_US"))
        args = self._expect(0, 10, 30)  # tune
        ch_max, fmax, _hb = struct.unpack(">HIH", args[:8])
        self.frame_max = fmax or 131072
        self._method(0, 10, 31, struct.pack(">HIH", ch_max, self.frame_max, 0))
        self._method(0, 10, 40, _shortstr(vhost) + _shortstr("") + b"\x00")
        self._expect(0, 10, 41)
        self._method(1, 20, 10, _shortstr(""))
        self._expect(1, 20, 11)

    # framing
    def _frame(self, ftype, ch, payload):
        return struct.pack(">BHI", ftype, ch, len(payload)) + payload + b"\xce"

    def _method(self, ch, cls, mid, args=b""):
        self.sock.sendall(self._frame(FRAME_METHOD, ch, struct.pack(">HH", cls, mid) + args))

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AmqpError("broker closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _read_frame(self):
        ftype, ch, size = struct.unpack(">BHI", self._read(7))
        payload = self._read(size)
        if self._read(1) != b"\xce":
            raise AmqpError("bad frame end")
        return ftype, ch, payload

    def _expect(self, ch, cls, mid):
        while True:
            ftype, fch, p = self._read_frame()
            if ftype != FRAME_METHOD:
                continue
            c, m = struct.unpack(">HH", p[:4])
            if (c, m) == (10, 50) or (c, m) == (20, 40):  # connection/channel close
                code = struct.unpack(">H", p[4:6])[0]
                tl = p[6]
                raise AmqpError("%d %s" % (code, p[7:7 + tl].decode(errors="replace")))
            if (c, m) == (60, 80) or (c, m) == (60, 120):  # basic.ack / nack (confirms)
                tag, flags = struct.unpack(">QB", p[4:13])
                self._confirm(tag, flags & 1, m == 80)
                if (ch, cls, mid) == (fch, c, m):
                    return p[4:]
                continue
            if (fch, c, m) == (ch, cls, mid):
                return p[4:]

    def _confirm(self, tag, multiple, ack):
        # confirms may come out of order (an unroutable message is confirmed
        # at once, a routed one once its queues have it): count each tag once
        if multiple:
            n = sum(1 for x in range(self._low, tag + 1) if x not in self._above)
            self._above = {x for x in self._above if x > tag}
            self._low = max(self._low, tag + 1)
        elif tag >= self._low and tag not in self._above:
            n = 1
            self._above.add(tag)
        else:
            n = 0
        while self._low in self._above:
            self._above.discard(self._low)
            self._low += 1
        if ack:
            self.acked += n
        else:
            self.nacked += n

    # operations
    def exchange_declare(self, name, etype="fanout", durable=False):
        flags = 0x02 if durable else 0
        self._method(1, 40, 10, b"\x00\x00" + _shortstr(name) + _shortstr(etype) +
                     struct.pack("B", flags) + _table({}))
        self._expect(1, 40, 11)

    def queue_delete(self, name):
        self._method(1, 50, 40, b"\x00\x00" + _shortstr(name) + b"\x00")
        self._expect(1, 50, 41)

    def confirm_select(self):
        self._method(1, 85, 10, b"\x00")
        self._expect(1, 85, 11)
        self.confirming = True

    def publish_frames(self, exchange, routing_key, body, message_id=None, content_type=None,
                       headers=None, delivery_mode=None):
        flags = 0
        props = b""
        if content_type is not None:
            flags |= 1 << 15
            props += _shortstr(content_type)
        if headers is not None:
            flags |= 1 << 13
            props += _table(headers)
        if delivery_mode is not None:
            flags |= 1 << 12
            props += struct.pack("B", delivery_mode)
        if message_id is not None:
            flags |= 1 << 7
            props += _shortstr(message_id)
        out = [self._frame(FRAME_METHOD, 1, struct.pack(">HH", 60, 40) + b"\x00\x00" +
                           _shortstr(exchange) + _shortstr(routing_key) + b"\x00"),
               self._frame(FRAME_HEADER, 1, struct.pack(">HHQH", 60, 0, len(body), flags) + props)]
        step = self.frame_max - 8
        for i in range(0, len(body), step):
            out.append(self._frame(FRAME_BODY, 1, body[i:i + step]))
        if self.confirming:
            self.next_seq += 1
        return b"".join(out)

    def publish(self, exchange, routing_key, body, **kw):
        self.sock.sendall(self.publish_frames(exchange, routing_key, body, **kw))

    def publish_many(self, items, batch=200):
        """items: iterable of (exchange, routing_key, body, kwargs)."""
        chunk = []
        for ex, rk, body, kw in items:
            chunk.append(self.publish_frames(ex, rk, body, **kw))
            if len(chunk) >= batch:
                self.sock.sendall(b"".join(chunk))
                chunk = []
        if chunk:
            self.sock.sendall(b"".join(chunk))

    def wait_confirms(self, timeout=30):
        """With confirm_select: waits until every publish is acked or nacked."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(1.0)
        try:
            while self.acked + self.nacked < self.next_seq - 1:
                if time.monotonic() > deadline:
                    raise AmqpError("confirms: %d of %d after %ss" %
                                    (self.acked + self.nacked, self.next_seq - 1, timeout))
                try:
                    ftype, _ch, p = self._read_frame()
                except socket.timeout:
                    continue
                if ftype == FRAME_METHOD:
                    c, m = struct.unpack(">HH", p[:4])
                    if (c, m) in ((60, 80), (60, 120)):
                        tag, flags = struct.unpack(">QB", p[4:13])
                        self._confirm(tag, flags & 1, m == 80)
                    elif (c, m) in ((10, 50), (20, 40)):
                        code = struct.unpack(">H", p[4:6])[0]
                        raise AmqpError("closed: %d %s" % (code, p[7:7 + p[6]].decode()))
        finally:
            self.sock.settimeout(10.0)
        return self.acked, self.nacked

    def close(self):
        try:
            self._method(0, 10, 50, struct.pack(">H", 200) + _shortstr("bye") +
                         struct.pack(">HH", 0, 0))
            self.sock.settimeout(2.0)
            self._expect(0, 10, 51)
        except (OSError, AmqpError):
            pass
        try:
            self.sock.close()
        except OSError:
            pass
