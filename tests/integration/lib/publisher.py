"""A steady-rate Redis publisher with unique sequence numbers, for the
multi-replica tests (stdlib only).

    pub = Publisher(port, channel="chan.x", rate=1000)
    pub.start()
    ...
    pub.stop()
    pub.entries        # [(seq, sent_wall_ms, receivers or None), ...]

Each message's payload is "<seq>:<sent_wall_ms>". PUBLISH answers with the
number of subscribers that received the message, which the tests use as a
direct probe of "exactly one subscriber" (receivers None: the connection
broke before the answer, so whether it was published is unknown). Survives
the server going away: it reconnects every 50 ms and goes on with the next
sequence numbers (sequence numbers are never reused).
"""

import signal
import threading
import time
import types

import harness as h


def parse_payload(payload):
    """(seq, sent_wall_ms) from a payload written by Publisher, or None."""
    try:
        a, b = payload.split(":", 1)
        return int(a), int(b)
    except (ValueError, AttributeError):
        return None


class Publisher:
    def __init__(self, port, channel="chan.x", rate=1000, batch=None, count=None,
                 first_seq=1):
        self.port = port
        self.channel = channel
        self.rate = float(rate)
        # one pipeline per tick; about 200 ticks per second
        self.batch = batch or max(1, int(self.rate / 200))
        self.count = count
        self.seq = first_seq
        self.entries = []
        self.errors = 0
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread = None
        self._conn = None
        h._cleanups.append(self.stop)

    # -- control ---------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(10)
            self._thread = None
        if self._conn:
            self._conn.close()
            self._conn = None

    def wait_done(self, timeout):
        """For a counted run: waits until every message was sent."""
        return self._done.wait(timeout)

    def sent(self):
        with self.lock:
            return len(self.entries)

    def snapshot(self):
        with self.lock:
            return list(self.entries)

    def last_seq(self):
        with self.lock:
            return self.entries[-1][0] if self.entries else 0

    # -- loop ------------------------------------------------------------
    def _connect(self):
        try:
            self._conn = h.Resp(self.port, timeout=2.0)
            return True
        except OSError:
            self._conn = None
            return False

    def _run(self):
        interval = self.batch / self.rate
        next_t = time.monotonic()
        while not self._stop.is_set():
            if self.count is not None and self.seq > self.count:
                break
            if self._conn is None and not self._connect():
                self.errors += 1
                time.sleep(0.05)
                next_t = time.monotonic()
                continue
            n = self.batch
            if self.count is not None:
                n = min(n, self.count - self.seq + 1)
            now_ms = int(time.time() * 1000)
            seqs = list(range(self.seq, self.seq + n))
            self.seq += n
            cmds = [("PUBLISH", self.channel, "%d:%d" % (s, now_ms)) for s in seqs]
            try:
                replies = self._conn.pipeline(cmds)
            except (OSError, ConnectionError, h.RedisError):
                replies = [None] * n
                self.errors += 1
                self._conn.close()
                self._conn = None
            with self.lock:
                for s, r in zip(seqs, replies):
                    self.entries.append((s, now_ms, r if isinstance(r, int) else None))
            next_t += interval
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:
                next_t = time.monotonic()  # far behind (server was down): no burst
        self._done.set()


# --------------------------------------------------------------------------
# Reading back what baton processes forwarded

def rfc3339_ms(s):
    """"2026-12-02T14:00:00.123Z" -> wall-clock ms since the epoch."""
    import calendar
    date, _, rest = s.partition("T")
    y, mo, d = (int(x) for x in date.split("-"))
    hms = rest.rstrip("Z")
    hh, mm, ss = hms.split(":")
    sec, _, frac = ss.partition(".")
    frac = (frac + "000")[:3]
    return (calendar.timegm((y, mo, d, int(hh), int(mm), int(sec))) * 1000 + int(frac))


def sequenced(baton, channel):
    """[(seq, envelope)] of what one baton process forwarded on channel, in
    output order (polls its out.jsonl first); envelopes without a
    Publisher payload are left out."""
    baton.poll_records()
    out = []
    for r in baton.records:
        p = parse_payload(r.get("payload")) if r.get("channel") == channel else None
        if p is not None:
            out.append((p[0], r))
    return out


def forwarded(baton, channel="chan.x"):
    """[(seq, sent_ms, received_ms)] forwarded by one baton process on channel,
    in output order (polls its out.jsonl first)."""
    baton.poll_records()
    out = []
    for r in baton.records:
        if r.get("channel") != channel:
            continue
        p = parse_payload(r.get("payload"))
        if p is None:
            continue
        out.append((p[0], p[1], rfc3339_ms(r["received_at"])))
    return out


def all_seqs(batons, records=forwarded):
    """Every sequence number forwarded by batons (records: forwarded, or a
    function like it whose tuples start (seq, sent_ms, received_ms))."""
    return [r[0] for b in batons for r in records(b)]


def leaders_since(batons, since_ms, records=forwarded):
    """The batons that forwarded something received at or after since_ms."""
    return [b for b in batons if any(r[2] >= since_ms for r in records(b))]


def wait_single_leader(t, batons, timeout=10, records=forwarded):
    """The one baton that forwards something from now on (t.require: exactly
    one within timeout seconds)."""
    since = now_ms()
    ls = h.wait_until(lambda: leaders_since(batons, since, records), timeout, 0.05)
    t.require(ls and len(ls) == 1, "expected one forwarding process, got %r"
              % [b.name for b in (ls or [])])
    return ls[0]


# --------------------------------------------------------------------------
# redis_psub leader scenarios (test_redis_psub.py on the Redis locker,
# test_etcd.py on etcd; records: forwarded, or the suite's own reader)

def wait_subscribed(t, redis_port, timeout=15):
    """Waits until exactly one subscriber receives a probe PUBLISH (on
    chan.probe; t.require)."""
    c = h.Resp(redis_port)
    try:
        n = h.wait_until(lambda: c.cmd("PUBLISH", "chan.probe", "probe") == 1, timeout, 0.05)
    finally:
        c.close()
    t.require(n, "no baton subscribed within %ds" % timeout)


def failover(t, batons, redis_port, how, ttl_ms, records=forwarded, subscribe_timeout=15,
             label=""):
    """A leader failover under load, the part the redis_psub suites share
    (test_redis_psub.py with the Redis locker, test_etcd.py with etcd):
    batons subscribed to redis_port, 1,000 msg/s published, the one
    forwarding baton SIGKILLed (how "kill") or SIGTERMed ("term"). Checks:
    a standby forwards within ttl + 5 s (required), no duplicates, losses
    only inside the gap, exactly one new leader, no PUBLISH reached two
    subscribers, the standbys alive. Returns a SimpleNamespace: takeover (ms
    from the signal to the first record of the new leader), gap (ms, last
    record of the old leader to it), status (exit status after SIGTERM),
    old, old_recs, new_recs (records(b) tuples)."""
    wait_subscribed(t, redis_port, subscribe_timeout)
    pub = Publisher(redis_port, rate=1000).start()
    time.sleep(0.5)
    old = wait_single_leader(t, batons, records=records)
    time.sleep(1.0)
    others = [b for b in batons if b is not old]

    t_fault = now_ms()
    status = None
    if how == "kill":
        old.proc.send_signal(signal.SIGKILL)
        old.proc.wait(5)
    else:
        status = old.term(15)
    new_ls = h.wait_until(lambda: leaders_since(others, t_fault, records), ttl_ms / 1000.0 + 5,
                          0.05)
    t.require(new_ls, "no standby forwarded anything within %d ms after the %s"
              % (ttl_ms + 5000, how))
    time.sleep(1.0)
    pub.stop()
    time.sleep(0.5)  # let the last batch through the sink

    old_recs = records(old)
    new_recs = sorted((r for b in others for r in records(b)), key=lambda r: r[0])
    forwarders = [b.name for b in others if records(b)]
    seqs = [r[0] for r in old_recs] + [r[0] for r in new_recs]
    dups = h.duplicates(seqs)
    entries = pub.snapshot()
    missing = sorted(set(e[0] for e in entries) - set(seqs))
    t.require(old_recs and new_recs, "old or new leader forwarded nothing")
    old_last = max(old_recs, key=lambda r: r[0])
    new_first = min(new_recs, key=lambda r: r[0])
    takeover = new_first[2] - t_fault
    gap = new_first[2] - old_last[2]
    outside = [s for s in missing if not (old_last[0] < s < new_first[0])]
    max_recv = max((e[2] or 0) for e in entries)
    h.log("%s%s: old leader %s forwarded %d (last seq %d), new leader %s forwarded %d "
          "(first seq %d); takeover %d ms after the signal; gap (last old -> first new) "
          "%d ms; lost %d (all inside the gap: %s); duplicates %d; max PUBLISH receivers %d"
          % (how, label, old.name, len(old_recs), old_last[0], forwarders, len(new_recs),
             new_first[0], takeover, gap, len(missing), not outside, len(dups), max_recv))
    t.check(len(dups) == 0, "duplicates: %d, e.g. %r" % (len(dups), list(dups.items())[:5]))
    t.check(not outside, "%d messages lost outside the gap, e.g. %r" % (len(outside), outside[:10]))
    t.check(len(forwarders) == 1, "expected one new leader, got %r" % forwarders)
    t.check(max_recv <= 1, "a PUBLISH reached %d subscribers" % max_recv)
    for b in others:
        t.check(b.alive(), "%s exited" % b.name)
    return types.SimpleNamespace(takeover=takeover, gap=gap, status=status, old=old,
                                 old_recs=old_recs, new_recs=new_recs)


# --------------------------------------------------------------------------
# baton's log

def log_events(baton, rx):
    """[(wall ms, match)] of baton's stderr lines matching the regex rx."""
    return match_log_lines(baton.stderr_text().splitlines(), rx)


def match_log_lines(lines, rx):
    """[(wall ms, match)] of the baton log lines (each starting with its
    RFC 3339 time) matching the regex rx."""
    out = []
    for line in lines:
        m = rx.search(line)
        if m:
            try:
                out.append((rfc3339_ms(line.split(" ", 1)[0]), m))
            except (ValueError, IndexError):
                pass
    return out


def log_times(baton, needle):
    """Wall-clock ms of every stderr line of baton containing needle."""
    out = []
    for line in baton.stderr_text().splitlines():
        if needle in line:
            try:
                out.append(rfc3339_ms(line.split(" ", 1)[0]))
            except (ValueError, IndexError):
                pass
    return out


def now_ms():
    return int(time.time() * 1000)
