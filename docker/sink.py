"""A minimal HTTP sink for the compose demo: prints one line per envelope
with the replica's fencing epoch, and counts duplicates by (endpoint, id)."""
import http.server
import json

seen = set()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        for line in body.splitlines():
            env = json.loads(line)
            key = (env.get("endpoint"), env.get("id") or env.get("payload"))
            dup = key in seen
            seen.add(key)
            print("%-10s epoch=%-20s %s%s" % (env.get("endpoint"), self.headers.get("X-Baton-Epoch"),
                                              (env.get("payload") or "")[:60], "  DUPLICATE" if dup else ""),
                  flush=True)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
