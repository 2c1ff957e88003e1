#!/usr/bin/env python3
"""Reference receiver for baton's http sink: fencing by epoch, dedup by id.

    receiver.py --port 8080 [--host 127.0.0.1] --db receiver.db [--reject-ids a,b]

POST (any path) one JSON envelope, or NDJSON lines of them (Content-Type
application/x-ndjson). An X-Baton-Epoch lower than the highest seen for its
X-Baton-Endpoint: 409, nothing applied. Otherwise the mark is raised and each
message whose id is not stored yet is inserted: check, raise and inserts in
ONE transaction. 200 applied or duplicate, 400 malformed, 409 fenced (only),
503 database busy. GET /messages, GET /health. Contract: docs/receiver.md.
"""
import argparse
import json
import sqlite3
import sys
import urllib.parse
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCHEMA = """
CREATE TABLE IF NOT EXISTS fence (endpoint TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS messages (seq INTEGER PRIMARY KEY, endpoint TEXT NOT NULL,
    id TEXT, epoch INTEGER NOT NULL, body TEXT NOT NULL, UNIQUE (endpoint, id));
"""  # UNIQUE lets several rows have id NULL: a message without id is always applied


def connect(path):
    # isolation_level=None: no implicit transactions, we say BEGIN ourselves;
    # timeout: how long to wait for another writer before "database is locked"
    return sqlite3.connect(path, timeout=2.0, isolation_level=None)


def parse(body, ndjson, header_id):
    """[(id or None, epoch or None, line text)]; ValueError says what is wrong."""
    docs = body.split(b"\n") if ndjson else [body]
    out = []
    for n, doc in enumerate(docs, 1):
        if ndjson and not doc.strip():
            continue
        try:
            env = json.loads(doc)
        except ValueError as e:  # also bad UTF-8
            raise ValueError("malformed JSON%s: %s" % (" on line %d" % n if ndjson else "", e))
        env = env if isinstance(env, dict) else {}
        mid = env.get("id") or (None if ndjson else header_id) or None  # the body's is exact
        epoch = env.get("epoch") if isinstance(env.get("epoch"), int) else None
        out.append((None if mid is None else str(mid), epoch, doc.decode()))
    if not out:
        raise ValueError("no message in the body")
    return out


def apply(path, endpoint, epoch, msgs):
    """The fence check, the raise of the mark and the inserts, in ONE
    transaction: BEGIN IMMEDIATE takes the write lock before the mark is read,
    so no other request (thread or process) can raise the mark between this
    check and these writes. Returns (HTTP status, answer)."""
    with closing(connect(path)) as db:
        try:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT epoch FROM fence WHERE endpoint = ?", (endpoint,)).fetchone()
            if row and epoch < row[0]:
                db.execute("ROLLBACK")
                sys.stderr.write("receiver: fenced %r epoch %d < %d\n" % (endpoint, epoch, row[0]))
                return 409, {"error": "fenced", "epoch": row[0]}
            # epoch >= the mark here: equal keeps it, higher raises it
            db.execute("INSERT OR REPLACE INTO fence VALUES (?, ?)", (endpoint, epoch))
            applied = 0
            for mid, line_epoch, text in msgs:  # an id already stored is ignored
                applied += db.execute(
                    "INSERT OR IGNORE INTO messages (endpoint, id, epoch, body) VALUES (?, ?, ?, ?)",
                    (endpoint, mid, epoch if line_epoch is None else line_epoch, text)).rowcount
            db.execute("COMMIT")
            return 200, {"applied": applied, "duplicates": len(msgs) - applied}
        except sqlite3.OperationalError as e:  # "database is locked": busy past the timeout
            if db.in_transaction:
                db.execute("ROLLBACK")
            if "locked" in str(e) or "busy" in str(e):
                return 503, {"error": "database busy"}
            return 500, {"error": str(e)}  # disk full, I/O error: baton retries too


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as baton expects

    def reply(self, status, obj, headers=()):
        text = obj if isinstance(obj, str) else json.dumps(obj)
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(obj, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self.reply(200, {"ok": True})
        if self.path != "/messages":
            return self.reply(404, {"error": "not found"})
        with closing(connect(self.server.db)) as db:
            rows = db.execute("SELECT endpoint, id, epoch FROM messages ORDER BY seq").fetchall()
        self.reply(200, [{"endpoint": e, "id": i, "epoch": n} for e, i, n in rows])

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        unquote = urllib.parse.unquote  # baton percent-encodes header values
        endpoint = unquote(self.headers.get("X-Baton-Endpoint", ""))
        try:
            epoch = int(self.headers.get("X-Baton-Epoch", ""))
        except ValueError:
            return self.reply(400, "missing or malformed X-Baton-Epoch")
        ndjson = self.headers.get("Content-Type", "").startswith("application/x-ndjson")
        header_id = unquote(self.headers["X-Baton-Id"]) if "X-Baton-Id" in self.headers else None
        try:
            msgs = parse(body, ndjson, header_id)
        except ValueError as e:
            return self.reply(400, str(e))
        if any(mid in self.server.reject_ids for mid, _, _ in msgs):
            return self.reply(400, "rejected by --reject-ids")
        status, answer = apply(self.server.db, endpoint, epoch, msgs)
        self.reply(status, answer, [("Retry-After", "1")] if status == 503 else [])

    def log_message(self, fmt, *args):  # no access log (fenced requests are logged)
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # listen backlog; the default 5 resets baton's parallel connects

    def handle_error(self, request, client_address):
        # baton aborts a request whose lease term ended: not worth a traceback
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--db", required=True, help="sqlite file (created if missing)")
    ap.add_argument("--reject-ids", default="", help="comma-separated ids answered 400")
    a = ap.parse_args()
    with closing(connect(a.db)) as db:
        db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
        db.executescript(SCHEMA)
    server = Server((a.host, a.port), Handler)
    server.db = a.db
    server.reject_ids = set(filter(None, a.reject_ids.split(",")))
    print("listening on %s:%d" % (a.host, server.server_address[1]), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
