"""Redis ACL users (issue 17): baton against a redis-server whose default user
is password-protected, the locker and the redis_psub sources each logged in
as an ACL user holding exactly the rule set documented in docs/lockers.md
("ACL users"), real baton processes, real MariaDB for mysql_cdc.

  1. test_documented_rules: 2 replicas, each with an ActiveGuard redis_psub
     endpoint (gap), a failover = "replay" redis_psub endpoint (replay marks
     through the fenced_set script), a schedule endpoint (OnceGuard claims) and
     a mysql_cdc endpoint (checkpoint in the locker; BATON_ACL_SKIP_CDC=1
     leaves it out). One leader per endpoint, messages forwarded, each slot
     fired once, the scripts survive a SCRIPT FLUSH (EVAL fallback), `baton
     status -c cfg` works as that user, SIGTERM hands over through the release
     announcement (PUBLISH <key>:released seen by a watcher), and Redis' ACL
     LOG is empty at the end.
  2. test_missing_rule: one baton per rule of the documented sets, its user
     missing exactly that rule, all in parallel for a few seconds: each logs
     an error naming the command (or the key / channel) and stays alive;
     CLIENT SETNAME is the one rule whose absence baton tolerates (it then
     only costs ACL LOG entries). A command refused inside a script must be
     named too: Redis 7.0 says only "can't run this command ... on
     @user_script:<line>", so baton has to name it (ACL LOG shows it,
     context lua).
"""
import os
import re
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
import harness as h  # noqa: E402
from publisher import Publisher, now_ms, parse_payload, rfc3339_ms  # noqa: E402

ORDER = ["test_documented_rules", "test_missing_rule"]

ADMIN_PW, LOCKER_PW, SRC_PW = "admin-secret", "locker-secret", "source-secret"
SKIP_CDC = os.environ.get("BATON_ACL_SKIP_CDC") == "1"

# The documented rule sets (docs/lockers.md, "ACL users"), with why baton needs
# each command. Locker user, prefix "baton" (locker.prefix):
LOCKER_COMMANDS = [
    ("evalsha", "runs the lease scripts (acquire, renew, check, unlock) and fenced_set"),
    ("eval", "the fallback when a script is missing (NOSCRIPT: SCRIPT FLUSH, restart)"),
    ("script|load", "loads the scripts on every connect"),
    ("set", "acquire script (lock, <key>:holder, <key>:epoch), fenced_set, OnceGuard claim"),
    ("get", "scripts (token, epoch), replay mark / CDC checkpoint reads, holder, status"),
    ("type", "acquire script and OnceGuard claim: refuse a key of another type"),
    ("pttl", "acquire script (a standby learns the remaining ttl), baton status"),
    ("pexpire", "renew script"),
    ("del", "unlock script"),
    ("time", "acquire script: the epoch's clock floor"),
    ("publish", "announces a release on <key>:released"),
    ("subscribe", "standbys listen on <key>:released"),
    ("ping", "the readiness probe (/readyz, baton_locker_up)"),
    ("client|setname", "names the connections (refusal tolerated, but logged by ACL LOG)"),
]
# Source user: the channels and patterns the endpoint subscribes to, and:
SOURCE_COMMANDS = [
    ("psubscribe", "patterns = [...]"),
    ("subscribe", "channels = [...]"),
    ("ping", "the keepalive (ping_interval_ms, default 1000)"),
]
SOURCE_PATTERN, SOURCE_CHANNEL = "chan.*", "rep.x"


def locker_rules(prefix="baton"):
    return (["~%s:*" % prefix, "&%s:*" % prefix] + ["+" + c for c, _ in LOCKER_COMMANDS])


def source_rules():
    return (["&" + SOURCE_PATTERN, "&" + SOURCE_CHANNEL] + ["+" + c for c, _ in SOURCE_COMMANDS])


def setuser(admin, name, password, rules):
    # reset = resetpass resetkeys resetchannels off -@all: nothing but `rules`
    return admin.cmd("ACL", "SETUSER", name, "reset", "on", ">" + password, *rules)


class AclRedis(h.RedisServer):
    """redis-server whose default user needs ADMIN_PW (requirepass)."""

    def __init__(self):
        super().__init__(extra_args=["--requirepass", ADMIN_PW, "--acllog-max-len", "1000"])

    def _connect(self, timeout):
        return h.Resp(self.port, timeout=timeout, password=ADMIN_PW)

    def admin(self):
        return self.client(password=ADMIN_PW)


class AuthPublisher(Publisher):
    def _connect(self):
        try:
            self._conn = h.Resp(self.port, timeout=2.0, password=ADMIN_PW)
            return True
        except (OSError, h.RedisError):
            self._conn = None
            return False


class Watcher:
    """PSUBSCRIBEs to "*:released" as the admin and records (ms, channel)."""

    def __init__(self, port):
        self.c = h.Resp(port, timeout=0.2, password=ADMIN_PW)
        self.c.sock.settimeout(5)
        self.c.cmd("PSUBSCRIBE", "*:released")
        self.c.sock.settimeout(0.2)
        self.seen = []
        self.stop = False
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()
        h._cleanups.append(self.close)

    def _run(self):
        while not self.stop:
            try:
                m = self.c.read()
            except (socket.timeout, TimeoutError):
                continue
            except (OSError, ConnectionError, h.RedisError):
                return
            if isinstance(m, list) and len(m) == 4 and m[0] == b"pmessage":
                self.seen.append((now_ms(), m[2].decode()))

    def close(self):
        self.stop = True
        self.th.join(2)
        self.c.close()


def acl_log(admin):
    """ACL LOG entries as dicts (str values)."""
    out = []
    for e in admin.cmd("ACL", "LOG", "1000") or []:
        d = {}
        for k, v in zip(e[0::2], e[1::2]):
            k = k.decode() if isinstance(k, bytes) else k
            d[k] = v.decode() if isinstance(v, bytes) else v
        out.append(d)
    return out


# ------------------------------------------------------------ configuration

def main_cfg(redis_port, prefix="baton", user="baton", metrics_port=None, lease=None):
    lease = lease or {"ttl_ms": 3000, "renew_ms": 1000, "retry_ms": 250}
    parts = ['locker = { type = "redis"; host = "127.0.0.1"; port = %d; prefix = "%s"; '
             'user = "%s"; password_env = "LOCKER_PW"; };' % (redis_port, prefix, user),
             "lease = { %s };" % "; ".join("%s = %s" % kv for kv in lease.items()),
             'sinks = ( { name = "out"; type = "stdout"; } );',
             'log = { level = "info"; };']
    if metrics_port:
        parts.append('metrics = { listen = "127.0.0.1:%d"; };' % metrics_port)
    return "\n".join(parts) + "\n"


def psub_cfg(name, port, user, sub, extra=""):
    return ('name = "%s"; type = "redis_psub"; sink = "out";\n'
            'host = "127.0.0.1"; port = %d; user = "%s"; password_env = "SRC_PW";\n%s\n%s\n'
            % (name, port, user, sub, extra))


def endpoints(port, src_user="batonsrc", with_busy=False, cdc=None):
    eps = {
        "gap.cfg": psub_cfg("gap", port, src_user, 'patterns = ["%s"];' % SOURCE_PATTERN),
        "rep.cfg": psub_cfg("rep", port, src_user, 'channels = ["%s"];' % SOURCE_CHANNEL,
                            'failover = "replay";'),
        "tick.cfg": 'name = "tick"; type = "schedule"; sink = "out"; cron = "* * * * * *";\n',
    }
    if with_busy:
        # its lease is held by someone else: the standby path (PTTL)
        eps["busy.cfg"] = psub_cfg("busy", port, src_user, 'patterns = ["%s"];' % SOURCE_PATTERN)
    if cdc:
        eps["cdc.cfg"] = cdc
    return eps


ENV = {"LOCKER_PW": LOCKER_PW, "SRC_PW": SRC_PW, "CDC_PW": "cdc-pw"}


def recs(b, channel):
    """[(seq, received_ms, replayed)] of channel in b's output."""
    b.poll_records()
    out = []
    for r in b.records:
        if r.get("channel") != channel:
            continue
        p = parse_payload(r.get("payload"))
        if p:
            out.append((p[0], rfc3339_ms(r["received_at"]), bool(r.get("replayed"))))
    return out


DENIAL = re.compile(r"NOPERM|no permissions|can't run this command|can't access")


def denial_lines(text):
    return [l for l in text.splitlines() if DENIAL.search(l)]


def names_command(lines, cmd):
    """A denial line names cmd: Redis' 'cmd' quoting, or the command in
    capitals as a word (e.g. a script line quoted by baton)."""
    q = re.compile(r"'%s'" % re.escape(cmd), re.I)
    w = re.compile(r"\b%s\b" % re.escape(cmd.upper().replace("|", " ")))
    return [l for l in lines if q.search(l) or w.search(l)]


# ------------------------------------------------------------------- tests

def test_documented_rules(t):
    srv = None
    cdc = None
    if not SKIP_CDC:
        import mariadb as mdb
        t0 = time.monotonic()
        srv = mdb.MariaServer()
        srv.create_user("cdc", "cdc-pw")
        srv.sql("CREATE DATABASE acl; CREATE TABLE acl.t (id INT PRIMARY KEY, v VARCHAR(20));")
        h.log("MariaDB up in %.1fs" % (time.monotonic() - t0))
        cdc = ('name = "cdc"; type = "mysql_cdc"; sink = "out"; host = "127.0.0.1"; port = %d;\n'
               'user = "cdc"; password_env = "CDC_PW"; server_id = 4343; tables = [ "acl.*" ];\n'
               'checkpoint = "locker"; checkpoint_every_ms = 200;\n' % srv.port)
    redis = AclRedis()
    t.cleanup(redis.stop)
    admin = redis.admin()
    setuser(admin, "baton", LOCKER_PW, locker_rules())
    setuser(admin, "batonsrc", SRC_PW, source_rules())
    h.log("locker user: %s" % " ".join(locker_rules()))
    h.log("source user: %s" % " ".join(source_rules()))
    t.require(admin.cmd("ACL", "DRYRUN", "baton", "GET", "other:x") != "OK",
              "the locker user must not reach keys outside baton:*")
    watcher = Watcher(redis.port)

    batons = []
    for i in range(2):
        mp = h.free_port()
        b = t.baton(main_cfg(redis.port, metrics_port=mp), endpoints(redis.port, cdc=cdc),
                    name="r%d" % i, env=ENV)
        b.metrics_port = mp
        batons.append(b)
    probe = redis.admin()
    ok = h.wait_until(lambda: probe.cmd("PUBLISH", "chan.probe", "p") == 1
                      and probe.cmd("PUBLISH", SOURCE_CHANNEL, "probe") == 2, 20, 0.1)
    if not ok:
        t.dump_logs()
    t.require(ok, "expected 1 gap subscriber (leader) and 2 rep subscribers (warm standby)")

    pub_gap = AuthPublisher(redis.port, channel="chan.x", rate=500).start()
    pub_rep = AuthPublisher(redis.port, channel=SOURCE_CHANNEL, rate=500).start()
    if srv:
        srv.sql("".join("INSERT INTO acl.t VALUES (%d, 'a%d');\n" % (i, i) for i in range(1, 101)))
    time.sleep(2.0)
    leaders = [b for b in batons if recs(b, "chan.x")]
    t.require(len(leaders) == 1, "expected one gap leader, got %r" % [b.name for b in leaders])
    old = leaders[0]
    new = [b for b in batons if b is not old][0]

    # the scripts go away: EVALSHA -> NOSCRIPT -> EVAL, then reloaded
    admin.cmd("SCRIPT", "FLUSH")
    time.sleep(1.5)
    st = h.status_endpoints(old.metrics_port)
    roles = {n: e.get("role") for n, e in st.items()}
    h.log("leader %s /status roles after SCRIPT FLUSH: %s" % (old.name, roles))
    t.check(roles.get("gap") == "leader", "gap: %s is no longer the leader after SCRIPT FLUSH"
            % old.name)
    code, body = h.readyz(old.metrics_port)
    t.check(code == 200, "/readyz of %s: %r %r" % (old.name, code, body[:200]))

    rc, out, err = h.run_baton(["status", "-c", old.cfg], env=ENV)
    h.log("baton status:\n" + "\n".join("      " + l for l in out.splitlines()) + err)
    rows = {l.split()[0]: l.split() for l in out.splitlines() if l.strip()}
    t.check(rc == 0, "baton status exit %d: %s" % (rc, err.strip()))
    t.check(rows.get("gap", [None] * 4)[3] == "has-leader" and "pid" in out,
            "baton status: gap has a leader with a holder: %r" % out)

    keys = sorted(k.decode() for k in admin.cmd("KEYS", "*"))
    h.log("keys: %s" % [k for k in keys if ":once:" not in k] +
          " + %d once claims" % len([k for k in keys if ":once:" in k]))
    t.check(all(k.startswith("baton:") for k in keys), "a key outside baton:*: %r" % keys)
    t.check("baton:active:redis_psub:rep:mark" in keys, "no replay mark in Redis")
    t.check(any(":once:" in k for k in keys), "no OnceGuard claim in Redis")
    if srv:
        t.check("baton:active:mysql_cdc:cdc:cdc" in keys, "no CDC checkpoint in Redis")
    clients = admin.cmd("CLIENT", "LIST").decode()
    subs = [l for l in clients.splitlines() if "name=baton-sub" in l and "user=baton " in l
            and re.search(r"\bsub=[1-9]", l)]
    t.check(len(subs) >= 2, "expected both replicas' release subscribers (baton-sub, sub>0):\n%s"
            % clients)

    # graceful handover: the release is announced, the standby takes over
    t_term = now_ms()
    status = old.term(15)
    t.check(status == 0, "%s exited with %r after SIGTERM" % (old.name, status))
    got = h.wait_until(lambda: [r for r in recs(new, "chan.x") if r[1] >= t_term], 10, 0.02)
    t.require(got, "%s did not take over gap within 10 s" % new.name)
    takeover = min(r[1] for r in recs(new, "chan.x") if r[1] >= t_term) - t_term
    ann = [(ms - t_term, ch) for ms, ch in watcher.seen if ms >= t_term - 100]
    h.log("SIGTERM -> %s forwards gap after %d ms; release announcements seen: %s"
          % (new.name, takeover, ann))
    t.check(any(ch == "baton:active:redis_psub:gap:released" for _, ch in ann),
            "no release announcement on baton:active:redis_psub:gap:released")
    t.check(takeover < 1500, "handover took %d ms (ttl 3000: the announcement was not used?)"
            % takeover)
    if srv:
        srv.sql("".join("INSERT INTO acl.t VALUES (%d, 'b%d');\n" % (i, i)
                        for i in range(101, 151)))
    time.sleep(2.0)
    pub_gap.stop()
    pub_rep.stop()
    time.sleep(0.7)

    # what arrived
    g_all = recs(old, "chan.x") + recs(new, "chan.x")
    sent = set(e[0] for e in pub_gap.snapshot())
    dups = h.duplicates(r[0] for r in g_all)
    h.log("gap: published %d, forwarded %d (old %d, new %d), duplicates %d, missing %d"
          % (len(sent), len(g_all), len(recs(old, "chan.x")), len(recs(new, "chan.x")),
             len(dups), len(sent - set(r[0] for r in g_all))))
    t.check(not dups, "gap duplicates: %r" % list(dups.items())[:5])
    t.check(len(g_all) > 0.9 * len(sent), "gap forwarded only %d of %d" % (len(g_all), len(sent)))
    r_all = recs(old, SOURCE_CHANNEL) + recs(new, SOURCE_CHANNEL)
    r_sent = set(e[0] for e in pub_rep.snapshot())
    r_missing = r_sent - set(r[0] for r in r_all)
    h.log("rep (replay): published %d, forwarded %d, replayed %d, missing %d"
          % (len(r_sent), len(r_all), sum(1 for r in r_all if r[2]), len(r_missing)))
    t.check(not r_missing, "replay endpoint lost %d messages, e.g. %r"
            % (len(r_missing), sorted(r_missing)[:5]))
    slots = []
    for b in batons:
        slots += [r["slot"] for r in b.records if r.get("endpoint") == "tick"]
    sdups = h.duplicates(slots)
    h.log("tick: %d slots fired, duplicates %d" % (len(slots), len(sdups)))
    t.check(len(slots) >= 6, "only %d schedule slots fired" % len(slots))
    t.check(not sdups, "slots fired twice: %r" % sdups)
    if srv:
        ids = [r["after"]["id"] for b in batons for r in b.records
               if r.get("endpoint") == "cdc" and r.get("op") == "insert"]
        h.log("cdc: %d inserts forwarded (150 made), distinct %d" % (len(ids), len(set(ids))))
        t.check(set(ids) == set(range(1, 151)), "cdc: missing %r"
                % sorted(set(range(1, 151)) - set(ids))[:10])
    st = new.term(15)
    t.check(st == 0, "%s exited with %r" % (new.name, st))

    log_entries = acl_log(admin)
    t.check(not log_entries, "ACL LOG has %d denials, e.g. %r" % (len(log_entries), log_entries[:3]))
    for b in batons:
        d = denial_lines(b.stderr_text())
        t.check(not d, "%s logged permission errors: %r" % (b.name, d[:3]))


def test_missing_rule(t):
    redis = AclRedis()
    t.cleanup(redis.stop)
    main_admin = redis.admin()
    setuser(main_admin, "batonsrc", SRC_PW, source_rules())
    setuser(main_admin, "baton", LOCKER_PW, locker_rules())
    full_locker, full_source = locker_rules(), source_rules()

    # (variant, side, rule removed, what the log must name)
    variants = []
    for c, _ in LOCKER_COMMANDS:
        variants.append(("l_" + c.replace("|", "_"), "locker", "+" + c, c))
    variants.append(("l_keys", "locker", "~baton:*", None))
    variants.append(("l_channels", "locker", "&baton:*", None))
    for c, _ in SOURCE_COMMANDS:
        variants.append(("s_" + c, "source", "+" + c, c))
    variants.append(("s_pattern", "source", "&" + SOURCE_PATTERN, None))
    variants.append(("s_channel", "source", "&" + SOURCE_CHANNEL, None))

    # SCRIPT FLUSH makes the EVAL fallback run, but scripts are shared by the
    # whole server: any other baton reloads the same script (same SHA) at
    # once, so the variant without +eval gets a Redis of its own
    own = AclRedis()
    t.cleanup(own.stop)
    own_admin = own.admin()
    setuser(own_admin, "batonsrc", SRC_PW, source_rules())
    runs = []
    for name, side, rule, cmd in variants:
        port, admin = (own.port, own_admin) if rule == "+eval" else (redis.port, main_admin)
        prefix = "baton:" + name
        lrules = [r for r in full_locker if r != rule] if side == "locker" else full_locker
        srules = [r for r in full_source if r != rule] if side == "source" else full_source
        luser, suser = "baton", "batonsrc"
        if side == "locker":
            luser = "u_" + name
            setuser(admin, luser, LOCKER_PW, lrules)
        else:
            suser = "u_" + name
            setuser(admin, suser, SRC_PW, srules)
        # the busy endpoint's lease is held by someone else: the standby path
        admin.cmd("SET", prefix + ":active:redis_psub:busy", "someone else", "PX", "120000")
        mp = h.free_port()
        b = t.baton(main_cfg(port, prefix=prefix, user=luser, metrics_port=mp),
                    endpoints(port, src_user=suser, with_busy=True), name=name, env=ENV)
        b.metrics_port = mp
        runs.append((b, name, side, rule, cmd, luser if side == "locker" else suser, prefix))

    time.sleep(4.0)
    own_admin.cmd("SCRIPT", "FLUSH")  # makes the EVAL fallback run (l_eval)
    time.sleep(3.0)
    ready, status_out = {}, {}
    for b, name, *_ in runs:
        ready[name] = h.readyz(b.metrics_port)
        st = h.status_endpoints(b.metrics_port, timeout=2.0)
        ready[name] += ({n: e.get("role") for n, e in st.items()},)
        status_out[name] = h.run_baton(["status", "-c", b.cfg], env=ENV)
    alive = {name: b.alive() for b, name, *_ in runs}
    exits = {}
    t_term = now_ms()
    for b, name, *_ in runs:
        b.signal(signal.SIGTERM)
    for b, name, *_ in runs:
        try:
            exits[name] = b.wait(15)
        except Exception:
            b.kill()
            exits[name] = "hung"
    entries = acl_log(main_admin) + acl_log(own_admin)

    for b, name, side, rule, cmd, user, prefix in runs:
        text = b.stderr_text()
        den = denial_lines(text)
        st_rc, st_out, st_err = status_out[name]
        mine = sorted(set((e.get("object"), e.get("context")) for e in entries
                          if e.get("username") == user))
        code, body, roles = ready[name]
        h.log("%-16s -%-16s ACL LOG %s; /readyz %s; roles %s; status exit %d%s"
              % (name, rule, mine, code, roles, st_rc,
                 (": " + st_err.strip()[:160]) if st_rc else ""))
        for l in (den[:2] or ["(no permission error logged)"]):
            h.log("      " + l[:300])
        t.check(alive[name], "%s: baton exited while running: %s" % (name, text[-500:]))
        t.check(exits[name] == 0, "%s: exit status %r after SIGTERM" % (name, exits[name]))
        if rule == "+client|setname":
            # tolerated: baton works, Redis logs the refusal
            t.check(not den, "%s: CLIENT SETNAME refusal should be tolerated: %r" % (name, den[:2]))
            t.check(roles.get("gap") == "leader", "%s: gap role %r" % (name, roles.get("gap")))
            t.check(("client|setname", "toplevel") in mine, "%s: no ACL LOG entry" % name)
            continue
        t.check(mine, "%s: Redis logged no denial for %s: the variant did not exercise %s"
                % (name, user, rule))
        if side == "locker" and rule not in ("+del", "+publish"):
            # everything but the release runs while baton runs: said then
            early = [l for l in den if rfc3339_ms(l.split(" ", 1)[0]) < t_term]
            t.check(early, "%s: nothing logged about the refusal while running (before SIGTERM)"
                    % name)
        if cmd:
            named = names_command(den, cmd)
            if not named and cmd == "ping" and side == "locker" and cmd in body.lower():
                t.check(False, "%s: the refused PING shows only on /readyz (%r), not in the log"
                        % (name, body.strip()[:200]))
                continue
            t.check(named, "%s: no logged error names the command %r; permission errors "
                    "logged: %r" % (name, cmd, den[:3]))
        elif side == "locker":
            # Redis names no key or channel; baton's message names the key
            named = [l for l in den if prefix + ":" in l]
            t.check(named, "%s: no logged error names the key or channel (%s:...); permission "
                    "errors logged: %r" % (name, prefix, den[:3]))
        else:
            # Redis names no channel; the line names the endpoint subscribing
            ep = "[gap]" if rule == "&" + SOURCE_PATTERN else "[rep]"
            named = [l for l in den if ep in l and "channels" in l]
            t.check(named, "%s: no logged channel refusal by the endpoint %s; permission errors "
                    "logged: %r" % (name, ep, den[:3]))


if __name__ == "__main__":
    h.main(globals())
