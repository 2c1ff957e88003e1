"""rabbitmq endpoint against a real rabbitmq-server (one broker for the whole
file, ~7-20 s to start, with a plain and a mutual-TLS listener) and real
baton processes coordinated through a real redis-server.

  1. 3 processes, fanout exchange, 5,000 messages with unique ids: each
     forwarded exactly once, by one process; rabbitmqctl shows exactly one
     private queue bound to the exchange (exclusive, auto-delete, 1 consumer)
  2. leader SIGKILL (private mode): the old private queue disappears, a
     standby binds and consumes within ttl + retry + 1 s; no duplicates;
     the gap (messages published while no queue was bound) is printed
  3. group mode, leader SIGKILL while publishing: zero lost; every duplicate
     is a redelivery of an unacked message ("redelivered": true); the count
     is printed
  4. topic exchange with two routing keys; header table (many field kinds)
     and binary payload: envelope exact; a non-matching key is not delivered
  5. wrong password, unknown vhost, exchange type mismatch: the broker's
     reply text is logged, each endpoint keeps retrying, and another endpoint
     of the same process (redis_psub) keeps forwarding
  6. mutual TLS against the broker's TLS listener (client certificate
     required; host "localhost"): with the right CA and a client
     certificate, N messages (published on the plain port) are forwarded
     exactly once; an unrelated CA: never consumes, a clear TLS error naming
     host:port, retries; no client certificate: refused by the broker
  7. headers exchange (bind_headers region=eu + tier=gold), one endpoint
     with bind_match "all" and one with "any", 3 processes: exactly the
     matching messages, each once, by one process per endpoint; the
     envelope's headers object is the published table
  8. hosts = [a dead port, the broker]: consumes from the broker, /status
     "source" names it; hosts = [two dead ports] in the same process: one
     error naming both hosts, the lease released, retries, no crash
  9. broker restart while leading (2 processes): the leader reconnects with
     backoff, gives its lease up once the broker is gone longer than the ttl,
     and after the restart exactly one queue is bound and messages flow
     exactly once; the unbound window is printed (runs last: it restarts the
     broker)

Default lease settings (ttl 3000, renew 1000, retry 250).
"""
import base64
import json
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
import rabbitmq as rmq  # noqa: E402
from tlsfiles import make_ca, make_tls_files  # noqa: E402

TTL, RETRY = 3000, 250
ORDER = ["test_three_replicas_exactly_once", "test_leader_sigkill", "test_group_mode_sigkill",
         "test_topic_headers_binary", "test_errors_keep_retrying", "test_tls",
         "test_headers_exchange", "test_hosts_list", "test_broker_restart"]

_broker = None
_tls = None


def broker():
    """The file's one broker, started on first use: a plain listener
    (srv.port) and a mutual-TLS one (srv.tls_port, certificates in _tls)."""
    global _broker, _tls
    if _broker is None:
        _tls = make_tls_files(h.mktemp("baton-rabbit-tls-"))
        _broker = rmq.RabbitServer(tls=_tls)
    return _broker


def ep_cfg(port, exchange, extra="", name="amqp"):
    return ('name = "%s"; type = "rabbitmq"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; exchange = "%s";\n%s\n' % (name, port, exchange, extra))


def records(b):
    b.poll_records()
    return [r for r in b.records if r.get("type") == "rabbitmq"]


def queue_of(b, ep=None):
    """Queue name the process (or its endpoint ep) last logged it consumes from."""
    text = b.stderr_text()
    if ep is not None:
        text = "\n".join(ln for ln in text.splitlines() if "rabbitmq[%s]" % ep in ln)
    m = re.findall(r'consuming from \w+ queue "([^"]+)"', text)
    return m[-1] if m else None


def wait_consuming(t, batons, timeout=20, exclude=()):
    """Waits until one process logs that it consumes; returns it."""
    def who():
        for b in batons:
            if b in exclude or not b.alive():
                continue
            if queue_of(b):
                return b
        return None
    b = h.wait_until(who, timeout, 0.05)
    t.require(b is not None, "no process started consuming within %ss" % timeout)
    return b


class SteadyPublisher(threading.Thread):
    """Publishes seq 0..count-1 at rate/s with publisher confirms; records the
    monotonic publish time of each seq."""

    def __init__(self, port, exchange, count, rate, key="", prefix="s"):
        super().__init__(daemon=True)
        self.c = rmq.Amqp(port)
        self.c.confirm_select()
        self.exchange, self.count, self.rate, self.key, self.prefix = exchange, count, rate, key, prefix
        self.sent_at = {}
        self.error = None
        self.stop_flag = False

    def run(self):
        try:
            t0 = time.monotonic()
            batch = max(1, self.rate // 100)
            i = 0
            while i < self.count and not self.stop_flag:
                due = t0 + i / float(self.rate)
                d = due - time.monotonic()
                if d > 0:
                    time.sleep(d)
                items = []
                for j in range(i, min(self.count, i + batch)):
                    self.sent_at[j] = time.monotonic()
                    items.append((self.exchange, self.key,
                                  json.dumps({"seq": j}).encode(),
                                  {"message_id": "%s-%d" % (self.prefix, j)}))
                self.c.publish_many(items)
                i += len(items)
            self.c.wait_confirms(60)
        except Exception as e:  # reported by the test
            self.error = e


def seq_of(r):
    return json.loads(r["payload"])["seq"]


# --------------------------------------------------------------------------

def test_three_replicas_exactly_once(t):
    srv = broker()
    redis = t.redis()
    pub = rmq.Amqp(srv.port)
    pub.exchange_declare("fan1", "fanout")
    main = h.main_cfg(redis_port=redis.port)
    batons = [t.baton(main, {"a.cfg": ep_cfg(srv.port, "fan1")}) for _ in range(3)]
    leader = wait_consuming(t, batons)
    time.sleep(1.0)  # standbys had several retries to (wrongly) start too
    bound = srv.bound_queues("fan1")
    h.log("queues bound to fan1: %s (leader %s: %s)" % (bound, leader.name, queue_of(leader)))
    t.check(bound == [queue_of(leader)], "expected exactly the leader's queue bound, got %r" % bound)
    qs = [q for q in srv.list_queues() if q["name"] in bound]
    t.check(len(qs) == 1 and qs[0]["exclusive"] == "true" and qs[0]["auto_delete"] == "true"
            and qs[0]["consumers"] == 1, "private queue properties: %r" % qs)
    t.check(sum(1 for b in batons if queue_of(b)) == 1, "more than one process consumed")

    total = 5000
    pub.confirm_select()
    t0 = time.monotonic()
    pub.publish_many(("fan1", "", b"payload-%d" % i, {"message_id": "id-%d" % i})
                     for i in range(total))
    acked, nacked = pub.wait_confirms(60)
    t.require(acked == total and nacked == 0, "broker confirmed %d/%d" % (acked, total))
    got = h.wait_until(lambda: sum(len(records(b)) for b in batons) >= total, 30, 0.1)
    dt = time.monotonic() - t0
    time.sleep(0.5)
    allr = [r for b in batons for r in records(b)]
    ids = [r["id"] for r in allr]
    h.log("forwarded %d of %d in %.2fs (%.0f msg/s end to end)" % (len(ids), total, dt, len(ids) / dt))
    t.check(got, "only %d of %d forwarded" % (len(ids), total))
    dups = h.duplicates(ids)
    t.check(not dups, "duplicates: %r" % list(dups.items())[:5])
    t.check(set(ids) == {"id-%d" % i for i in range(total)}, "missing ids: %d"
            % (total - len(set(ids))))
    per = {b.name: len(records(b)) for b in batons}
    t.check(sorted(per.values()) == [0, 0, total], "forwarded per process: %r" % per)
    r0 = next((r for r in allr if r["id"] == "id-7"), None)
    t.check(r0 and r0["exchange"] == "fan1" and r0["message_id"] == "id-7" and
            r0["payload"] == "payload-7" and r0["epoch"] > 0 and r0["delivery_tag"] > 0,
            "envelope: %r" % r0)
    bound = srv.bound_queues("fan1")
    t.check(len(bound) == 1, "after the run: queues bound %r" % bound)
    pub.close()


def test_leader_sigkill(t):
    srv = broker()
    redis = t.redis()
    c = rmq.Amqp(srv.port)
    c.exchange_declare("fan2", "fanout")
    c.close()
    main = h.main_cfg(redis_port=redis.port)
    batons = [t.baton(main, {"a.cfg": ep_cfg(srv.port, "fan2")}) for _ in range(3)]
    leader = wait_consuming(t, batons)
    old_q = queue_of(leader)
    pub = SteadyPublisher(srv.port, "fan2", count=4000, rate=400)
    pub.start()
    t.require(h.wait_until(lambda: len(records(leader)) >= 200, 10, 0.05), "leader not forwarding")
    t_kill = time.monotonic()
    leader.signal(signal.SIGKILL)
    leader.wait(5)
    others = [b for b in batons if b is not leader]
    new = h.wait_until(lambda: next((b for b in others if records(b)), None), 15, 0.01)
    t_first = time.monotonic()
    t.require(new is not None, "no standby forwarded within 15 s of the kill")
    took = t_first - t_kill
    bound_limit = (TTL + RETRY) / 1000.0 + 1.0
    h.log("standby %s consumed %.2fs after SIGKILL (limit %.2fs)" % (new.name, took, bound_limit))
    t.check(took <= bound_limit, "takeover took %.2fs > %.2fs" % (took, bound_limit))
    pub.join(30)
    t.require(pub.error is None, "publisher: %r" % pub.error)
    time.sleep(1.0)
    seqs_old = [seq_of(r) for r in records(leader)]
    seqs_new = [seq_of(r) for r in records(new)]
    allseq = seqs_old + seqs_new + [seq_of(r) for b in others if b is not new for r in records(b)]
    dups = h.duplicates(allseq)
    t.check(not dups, "duplicates after failover: %r" % list(dups.items())[:5])
    missing = sorted(set(range(4000)) - set(allseq))
    if missing:
        gap_s = pub.sent_at[missing[-1]] - pub.sent_at[missing[0]]
        h.log("gap: %d messages lost (seq %d..%d), published over %.2fs while no queue was "
              "bound; kill->new binding %.2fs" % (len(missing), missing[0], missing[-1], gap_s, took))
        contiguous = missing[-1] - missing[0] + 1 == len(missing)
        t.check(contiguous, "losses outside one contiguous gap: %r" % missing[:20])
        t.check(missing[0] >= max(seqs_old) - 200 if seqs_old else True,
                "losses before the kill")
    else:
        h.log("gap: no message lost")
    t.check(min(seqs_new) > max(seqs_old), "new leader delivered older messages")
    # the dead leader's exclusive queue is gone with its connection
    gone = h.wait_until(lambda: old_q not in [q["name"] for q in srv.list_queues()], 15, 0.5)
    t.check(gone, "old private queue %s still exists" % old_q)
    bound = srv.bound_queues("fan2")
    h.log("queues bound now: %s (old %s)" % (bound, old_q))
    t.check(bound == [queue_of(new)], "bound after failover: %r" % bound)


def test_group_mode_sigkill(t):
    srv = broker()
    redis = t.redis()
    c = rmq.Amqp(srv.port)
    c.exchange_declare("fan3", "fanout")
    main = h.main_cfg(redis_port=redis.port)
    cfg = ep_cfg(srv.port, "fan3", 'mode = "group"; prefetch = 50;', name="grp")
    batons = [t.baton(main, {"g.cfg": cfg}) for _ in range(3)]
    leader = wait_consuming(t, batons)
    t.cleanup(lambda: _delete_queue(srv.port, "baton.grp"))
    qname = queue_of(leader)
    t.check(qname == "baton.grp", "group queue name %r" % qname)
    total = 3000
    pub = SteadyPublisher(srv.port, "fan3", count=total, rate=500, prefix="g")
    pub.start()
    t.require(h.wait_until(lambda: len(records(leader)) >= 500, 15, 0.02), "leader not forwarding")
    leader.signal(signal.SIGKILL)
    leader.wait(5)
    pub.join(60)
    t.require(pub.error is None, "publisher: %r" % pub.error)
    t.check(pub.c.acked == total, "broker confirmed %d/%d" % (pub.c.acked, total))
    got = h.wait_until(lambda: len({seq_of(r) for b in batons for r in records(b)}) >= total, 30, 0.1)
    time.sleep(1.0)
    allr = [r for b in batons for r in records(b)]
    seqs = [seq_of(r) for r in allr]
    missing = set(range(total)) - set(seqs)
    dups = h.duplicates(seqs)
    redelivered_dups = {s for s in dups if any(r.get("redelivered") for r in allr if seq_of(r) == s)}
    redelivered = sum(1 for r in allr if r.get("redelivered"))
    h.log("group mode: %d forwarded, %d distinct, %d lost, %d duplicated (all redelivered "
          "unacked: %s); %d deliveries marked redelivered (in flight at the kill)"
          % (len(seqs), len(set(seqs)), len(missing), len(dups),
             len(redelivered_dups) == len(dups), redelivered))
    t.check(got and not missing, "lost in group mode: %d (%r)" % (len(missing), sorted(missing)[:10]))
    t.check(len(redelivered_dups) == len(dups),
            "duplicates that were not redeliveries: %r" % sorted(set(dups) - redelivered_dups)[:10])
    t.check(len(dups) <= 50 + 10, "more duplicates (%d) than the prefetch window" % len(dups))
    qs = {q["name"]: q for q in srv.list_queues()}
    t.check("baton.grp" in qs and qs["baton.grp"]["durable"] == "true"
            and qs["baton.grp"]["messages"] == 0, "group queue after the run: %r" % qs.get("baton.grp"))
    c.close()


def _delete_queue(port, name):
    c = rmq.Amqp(port)
    try:
        c.queue_delete(name)
    finally:
        c.close()


def test_topic_headers_binary(t):
    srv = broker()
    extra = ('exchange_type = "topic"; declare_exchange = true; exchange_durable = false;\n'
             'routing_keys = ["a.*", "b.#"];')
    b = t.baton(h.main_cfg(), {"t.cfg": ep_cfg(srv.port, "top1", extra)})
    wait_consuming(t, [b])
    bindings = [x for x in srv.list_bindings() if x["source"] == "top1"]
    t.check(sorted(x["routing_key"] for x in bindings) == ["a.*", "b.#"], "bindings %r" % bindings)
    c = rmq.Amqp(srv.port)
    binary = bytes(range(256)) + b"\xff\xfe\x00"
    headers = {"str": "h\u00e9llo", "int": -42, "big": 2**40, "flag": True, "pi": 3.25,
               "none": None, "bin": b"\x00\x01\xfe", "dec": rmq.Decimal(3, 1234),
               "ts": rmq.Timestamp(1700000000), "nested": {"k": [1, "two", False, {"z": 0}]}}
    c.publish("top1", "a.x", binary, message_id="bin-1", content_type="application/octet-stream",
              headers=headers)
    c.publish("top1", "c.nomatch", b"never", message_id="nm-1")
    c.publish("top1", "b.y.z", "text \u2713".encode(), message_id="txt-1", content_type="text/plain")
    got = h.wait_until(lambda: len(records(b)) >= 2, 10, 0.05)
    time.sleep(0.5)
    rs = {r["id"]: r for r in records(b)}
    t.require(got, "records: %r" % list(rs))
    t.check(set(rs) == {"bin-1", "txt-1"}, "delivered ids %r" % sorted(rs))
    r = rs["bin-1"]
    t.check(r["exchange"] == "top1" and r["routing_key"] == "a.x", "coordinates %r" % r)
    t.check(r["content_type"] == "application/octet-stream" and r["message_id"] == "bin-1",
            "properties %r" % r)
    t.check(r.get("payload_encoding") == "base64" and base64.b64decode(r["payload"]) == binary,
            "binary payload not preserved")
    want = {"str": "h\u00e9llo", "int": -42, "big": 2**40, "flag": True, "pi": 3.25, "none": None,
            "bin": base64.b64encode(b"\x00\x01\xfe").decode(), "dec": 1.234, "ts": 1700000000,
            "nested": {"k": [1, "two", False, {"z": 0}]}}
    t.check(r.get("headers") == want, "headers %r != %r" % (r.get("headers"), want))
    r2 = rs["txt-1"]
    t.check(r2["routing_key"] == "b.y.z" and r2["payload"] == "text \u2713" and
            "payload_encoding" not in r2 and "headers" not in r2, "text envelope %r" % r2)
    c.close()


def test_errors_keep_retrying(t):
    srv = broker()
    redis = t.redis()
    c = rmq.Amqp(srv.port)
    c.exchange_declare("topic_existing", "topic")
    c.close()
    eps = {
        "badpass.cfg": ep_cfg(srv.port, "fanx", 'password_env = "RMQ_BAD";', name="badpass"),
        "badvhost.cfg": ep_cfg(srv.port, "fanx", 'vhost = "nosuchvhost";', name="badvhost"),
        "mismatch.cfg": ep_cfg(srv.port, "topic_existing",
                               'exchange_type = "fanout"; declare_exchange = true;',
                               name="mismatch"),
        "psub.cfg": ('name = "psub"; type = "redis_psub"; sink = "out"; host = "127.0.0.1"; '
                     'port = %d; channels = ["other"];\n' % redis.port),
    }
    b = t.baton(h.main_cfg(redis_port=redis.port), eps, env={"RMQ_BAD": "wrong"})
    # the other endpoint of the same process forwards meanwhile
    r = h.Resp(redis.port)
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 6:
        if r.cmd("PUBLISH", "other", "m%d" % n) == 1:
            n += 1
        time.sleep(0.05)
    r.close()
    time.sleep(0.5)
    b.poll_records()
    psub = [x for x in b.records if x.get("endpoint") == "psub"]
    h.log("redis_psub forwarded %d of %d while the rabbitmq endpoints failed" % (len(psub), n))
    t.check(n > 0 and len(psub) == n, "psub forwarded %d of %d" % (len(psub), n))
    t.check(b.alive(), "process exited")
    err = b.stderr_text()
    checks = [("badpass", "ACCESS_REFUSED"), ("badvhost", "vhost"),
              ("mismatch", "PRECONDITION_FAILED")]
    for ep, needle in checks:
        lines = [ln for ln in err.splitlines() if "rabbitmq[%s]" % ep in ln and needle in ln]
        retries = [ln for ln in err.splitlines() if "[%s]" % ep in ln and
                   "starting the consumer failed" in ln]
        h.log("%s: %d start failures, %d error lines (rate-limited), e.g. %s"
              % (ep, len(retries), len(lines), lines[0] if lines else "-"))
        t.check(len(lines) >= 1, "%s: expected an error with %r" % (ep, needle))
        t.check(len(retries) >= 3, "%s: the guard did not keep retrying" % ep)
    t.check("inequivalent arg 'type'" in err, "mismatch reply text missing")
    t.check(not [x for x in b.records if x.get("type") == "rabbitmq"], "rabbitmq forwarded?")
    t.check(srv.bound_queues("topic_existing") == [], "a queue got bound despite the errors")
    t.check(b.term() == 0, "exit status on SIGTERM")


def test_tls(t):
    """Mutual TLS against the broker's TLS listener (client certificate
    required): with the right CA and a client certificate the endpoint
    consumes and forwards each message once; with an unrelated CA it never
    consumes, logs a clear TLS error naming host:port and keeps retrying."""
    srv = broker()
    tls = _tls
    other_ca = make_ca(os.path.dirname(tls["ca"]), "other-ca")[0]
    os.chmod(other_ca, 0o644)
    c = rmq.Amqp(srv.port)
    c.exchange_declare("tls1", "fanout")

    # host "localhost": rabbitmq-c 0.11 checks the host against the
    # certificate's DNS names only (with host "127.0.0.1" verify_hostname
    # fails although the certificate has IP:127.0.0.1)
    def tls_cfg(name, ca, client_cert=True):
        cert = ('cert_file = "%s"; key_file = "%s";' % (tls["client_cert"], tls["client_key"])
                if client_cert else "")
        return ('name = "%s"; type = "rabbitmq"; sink = "out";\n'
                'host = "localhost"; port = %d; exchange = "tls1"; reconnect_max_ms = 500;\n'
                'tls = true; verify_peer = true; verify_hostname = true; ca_file = "%s";\n%s\n'
                % (name, srv.tls_port, ca, cert))
    b = t.baton(h.main_cfg(), {"a-tls.cfg": tls_cfg("tls", tls["ca"]),
                               "b-wrongca.cfg": tls_cfg("wrongca", other_ca),
                               "c-nocert.cfg": tls_cfg("nocert", tls["ca"], client_cert=False)})
    t.require(h.wait_until(lambda: queue_of(b, "tls"), 20, 0.05),
              "tls endpoint not consuming: %s"
              % [ln for ln in b.stderr_text().splitlines() if "rabbitmq[tls]" in ln][:3])
    total = 2000
    c.confirm_select()
    t0 = time.monotonic()
    c.publish_many(("tls1", "", b"tls-%d" % i, {"message_id": "tls-%d" % i}) for i in range(total))
    acked, nacked = c.wait_confirms(30)
    t.require(acked == total and nacked == 0, "broker confirmed %d/%d" % (acked, total))
    h.wait_until(lambda: len(records(b)) >= total, 15, 0.05)
    dt = time.monotonic() - t0
    time.sleep(1.5)  # the wrongca endpoint had several attempts meanwhile
    rs = records(b)
    ids = [r["id"] for r in rs if r["endpoint"] == "tls"]
    h.log("over TLS (client certificate, verify_peer + verify_hostname): %d of %d forwarded in "
          "%.2fs, %d duplicates" % (len(set(ids)), total, dt, len(ids) - len(set(ids))))
    t.check(sorted(ids) == sorted("tls-%d" % i for i in range(total)),
            "TLS endpoint forwarded %d (%d distinct) of %d" % (len(ids), len(set(ids)), total))
    t.check(all(r["payload"] == r["id"] for r in rs if r["endpoint"] == "tls"), "payloads differ")
    err = b.stderr_text().splitlines()
    wrong = [ln for ln in err if "rabbitmq[wrongca]" in ln]
    retries = [ln for ln in err if "guard[wrongca]" in ln and "starting the consumer failed" in ln]
    h.log("wrong CA: %d start failures, %d error lines (rate-limited), first: %s"
          % (len(retries), len(wrong), wrong[:1]))
    t.check(wrong and all("cannot start: connect localhost:%d (tls): SSL peer cert verification "
                          "failed" % srv.tls_port in ln for ln in wrong),
            "no clear error for the untrusted broker certificate: %r" % wrong[:2])
    t.check(len(retries) >= 3, "the guard did not keep retrying the wrongca endpoint")
    nocert = [ln for ln in err if "rabbitmq[nocert]" in ln]
    h.log("no client certificate: %s" % nocert[:1])
    t.check(queue_of(b, "nocert") is None and not any(r["endpoint"] == "nocert" for r in rs),
            "consumed without a client certificate: the listener does not require one")
    t.check(nocert and all("localhost:%d" % srv.tls_port in ln and "SSL" in ln for ln in nocert),
            "no TLS error logged for the endpoint without a client certificate: %r" % nocert[:2])
    t.check(queue_of(b, "wrongca") is None, "consumed although the broker's CA was not trusted")
    t.check(not any(r["endpoint"] == "wrongca" for r in rs), "wrongca forwarded messages")
    bound = srv.bound_queues("tls1")
    t.check(bound == [queue_of(b, "tls")], "queues bound to tls1: %r (only the tls endpoint's)"
            % bound)
    t.check(b.term() == 0, "baton did not exit 0")
    c.close()


# headers exchange: what each published header set is, and whether a binding
# with bind_match "all" / "any" on region=eu, tier=gold matches it
HDR_KINDS = [
    ({"region": "eu", "tier": "gold"}, True, True),
    ({"region": "eu", "tier": "silver"}, False, True),
    ({"region": "us", "tier": "gold"}, False, True),
    ({"region": "us", "tier": "silver"}, False, False),
    ({"region": "eu"}, False, True),
    (None, False, False),  # no headers at all
]


def test_headers_exchange(t):
    """exchange_type "headers", bind_headers region=eu + tier=gold, one
    endpoint with bind_match "all" and one with "any", 3 processes: exactly
    the matching messages are forwarded, each once, by one process per
    endpoint, and the envelope's headers object carries the headers."""
    srv = broker()
    redis = t.redis()
    main = h.main_cfg(redis_port=redis.port)

    def hdr_cfg(name, match):
        return ep_cfg(srv.port, "hdr1",
                      'exchange_type = "headers"; declare_exchange = true; '
                      'exchange_durable = false;\n'
                      'bind_headers = ["region=eu", "tier=gold"]; bind_match = "%s";' % match,
                      name=name)
    cfgs = {"all.cfg": hdr_cfg("hall", "all"), "any.cfg": hdr_cfg("hany", "any")}
    batons = [t.baton(main, cfgs) for _ in range(3)]

    def consumers(ep):
        return [b for b in batons if queue_of(b, ep)]
    t.require(h.wait_until(lambda: consumers("hall") and consumers("hany"), 20, 0.05),
              "headers endpoints not consuming")
    time.sleep(1.0)  # standbys had several retries to (wrongly) start too
    lead = {ep: consumers(ep) for ep in ("hall", "hany")}
    h.log("leaders: hall %s, hany %s" % ([b.name for b in lead["hall"]],
                                         [b.name for b in lead["hany"]]))
    t.check(all(len(v) == 1 for v in lead.values()), "consumers per endpoint: %r"
            % {k: [b.name for b in v] for k, v in lead.items()})
    bound = srv.bound_queues("hdr1")
    t.check(bound == sorted(queue_of(v[0], ep) for ep, v in lead.items()),
            "queues bound to hdr1: %r" % bound)

    total = 600
    c = rmq.Amqp(srv.port)
    c.confirm_select()
    items, want_all, want_any, sent_headers = [], set(), set(), {}
    for i in range(total):
        hdrs, m_all, m_any = HDR_KINDS[i % len(HDR_KINDS)]
        mid = "h-%d" % i
        kw = {"message_id": mid}
        if hdrs is not None:
            kw["headers"] = dict(hdrs, n=i)  # an extra header: "all" ignores it
            sent_headers[mid] = kw["headers"]
        items.append(("hdr1", "", b"hdr-%d" % i, kw))
        if m_all:
            want_all.add(mid)
        if m_any:
            want_any.add(mid)
    c.publish_many(items)
    acked, nacked = c.wait_confirms(30)
    t.require(acked == total and nacked == 0, "broker confirmed %d/%d" % (acked, total))
    c.close()

    def got(ep):
        return [(b, r) for b in batons for r in records(b) if r["endpoint"] == ep]
    h.wait_until(lambda: len(got("hall")) >= len(want_all) and len(got("hany")) >= len(want_any),
                 15, 0.05)
    time.sleep(1.0)  # anything non-matching or duplicated would have arrived too
    for ep, want in (("hall", want_all), ("hany", want_any)):
        rs = got(ep)
        ids = [r["id"] for _b, r in rs]
        by = sorted({b.name for b, _r in rs})
        dups = h.duplicates(ids)
        h.log("%s (x-match %s): %d published, %d matching, %d forwarded by %s, %d unexpected, "
              "%d missing, %d duplicates" % (ep, ep[1:], total, len(want), len(ids), by,
                                             len(set(ids) - want), len(want - set(ids)), len(dups)))
        t.check(set(ids) == want, "%s: unexpected %r, missing %r" % (
            ep, sorted(set(ids) - want)[:5], sorted(want - set(ids))[:5]))
        t.check(not dups, "%s: duplicates %r" % (ep, list(dups.items())[:5]))
        t.check(by == [lead[ep][0].name] if lead[ep] else False,
                "%s forwarded by %r, leader %r" % (ep, by, [b.name for b in lead[ep]]))
        bad = [r for _b, r in rs if r.get("headers") != sent_headers.get(r["id"]) or
               r["exchange"] != "hdr1" or r["payload"] != "hdr-%s" % r["id"][2:]]
        t.check(not bad, "%s: %d envelopes with wrong headers/payload, e.g. %r"
                % (ep, len(bad), bad[:1]))
    sample = next((r for _b, r in got("hall")), None)
    h.log("envelope headers, e.g.: %s" % (sample and json.dumps(sample.get("headers"))))


def test_hosts_list(t):
    """hosts: tried in order from the first on every connect. [dead port,
    broker] -> consumes from the broker, /status "source" is the broker;
    [dead, dead] -> a start error naming both hosts, the guard releases the
    lease and retries, the process and its other endpoint carry on."""
    srv = broker()
    redis = t.redis()
    dead = [h.free_port() for _ in range(3)]
    mport = h.free_port()
    c = rmq.Amqp(srv.port)
    c.exchange_declare("fan7", "fanout")

    def cfg(name, hosts, extra=""):
        return ('name = "%s"; type = "rabbitmq"; sink = "out"; exchange = "fan7";\n'
                'hosts = [%s];\n%s\n' % (name, ", ".join('"%s"' % x for x in hosts), extra))
    good = ["127.0.0.1:%d" % dead[0], "127.0.0.1:%d" % srv.port]
    bad = ["127.0.0.1:%d" % dead[1], "127.0.0.1:%d" % dead[2]]
    b = t.baton(h.main_cfg(redis_port=redis.port,
                           extra='metrics = { listen = "127.0.0.1:%d"; };' % mport),
                {"a-multi.cfg": cfg("multi", good), "b-down.cfg": cfg("down", bad)})
    t0 = time.monotonic()
    t.require(h.wait_until(lambda: queue_of(b, "multi"), 15, 0.05),
              "multi not consuming: %s" % [ln for ln in b.stderr_text().splitlines()
                                           if "rabbitmq[multi]" in ln][:3])
    h.log("multi consuming %.2fs after start (first host dead)" % (time.monotonic() - t0))
    total = 200
    c.confirm_select()
    c.publish_many(("fan7", "", b"h-%d" % i, {"message_id": "h-%d" % i}) for i in range(total))
    acked, nacked = c.wait_confirms(30)
    c.close()
    t.require(acked == total and nacked == 0, "broker confirmed %d/%d" % (acked, total))
    h.wait_until(lambda: len(records(b)) >= total, 10, 0.05)
    ids = [r["id"] for r in records(b) if r["endpoint"] == "multi"]
    t.check(sorted(ids) == sorted("h-%d" % i for i in range(total)),
            "multi forwarded %d of %d (%d distinct)" % (len(ids), total, len(set(ids))))
    st = h.status_endpoints(mport)
    h.log("/status source: multi %r, down %r" % (st.get("multi", {}).get("source"),
                                                 st.get("down", {}).get("source")))
    t.check(st.get("multi", {}).get("source") == "127.0.0.1:%d" % srv.port,
            "/status multi source: %r" % st.get("multi"))
    t.check("source" not in st.get("down", {"source": "?"}), "/status down: %r" % st.get("down"))
    err = b.stderr_text().splitlines()
    t.check(any("rabbitmq[multi]" in ln and "127.0.0.1:%d" % dead[0] in ln for ln in err),
            "the failure of the first host is not logged")

    def down_errors():
        return [ln for ln in b.stderr_text().splitlines() if "rabbitmq[down]" in ln and
                "cannot start" in ln and bad[0] in ln and bad[1] in ln]
    t.check(h.wait_until(down_errors, 5, 0.05), "no start error naming both hosts of 'down'")
    h.log("down: %s" % (down_errors()[:1]))
    t.check(any("connect %s: connection refused; connect %s: connection refused" % (bad[0], bad[1])
                in ln for ln in down_errors()), "the error does not give each host's cause")

    def releases():
        return [ln for ln in b.stderr_text().splitlines() if "[down]" in ln and
                "starting the consumer failed; releasing" in ln]
    h.wait_until(lambda: len(releases()) >= 2, 5, 0.05)
    h.log("down: the guard released the lease %d times" % len(releases()))
    t.check(len(releases()) >= 2, "the guard did not release and retry: %d" % len(releases()))
    t.check(b.alive(), "process exited")
    t.check(b.term() == 0, "exit status on SIGTERM")


def test_broker_restart(t):
    srv = broker()
    redis = t.redis()
    extra = 'declare_exchange = true; exchange_durable = false; reconnect_max_ms = 1000;'
    main = h.main_cfg(redis_port=redis.port)
    batons = [t.baton(main, {"r.cfg": ep_cfg(srv.port, "fan6", extra)}) for _ in range(2)]
    leader = wait_consuming(t, batons)
    t_kill = time.monotonic()
    srv.kill()
    lost = h.wait_until(lambda: "giving up the lease" in leader.stderr_text(), 15, 0.1)
    h.log("leader gave its lease up %.2fs after the broker died" % (time.monotonic() - t_kill))
    t.check(lost, "the leader did not give its lease up while the broker was down")
    marks = {b: len(re.findall(r"consuming from", b.stderr_text())) for b in batons}
    srv.start()
    t_up = time.monotonic()

    def resumed():
        return [b for b in batons if len(re.findall(r"consuming from", b.stderr_text())) > marks[b]]
    now = h.wait_until(resumed, 20, 0.05)
    t.require(now, "nobody consumes again within 20 s of the broker restart")
    h.log("consuming again %.2fs after the broker was back (%.2fs after it died); queue unbound "
          "for that whole window" % (time.monotonic() - t_up, time.monotonic() - t_kill))
    time.sleep(1.0)
    bound = srv.bound_queues("fan6")
    t.check(len(bound) == 1, "queues bound after the restart: %r" % bound)
    c = rmq.Amqp(srv.port)
    c.confirm_select()
    c.publish_many(("fan6", "", b"after", {"message_id": "r-%d" % i}) for i in range(200))
    c.wait_confirms(30)
    c.close()
    h.wait_until(lambda: sum(len([r for r in records(b) if r["id"].startswith("r-")])
                             for b in batons) >= 200, 10, 0.05)
    time.sleep(0.5)
    ids = [r["id"] for b in batons for r in records(b) if r["id"].startswith("r-")]
    t.check(len(ids) == 200 and not h.duplicates(ids), "after restart: %d forwarded, dups %r"
            % (len(ids), list(h.duplicates(ids).items())[:5]))


if __name__ == "__main__":
    h.main(globals())
