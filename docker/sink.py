"""A minimal HTTP sink for the compose demo: prints one line per envelope
with the replica's fencing epoch, and flags a message seen before (same
endpoint and id) with DUPLICATE, or REPLAYED when baton marked it so.

GET /messages answers every envelope received so far, in arrival order, as
a JSON list of {"n", "epoch", "peer", "envelope"} (the compose test reads
it; "peer" is the sending replica's address)."""
import http.server
import json
import threading

seen = set()
records = []
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, status, body=b"", ctype="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path != "/messages":
            self.answer(404, b"try /messages\n")
            return
        with lock:
            body = json.dumps(records).encode()
        self.answer(200, body, "application/json")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        epoch = self.headers.get("X-Baton-Epoch")
        with lock:  # one batch's lines together, numbered in arrival order
            for line in body.splitlines():
                try:
                    env = json.loads(line)
                except ValueError:
                    print("not JSON: %r" % line[:80], flush=True)
                    continue
                key = (env.get("endpoint"), env.get("id"))
                flag = ""
                if key in seen:
                    flag = "  REPLAYED" if env.get("replayed") else "  DUPLICATE"
                seen.add(key)
                records.append({"n": len(records), "epoch": epoch, "peer": self.client_address[0],
                                "envelope": env})
                payload = env.get("payload")
                if payload is None:  # CDC rows: the row after (or before) the change
                    payload = env.get("after") or env.get("before") or env.get("slot")
                if not isinstance(payload, str):
                    payload = json.dumps(payload, separators=(",", ":"))
                print("%-10s epoch=%-20s %s%s" % (env.get("endpoint"), epoch, payload[:60], flag),
                      flush=True)
        self.answer(200)


http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
