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

import threading
import time

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
