"""A receiver for the http sink that can go down as a stopped service does
(issue 37 tests: test_receiver_down.py, test_receiver_down_sources.py).

    recv = Receiver(answer=lambda body: (200, {}, b""))
    recv.down()   # the port refuses connections, kept-alive ones are shut
    recv.up()     # listening again on the same port
    recv.accepted()       # envelopes answered 200, in the order answered
    recv.requests         # (monotonic time, headers, body, status)

Going down is atomic with respect to answers: a request is recorded only
together with writing its whole answer, under the lock that down() takes
first, so no recorded answer is cut by down(). (A receiver that applies a
message and then loses the answer makes the sender retry it: a duplicate no
sender can avoid, not the one these tests count.) A request read once
down() began is left unanswered and its connection shut (counted in
unanswered).
"""
import http.server
import json
import socket
import threading
import time

import harness as h


class Receiver:
    def __init__(self, port=None, answer=None):
        self.port = port or h.free_port()
        self.url = "http://127.0.0.1:%d/ingest" % self.port
        self.answer = answer or (lambda body: (200, {}, b""))
        self.requests = []  # (monotonic time, headers, body, status), in the order answered
        self.lock = threading.Lock()
        self.conns = set()
        self.server = None
        self.is_down = False
        self.unanswered = 0
        self.up()
        h._cleanups.append(self.down)

    def up(self):
        recv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def setup(self):
                super().setup()
                with recv.lock:
                    recv.conns.add(self.connection)
                    if recv.is_down:
                        recv._shut(self.connection)

            def finish(self):
                with recv.lock:
                    recv.conns.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                status, hdrs, out = recv.answer(body)
                with recv.lock:
                    if recv.is_down:
                        recv.unanswered += 1
                        self.close_connection = True
                        recv._shut(self.connection)
                        return
                    self.send_response(status)
                    for k, v in hdrs.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                    self.wfile.flush()
                    recv.requests.append((time.monotonic(), dict(self.headers), body, status))

        class Server(http.server.ThreadingHTTPServer):
            allow_reuse_address = True
            request_queue_size = 128
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass

        with self.lock:
            self.is_down = False
        self.server = Server(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def _shut(conn):
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def down(self):
        with self.lock:
            self.is_down = True
            for c in list(self.conns):
                self._shut(c)
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        with self.lock:
            for c in list(self.conns):
                self._shut(c)

    def accepted(self):
        """Envelopes accepted (200), in the order their requests were answered."""
        return [e for (_t, e) in self.accepted_at()]

    def accepted_at(self):
        """(monotonic time answered, envelope) of every accepted envelope."""
        with self.lock:
            reqs = list(self.requests)
        out = []
        for (t, _hd, body, status) in reqs:
            if status == 200:
                out.extend((t, json.loads(line)) for line in body.split(b"\n") if line.strip())
        return out
