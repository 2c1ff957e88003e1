"""Shared code of the fault suite (tests/chaos): clusters of real baton
processes, a sequenced publisher, and one summary line per scenario.

Every scenario ends with

    CHAOS scenario=<name> forwarded=<n> duplicates=<n> lost=<n> gap_ms=<n> [k=v ...]

forwarded   distinct messages (seqs / slots) that reached the sink
duplicates  messages the sink received more than once
lost        published (or planned) but never forwarded
gap_ms      longest interval without forwarding across the fault

Short lease (ttl 1500, renew 500, retry 100 ms) so the whole suite stays
within its time bound; the default-lease figures are in bench/.
"""
import json
import os
import signal
import sys
import time

SOURCE_DIR = os.environ.get(
    "BATON_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration", "lib"))
import harness as h  # noqa: E402
import termdelivery as td  # noqa: E402
from publisher import Publisher, parse_payload, rfc3339_ms, now_ms  # noqa: E402,F401

TTL, RENEW, RETRY = 1500, 500, 100
LEASE = {"ttl_ms": TTL, "renew_ms": RENEW, "retry_ms": RETRY}
# the endpoint's source connection: notice a dead source quickly
PSUB_EXTRA = ("connect_timeout_ms = 300; command_timeout_ms = 300; ping_interval_ms = 300;\n"
              "reconnect_backoff_ms = 50; reconnect_backoff_max_ms = 300;")


def summary(name, forwarded, duplicates, lost, gap_ms, **extra):
    """Prints the one summary line of a scenario."""
    tail = "".join(" %s=%s" % kv for kv in extra.items())
    print("CHAOS scenario=%s forwarded=%d duplicates=%d lost=%d gap_ms=%s%s"
          % (name, forwarded, duplicates, lost, "-" if gap_ms is None else int(gap_ms), tail),
          flush=True)


class BackgroundWorker:
    """A steady-rate traffic thread: subclasses implement _run (looping until
    self._stop is set) and may override _close (called after the thread
    ended). Registered for cleanup at creation."""

    join_s = 15

    def __init__(self):
        import threading
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        h._cleanups.append(self.stop)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.join_s)
        self._close()

    def _run(self):
        raise NotImplementedError

    @staticmethod
    def pace(next_t, interval):
        """Sleeps until next_t + interval (the steady rate of a _run loop)
        and returns that time; more than 1 s behind, it starts afresh."""
        next_t += interval
        d = next_t - time.monotonic()
        if d > 0:
            time.sleep(d)
        elif d < -1.0:
            next_t = time.monotonic()
        return next_t

    def _close(self):
        pass


class ConfirmedPublisher(BackgroundWorker):
    """Publishes "<seq>:<sent_wall_ms>" messages at a steady rate, rate / 20
    a batch, to a broker that confirms them: entries holds (seq, sent_ms, 1)
    of every confirmed message only (one whose confirmation was lost with
    the connection is counted in `unconfirmed` and left out: whether the
    broker kept it is unknown); `errors` counts failed connects and batches.
    Reconnects every 100 ms while the broker is down. Subclasses implement
    _connected(), _connect(), _publish(seqs, now, confirmed) (appends the
    confirmed seqs, raises one of `failures` on a broken connection) and
    _close()."""

    failures = (OSError,)

    def __init__(self, rate):
        self.rate = float(rate)
        self.entries = []
        self.unconfirmed = 0
        self.errors = 0
        self.seq = 1
        super().__init__()

    def snapshot(self):
        with self.lock:
            return list(self.entries)

    def _run(self):
        batch = max(1, int(self.rate / 20))
        interval = batch / self.rate
        next_t = time.monotonic()
        while not self._stop.is_set():
            if not self._connected():
                try:
                    self._connect()
                except self.failures:
                    self._close()
                    self.errors += 1
                    time.sleep(0.1)
                    next_t = time.monotonic()
                    continue
            now = now_ms()
            seqs = list(range(self.seq, self.seq + batch))
            self.seq += batch
            confirmed = []
            try:
                self._publish(seqs, now, confirmed)
            except self.failures:
                self.errors += 1
                self._close()
            with self.lock:
                self.entries += [(s, now, 1) for s in sorted(confirmed)]
                self.unconfirmed += len(seqs) - len(confirmed)
            next_t = self.pace(next_t, interval)


class Replica:
    """A baton process with its metrics listener on its own port."""

    def __init__(self, t, main_extra_sinks, endpoints, name, redis_port, start=True,
                 lease=None, log_level="info"):
        self.mport = h.free_port()
        main = h.main_cfg(redis_port=redis_port, lease=lease or LEASE, log_level=log_level,
                          sinks=main_extra_sinks,
                          extra='metrics = { listen = "127.0.0.1:%d"; };' % self.mport)
        self.b = t.baton(main, endpoints, name=name, start=start)

    @property
    def name(self):
        return self.b.name

    def endpoint(self, ep_name):
        st = h.http_status(self.mport)
        if not st:
            return None
        for e in st.get("endpoints", []):
            if e.get("name") == ep_name:
                return e
        return None

    def role(self, ep_name):
        e = self.endpoint(ep_name)
        return e.get("role") if e else None


def wait_leader(reps, ep_name, timeout=15):
    """The single replica whose /status says leader for ep_name, or None."""
    def one():
        ls = [r for r in reps if r.b.alive() and r.role(ep_name) == "leader"]
        return ls[0] if len(ls) == 1 else None
    return h.wait_until(one, timeout, 0.05)


def psub_endpoint(port, extra=""):
    return ('name = "psub"; type = "redis_psub"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; patterns = ["chan.*"];\n%s\n%s\n'
            % (port, PSUB_EXTRA, extra))


def wait_subscribed(port, timeout=15):
    c = h.Resp(port)
    try:
        return h.wait_until(lambda: c.cmd("PUBLISH", "chan.probe", "probe") == 1, timeout, 0.05)
    finally:
        c.close()


def channel_pick(channel):
    """A pick (records_by) of the Redis pub/sub records of channel."""
    def pick(rec):
        if rec.get("channel") != channel:
            return None
        return parse_payload(rec.get("payload"))
    return pick


def stdout_records(reps, channel="chan.x"):
    """[(seq, sent_ms, received_ms, replica name)] from every replica's stdout."""
    return records_by(reps, channel_pick(channel))


def http_records(receiver, channel="chan.x"):
    """Like stdout_records, from the envelopes a HttpReceiver accepted; the
    third field is when the receiver got the request (wall ms), so gap_ms
    measures the outage as the sink's peer saw it."""
    return http_records_by(receiver, channel_pick(channel))


class Outcome:
    """What a publisher run turned into at the sink."""

    def __init__(self, entries, records, fault_from_ms, fault_to_ms):
        self.entries = entries
        self.records = records
        seen = {}
        for r in records:
            seen[r[0]] = seen.get(r[0], 0) + 1
        self.forwarded = len(seen)
        self.duplicates = sum(n - 1 for n in seen.values())
        self.dup_seqs = sorted(s for s, n in seen.items() if n > 1)
        published = {e[0]: e for e in entries if e[2] != 0}  # 0: no subscriber at all
        self.no_subscriber = sum(1 for e in entries if e[2] == 0)
        self.lost_seqs = sorted(s for s in published if s not in seen)
        self.lost = len(self.lost_seqs) + self.no_subscriber
        # loss outside the fault window (plus the lease ttl and a margin after it)
        lo, hi = fault_from_ms - 300, fault_to_ms + TTL + 1000
        self.lost_outside = [s for s in self.lost_seqs
                             if not (lo <= published[s][1] <= hi)]
        self.lost_outside += [e[0] for e in entries if e[2] == 0 and not (lo <= e[1] <= hi)]
        # longest interval without forwarding, by the sink-side receive time
        times = sorted(r[2] for r in records)
        inside = [b - a for a, b in zip(times, times[1:])
                  if b >= fault_from_ms - 1000 and a <= fault_to_ms + 10000]
        self.gap_ms = max(inside) if inside else None
        self.by_replica = {}
        for r in records:
            self.by_replica[r[3]] = self.by_replica.get(r[3], 0) + 1


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def sigstop(proc_pid):
    os.kill(proc_pid, signal.SIGSTOP)


def sigcont(proc_pid):
    os.kill(proc_pid, signal.SIGCONT)


# --------------------------------------------------------------------------
# Helpers for the broker endpoints (rabbitmq, mqtt, mysql_cdc): records
# picked by a callback instead of a Redis channel, and the common verdict.

def records_by(reps, pick):
    """[(seq, sent_ms, received_ms, replica name)] from every replica's
    stdout; pick(rec) -> (seq, sent_ms) or None for records to ignore."""
    out = []
    for r in reps:
        r.b.poll_records()
        for rec in r.b.records:
            p = pick(rec)
            if p:
                out.append((p[0], p[1], rfc3339_ms(rec["received_at"]), r.name))
    return out


def http_records_by(receiver, pick):
    """Like records_by, from the envelopes a HttpReceiver accepted; the
    received time is when the receiver got the request (wall ms)."""
    off = time.time() * 1000.0 - time.monotonic() * 1000.0
    out = []
    with receiver.lock:
        reqs = list(receiver.requests)
    for (t_mono, _p, _h, body, status) in reqs:
        if status != 200:
            continue
        for line in body.split(b"\n"):
            if not line.strip():
                continue
            p = pick(json.loads(line))
            if p:
                out.append((p[0], p[1], int(t_mono * 1000.0 + off), "http"))
    return out


def picked_records(reps, rx, pick):
    """records_by the replicas' stdout, or http_records_by rx when there is
    one (the scenario's sink)."""
    return http_records_by(rx, pick) if rx else records_by(reps, pick)


def wait_recovered(recs, t_to):
    """Waits (up to 20 s) until recs() holds a message sent after the fault
    (t_to + 100 ms): the earliest sink-side receive time of those, or 0."""
    return h.wait_until(lambda: min([r[2] for r in recs() if r[1] >= t_to + 100] or [0]),
                        20, 0.1)


# --------------------------------------------------------------------------
# The scenarios' sink and faults. A fault returns (t_from_ms, t_to_ms,
# extra dict for the summary line).

def http_sink(rx, timeout_ms=5000):
    """The main config's sink "out": HTTP to a HttpReceiver, retrying."""
    return ('{ name = "out"; type = "http"; url = "%s"; timeout_ms = %d; retries = 30;\n'
            '  backoff_ms = 50; backoff_max_ms = 300; batch_max = 100; }' % (rx.url, timeout_ms))


def restart_redis(server, down_s=1.0):
    """The Redis (locker or source) down for down_s: its data is lost."""
    t0 = now_ms()
    server.restart(down_s=down_s)
    return t0, now_ms(), {"down_ms": int(down_s * 1000)}


def pause_redis(server, ms=2 * TTL):
    """The Redis SIGSTOPped for ms: unreachable, connections kept."""
    pid = server.proc.pid
    t0 = now_ms()
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(ms / 1000.0)
    finally:
        os.kill(pid, signal.SIGCONT)
    return t0, now_ms(), {"unreachable_ms": ms}


def sink_http_500(rx, seconds=2.0):
    """The HTTP sink's receiver answers 500 to everything for seconds."""
    t0 = now_ms()
    rx.fail_first = 10 ** 9
    time.sleep(seconds)
    with rx.lock:
        failed = sum(1 for r in rx.requests if r[4] == 500)
        rx.fail_first = 0
    return t0, now_ms(), {"http_500_answers": failed}


def stale_after(rep, t_ms, pick=None):
    """Records a replica forwarded whose received_at is at or after t_ms
    (wall ms): after SIGCONT everything it reads is stale."""
    rep.b.poll_records()
    return [rec for rec in rep.b.records
            if rfc3339_ms(rec["received_at"]) >= t_ms and (pick is None or pick(rec))]


def counters(rep, ep_name):
    """An endpoint's message counters from a replica's /metrics (see
    termdelivery.counters)."""
    return td.counters(rep.mport, ep_name)


def stale_counted(cnt):
    """What a resumed leader counted as reaching it after its term had ended
    (dropped not_leader / term_ended, or returned to the source)."""
    if not cnt:
        return 0
    return (cnt["dropped"].get("not_leader", 0) + cnt["dropped"].get("term_ended", 0)
            + cnt["returned"])


def check_resumed_counted(t, rep, ep_name, require_stale=True):
    """A leader paused past its term and resumed as a standby: what reached it
    after its term had ended was counted (dropped as not_leader / term_ended,
    or returned to the source), and its counters add up once it is quiet:
    received = forwarded + dropped + returned + queued. A resumed process that
    received nothing would make "it forwarded nothing stale" vacuous, so that
    fails too when require_stale (see resumed_attempts: whether the endpoint's
    thread reads its socket before the guard stops the subscription is a race
    inside the resumed process, so a scenario may take more than one run to
    exercise the stale path)."""
    def settled():
        a = counters(rep, ep_name)
        time.sleep(0.3)
        b = counters(rep, ep_name)
        return b if a and a == b else None
    cnt = h.wait_until(settled, 10, 0.2)
    h.log("resumed %s: counters %r" % (rep.name, cnt))
    if not t.check(cnt is not None, "%s: /metrics counters did not settle" % rep.name):
        return None
    if require_stale:
        t.check(stale_counted(cnt) > 0, "%s received nothing after its term ended, or did not "
                "count it (dropped not_leader/term_ended + returned = 0): %r" % (rep.name, cnt))
    accounted = cnt["forwarded"] + sum(cnt["dropped"].values()) + cnt["returned"] + cnt["queued"]
    t.check(cnt["received"] == accounted,
            "%s: received %d != forwarded + dropped + returned + queued = %d: %r"
            % (rep.name, cnt["received"], accounted, cnt))
    return cnt


def replica_name(i, run_no=1):
    """r1, r2, ... in a scenario's first run; r1.2, r2.2, ... in its second
    (resumed_attempts): a process's log file is named after it."""
    return "r%d" % i if run_no == 1 else "r%d.%d" % (i, run_no)


# Runs of a leader-pause scenario until the resumed leader read something
# stale (see check_resumed_counted); every run's own checks hold on each.
RESUMED_ATTEMPTS = 3


def resumed_attempts(one):
    """Calls one(attempt, last) -> (reps, cnt) up to RESUMED_ATTEMPTS times:
    again while the resumed leader counted nothing stale (it was stopped
    before its thread read the socket), killing the run's replicas first.
    The last run requires the stale path (one passes last to
    check_resumed_counted as require_stale)."""
    for attempt in range(1, RESUMED_ATTEMPTS + 1):
        last = attempt == RESUMED_ATTEMPTS
        reps, cnt = one(attempt, last)
        if last or cnt is None or stale_counted(cnt) > 0:
            return
        h.log("run %d of %d: the resumed leader was stopped before it read anything stale "
              "(a race inside the resumed process); running the scenario again"
              % (attempt, RESUMED_ATTEMPTS))
        for r in reps:
            r.b.kill()


def verdict(t, name, o, survivors, ep_name, recovered_ms=None, expect_no_loss=False,
            allowed_dups=0, dup_why="", **extra):
    """Prints the summary line of a scenario and records the common checks:
    forwarding resumed, duplicates within allowed_dups (0 where the design
    promises none), no loss outside the fault window (or none at all),
    no surviving process exited, one leader at the end (ep_name None: no
    guard, skip that check)."""
    crashed = [r.name for r in survivors if not r.b.alive()]
    final = (wait_leader([r for r in survivors if r.b.alive()], ep_name, 10)
             if ep_name else True)
    summary(name, o.forwarded, o.duplicates, o.lost, o.gap_ms,
            published=len(o.entries), lost_outside_window=len(o.lost_outside),
            recovered_ms=recovered_ms,
            per_replica=",".join("%s:%d" % kv for kv in sorted(o.by_replica.items())),
            **extra)
    t.check(recovered_ms is not None, "forwarding did not resume within 20 s after the fault")
    t.check(o.duplicates <= allowed_dups, "%d duplicates (at most %d allowed%s), e.g. seqs %r"
            % (o.duplicates, allowed_dups, dup_why, o.dup_seqs[:10]))
    if expect_no_loss:
        t.check(o.lost == 0, "%d messages lost where none may be, e.g. %r"
                % (o.lost, o.lost_seqs[:10]))
    else:
        t.check(not o.lost_outside, "%d messages lost outside the fault window, e.g. %r"
                % (len(o.lost_outside), o.lost_outside[:10]))
    t.check(not crashed, "processes exited: %r" % crashed)
    t.check(final is not None, "not exactly one leader at the end: %r"
            % [(r.name, r.role(ep_name)) for r in survivors])
