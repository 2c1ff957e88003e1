"""schedule endpoint, end to end: real baton processes, a real redis-server.

- 3 replicas sharing one Redis, cron every second for 20 s: across all
  outputs every slot of the window appears exactly once (none missing)
- no locker section: one process fires every second, on the planned second
- SIGSTOP/SIGCONT: the slots passed over are not replayed (logged)
- every claim's answer lost (a fault proxy delays SET replies past the
  command timeout): the replica whose SET ran finds out and fires, every slot
  exactly once
- Redis stopped mid-run: ticks are skipped with a warning (fail-closed), the
  processes stay up, and after the restart every slot fires exactly once;
  with once_fail_open = true every replica fires every slot meanwhile
- a claim that comes late (its requests held 2.6 s by a fault proxy, or its
  process paused across the slot) while the locker lost its keys (FLUSHALL)
  does not fire the slot a second time: past max_late_ms it is not fired
- --check-config on the example configuration, and a bad cron -> 78 with
  file:line
"""
import datetime
import os
import re
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import faultproxy  # noqa: E402
import harness as h  # noqa: E402

ORDER = ["test_check_config", "test_single_process_every_second", "test_pause_not_replayed",
         "test_three_replicas_once", "test_guard_active_leader_only",
         "test_redis_outage_fail_closed", "test_redis_outage_fail_open",
         "test_claim_answers_lost", "test_late_claim_not_fired"]


def main_cfg(redis_port=None):
    parts = []
    if redis_port is not None:
        parts.append('locker = { type = "redis"; host = "127.0.0.1"; port = %d; '
                     'connect_timeout_ms = 200; command_timeout_ms = 300; };' % redis_port)
    parts.append('sinks = ( { name = "out"; type = "stdout"; } );')
    parts.append('log = { level = "info"; };')
    return "\n".join(parts) + "\n"


def schedule_cfg(cron="* * * * * *", extra=""):
    return ('name = "tick";\ntype = "schedule";\nsink = "out";\n'
            'cron = "%s";\n%s\n' % (cron, extra))


def stop_all(t, batons):
    """SIGTERM each process; a clean exit (0) is part of the contract (and
    is how a sanitizer build reports leaks or errors)."""
    for b in batons:
        rc = b.term()
        t.check(rc == 0, "%s exited with status %r" % (b.name, rc))


def slots_of(batons):
    """All slots emitted by the given processes: list of (slot, process name, record)."""
    out = []
    for b in batons:
        b.poll_records()
        for r in b.records:
            if r.get("endpoint") == "tick":
                out.append((r["slot"], b.name, r))
    return out


def check_envelope(t, rec):
    t.check(rec.get("type") == "schedule", "envelope type: %r" % rec.get("type"))
    t.check(rec.get("id") == "tick:%d" % rec["slot"], "envelope id %r for slot %r" % (rec.get("id"), rec["slot"]))
    t.check(rec.get("cron") == "* * * * * *", "envelope cron %r" % rec.get("cron"))
    st = rec.get("slot_time", "")
    want = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rec["slot"]))
    t.check(st == want, "slot_time %r, expected %r" % (st, want))


def test_check_config(t):
    """The shipped example passes --check-config, also with the schedule
    example enabled; a bad cron exits 78 naming file:line and the field."""
    src = os.path.join(h.SOURCE_DIR, "config")
    d = os.path.join(t.workdir, "cfg")
    shutil.copytree(src, d)
    rc, out, err = h.run_baton(["-c", os.path.join(d, "baton.cfg"), "--check-config"])
    h.log("example config: exit %d: %s" % (rc, (out + err).strip().splitlines()[:1]))
    t.require(rc == 0, "example config: exit %d: %s%s" % (rc, out, err))
    t.check("nightly-report" in out + err, "the schedule example is listed: %r" % (out + err))

    ep = os.path.join(d, "endpoints.d", "schedule.cfg")
    with open(ep) as f:
        text = f.read()
    t.require("enabled = false;" in text, "example schedule.cfg has enabled = false")
    with open(ep, "w") as f:
        f.write(text.replace("enabled = false;", "enabled = true;"))
    rc, out, err = h.run_baton(["-c", os.path.join(d, "baton.cfg"), "--check-config"])
    t.check(rc == 0, "enabled schedule example: exit %d: %s%s" % (rc, out, err))

    cases = [
        ('"0 0 25 * * *"', "hour field"),
        ('"0 0 0 * * *  *"', "expected 6 fields"),
        ('"0 0 0 30 FEB *"', "never matches"),
        ('"@every 0s"', "bad duration"),
    ]
    for bad, want in cases:
        with open(ep, "w") as f:
            f.write(re.sub(r'^cron = .*$', "cron = %s;" % bad, text.replace("enabled = false;", "enabled = true;"),
                           flags=re.M))
        rc, out, err = h.run_baton(["-c", os.path.join(d, "baton.cfg"), "--check-config"])
        msg = (out + err).strip()
        h.log("cron %s -> exit %d: %s" % (bad, rc, msg))
        t.check(rc == 78, "bad cron %s: exit %d, expected 78" % (bad, rc))
        t.check(re.search(r"schedule\.cfg:\d+: ", msg) is not None, "bad cron %s: no file:line in %r" % (bad, msg))
        t.check(want in msg, "bad cron %s: %r lacks %r" % (bad, msg, want))
    with open(ep, "w") as f:
        f.write(text.replace('timezone = "Europe/Berlin";', 'timezone = "Europe/Atlantis";'))
    rc, out, err = h.run_baton(["-c", os.path.join(d, "baton.cfg"), "--check-config"])
    t.check(rc == 78 and "Europe/Atlantis" in out + err, "unknown zone: exit %d: %s%s" % (rc, out, err))


def test_single_process_every_second(t):
    """No locker: the one process fires every second, on the planned second."""
    b = t.baton(main_cfg(None), {"tick.cfg": schedule_cfg()})
    rc, out, err = h.run_baton(["status", "-c", b.cfg])
    row = [l.split() for l in out.splitlines() if l.startswith("tick ")]
    t.check(rc == 0 and row and row[0][3] == "single-process",
            "baton status without a locker: tick single-process (%d %r %r)" % (rc, out, err))
    time.sleep(7.5)
    t.require(b.alive(), "baton exited early: %r" % b.proc.poll())
    stop_all(t, [b])
    got = slots_of([b])
    slots = [s for s, _, _ in got]
    h.log("slots fired: %d (%s .. %s)" % (len(slots), slots[:1], slots[-1:]))
    t.require(len(slots) >= 5, "expected >= 5 slots in 7.5 s, got %d" % len(slots))
    t.check(not h.duplicates(slots), "duplicate slots: %r" % h.duplicates(slots))
    t.check(slots == list(range(slots[0], slots[0] + len(slots))), "slots not consecutive: %r" % slots)
    late = []
    for s, _, r in got:
        check_envelope(t, r)
        ra = datetime.datetime.strptime(r["received_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
        ra = ra.replace(tzinfo=datetime.timezone.utc).timestamp()
        late.append((ra - s) * 1000)
    h.log("firing lateness after the planned second (ms): max %.0f" % max(late))
    t.check(max(late) < 900 and min(late) >= 0, "fired away from its planned second: %r" % late)


def test_pause_not_replayed(t):
    """SIGSTOP for ~3.5 s: the slots passed over are not replayed; the
    latest one fires on resume, and the skip is logged."""
    b = t.baton(main_cfg(None), {"tick.cfg": schedule_cfg()})
    time.sleep(2.5)
    b.signal(signal.SIGSTOP)
    time.sleep(3.5)
    b.signal(signal.SIGCONT)
    time.sleep(2.5)
    stop_all(t, [b])
    slots = [s for s, _, _ in slots_of([b])]
    gaps = [(a, c) for a, c in zip(slots, slots[1:]) if c - a > 1]
    h.log("slots %r, gaps %r" % (slots, gaps))
    t.check(not h.duplicates(slots), "duplicates: %r" % h.duplicates(slots))
    t.check(slots == sorted(slots), "slots out of order: %r" % slots)
    t.check(len(gaps) == 1 and 3 <= gaps[0][1] - gaps[0][0] <= 5, "expected one gap of 3-5 s: %r" % gaps)
    m = re.search(r"(\d+) missed slot\(s\)", b.stderr_text())
    t.check(m is not None, "no 'missed slot(s)' warning")
    if m and gaps:
        t.check(int(m.group(1)) == gaps[0][1] - gaps[0][0] - 1,
                "logged %s missed, gap %r" % (m.group(1), gaps[0]))


def run_window(batons, seconds):
    t0 = time.time()
    time.sleep(seconds)
    t1 = time.time()
    for b in batons:
        b.poll_records()
    return t0, t1


def test_three_replicas_once(t):
    """3 replicas, one Redis: every slot of a 20 s window exactly once."""
    r = t.redis()
    cfg = main_cfg(r.port)
    bs = [t.baton(cfg, {"tick.cfg": schedule_cfg()}) for _ in range(3)]
    time.sleep(1.5)  # let all three start
    t0, t1 = run_window(bs, 20)
    for b in bs:
        t.check(b.alive(), "%s died" % b.name)
    stop_all(t, bs)
    got = slots_of(bs)
    slots = [s for s, _, _ in got]
    dups = h.duplicates(slots)
    window = range(int(t0) + 1, int(t1))
    missing = [s for s in window if s not in set(slots)]
    per = {b.name: sum(1 for _, n, _ in got if n == b.name) for b in bs}
    h.log("window %d s: %d slots fired in total, per process %r, missing %r, duplicates %r"
          % (len(window), len(slots), per, missing, dups))
    t.check(not dups, "slots fired more than once: %r" % dups)
    t.check(not missing, "missing slots in the window: %r" % missing)
    for _, _, rec in got[:3]:
        check_envelope(t, rec)
    # the locker keeps an expiring "<key>:epoch" beside each lock: not ours
    keys = [k for k in r.client().cmd("KEYS", "baton:once:schedule:*") if not k.endswith(b":epoch")]
    ttl = r.client().cmd("PTTL", keys[0]) if keys else -2
    h.log("once key ttl: %d ms" % ttl)
    t.check(3000000 < ttl <= 3600000, "once key ttl %d ms, expected the 1 h default" % ttl)
    h.log("once keys in redis: %d, e.g. %r" % (len(keys), keys[:1]))
    t.check(len(keys) >= len(window), "expected one once key per slot, got %d" % len(keys))
    t.check(all(re.match(rb"^baton:once:schedule:tick:\d+$", k) for k in keys), "key format: %r" % keys[:3])


def test_guard_active_leader_only(t):
    """guard = "active": only the ActiveGuard leader runs the clock."""
    r = t.redis()
    cfg = main_cfg(r.port)
    bs = [t.baton(cfg, {"tick.cfg": schedule_cfg(extra='guard = "active";')}) for _ in range(3)]
    time.sleep(1.5)
    t0, t1 = run_window(bs, 8)
    stop_all(t, bs)
    got = slots_of(bs)
    slots = [s for s, _, _ in got]
    # Within the window: stopping the processes one after another hands the
    # lease over (graceful release), so the next one may fire a slot during
    # teardown; that is correct behaviour, not a second concurrent leader.
    per = {b.name: sum(1 for s, n, _ in got if n == b.name and s < t1) for b in bs}
    missing = [s for s in range(int(t0) + 1, int(t1)) if s not in set(slots)]
    h.log("per process %r, missing %r" % (per, missing))
    t.check(not h.duplicates(slots), "duplicates: %r" % h.duplicates(slots))
    t.check(sum(1 for n in per.values() if n) == 1, "more than one process fired in the window: %r" % per)
    t.check(not missing, "missing: %r" % missing)
    t.check(all(rec.get("epoch", 0) > 0 for _, _, rec in got), "leader messages carry the fencing epoch")


def test_redis_outage_fail_closed(t):
    """Redis stopped: ticks are skipped with warnings, processes stay up;
    after the restart every slot fires exactly once again."""
    r = t.redis()
    cfg = main_cfg(r.port)
    bs = [t.baton(cfg, {"tick.cfg": schedule_cfg()}) for _ in range(3)]
    time.sleep(4)
    for b in bs:
        b.poll_records()
    before = len(slots_of(bs))
    t.require(before >= 2, "no slots before the outage (%d)" % before)

    r.stop()
    down_at = time.time()
    time.sleep(6)
    up_at = time.time()
    r.start()
    time.sleep(8)
    end = time.time()
    for b in bs:
        t.check(b.alive(), "%s died during the outage" % b.name)
    stop_all(t, bs)
    got = slots_of(bs)
    slots = [s for s, _, _ in got]
    t.check(not h.duplicates(slots), "duplicate slots: %r" % h.duplicates(slots))
    # during the outage (with a 1 s margin on each side) nothing may fire
    during = [s for s in slots if down_at + 1 < s < up_at - 1]
    t.check(not during, "slots fired while redis was down: %r" % during)
    warned = [b.name for b in bs if "skipped: locker unreachable" in b.stderr_text()]
    nwarn = sum(b.stderr_text().count("skipped: locker unreachable") for b in bs)
    h.log("skipped-tick warnings: %d (in %r)" % (nwarn, warned))
    t.check(len(warned) == 3, "every replica warns about skipped ticks: %r" % warned)
    # after the restart: every slot from restart+2 s on fires exactly once
    after = range(int(up_at) + 2, int(end))
    missing = [s for s in after if s not in set(slots)]
    h.log("outage %.1f s; after restart: %d slots expected, missing %r"
          % (up_at - down_at, len(after), missing))
    t.check(not missing, "slots missing after the restart: %r" % missing)


def test_redis_outage_fail_open(t):
    """once_fail_open = true, Redis stopped: every replica fires every slot
    itself (duplicates by choice, each logged as fired without the locker),
    nobody skips; after the restart every slot fires exactly once again."""
    r = t.redis()
    cfg = main_cfg(r.port)
    bs = [t.baton(cfg, {"tick.cfg": schedule_cfg(extra="once_fail_open = true;")}) for _ in range(3)]
    time.sleep(3)
    r.stop()
    down_at = time.time()
    time.sleep(6)
    up_at = time.time()
    r.start()
    time.sleep(6)
    end = time.time()
    for b in bs:
        t.check(b.alive(), "%s died during the outage" % b.name)
    stop_all(t, bs)
    got = slots_of(bs)
    # well inside the outage (the 300 ms command timeout and a 1 s margin)
    inside = range(int(down_at) + 2, int(up_at) - 1)
    per_slot = {s: sorted(n for s2, n, _ in got if s2 == s) for s in inside}
    short = {s: ns for s, ns in per_slot.items() if len(ns) != 3}
    h.log("outage %.1f s: %d slots inside it, fired by 3 replicas each except %r"
          % (up_at - down_at, len(inside), short))
    t.check(len(inside) >= 2 and not short, "fail-open: every replica fires every slot while "
            "the locker is down: %r" % short)
    opened = [b.name for b in bs if "fired without the locker (fail-open)" in b.stderr_text()]
    t.check(len(opened) == 3, "every replica logs its fail-open firing: %r" % opened)
    t.check(not any("fail-closed" in b.stderr_text() for b in bs), "a fail-closed skip was logged")
    after = range(int(up_at) + 2, int(end))
    slots_after = [s for s, _, _ in got if s in after]
    missing = [s for s in after if s not in slots_after]
    t.check(not h.duplicates(slots_after), "duplicates after the restart: %r"
            % h.duplicates(slots_after))
    t.check(not missing, "slots missing after the restart: %r" % missing)


def test_claim_answers_lost(t):
    """Every claim's answer lost: a fault proxy delays the reply to each SET
    past the 300 ms command timeout, so every replica's claim times out while
    Redis ran it. A claim whose answer was lost is checked with one GET on a
    fresh connection, so the replica whose SET ran fires and the others skip:
    every slot still fires exactly once (before, every slot was lost)."""
    r = t.redis()
    p = faultproxy.FaultProxy(target_port=r.port)
    t.cleanup(p.close)
    cfg = main_cfg(p.port)
    bs = [t.baton(cfg, {"tick.cfg": schedule_cfg()}) for _ in range(3)]
    time.sleep(2)
    p.set_delay(700, match=b"\r\nSET\r\n")  # SET replies only, not GET
    t0, t1 = run_window(bs, 8)
    for b in bs:
        t.check(b.alive(), "%s died" % b.name)
    stop_all(t, bs)
    got = slots_of(bs)
    window = range(int(t0) + 1, int(t1))
    slots = [s for s, _, _ in got if s in window]
    missing = [s for s in window if s not in slots]
    lost = sum(b.stderr_text().count("its answer was lost") for b in bs)
    h.log("window %d s with every SET answer 700 ms late: %d slots fired, missing %r, "
          "duplicates %r, lost answers resolved %d" % (len(window), len(slots), missing,
                                                      h.duplicates(slots), lost))
    t.check(lost >= len(window), "the claims' answers were not lost (proxy?): %d resolved" % lost)
    t.check(not h.duplicates(slots), "slots fired more than once: %r" % h.duplicates(slots))
    t.check(not missing, "slots lost although one replica's SET ran: %r" % missing)


def wait_phase(period, at):
    """Sleeps until the wall clock is next `at` seconds into a period of
    `period` seconds; returns the slot (that period's start)."""
    now = time.time()
    start = now - now % period
    target = start + at if start + at > now else start + period + at
    while time.time() < target:
        time.sleep(min(0.05, max(0.0, target - time.time())))
    return int(target - at)


def test_late_claim_not_fired(t):
    """A claim answered, or a slot reached, more than max_late_ms (2 s) after
    the slot's time is not fired. Replica A claims every 5 s slot on time;
    its key is then lost (FLUSHALL at +0.5 s, as a Redis restarted without
    persistence would lose it) while replica B's claim is late:
    1. B's side connection goes through a fault proxy that holds its
       requests 2.6 s, so its SET reaches the flushed Redis and wins;
    2. B is SIGSTOPped across the slot and resumed 2.6 s after it, so it
       reaches the slot late.
    Before max_late_ms, B fired both slots a second time (found by the
    compose test: a replica cut off the network across a heartbeat slot
    claimed it after a Redis restart)."""
    r = t.redis()
    p = faultproxy.start(t, r.port)
    cron = "*/5 * * * * *"
    a = t.baton(main_cfg(r.port), {"tick.cfg": schedule_cfg(cron)}, name="a")
    b_cfg = ('locker = { type = "redis"; host = "127.0.0.1"; port = %d; '
             'connect_timeout_ms = 200; command_timeout_ms = 5000; };\n'
             'lease = { ttl_ms = 20000; };\n'  # no lease here, but its timings must fit the timeout
             'sinks = ( { name = "out"; type = "stdout"; } );\nlog = { level = "info"; };\n' % p.port)
    b = t.baton(b_cfg, {"tick.cfg": schedule_cfg(cron)}, name="b")
    time.sleep(1.5)
    # 1. B's claim held 2.6 s on its way; the slot's key lost at +0.5 s
    wait_phase(5, 4.0)
    p.set_delay(2600, names={"baton-side"}, direction="c2s")
    s1 = wait_phase(5, 0.5)
    r.client().cmd("FLUSHALL")
    # its answer comes 2.6 s or more after the slot (the side connection's
    # other requests wait in the same queue)
    t.check(h.wait_until(lambda: "its claim was answered" in b.stderr_text(), 15),
            "B logs its late-answered claim")
    p.set_delay(0)
    # 2. B paused across the next slot, resumed 2.6 s after it
    wait_phase(5, 4.7)
    b.signal(signal.SIGSTOP)
    s2 = wait_phase(5, 0.5)
    r.client().cmd("FLUSHALL")
    wait_phase(5, 2.6)
    b.signal(signal.SIGCONT)
    time.sleep(1.5)
    stop_all(t, [a, b])
    got = slots_of([a, b])
    slots = [s for s, _, _ in got]
    late = b.stderr_text().count("past max_late_ms")
    h.log("slots %r (by %r); B's claim late on slot %d, B paused across slot %d; B logged %d "
          "late slot(s)" % (slots, [n for _, n, _ in got], s1, s2, late))
    t.check(not h.duplicates(slots), "slots fired more than once: %r" % h.duplicates(slots))
    t.check(s1 in slots and s2 in slots, "A fired both slots on time: %r" % slots)
    t.check("reached" in b.stderr_text() and late >= 2, "B logs the slot it reached late (%d)" % late)


if __name__ == "__main__":
    h.main(globals())
