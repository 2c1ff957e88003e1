"""A scriptable fake Redis (RESP2) for hostile-server tests. Stdlib only.

    import sys, os
    sys.path.insert(0, os.path.join(<tests dir>, "support"))
    from fake_redis import FakeRedis, Simple, Error

    fake = FakeRedis()                        # 127.0.0.1, a free port: fake.port
    fake.on("ROLE", lambda conn, args: [b"sentinel", []])
    fake.on("SENTINEL", lambda conn, args: conn.trickle(b"$100000\\r\\n", interval=0.3))
    fake.on("EVALSHA", lambda conn, args: b"1")          # a bulk "1", not :1
    ...
    fake.close()

Every connection is served by its own thread: commands (RESP arrays of bulk
strings, as hiredis sends them) are parsed and looked up by their upper-case
name in the handlers. A handler is called as handler(conn, args) with args
the command's arguments as bytes (args[0] is the name); it returns what to
answer (encoded by encode(): bytes/str -> bulk string, int -> integer,
None -> nil, list/tuple -> array, Simple("OK") -> +OK, Error("ERR x") ->
-ERR x, Raw(b"...") -> sent as is), or NO_REPLY when it has answered by
itself (conn.send, conn.trickle, conn.endless_bulk) or wants to stay silent.
A handler that raises closes that connection.

Defaults, enough for baton to get as far as the handlers under test: PING
(+PONG, or ["pong", ""] once subscribed), AUTH, SELECT, CLIENT, READONLY
(+OK), ROLE (a master), SCRIPT LOAD (the script's SHA1, remembered:
fake.scripts[sha] is its text), EVALSHA of a loaded script (:0, held
elsewhere) or -NOSCRIPT, EVAL (:0), SUBSCRIBE / PSUBSCRIBE (one confirmation
per channel or pattern), PUBLISH (:0), GET (nil), SENTINEL
get-master-addr-by-name (nil). Anything else: -ERR unknown command.
fake.commands lists (connection number, name, args) of every command seen.
FakeRedis(tls=(cert, key)) serves TLS (ssl module) instead of plain TCP.
"""

import hashlib
import socket
import threading
import time


class Simple(str):
    """A status reply: +<text>."""


class Error(str):
    """An error reply: -<text>."""


class Raw(bytes):
    """Bytes sent as they are."""


NO_REPLY = object()


def encode(v):
    if isinstance(v, Raw):
        return bytes(v)
    if isinstance(v, Simple):
        return b"+" + v.encode() + b"\r\n"
    if isinstance(v, Error):
        return b"-" + v.encode() + b"\r\n"
    if v is None:
        return b"$-1\r\n"
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, int):
        return b":%d\r\n" % v
    if isinstance(v, str):
        v = v.encode()
    if isinstance(v, (bytes, bytearray)):
        return b"$%d\r\n" % len(v) + bytes(v) + b"\r\n"
    if isinstance(v, (list, tuple)):
        return b"*%d\r\n" % len(v) + b"".join(encode(x) for x in v)
    raise TypeError("cannot encode %r" % (v,))


class Conn:
    """One client connection of a FakeRedis."""

    def __init__(self, fake, sock, num):
        self.fake, self.sock, self.num = fake, sock, num
        self.subscribed = False
        self.closed = threading.Event()
        self._buf = b""
        self.sent = 0  # bytes sent

    def send(self, data):
        """Sends bytes (or an object, encoded); False once the peer is gone."""
        if not isinstance(data, (bytes, bytearray)):
            data = encode(data)
        try:
            self.sock.sendall(data)
            self.sent += len(data)
            return True
        except OSError:
            self.closed.set()
            return False

    def trickle(self, data, interval=0.5, step=1, limit_s=None):
        """Sends data step bytes at a time, one step every interval seconds,
        until all is sent, the peer closes, the fake stops, or limit_s
        passes. Returns NO_REPLY (for use as a handler's answer)."""
        t0 = time.monotonic()
        for i in range(0, len(data), step):
            if self.fake.stopping.is_set() or self.closed.is_set():
                break
            if limit_s is not None and time.monotonic() - t0 > limit_s:
                break
            if not self.send(data[i:i + step]):
                break
            if i + step < len(data) and self.fake.stopping.wait(interval):
                break
        return NO_REPLY

    def endless_bulk(self, declared=3000000000, head=b"", chunk=65536, limit_s=30.0,
                     interval=0.0):
        """Sends head, then "$<declared>\\r\\n" (nothing with declared None:
        head alone, e.g. b"+" for an endless status line), then 'x' * chunk
        again and again until the peer closes (or limit_s). The total sent
        is in self.sent. Returns NO_REPLY."""
        if not self.send(head + (b"$%d\r\n" % declared if declared is not None else b"")):
            return NO_REPLY
        block = b"x" * chunk
        t0 = time.monotonic()
        while not self.fake.stopping.is_set() and time.monotonic() - t0 < limit_s:
            if not self.send(block):
                break
            if interval:
                time.sleep(interval)
        return NO_REPLY

    def hold(self, limit_s=60.0):
        """Keeps the connection open, silent, until the peer closes (or the
        fake stops, or limit_s). Returns NO_REPLY."""
        t0 = time.monotonic()
        while not self.fake.stopping.is_set() and not self.closed.is_set() and \
                time.monotonic() - t0 < limit_s:
            time.sleep(0.05)
        return NO_REPLY

    # ---- parsing -------------------------------------------------------------

    def _fill(self):
        try:
            d = self.sock.recv(65536)
        except OSError:
            d = b""
        if not d:
            self.closed.set()
            raise EOFError
        self._buf += d

    def _line(self):
        while b"\r\n" not in self._buf:
            self._fill()
        line, self._buf = self._buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self._buf) < n + 2:
            self._fill()
        data, self._buf = self._buf[:n], self._buf[n + 2:]
        return data

    def read_command(self):
        line = self._line()
        if line.startswith(b"*"):
            args = []
            for _ in range(int(line[1:])):
                h = self._line()
                if not h.startswith(b"$"):
                    raise ValueError("not a bulk string: %r" % h)
                args.append(self._exact(int(h[1:])))
            return args
        return line.split()  # an inline command

    def serve(self):
        try:
            while not self.fake.stopping.is_set():
                try:
                    args = self.read_command()
                except EOFError:
                    break
                if not args:
                    continue
                name = args[0].decode(errors="replace").upper()
                with self.fake.lock:
                    self.fake.commands.append((self.num, name, args))
                handler = self.fake.handlers.get(name) or self.fake.default_handler(name)
                answer = handler(self, args)
                if answer is not NO_REPLY and not self.send(encode(answer)):
                    break
        except Exception:  # a handler that raised, a broken stream: close
            pass
        finally:
            self.closed.set()
            try:
                self.sock.close()
            except OSError:
                pass


class FakeRedis:
    def __init__(self, handlers=None, host="127.0.0.1", port=0, tls=None):
        """tls: None, or (certificate file, key file): every connection is
        TLS (the handshake in its own thread)."""
        self.tls = None
        if tls:
            import ssl
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(tls[0], tls[1])
        self.handlers = dict((k.upper(), v) for k, v in (handlers or {}).items())
        self.scripts = {}
        self.commands = []
        self.conns = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind((host, port))
        self.ls.listen(64)
        self.host, self.port = self.ls.getsockname()
        self._t = threading.Thread(target=self._accept, daemon=True)
        self._t.start()

    def on(self, name, handler):
        """Sets (or, with None, removes) the handler of a command name."""
        if handler is None:
            self.handlers.pop(name.upper(), None)
        else:
            self.handlers[name.upper()] = handler
        return self

    def seen(self, name):
        """Commands of that name received so far: [(conn number, args)]."""
        with self.lock:
            return [(n, a) for n, c, a in self.commands if c == name.upper()]

    def _accept(self):
        n = 0
        while not self.stopping.is_set():
            try:
                s, _ = self.ls.accept()
            except OSError:
                break
            n += 1
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(s, n), daemon=True).start()

    def _serve(self, s, n):
        if self.tls:
            try:
                s.settimeout(10)
                s = self.tls.wrap_socket(s, server_side=True)
                s.settimeout(None)
            except OSError:
                s.close()
                return
        c = Conn(self, s, n)
        with self.lock:
            self.conns.append(c)
        c.serve()

    def kill_connections(self):
        """Closes every client connection now (the fake keeps listening)."""
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.stopping.set()
        try:
            self.ls.close()
        except OSError:
            pass
        self.kill_connections()

    # ---- default behaviour ---------------------------------------------------

    def default_handler(self, name):
        return {
            "PING": lambda c, a: [b"pong", b""] if c.subscribed else Simple("PONG"),
            "AUTH": lambda c, a: Simple("OK"),
            "SELECT": lambda c, a: Simple("OK"),
            "CLIENT": lambda c, a: Simple("OK"),
            "READONLY": lambda c, a: Simple("OK"),
            "ROLE": lambda c, a: [b"master", 0, []],
            "SCRIPT": self._script,
            "EVALSHA": lambda c, a: 0 if a[1].decode() in self.scripts else
            Error("NOSCRIPT No matching script. Please use EVAL."),
            "EVAL": lambda c, a: 0,
            "SUBSCRIBE": lambda c, a: self._subscribe(c, a, b"subscribe"),
            "PSUBSCRIBE": lambda c, a: self._subscribe(c, a, b"psubscribe"),
            "PUBLISH": lambda c, a: 0,
            "GET": lambda c, a: None,
            "SENTINEL": lambda c, a: None,
        }.get(name, lambda c, a: Error("ERR unknown command '%s'" % name))

    def _script(self, conn, args):
        if len(args) >= 3 and args[1].upper() == b"LOAD":
            sha = hashlib.sha1(args[2]).hexdigest()
            self.scripts[sha] = args[2]
            return sha
        return Simple("OK")

    @staticmethod
    def _subscribe(conn, args, kind):
        conn.subscribed = True
        out = b"".join(encode([kind, name, i + 1]) for i, name in enumerate(args[1:]))
        conn.send(out)
        return NO_REPLY


def script_kind(fake, args):
    """For an EVALSHA/EVAL's args: the script's text (bytes), b"" if unknown."""
    if args[0].upper() == b"EVAL":
        return args[1]
    return fake.scripts.get(args[1].decode(errors="replace"), b"")
