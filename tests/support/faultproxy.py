"""A fault-injecting TCP proxy for the tests (stdlib only, threaded).

It sits in front of a server (redis-server in practice), forwards every
connection to it and, under the test's control, delays, holds or cuts the
traffic:

    p = FaultProxy(target_port=6379, port=0)       # listening on 127.0.0.1:p.port
    p.set_delay(700)                               # every reply 700 ms late
    p.set_delay(700, names={"baton-lease"})        # only connections named so
    p.set_delay(700, match=b"orders")              # only replies to requests that
                                                   #   contain b"orders" (RESP-aware)
    p.set_hold_new(1500)                           # a new connection's replies
                                                   #   wait until it is 1.5 s old
    p.stall()                                      # hold every byte, both ways
    p.resume()                                     # no delay, no stall, no hold
                                                   #   (for connections accepted later)
    p.cut()                                        # close every connection (both sides)
    p.refuse(True)                                 # new connections closed at once
    p.close()

Delays apply to the server -> client direction (the replies) unless
direction="c2s" or "both" is given. A delay is decided per chunk, when the
proxy reads it (due = read time + delay), and chunks of one connection and
direction leave strictly in the order they came: a chunk whose delay is over
still waits for the chunks before it, so lowering the delay never reorders
bytes. A stall holds the queued bytes; resume() lets them go, in order.

With match, the proxy follows the RESP stream: it splits the client's bytes
into requests and the server's into replies, pairs them in order, and delays
only the replies to requests containing the match bytes (a key, a command).
Connections in pub/sub mode (a SUBSCRIBE was seen) are never delayed by a
match rule: their pushes have no request. A stream that is not RESP is
passed through whole (no match delays on it).

Connection names come from sniffing the client's first bytes for a RESP
"CLIENT SETNAME <name>" (baton names its Redis connections baton-lease,
baton-side and baton-sub). The name is known before the command is forwarded,
so the reply to SETNAME itself is already delayed when the name matches.

Loopback by default (listen_host 127.0.0.1). Every thread is a daemon and
close() ends them all; nothing outlives the process.

Run as a program for manual experiments:

    python3 tests/support/faultproxy.py --target 127.0.0.1:6379 --port 16379
    (then type: delay 700 [name] | hold 1500 | stall | resume | cut | quit)
"""

import re
import socket
import sys
import threading
import time

_SETNAME = re.compile(rb"SETNAME\r\n\$\d+\r\n([^\r\n]{1,128})\r\n", re.IGNORECASE)
_SNIFF_MAX = 16384
_EOF = object()
_SUBSCRIBE = (b"SUBSCRIBE", b"PSUBSCRIBE", b"SSUBSCRIBE")


def resp_end(buf, pos=0):
    """End offset of the complete RESP value starting at pos, None when
    incomplete; ValueError when buf is not RESP (RESP2 and RESP3 types)."""
    if pos >= len(buf):
        return None
    t = buf[pos:pos + 1]
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        if len(buf) - pos > 65536:
            raise ValueError("no line end")
        return None
    if t in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return nl + 2
    try:
        n = int(buf[pos + 1:nl])
    except ValueError:
        raise ValueError("bad length %r" % buf[pos:nl][:20])
    if t in (b"$", b"!", b"="):
        if n < 0:
            return nl + 2
        end = nl + 2 + n + 2
        return end if len(buf) >= end else None
    if t in (b"*", b"~", b">", b"%", b"|"):
        if t in (b"%", b"|"):
            n *= 2
        p = nl + 2
        for _ in range(max(0, n)):
            p = resp_end(buf, p)
            if p is None:
                return None
        return p
    raise ValueError("not RESP: %r" % t)


def _first_word(req):
    """The command name of a RESP request array, upper case (b"" if none)."""
    try:
        nl = req.index(b"\r\n")
        nl2 = req.index(b"\r\n", nl + 2)
        n = int(req[nl + 3:nl2])
        return req[nl2 + 2:nl2 + 2 + n].upper()
    except ValueError:
        return b""


class _Direction:
    """One direction of one connection: a reader thread queues chunks with
    their due time, a writer thread sends them in order once due."""

    def __init__(self, conn, src, dst, name):
        self.conn = conn
        self.src, self.dst = src, dst
        self.name = name  # "c2s" or "s2c"
        self.queue = []   # [(due monotonic, bytes or _EOF)]
        self.cv = threading.Condition()
        self.done = False
        self.bytes = 0
        self.reader = threading.Thread(target=self._read, daemon=True,
                                       name="faultproxy-%s-r" % name)
        self.writer = threading.Thread(target=self._write, daemon=True,
                                       name="faultproxy-%s-w" % name)

    def start(self):
        self.reader.start()
        self.writer.start()

    def wake(self):
        with self.cv:
            self.cv.notify_all()

    def _read(self):
        proxy = self.conn.proxy
        buf = b""
        resp = proxy.resp
        while not self.done:
            try:
                data = self.src.recv(65536)
            except OSError:
                data = None
            now = time.monotonic()
            if data and self.name == "c2s" and self.conn.name is None \
                    and self.conn.sniffed < _SNIFF_MAX:
                self.conn.sniff(data)
            if not data:
                with self.cv:
                    if buf:
                        self.queue.append((now, buf))
                    self.queue.append((now, _EOF))
                    self.cv.notify_all()
                return
            if not resp:
                self._put(now, data, proxy._delay_for(self.conn, self.name))
                continue
            # RESP: whole requests / replies, each with its own delay
            buf += data
            pos = 0
            while True:
                try:
                    end = resp_end(buf, pos)
                except (ValueError, RecursionError):
                    resp = False  # not RESP after all: raw from here on
                    self.conn.raw = True
                    end = None
                if end is None:
                    break
                msg = buf[pos:end]
                pos = end
                if self.name == "c2s":
                    self.conn.note_request(msg, proxy._match)
                    self._put(now, msg, proxy._delay_for(self.conn, self.name))
                else:
                    matched = self.conn.reply_matched()
                    self._put(now, msg, proxy._delay_for(self.conn, self.name, matched))
            buf = buf[pos:]
            if not resp and buf:
                self._put(now, buf, proxy._delay_for(self.conn, self.name))
                buf = b""

    def _put(self, now, data, delay_ms):
        due = now + delay_ms / 1000.0
        if self.name == "s2c":
            hold = self.conn.proxy._hold_new_ms_at(self.conn)
            if hold > 0:
                due = max(due, self.conn.t0 + hold / 1000.0)
        with self.cv:
            self.queue.append((due, data))
            self.cv.notify_all()

    def _write(self):
        proxy = self.conn.proxy
        while True:
            with self.cv:
                while True:
                    if self.done:
                        return
                    if self.queue and not proxy._stalled:
                        due, data = self.queue[0]
                        wait = due - time.monotonic()
                        if wait <= 0:
                            self.queue.pop(0)
                            break
                        self.cv.wait(min(wait, 0.5))
                    else:
                        self.cv.wait(0.5)
            if data is _EOF:
                try:
                    self.dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                self.conn._half_closed(self)
                return
            try:
                self.dst.sendall(data)
                self.bytes += len(data)
            except OSError:
                self.conn.close()
                return


class _Conn:
    def __init__(self, proxy, client, upstream, peer):
        self.proxy = proxy
        self.client, self.upstream = client, upstream
        self.peer = peer
        self.t0 = time.monotonic()
        self.name = None
        self.sniffed = 0
        self._sniff_buf = b""
        self.closed = False
        self._lock = threading.Lock()
        self._finished = set()
        self.hold_new_ms = proxy._hold_new_ms
        self.raw = False
        self.pubsub = False
        self._flags = []  # per request sent and not yet answered: matched the rule?
        self._flags_lock = threading.Lock()
        self.c2s = _Direction(self, client, upstream, "c2s")
        self.s2c = _Direction(self, upstream, client, "s2c")

    def sniff(self, data):
        self._sniff_buf = (self._sniff_buf + data)[-_SNIFF_MAX:]
        self.sniffed += len(data)
        m = _SETNAME.search(self._sniff_buf)
        if m:
            self.name = m.group(1).decode(errors="replace")
            self._sniff_buf = b""

    def note_request(self, req, match):
        if _first_word(req) in _SUBSCRIBE:
            self.pubsub = True
        hit = bool(match) and match in req
        with self._flags_lock:
            self._flags.append(hit)
        hook = self.proxy._on_match
        if hit and hook is not None:
            hook(self, req)

    def reply_matched(self):
        """Whether the request this reply answers matched the rule."""
        if self.pubsub or self.raw:
            return False
        with self._flags_lock:
            return self._flags.pop(0) if self._flags else False

    def start(self):
        self.c2s.start()
        self.s2c.start()

    def wake(self):
        self.c2s.wake()
        self.s2c.wake()

    def _half_closed(self, d):
        with self._lock:
            self._finished.add(d.name)
            both = len(self._finished) == 2
        if both:
            self.close()

    def close(self):
        with self._lock:
            if self.closed:
                return
            self.closed = True
        for d in (self.c2s, self.s2c):
            d.done = True
        for s in (self.client, self.upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        self.wake()
        self.proxy._forget(self)


class FaultProxy:
    """See the module docstring. port=0: a port chosen by the kernel."""

    def __init__(self, target_port, target_host="127.0.0.1", port=0, listen_host="127.0.0.1",
                 connect_timeout=2.0, resp=True):
        self.target = (target_host, target_port)
        self.resp = resp  # split the streams into RESP requests / replies
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._conns = []
        self._delay_ms = 0
        self._delay_names = None
        self._delay_dir = "s2c"
        self._match = None
        self._on_match = None
        self._hold_new_ms = 0
        self._stalled = False
        self._refuse = False
        self._closed = False
        self.accepted = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((listen_host, port))
        self.sock.listen(128)
        self.sock.settimeout(0.2)
        self.host = listen_host
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name="faultproxy-accept")
        self._thread.start()

    # -- controls -----------------------------------------------------------
    def set_delay(self, ms, names=None, direction="s2c", match=None, on_match=None):
        """Delays what is read from now on by ms. names: a set of connection
        names (CLIENT SETNAME; None in it = unnamed connections) to delay,
        None = every connection. direction: "s2c" (replies), "c2s"
        (requests) or "both". match (bytes or str): only the replies to
        requests containing it (direction s2c; RESP streams only).
        on_match(conn, request): called (on the proxy's reader thread) for
        each matching request, just before it is forwarded."""
        if isinstance(match, str):
            match = match.encode()
        with self._lock:
            self._delay_ms = max(0, int(ms))
            self._delay_names = set(names) if names else None
            self._delay_dir = "s2c" if match else direction
            self._match = match or None
            self._on_match = on_match if match else None
        self._wake_all()

    def set_hold_new(self, ms):
        """Connections accepted from now on: their server -> client bytes
        wait until the connection is ms old (a slow handshake)."""
        with self._lock:
            self._hold_new_ms = max(0, int(ms))

    def stall(self):
        """Holds every queued and future byte, both directions."""
        with self._lock:
            self._stalled = True
        self._wake_all()

    def resume(self):
        """No stall, no delay, and no hold for connections accepted from now
        on; held bytes go out in order (a connection accepted under a hold
        keeps it)."""
        with self._lock:
            self._stalled = False
            self._delay_ms = 0
            self._delay_names = None
            self._match = None
            self._on_match = None
            self._hold_new_ms = 0
        self._wake_all()

    def cut(self):
        """Closes every current connection, both sides. Returns how many."""
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close()
        return len(conns)

    def refuse(self, on=True):
        """While on, new connections are accepted and closed at once."""
        with self._lock:
            self._refuse = bool(on)

    def connections(self):
        """[(name or None, age in s, peer)] of the open connections."""
        now = time.monotonic()
        with self._lock:
            return [(c.name, now - c.t0, c.peer) for c in self._conns]

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        self._thread.join(2)
        self.cut()

    # -- internals ----------------------------------------------------------
    def _delay_for(self, conn, direction, matched=False):
        with self._lock:
            if self._delay_ms <= 0:
                return 0
            if self._delay_dir != "both" and self._delay_dir != direction:
                return 0
            if self._delay_names is not None and conn.name not in self._delay_names:
                return 0
            if self._match is not None and not matched:
                return 0
            return self._delay_ms

    def _hold_new_ms_at(self, conn):
        """The hold that applies to conn: the one set when it was accepted."""
        return conn.hold_new_ms

    def _wake_all(self):
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.wake()

    def _forget(self, conn):
        with self._lock:
            try:
                self._conns.remove(conn)
            except ValueError:
                pass

    def _accept_loop(self):
        while not self._closed:
            try:
                client, peer = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            with self._lock:
                refuse = self._refuse
            if refuse:
                client.close()
                continue
            try:
                up = socket.create_connection(self.target, timeout=self.connect_timeout)
                up.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(self, client, up, peer)
            with self._lock:
                if self._closed:
                    conn.closed = True
                    client.close()
                    up.close()
                    return
                self._conns.append(conn)
                self.accepted += 1
            conn.start()


def _cli(argv):
    import argparse
    ap = argparse.ArgumentParser(description="fault-injecting TCP proxy (see the docstring)")
    ap.add_argument("--target", required=True, help="host:port to forward to")
    ap.add_argument("--port", type=int, default=0, help="listen port (0: any)")
    ap.add_argument("--listen", default="127.0.0.1")
    a = ap.parse_args(argv)
    host, _, port = a.target.rpartition(":")
    p = FaultProxy(int(port), host or "127.0.0.1", a.port, a.listen)
    print("listening on %s:%d -> %s" % (a.listen, p.port, a.target), flush=True)
    try:
        for line in sys.stdin:
            w = line.split()
            if not w:
                continue
            if w[0] == "delay":
                p.set_delay(int(w[1]), set(w[2:]) or None)
            elif w[0] == "hold":
                p.set_hold_new(int(w[1]))
            elif w[0] == "stall":
                p.stall()
            elif w[0] == "resume":
                p.resume()
            elif w[0] == "cut":
                print("cut %d" % p.cut(), flush=True)
            elif w[0] == "list":
                for c in p.connections():
                    print(c, flush=True)
            elif w[0] == "quit":
                break
    finally:
        p.close()


if __name__ == "__main__":
    _cli(sys.argv[1:])
