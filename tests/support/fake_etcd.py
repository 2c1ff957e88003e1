"""A fake etcd v3 JSON gateway for hostile-server tests, stdlib only.

It answers on 127.0.0.1 (a free port, HTTP/1.1 keep-alive) the way etcd
3.4's grpc-gateway does for what baton asks (guard/locker_etcd.c): int64
fields as decimal strings, false and zero fields omitted, errors as
{"error", "code", "message"} with the gRPC code's HTTP status, /v3/watch as
a chunked stream of one JSON object per line. Behind it is a small honest
etcd: one key space with revisions, leases that expire (their keys deleted,
DELETE events sent to watchers), transactions with compares.

Any request kind can be answered otherwise, for every request or a number
of them:

    sys.path.insert(0, ".../tests/support")
    import fake_etcd
    f = fake_etcd.FakeEtcd()                       # started; f.close() stops it
    f.url                                          # "http://127.0.0.1:PORT"

    def lying_txn(req, honest):                    # req: the parsed JSON body
        if not fake_etcd.is_acquire(req):
            return honest()                        # the honest answer, applied
        return {"header": f.header(), "succeeded": "false"}   # nothing applied
    f.on("/v3/kv/txn", lying_txn)                  # every txn; times=N: the next N

    def rev_overflow(req, honest):
        a = honest()                               # applied, then altered
        a["header"]["revision"] = "99999999999999999999"
        return a

A handler returns a dict or list (sent as JSON, HTTP 200), Raw(body,
status, headers) for bytes as they are, or Stream(chunks) for a chunked
answer whose chunks (bytes) come from any iterable, endless ones included
(the stream ends when the client goes away or the fake is closed).

    f.hold(pred)            # keys for which pred(key) is true are held by
                            # "another replica" (a lease of an hour) as soon
                            # as a request names them: baton stays a standby
    f.requests(path)        # the parsed bodies received on path, in order
    f.count(path)
    f.kv(key)               # the stored entry of key (dict) or None
"""

import base64
import http.server
import json
import socket
import socketserver
import threading
import time

CLUSTER_ID = "14841639068965178418"
MEMBER_ID = "10276657743932975437"   # beyond int64: member IDs are uint64

GRPC_HTTP = {3: 400, 5: 404, 9: 400, 14: 503, 16: 401}


def b64(b):
    if isinstance(b, str):
        b = b.encode()
    return base64.b64encode(b).decode()


def unb64(s):
    return base64.b64decode(s or "")


def is_acquire(req):
    """A txn that creates a key if absent (baton's try_lock and claim)."""
    return any(c.get("target") == "CREATE" for c in req.get("compare", []))


class Raw:
    def __init__(self, body, status=200, headers=()):
        self.body = body.encode() if isinstance(body, str) else body
        self.status = status
        self.headers = list(headers)


class Stream:
    def __init__(self, chunks, status=200):
        self.chunks = chunks
        self.status = status


class EtcdError(Exception):
    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code
        self.message = message


class FakeEtcd:
    def __init__(self, port=0):
        self.mu = threading.RLock()
        self.cv = threading.Condition(self.mu)
        self.rev = 1
        self.kvs = {}          # key bytes -> {value, create_revision, mod_revision, version, lease}
        self.leases = {}       # id -> {"ttl", "granted", "expires", "keys": set}
        self.next_lease = 7587870000000000001
        self.watch_events = []  # (seq, key, event dict)
        self.hooks = {}        # path -> [fn, times or None]
        self.hold_pred = None
        self.log = []          # (path, req)
        self.closed = False
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                try:
                    req = json.loads(body or b"{}")
                except ValueError:
                    req = None
                fake._serve(self, self.path, req)

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass   # a client gone mid-answer

        self.server = Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.sweeper = threading.Thread(target=self._sweep_loop, daemon=True)
        self.sweeper.start()

    # -- scripting -----------------------------------------------------------
    def on(self, path, fn, times=None):
        """fn(req, honest) answers the next `times` requests on path (all
        when None)."""
        with self.mu:
            self.hooks[path] = [fn, times]

    def off(self, path):
        with self.mu:
            self.hooks.pop(path, None)

    def hold(self, pred):
        with self.mu:
            self.hold_pred = pred

    def requests(self, path):
        with self.mu:
            return [r for p, r in self.log if p == path]

    def count(self, path):
        return len(self.requests(path))

    def kv(self, key):
        with self.mu:
            e = self.kvs.get(key.encode() if isinstance(key, str) else key)
            return dict(e) if e else None

    def header(self):
        with self.mu:
            return {"cluster_id": CLUSTER_ID, "member_id": MEMBER_ID,
                    "revision": str(self.rev), "raft_term": "2"}

    def close(self):
        with self.mu:
            self.closed = True
            self.cv.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # -- serving ---------------------------------------------------------------
    def _serve(self, handler, path, req):
        with self.mu:
            self.log.append((path, req))
            hook = self.hooks.get(path)
            fn = None
            if hook:
                fn = hook[0]
                if hook[1] is not None:
                    hook[1] -= 1
                    if hook[1] <= 0:
                        del self.hooks[path]

        def honest():
            return self._honest(path, req)

        try:
            if req is None or not isinstance(req, dict):
                raise EtcdError(3, "invalid request body")
            self._held_by_other(req)
            ans = fn(req, honest) if fn else honest()
        except EtcdError as e:
            ans = Raw(json.dumps({"error": e.message, "code": e.code, "message": e.message}),
                      GRPC_HTTP.get(e.code, 500))
        self._send(handler, ans)

    def _send(self, handler, ans):
        try:
            if isinstance(ans, Stream):
                handler.send_response(ans.status)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Transfer-Encoding", "chunked")
                handler.end_headers()
                for chunk in ans.chunks:
                    if self.closed:
                        break
                    if chunk:
                        handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        handler.wfile.flush()
                handler.wfile.write(b"0\r\n\r\n")
                handler.close_connection = True
                return
            if not isinstance(ans, Raw):
                ans = Raw(json.dumps(ans))
            handler.send_response(ans.status)
            names = [k.lower() for k, _v in ans.headers]
            if "content-type" not in names:
                handler.send_header("Content-Type", "application/json")
            for k, v in ans.headers:
                handler.send_header(k, v)
            handler.send_header("Content-Length", str(len(ans.body)))
            handler.end_headers()
            handler.wfile.write(ans.body)
        except (BrokenPipeError, ConnectionResetError, socket.timeout, OSError):
            handler.close_connection = True

    # -- the honest etcd -----------------------------------------------------
    def _held_by_other(self, req):
        """Keys matching hold(pred) named by req are put first, held by
        another replica under a lease of an hour."""
        if self.hold_pred is None:
            return
        keys = []
        if "key" in req:
            keys.append(req["key"])
        for c in req.get("compare", []):
            keys.append(c.get("key"))
        cr = req.get("create_request")
        if isinstance(cr, dict):
            keys.append(cr.get("key"))
        with self.mu:
            for k in keys:
                if not k:
                    continue
                kb = unb64(k)
                if kb in self.kvs or not self.hold_pred(kb.decode(errors="replace")):
                    continue
                lid = self._grant(3600)
                self.rev += 1
                self._put(kb, b"another replica's token", lid)
                self._put(kb + b":holder", b"otherhost pid 1", lid)

    def _grant(self, ttl):
        lid = self.next_lease
        self.next_lease += 1
        now = time.monotonic()
        self.leases[lid] = {"ttl": ttl, "granted": ttl, "expires": now + ttl, "keys": set()}
        return lid

    def _put(self, key, value, lease):
        """Under mu, at self.rev (already advanced)."""
        old = self.kvs.get(key)
        if old and old["lease"] and old["lease"] in self.leases:
            self.leases[old["lease"]]["keys"].discard(key)
        e = {"value": value, "create_revision": old["create_revision"] if old else self.rev,
             "mod_revision": self.rev, "version": (old["version"] + 1) if old else 1,
             "lease": lease or 0}
        self.kvs[key] = e
        if lease:
            self.leases[lease]["keys"].add(key)
        self._event(key, {"kv": self._kv_json(key, e)})   # PUT: type omitted

    def _delete(self, key):
        e = self.kvs.pop(key, None)
        if e is None:
            return 0
        if e["lease"] and e["lease"] in self.leases:
            self.leases[e["lease"]]["keys"].discard(key)
        self._event(key, {"type": "DELETE",
                          "kv": {"key": b64(key), "mod_revision": str(self.rev)}})
        return 1

    def _event(self, key, ev):
        self.watch_events.append((len(self.watch_events), key, ev))
        self.cv.notify_all()

    @staticmethod
    def _kv_json(key, e):
        d = {"key": b64(key), "create_revision": str(e["create_revision"]),
             "mod_revision": str(e["mod_revision"]), "version": str(e["version"]),
             "value": b64(e["value"])}
        if e["lease"]:
            d["lease"] = str(e["lease"])
        return d

    def _expire(self):
        now = time.monotonic()
        with self.mu:
            for lid in [l for l, v in self.leases.items() if v["expires"] <= now]:
                self._revoke(lid)

    def _revoke(self, lid):
        lease = self.leases.pop(lid, None)
        if lease is None:
            return False
        if lease["keys"]:
            self.rev += 1
            for k in sorted(lease["keys"]):
                self._delete(k)
        return True

    def _sweep_loop(self):
        while not self.closed:
            time.sleep(0.1)
            self._expire()

    def _range_json(self, key):
        e = self.kvs.get(key)
        r = {"header": self.header()}
        if e:
            r["kvs"] = [self._kv_json(key, e)]
            r["count"] = "1"
        return r

    def _compare(self, c):
        e = self.kvs.get(unb64(c.get("key")))
        target = c.get("target", "VERSION")
        if target == "CREATE":
            have, want = (e["create_revision"] if e else 0), int(c.get("create_revision", 0))
        elif target == "MOD":
            have, want = (e["mod_revision"] if e else 0), int(c.get("mod_revision", 0))
        elif target == "VALUE":
            if e is None:
                return False
            have, want = e["value"], unb64(c.get("value"))
        elif target == "LEASE":
            have, want = (e["lease"] if e else 0), int(c.get("lease", 0))
        else:
            have, want = (e["version"] if e else 0), int(c.get("version", 0))
        res = c.get("result", "EQUAL")
        return {"EQUAL": have == want, "NOT_EQUAL": have != want,
                "GREATER": have > want, "LESS": have < want}[res]

    def _honest(self, path, req):
        self._expire()
        with self.mu:
            if path == "/v3/maintenance/status":
                return {"header": self.header(), "version": "3.4.23", "dbSize": "20480",
                        "leader": MEMBER_ID, "raftIndex": str(self.rev + 10),
                        "raftTerm": "2", "raftAppliedIndex": str(self.rev + 10),
                        "dbSizeInUse": "20480"}
            if path == "/v3/auth/authenticate":
                return {"header": self.header(), "token": "fake.token.1"}
            if path == "/v3/kv/range":
                return self._range_json(unb64(req.get("key")))
            if path == "/v3/lease/grant":
                ttl = int(req.get("TTL", 0))
                lid = self._grant(ttl)
                return {"header": self.header(), "ID": str(lid), "TTL": str(ttl)}
            if path == "/v3/lease/revoke":
                if not self._revoke(int(req.get("ID", 0))):
                    raise EtcdError(5, "etcdserver: requested lease not found")
                return {"header": self.header()}
            if path == "/v3/lease/keepalive":
                lid = int(req.get("ID", 0))
                lease = self.leases.get(lid)
                res = {"header": self.header(), "ID": str(lid)}
                if lease:
                    lease["expires"] = time.monotonic() + lease["granted"]
                    res["TTL"] = str(lease["granted"])
                return {"result": res}
            if path == "/v3/lease/timetolive":
                lid = int(req.get("ID", 0))
                lease = self.leases.get(lid)
                if lease is None:
                    return {"header": self.header(), "ID": str(lid), "TTL": "-1"}
                left = max(0, int(lease["expires"] - time.monotonic()))
                return {"header": self.header(), "ID": str(lid), "TTL": str(left),
                        "grantedTTL": str(lease["granted"])}
            if path == "/v3/kv/txn":
                return self._txn(req)
            if path == "/v3/watch":
                return Stream(self._watch_stream(req))
        raise EtcdError(12, "unknown service path %s" % path)

    def _txn(self, req):
        ok = all(self._compare(c) for c in req.get("compare", []))
        ops = req.get("success" if ok else "failure", [])
        for op in ops:
            p = op.get("request_put")
            if p and p.get("lease") and int(p["lease"]) not in self.leases:
                raise EtcdError(5, "etcdserver: requested lease not found")
        writes = any("request_put" in op or "request_delete_range" in op for op in ops)
        if writes:
            self.rev += 1
        responses = []
        for op in ops:
            if "request_put" in op:
                p = op["request_put"]
                self._put(unb64(p.get("key")), unb64(p.get("value")), int(p.get("lease", 0)))
                responses.append({"response_put": {"header": self.header()}})
            elif "request_delete_range" in op:
                n = self._delete(unb64(op["request_delete_range"].get("key")))
                r = {"header": self.header()}
                if n:
                    r["deleted"] = str(n)
                responses.append({"response_delete_range": r})
            elif "request_range" in op:
                responses.append({"response_range":
                                  self._range_json(unb64(op["request_range"].get("key")))})
        ans = {"header": self.header(), "responses": responses}
        if ok:
            ans["succeeded"] = True
        return ans

    def _watch_stream(self, req):
        key = unb64((req.get("create_request") or {}).get("key"))
        with self.mu:
            seen = len(self.watch_events)
        yield (json.dumps({"result": {"header": self.header(), "created": True}})
               + "\n").encode()
        while True:
            with self.mu:
                while len(self.watch_events) == seen and not self.closed:
                    self.cv.wait(0.5)
                if self.closed:
                    return
                evs = [ev for _s, k, ev in self.watch_events[seen:] if k == key]
                seen = len(self.watch_events)
                hdr = self.header()
            if evs:
                yield (json.dumps({"result": {"header": hdr, "events": evs}}) + "\n").encode()


def endless_string(prefix=b'{"result":{"header":{},"created":true}}\n{"result":{"x":"',
                   chunk=64 * 1024, limit=None):
    """Chunks of a JSON string that never ends (a hostile watch answer):
    the prefix, then chunk bytes of 'a' forever (or up to limit bytes)."""
    yield prefix
    block = b"a" * chunk
    sent = 0
    while limit is None or sent < limit:
        yield block
        sent += len(block)
