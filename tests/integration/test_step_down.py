"""Operator control of leadership (issue 42) with real baton processes on a
real redis-server (locker and source), stdout sinks recorded:

  1. step down one endpoint of two (`baton step-down -c FILE a`) on 3
     replicas: only that endpoint moves, to another replica, under a larger
     epoch; /status shows the hold; the replica that stepped down does not
     take it back within hold_ms even when every other replica is gone, and
     takes it once the hold is over
  2. failover = "replay" at 2,000 msg/s, the leader stepped down 5 times
     (POST /v1/endpoints/NAME/step-down), each time to the other replica in
     a new term: 0 missing, every duplicate marked replayed
  3. `baton drain`: every endpoint moves away, /readyz 503 and /status say
     draining, the replica stays out (other replicas killed: nobody leads);
     `baton resume`: it competes again and takes them
  4. who may: a control request from a non-loopback peer without a token is
     refused (403) and nothing happens; with admin.token_file: no token 401,
     a wrong one 403, the right one done and logged with the peer; a missing
     token file is a configuration error with file:line
  5. a preferred leader (priority, prefer_after_ms): the replica of higher
     priority, started last and restarted 5 times at shorter intervals than
     prefer_after_ms, causes no handover; once it stays up it leads after
     prefer_after_ms, in one handover, and keeps the lead
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
from publisher import Publisher, sequenced  # noqa: E402

ORDER = ["test_step_down_one", "test_step_down_replay", "test_drain_resume", "test_drain_schedule",
         "test_control_auth", "test_preferred_leader"]

TTL = 1000
LEASE = {"ttl_ms": TTL, "renew_ms": 300, "retry_ms": 100}


def ep_cfg(name, port, extra=""):
    return ('name = "%s"; type = "redis_psub"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; patterns = ["%s.*"];\n%s\n' % (name, port, name, extra))


def replicas(t, port, n, eps=("a", "b"), extra="", main_extra="", listen="127.0.0.1"):
    out = []
    for i in range(n):
        mport = h.free_port()
        main = h.main_cfg(redis_port=port, lease=LEASE,
                          extra='metrics = { listen = "%s:%d"; };\n%s' % (listen, mport, main_extra))
        b = t.baton(main, {"%s.cfg" % e: ep_cfg(e, port, extra) for e in eps}, name="r%d" % i)
        b.mport = mport
        out.append(b)
    return out


def role(b, ep):
    e = h.status_endpoints(b.mport).get(ep)
    return e["role"] if e else None


def leader_of(batons, ep):
    for b in batons:
        if b.alive() and role(b, ep) == "leader":
            return b
    return None


def wait_leader(t, batons, ep, timeout=10, exclude=None):
    b = h.wait_until(lambda: (lambda x: x if x is not None and x is not exclude else None)(
        leader_of(batons, ep)), timeout, 0.05, what="a leader of %s" % ep)
    t.require(b, "no replica leads %s within %ds" % (ep, timeout))
    return b


def epoch(b, ep):
    return h.status_endpoints(b.mport).get(ep, {}).get("epoch")


def ctl(b, *args):
    """Runs `baton <args> -c <b's config>`: (exit status, stdout, stderr)."""
    return h.run_baton([args[0], "-c", b.cfg] + list(args[1:]))


def post(port, path, host="127.0.0.1", source=None, token=None):
    c = http.client.HTTPConnection(host, port, timeout=5, source_address=(source, 0) if source else None)
    c.request("POST", path, headers={"Authorization": "Bearer " + token} if token else {})
    r = c.getresponse()
    body = r.read().decode()
    c.close()
    return r.status, body


def test_step_down_one(t):
    redis = t.redis()
    batons = replicas(t, redis.port, 3)
    la = wait_leader(t, batons, "a")
    lb = wait_leader(t, batons, "b")
    ea, eb = epoch(la, "a"), epoch(lb, "b")
    t0 = time.monotonic()
    rc, out, err = ctl(la, "step-down", "--hold-ms", "4000", "a")
    t.require(rc == 0, "baton step-down: exit %d: %s %s" % (rc, out, err))
    h.log("step-down: %s" % out.strip())
    na = wait_leader(t, batons, "a", timeout=5, exclude=la)
    moved_ms = (time.monotonic() - t0) * 1000
    h.log("a moved from %s to %s in %.0f ms; b stays on %s" % (la.name, na.name, moved_ms, lb.name))
    print("RESULT step_down_handover_ms %.0f" % moved_ms)
    t.check(epoch(na, "a") > ea, "epoch of a did not increase: %s -> %s" % (ea, epoch(na, "a")))
    t.check(moved_ms < 2000, "the step-down took %.0f ms (a release is announced: well under ttl)" % moved_ms)
    st = h.status_endpoints(la.mport).get("a", {})
    t.check(st.get("role") == "standby" and 0 < st.get("hold_ms_left", 0) <= 4000,
            "/status of the replica that stepped down: %r" % st)
    time.sleep(0.5)
    t.check(leader_of(batons, "b") is lb and epoch(lb, "b") == eb,
            "b moved: leader %s epoch %s (was %s, %s)" % (
                getattr(leader_of(batons, "b"), "name", None), epoch(lb, "b"), lb.name, eb))
    # every other replica gone: the one that stepped down stays out for its hold
    for b in batons:
        if b is not la:
            b.kill()
    time.sleep(max(0.0, 3.0 - (time.monotonic() - t0)))
    t.check(role(la, "a") == "standby", "%s took a back within its hold (%.1f s after the step-down)"
            % (la.name, time.monotonic() - t0))
    back = h.wait_until(lambda: role(la, "a") == "leader", 6, 0.05)
    took = time.monotonic() - t0
    h.log("%s leads a again %.1f s after the step-down (hold 4 s)" % (la.name, took))
    t.check(back and took >= 3.9, "%s led a again after %.1f s (hold 4 s): %s" % (la.name, took, back))
    t.check("stepping down on request" in la.stderr_text() and "control: POST /v1/endpoints/a/step-down from "
            "127.0.0.1:" in la.stderr_text(), "the step-down was not logged with its peer")
    t.check(la.term() == 0, "exit status after SIGTERM")


def test_step_down_replay(t):
    redis = t.redis()
    batons = replicas(t, redis.port, 2, eps=("orders",), extra='failover = "replay";')
    c = h.Resp(redis.port)
    t.require(h.wait_until(lambda: c.cmd("PUBLISH", "orders.probe", "x") == 2, 15, 0.05),
              "both replicas subscribed")
    c.close()
    wait_leader(t, batons, "orders")
    rate = 2000
    pub = Publisher(redis.port, channel="orders.x", rate=rate).start()
    steps = 0
    for _ in range(5):
        time.sleep(2.5)
        l = leader_of(batons, "orders")
        if l is None:
            continue
        st, body = post(l.mport, "/v1/endpoints/orders/step-down")
        t.check(st == 200, "step-down: %d %s" % (st, body))
        steps += 1
    time.sleep(1.0)
    pub.stop()
    time.sleep(2.0)
    published = [e[0] for e in pub.snapshot() if e[2]]
    copies = {}
    for b in batons:
        for seq, r in sequenced(b, "orders.x"):
            copies.setdefault(seq, []).append((r["epoch"], bool(r.get("replayed")), b.name))
    missing = [s for s in published if s not in copies]
    dups = {s: v for s, v in copies.items() if len(v) > 1}
    unmarked = {s: v for s, v in dups.items() if sum(1 for x in v if not x[1]) > 1}
    h.log("replay step-downs: %d, published %d, missing %d, duplicates %d, unmarked %d"
          % (steps, len(published), len(missing), len(dups), len(unmarked)))
    print("RESULT step_down_replay_missing %d" % len(missing))
    print("RESULT step_down_replay_duplicates %d" % len(dups))
    epochs = {x[0] for v in copies.values() for x in v}
    h.log("terms that forwarded: %d" % len(epochs))
    t.check(steps >= 4, "only %d step-downs" % steps)
    t.check(len(epochs) >= steps + 1, "%d step-downs but only %d terms forwarded" % (steps, len(epochs)))
    t.check(not missing, "%d missing, e.g. %r" % (len(missing), missing[:10]))
    t.check(not unmarked, "%d duplicates not marked replayed, e.g. %r" % (len(unmarked), list(unmarked.items())[:3]))


def test_drain_resume(t):
    redis = t.redis()
    batons = replicas(t, redis.port, 2)
    wait_leader(t, batons, "a")
    wait_leader(t, batons, "b")
    d = batons[0]
    other = batons[1]
    rc, out, err = ctl(d, "drain")
    t.require(rc == 0, "baton drain: exit %d: %s %s" % (rc, out, err))
    ok = h.wait_until(lambda: leader_of(batons, "a") is other and leader_of(batons, "b") is other, 5, 0.05)
    t.check(ok, "after drain: a led by %s, b by %s" % (getattr(leader_of(batons, "a"), "name", None),
                                                      getattr(leader_of(batons, "b"), "name", None)))
    st, body = h.readyz(d.mport)
    t.check(st == 503 and "draining" in body, "/readyz while draining: %s %s" % (st, body))
    s = h.http_status(d.mport) or {}
    t.check(s.get("state") == "draining" and all(e.get("hold") == "until-resume" for e in s.get("endpoints", [])),
            "/status while draining: %r" % s)
    m = h.metrics(d.mport)
    t.check(m.get("baton_draining") == 1 and m.get('baton_endpoint_held{endpoint="a"}') == 1,
            "metrics while draining: draining %r, held %r" % (m.get("baton_draining"),
                                                           m.get('baton_endpoint_held{endpoint="a"}')))
    # the other replica gone: the drained one stays out
    other.kill()
    time.sleep(2.5 * TTL / 1000.0)
    t.check(role(d, "a") == "standby" and role(d, "b") == "standby", "a drained replica took a lease")
    t0 = time.monotonic()
    rc, out, err = ctl(d, "resume")
    t.require(rc == 0, "baton resume: exit %d: %s %s" % (rc, out, err))
    ok = h.wait_until(lambda: role(d, "a") == "leader" and role(d, "b") == "leader", 5, 0.05)
    h.log("resume: both endpoints led again in %.0f ms" % ((time.monotonic() - t0) * 1000))
    t.check(ok, "after resume: a %s, b %s" % (role(d, "a"), role(d, "b")))
    st, body = h.readyz(d.mport)
    t.check(st == 200, "/readyz after resume: %s %s" % (st, body))


def test_drain_schedule(t):
    """A drained replica claims no schedule slot (guard once): the other
    claims every one, none missed, none twice; resumed, it claims again."""
    redis = t.redis()
    tick = 'name = "tick"; type = "schedule"; sink = "out"; cron = "* * * * * *";\n'
    bs = []
    for i in range(2):
        mport = h.free_port()
        main = h.main_cfg(redis_port=redis.port, lease=LEASE, extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
        b = t.baton(main, {"tick.cfg": tick}, name="s%d" % i)
        b.mport = mport
        bs.append(b)
    d, other = bs
    time.sleep(3.0)
    rc, out, err = ctl(d, "drain")
    t.require(rc == 0, "baton drain: exit %d: %s %s" % (rc, out, err))
    t0 = time.time()
    time.sleep(6.0)
    rc, out, err = ctl(d, "resume")
    t.require(rc == 0, "baton resume: exit %d: %s %s" % (rc, out, err))
    t1 = time.time()
    time.sleep(2.0)
    other.kill()  # d alone now: it must claim the slots again
    t2 = time.time()
    time.sleep(3.0)
    t3 = time.time()
    slots = {}
    for b in bs:
        b.poll_records()
        for r in b.records:
            if r.get("endpoint") == "tick":
                slots.setdefault(r["slot"], []).append(b.name)
    drained = range(int(t0) + 1, int(t1) - 1)
    by_d = [s for s in drained if d.name in slots.get(s, [])]
    missing = [s for s in range(int(t0) - 1, int(t2)) if s not in slots]
    dups = {s: v for s, v in slots.items() if len(v) > 1}
    after = [s for s in range(int(t2) + 1, int(t3)) if d.name in slots.get(s, [])]
    h.log("drained %d s: slots fired by the drained replica %r, missing %r, duplicates %r; "
          "after resume, alone: %d of %d slots" % (len(drained), by_d, missing, dups, len(after),
                                                    len(range(int(t2) + 1, int(t3)))))
    t.check(len(drained) >= 3 and not by_d, "the drained replica fired slots %r" % by_d)
    t.check(not missing, "slots missed: %r" % missing)
    t.check(not dups, "slots fired twice: %r" % dups)
    t.check(len(after) >= 1, "the resumed replica, alone, fired none of the slots after the other's end")
    t.check("left to the other replicas: this one is drained" in d.stderr_text(),
            "the drained replica did not log the slot it left")


def non_loopback_ip():
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout.split()
    except OSError:
        return None
    for ip in out:
        if "." in ip and not ip.startswith("127."):
            try:
                s = socket.socket()
                s.bind((ip, 0))
                s.close()
                return ip
            except OSError:
                continue
    return None


def test_control_auth(t):
    redis = t.redis()
    ip = non_loopback_ip()
    if ip:
        h.log("control from %s (a non-loopback address of this machine) to a listener on 0.0.0.0" % ip)
        (b,) = replicas(t, redis.port, 1, eps=("a",), listen="0.0.0.0")
        wait_leader(t, [b], "a")
        e0 = epoch(b, "a")
        st, body = post(b.mport, "/v1/endpoints/a/step-down", host=ip, source=ip)
        t.check(st == 403, "step-down from %s without a token: %d %s" % (ip, st, body))
        st, body = post(b.mport, "/v1/drain", host=ip, source=ip)
        t.check(st == 403, "drain from %s without a token: %d %s" % (ip, st, body))
        time.sleep(0.5)
        t.check(role(b, "a") == "leader" and epoch(b, "a") == e0 and (h.http_status(b.mport) or {}).get(
            "state") == "running", "a refused request changed something")
        t.check("from %s:" % ip in b.stderr_text() and "refused (403)" in b.stderr_text(),
                "the refusal was not logged with the peer")
        st, _ = h.http_get(b.mport, "/status")
        t.check(st == 200, "GET /status")
        b.kill()
    else:
        h.log("no non-loopback address here: only the token path is tested")
    # the token path, on loopback
    d = h.mktemp()
    tok = os.path.join(d, "admin.token")
    with open(tok, "w") as f:
        f.write("s3cret-token-0123456789abcdef\n")
    os.chmod(tok, 0o600)
    (b,) = replicas(t, redis.port, 1, eps=("a",), main_extra='admin = { token_file = "%s"; };' % tok)
    wait_leader(t, [b], "a")
    e0 = epoch(b, "a")
    st, body = post(b.mport, "/v1/endpoints/a/step-down")
    t.check(st == 401, "no token: %d %s" % (st, body))
    st, body = post(b.mport, "/v1/endpoints/a/step-down", token="s3cret-token-0123456789abcdeX")
    t.check(st == 403, "wrong token: %d %s" % (st, body))
    t.check(role(b, "a") == "leader" and epoch(b, "a") == e0, "a refused request changed something")
    st, body = post(b.mport, "/v1/endpoints/nope/step-down", token="s3cret-token-0123456789abcdef")
    t.check(st == 404, "unknown endpoint: %d %s" % (st, body))
    for bad in ("abc", "0", "-5", "12x", "604800001", "99999999999999999999"):
        st, body = post(b.mport, "/v1/endpoints/a/step-down?hold_ms=" + bad, token="s3cret-token-0123456789abcdef")
        t.check(st == 400 and "hold_ms" in body, "hold_ms=%s: %d %s" % (bad, st, body))
    t.check(role(b, "a") == "leader" and epoch(b, "a") == e0, "a malformed hold_ms changed something")
    rc, out, err = ctl(b, "step-down", "--hold-ms", "500", "a")  # the command sends the file's token
    t.check(rc == 0 and "stepping down" in out, "baton step-down with the token: %d %s %s" % (rc, out, err))
    t.check(h.wait_until(lambda: (epoch(b, "a") or 0) > e0, 5, 0.05), "a was not taken again after the hold")
    t.check("control: POST /v1/endpoints/a/step-down from 127.0.0.1:" in b.stderr_text(),
            "the step-down was not logged with its peer")
    t.check("s3cret" not in b.stderr_text(), "the token appears in the log")
    # configuration errors name the file and line
    main = b.cfg
    with open(main) as f:
        text = f.read()
    with open(main, "w") as f:
        f.write(text.replace(tok, tok + ".missing"))
    rc, out, err = h.run_baton(["-c", main, "--check-config"])
    t.check(rc == 78 and "baton.cfg:" in err and "admin" in err, "missing token file: %d %s" % (rc, err))


def test_preferred_leader(t):
    redis = t.redis()
    low = replicas(t, redis.port, 2, eps=("a",))
    la = wait_leader(t, low, "a")
    e0 = epoch(la, "a")
    mport = h.free_port()
    main = h.main_cfg(redis_port=redis.port, lease=LEASE,
                      extra='metrics = { listen = "127.0.0.1:%d"; };\npriority = 10;\nprefer_after_ms = 3000;' % mport)
    pref = t.baton(main, {"a.cfg": ep_cfg("a", redis.port)}, name="preferred")
    pref.mport = mport
    # flapping: up 1.5 s at a time, 5 times
    for _ in range(5):
        time.sleep(1.5)
        pref.kill()
        pref.start()
    h.log("after 5 restarts of the preferred replica: a led by %s, epoch %s (was %s, %s)"
          % (getattr(leader_of(low, "a"), "name", None), epoch(la, "a"), la.name, e0))
    t.check(leader_of(low, "a") is la and epoch(la, "a") == e0, "a handover while the preferred replica flapped")
    t0 = time.monotonic()
    ok = h.wait_until(lambda: role(pref, "a") == "leader", 12, 0.05)
    took = time.monotonic() - t0
    h.log("the preferred replica leads %.1f s after its last start (prefer_after_ms 3000)" % took)
    print("RESULT preferred_takeover_s %.1f" % took)
    t.require(ok, "the preferred replica did not take a over within 12 s")
    t.check(took >= 2.9, "it took over after %.1f s, before prefer_after_ms" % took)
    e1 = epoch(pref, "a")
    time.sleep(3.0)
    t.check(role(pref, "a") == "leader" and epoch(pref, "a") == e1,
            "the preferred replica lost the lead again (epoch %s -> %s)" % (e1, epoch(pref, "a")))
    # one handover, straight to the preferred replica: no other term in between
    promos = {b.name: h.status_endpoints(b.mport).get("a", {}).get("promotions") for b in low + [pref]}
    h.log("promotions: %r" % promos)
    t.check(promos[la.name] == 1 and sum(promos[b.name] for b in low) == 1 and promos["preferred"] == 1,
            "promotions %r: more than one handover" % promos)
    t.check("handing over to a replica of priority 10" in la.stderr_text(), "the handover was not logged")


if __name__ == "__main__":
    h.main(globals())
