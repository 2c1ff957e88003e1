"""Fault suite, mqtt: 3 real baton replicas, one real mosquitto for the whole
file (started once), a sequenced QoS 1 publisher at 200 msg/s, one fault per
scenario, one CHAOS summary line each.

What the design promises (docs/endpoints/mqtt.md, README "What each endpoint
loses"):
  plain subscription (ActiveGuard): no duplicate; loss only of what is
      published while no leader is subscribed (the failover gap) or while the
      broker restarts (no persistence, no shared session).
  $share (no guard): no loss at QoS 1 (broker semantics) when a crashed
      member comes back with its session (stable client id, clean_start =
      false); the only duplicates are broker redeliveries of what the crashed
      process had forwarded but not yet acknowledged (ack after the sink: at
      most one in flight per process).

The integration test already covers plain-subscription SIGKILL (gap, no
duplicates), $share exactly-once and a $share single-process sink outage,
so this file covers:

  plain_leader_sigstop   leader paused 2 x ttl: mosquitto keeps queueing for
                         its live session; on SIGCONT it forwards nothing
                         stale; no duplicates; loss only in the window
  plain_broker_restart   mosquitto stopped and restarted on its port: the
                         leader reconnects and resubscribes; loss only in the
                         window, no duplicates
  plain_locker_restart   the lease Redis restarted (data lost): loss only in
                         the window, no duplicates
  plain_sink_http_500    HTTP sink answering 500 for 2 s (ack after the sink):
                         the broker holds the rest; no loss, no duplicates
  share_member_sigkill   $share, persistent sessions: one member SIGKILLed and
                         restarted 1 s later: no loss, at most 1 duplicate
                         (redelivery)

Short lease (ttl 1500 ms) from lib/chaos.py.
"""
import os
import select
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import chaos as c  # noqa: E402
from chaos import h  # noqa: E402
import mosquitto  # noqa: E402

RATE = 200
TOPIC = "chaos/x"
ORDER = ["test_plain_leader_sigstop", "test_plain_locker_restart", "test_plain_sink_http_500",
         "test_share_member_sigkill", "test_plain_broker_restart"]

def broker():
    return mosquitto.shared_broker()


# --------------------------------------------------------------------------
# A minimal MQTT 3.1.1 QoS 1 publisher (stdlib sockets)

def _varint(n):
    out = b""
    while True:
        d, n = n % 128, n // 128
        out += bytes([d | (0x80 if n else 0)])
        if not n:
            return out


def _str(s):
    b = s.encode()
    return struct.pack(">H", len(b)) + b


class MqttPublisher(c.ConfirmedPublisher):
    """Publishes "<seq>:<sent_wall_ms>" at QoS 1 at a steady rate; entries
    holds (seq, sent_ms, 1) for each message the broker acknowledged
    (PUBACK); a message whose PUBACK was lost with the connection is counted
    in `unconfirmed` and left out. Reconnects every 100 ms."""

    def __init__(self, port, topic=TOPIC, rate=RATE):
        self.port, self.topic = port, topic
        self.pid = 0
        self._sock = None
        self._buf = b""
        super().__init__(rate)

    def _connected(self):
        return self._sock is not None

    def _close(self):
        if self._sock:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._buf = b""

    def _packet(self, timeout):
        """(type byte, body) of the next packet."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self._buf) >= 2:
                n, mult, i = 0, 1, 1
                while i < len(self._buf):
                    b = self._buf[i]
                    n += (b & 0x7f) * mult
                    mult *= 128
                    i += 1
                    if not b & 0x80:
                        break
                else:
                    i = None
                if i is not None and len(self._buf) >= i + n:
                    t, body = self._buf[0], self._buf[i:i + n]
                    self._buf = self._buf[i + n:]
                    return t, body
            left = deadline - time.monotonic()
            if left <= 0:
                raise OSError("timeout waiting for the broker")
            r, _w, _x = select.select([self._sock], [], [], left)
            if r:
                chunk = self._sock.recv(65536)
                if not chunk:
                    raise OSError("broker closed the connection")
                self._buf += chunk

    def _connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=2.0)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = s
        body = _str("MQTT") + bytes([4, 0x02]) + struct.pack(">H", 60) + \
            _str("chaos-pub-%d" % os.getpid())
        s.sendall(b"\x10" + _varint(len(body)) + body)
        t, b = self._packet(3.0)
        if t != 0x20 or len(b) < 2 or b[1] != 0:
            raise OSError("CONNACK refused: %r" % b)

    def _publish(self, seqs, now, confirmed):
        pids = {}
        out = []
        for s in seqs:
            self.pid = self.pid % 65535 + 1
            pids[self.pid] = s
            body = _str(self.topic) + struct.pack(">H", self.pid) + b"%d:%d" % (s, now)
            out.append(b"\x32" + _varint(len(body)) + body)
        self._sock.sendall(b"".join(out))
        while pids:
            t, b = self._packet(5.0)
            if t & 0xf0 == 0x40:
                pid = struct.unpack(">H", b[:2])[0]
                if pid in pids:
                    confirmed.append(pids.pop(pid))


# --------------------------------------------------------------------------

def pick(rec):
    if rec.get("type") != "mqtt" or rec.get("topic") != TOPIC:
        return None
    return c.parse_payload(rec.get("payload"))


def ep_cfg(port, name, extra=""):
    return ('name = "%s"; type = "mqtt"; sink = "out";\n'
            'server = "tcp://127.0.0.1:%d"; topics = ["chaos/#"]; qos = 1;\n'
            'connect_timeout_ms = 1000; reconnect_min_ms = 50; reconnect_max_ms = 300;\n'
            'stop_timeout_ms = 1000;\n%s\n' % (name, port, extra))


def subscribed(reps):
    return [r for r in reps if r.b.alive() and "subscribed to" in r.b.stderr_text()]


def run(t, name, ep, fault, cfgs=None, sinks=None, rx=None, guarded=True, expect_no_loss=False,
        allowed_dups=0, dup_why="", run_no=1):
    """fault(srv, locker, reps, leader) -> (t_from_ms, t_to_ms, extra dict).
    cfgs: one endpoint config per replica (default: the plain one). run_no:
    the scenario's run (c.resumed_attempts); replicas of a later run are
    named r1.2, r2.2, ... (a process's log file is named after it)."""
    srv = broker()
    locker = t.redis()
    cfgs = cfgs or [ep_cfg(srv.port, ep)] * 3
    reps = [c.Replica(t, sinks, {"m.cfg": cfg}, c.replica_name(i + 1, run_no), locker.port)
            for i, cfg in enumerate(cfgs)]
    t.require(h.wait_until(lambda: len(subscribed(reps)) == (1 if guarded else 3), 15, 0.05),
              "not subscribed within 15 s: %r" % [r.name for r in subscribed(reps)])
    leader = c.wait_leader(reps, ep) if guarded else None
    t.require(leader is not None or not guarded, "no single leader within 15 s")
    pub = MqttPublisher(srv.port).start()
    time.sleep(1.0)

    def recs():
        return c.picked_records(reps, rx, pick)
    t_from, t_to, extra = fault(srv, locker, reps, leader)
    recovered = c.wait_recovered(recs, t_to)
    time.sleep(1.5)
    pub.stop()
    if expect_no_loss:  # what the broker still holds for a session
        want = {e[0] for e in pub.snapshot()}
        h.wait_until(lambda: want <= {r[0] for r in recs()}, 15, 0.2)
    time.sleep(0.8)
    o = c.Outcome(pub.snapshot(), recs(), t_from, t_to)
    c.verdict(t, name, o, reps, ep if guarded else None,
              recovered_ms=(recovered - t_to) if recovered else None,
              expect_no_loss=expect_no_loss, allowed_dups=allowed_dups, dup_why=dup_why,
              unconfirmed=pub.unconfirmed, **extra)
    return reps, o


# --------------------------------------------------------------------------

def test_plain_leader_sigstop(t):
    def one(attempt, last):
        state = {}

        def fault(srv, locker, reps, leader):
            t0 = c.now_ms()
            leader.b.signal(signal.SIGSTOP)
            time.sleep(2 * c.TTL / 1000.0)
            state["t_cont"] = c.now_ms()
            state["old"] = leader
            leader.b.signal(signal.SIGCONT)
            return t0, state["t_cont"], {"stopped_ms": 2 * c.TTL, "stopped": leader.name}
        reps, _o = run(t, "mqtt.plain_leader_sigstop", "mq_sig", fault, run_no=attempt)
        old = state["old"]
        t.check(h.wait_until(lambda: old.role("mq_sig") == "standby", 10, 0.1),
                "the resumed leader is not a standby: %r" % old.role("mq_sig"))
        stale = c.stale_after(old, state["t_cont"], pick)
        h.log("resumed %s: %d messages received after SIGCONT forwarded (must be 0)"
              % (old.name, len(stale)))
        cnt = c.check_resumed_counted(t, old, "mq_sig", require_stale=last)
        t.check(not stale, "the resumed process forwarded %d stale messages, e.g. %r"
                % (len(stale), [s.get("payload") for s in stale[:5]]))
        return reps, cnt
    c.resumed_attempts(one)


def test_plain_locker_restart(t):
    def fault(srv, locker, reps, leader):
        return c.restart_redis(locker)
    run(t, "mqtt.plain_locker_restart", "mq_lock", fault)


def test_plain_sink_http_500(t):
    rx = h.HttpReceiver(fail_status=500)

    def fault(srv, locker, reps, leader):
        return c.sink_http_500(rx)
    run(t, "mqtt.plain_sink_http_500", "mq_http", fault, sinks=c.http_sink(rx), rx=rx,
        expect_no_loss=True)


def test_share_member_sigkill(t):
    srv = broker()
    cfgs = [ep_cfg(srv.port, "mq_share",
                   'shared_group = "chaos"; client_id = "chaos-%%n-r%d"; clean_start = false;\n'
                   'session_expiry = 60;' % (i + 1)) for i in range(3)]

    def fault(srv, locker, reps, leader):
        victim = reps[0]
        t0 = c.now_ms()
        victim.b.proc.send_signal(signal.SIGKILL)
        victim.b.proc.wait(5)
        time.sleep(1.0)
        victim.b.start()
        t.check(h.wait_until(lambda: "subscribed to" in victim.b.stderr_text().split(
            "started (pid")[-1], 15, 0.05), "the restarted member did not subscribe again")
        return t0, c.now_ms(), {"killed_and_restarted": victim.name}
    run(t, "mqtt.share_member_sigkill", "mq_share", fault, cfgs=cfgs, guarded=False,
        expect_no_loss=True, allowed_dups=1,
        dup_why=": the redelivery of the one message in flight at the kill")


def test_plain_broker_restart(t):
    def fault(srv, locker, reps, leader):
        t0 = c.now_ms()
        srv.stop()
        time.sleep(1.0)
        srv.start()
        return t0, c.now_ms(), {"down_ms": c.now_ms() - t0}
    reps, _o = run(t, "mqtt.plain_broker_restart", "mq_brk", fault)
    t.check(len(subscribed(reps)) >= 1, "nobody subscribed again")


if __name__ == "__main__":
    h.main(globals())
