"""Installing baton and libbaton-guard as a new user would (issue 19).

One build of this source tree, configured with -DCMAKE_INSTALL_PREFIX=/usr
(BATON_TESTS=OFF: only what is installed), installed into a temporary
DESTDIR; every test below uses that copy, never the build tree.

  1. install_layout: `cmake --install --prefix <other>` is refused (the unit
     and the configuration paths are fixed at configure time) and installs
     nothing; the DESTDIR install holds the binary, the configuration under
     etc/ (not usr/etc), the unit, the library (libbaton-guard.so.1 with
     that SONAME, exporting only baton_* names; libbaton-guard.a whose
     global symbols are only baton_* names), the public headers and
     baton-guard.pc. The unit's ExecStart names the installed binary and
     configuration; `systemd-analyze verify --root` passes on it, and fails
     on the same unit in a root without the binary (the check can fail).
     The installed `baton --check-config` passes on the installed
     configuration.
  2. credentials: a `*_file` setting "credential:NAME" reads
     $CREDENTIALS_DIRECTORY/NAME (systemd LoadCredential=): without the
     variable --check-config exits 78 naming the setting and its line; with
     it, the installed baton authenticates to a Redis with requirepass
     (a schedule endpoint's OnceGuard claims succeed: slots are fired).
  3. examples_build: examples/once_cron.c and examples/active_worker.c
     compile with -Werror against the installed copy with
     `pkg-config --cflags --libs baton-guard` (and once_cron also linked
     statically with libbaton-guard.a); the dynamic ones load the installed
     libbaton-guard.so.1.
  4. once_cron: two replicas (one dynamic, one static) on one real Redis,
     4 slots: every slot ran exactly once across them.
  5. active_worker: two replicas on one Redis (ttl 2 s). The leader commits
     items with fenced writes; SIGSTOP it beyond its ttl: the standby takes
     over with a higher epoch and continues; SIGCONT the old leader: it
     commits nothing in its old term after the takeover (its write is
     refused or its term is over; a line printed late belongs to a commit
     made before the pause) and becomes standby; SIGKILL the new leader: the old one takes
     over again. No item is printed twice, epochs never go backwards along
     the items, every takeover resumes after the last committed item (gaps
     only where a commit's line was lost with a SIGKILL), SIGTERM exits 0.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

ORDER = ["test_install_layout", "test_credentials", "test_examples_build", "test_once_cron",
         "test_active_worker"]

_state = {}


def sh(args, timeout=600, env=None, cwd=None):
    """Runs args; returns (exit status, stdout + stderr)."""
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       env=env, cwd=cwd, text=True)
    return p.returncode, p.stdout


def installed(t):
    """The DESTDIR install (built once per run of this file)."""
    if "dest" in _state:
        return _state["dest"]
    base = h.mktemp("baton-install-")
    _state["base"] = base
    build = os.path.join(base, "build")
    dest = os.path.join(base, "dest")
    t0 = time.monotonic()
    rc, out = sh(["cmake", "-S", h.SOURCE_DIR, "-B", build, "-DCMAKE_INSTALL_PREFIX=/usr",
                  "-DBATON_TESTS=OFF", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"])
    t.require(rc == 0, "configure with prefix /usr: %s" % out[-2000:])
    rc, out = sh(["cmake", "--build", build, "-j2", "--target", "baton", "baton_guard_shared",
                  "baton_guard_archive"])
    t.require(rc == 0, "build: %s" % out[-3000:])
    h.log("configured and built in %.1f s" % (time.monotonic() - t0))
    # another prefix than the configured one: refused, nothing installed
    other = os.path.join(base, "other")
    env = dict(os.environ, DESTDIR=other)
    rc, out = sh(["cmake", "--install", build, "--prefix", "/opt/elsewhere"], env=env)
    _state["other"] = (rc, out, other)
    rc, out = sh(["cmake", "--install", build], env=dict(os.environ, DESTDIR=dest))
    t.require(rc == 0, "DESTDIR install: %s" % out[-2000:])
    _state["dest"] = dest
    _state["build"] = build
    return dest


def libdir(dest):
    found = glob.glob(os.path.join(dest, "usr", "lib*", "**", "libbaton-guard.so.1"),
                      recursive=True)
    return os.path.dirname(found[0]) if found else None


def test_install_layout(t):
    dest = installed(t)
    rc, out, other = _state["other"]
    t.check(rc != 0 and "configured for prefix /usr" in out and "-DCMAKE_INSTALL_PREFIX" in out,
            "install to another prefix refused with a clear message (rc %d): %s" % (rc, out[-600:]))
    t.check(not os.path.exists(os.path.join(other, "opt")),
            "the refused install wrote nothing")
    for rel in ["usr/bin/baton", "etc/baton/baton.cfg", "etc/baton/endpoints.d/schedule.cfg",
                "usr/lib/systemd/system/baton.service", "usr/include/baton/guard.h",
                "usr/include/baton/locker.h", "usr/include/baton/active_guard.h",
                "usr/include/baton/once_guard.h", "usr/include/baton/log.h",
                "usr/share/doc/baton/README.md"]:
        t.check(os.path.exists(os.path.join(dest, rel)), "installed: /%s" % rel)
    t.check(not os.path.exists(os.path.join(dest, "usr", "etc")), "no configuration in /usr/etc")
    t.check(not os.path.exists(os.path.join(dest, "usr", "local")), "nothing in /usr/local")
    ld = libdir(dest)
    t.require(ld is not None, "libbaton-guard.so.1 installed")
    for f in ["libbaton-guard.so", "libbaton-guard.a", "pkgconfig/baton-guard.pc"]:
        t.check(os.path.exists(os.path.join(ld, f)), "installed: %s" % f)
    rc, out = sh(["readelf", "-d", os.path.join(ld, "libbaton-guard.so.1")])
    t.check("Library soname: [libbaton-guard.so.1]" in out, "SONAME libbaton-guard.so.1")
    rc, out = sh(["nm", "-D", "--defined-only", os.path.join(ld, "libbaton-guard.so.1")])
    exported = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
    h.log("exported: %d functions" % len(exported))
    t.check(exported and all(s.startswith("baton_") for s in exported),
            "only baton_* exported (others: %s)" % [s for s in exported if not s.startswith("baton_")][:10])
    for need in ["baton_locker_redis_create", "baton_active_guard_create", "baton_once_guard_allow",
                 "baton_locker_fenced_set", "baton_log_set"]:
        t.check(need in exported, "exports %s" % need)
    rc, out = sh(["nm", "-g", "--defined-only", os.path.join(ld, "libbaton-guard.a")])
    globals_a = sorted(set(line.split()[-1] for line in out.splitlines()
                           if re.match(r"^[0-9a-f]+ [TDBR] ", line)))
    t.check(globals_a and all(s.startswith("baton_") for s in globals_a),
            "libbaton-guard.a: only baton_* global (others: %s)"
            % [s for s in globals_a if not s.startswith("baton_")][:10])

    unit = open(os.path.join(dest, "usr/lib/systemd/system/baton.service")).read()
    t.check("ExecStart=/usr/bin/baton -c /etc/baton/baton.cfg\n" in unit,
            "the unit runs the installed binary with the installed configuration")
    t.check("@" not in re.sub(r"(?m)^#.*$", "", unit).replace("%", ""),
            "no unfilled @VAR@ in the unit")
    t.check(re.search(r"(?m)^LoadCredential=", unit) is None,
            "no active LoadCredential= for a file the install does not provide")
    if not shutil.which("systemd-analyze"):
        t.skip("systemd-analyze is not installed (Debian package systemd)")
    # the root needs systemd's own units (sysinit.target, ...) beside baton's
    units = os.path.join(dest, "usr/lib/systemd/system")
    ours = open(os.path.join(units, "baton.service")).read()

    def systemd_root(root):
        d = os.path.join(root, "usr/lib/systemd/system")
        shutil.copytree("/usr/lib/systemd/system", d, symlinks=True, dirs_exist_ok=True)
        with open(os.path.join(d, "baton.service"), "w") as f:
            f.write(ours)
    systemd_root(dest)
    rc, out = sh(["systemd-analyze", "verify", "--root=" + dest, "baton.service"])
    t.check(rc == 0, "systemd-analyze verify --root passes on the installed unit: %s" % out[-1500:])
    bare = os.path.join(_state["base"], "bare")
    systemd_root(bare)
    rc, out = sh(["systemd-analyze", "verify", "--root=" + bare, "baton.service"])
    t.check(rc != 0 and "/usr/bin/baton" in out,
            "the same check fails where the binary is missing (rc %d): %s" % (rc, out[-400:]))
    rc, out = sh([os.path.join(dest, "usr/bin/baton"), "-c",
                  os.path.join(dest, "etc/baton/baton.cfg"), "--check-config"])
    t.check(rc == 0 and "configuration OK" in out,
            "installed baton --check-config on the installed configuration: %s" % out[-800:])


CRED_CFG = """locker = { host = "127.0.0.1"; port = %d;
  password_file = "credential:redis-password"; };
sinks = ( { name = "out"; type = "stdout"; } );
endpoints_dir = "endpoints.d";
"""
TICK = 'name = "tick"; type = "schedule"; sink = "out"; cron = "* * * * * *";\n'


def test_credentials(t):
    dest = installed(t)
    baton = os.path.join(dest, "usr/bin/baton")
    redis = t.redis()
    redis.client().cmd("CONFIG", "SET", "requirepass", "s3cret-pw")
    cfgdir = os.path.join(t.workdir, "cfg")
    os.makedirs(os.path.join(cfgdir, "endpoints.d"))
    cfg = os.path.join(cfgdir, "baton.cfg")
    with open(cfg, "w") as f:
        f.write(CRED_CFG % redis.port)
    with open(os.path.join(cfgdir, "endpoints.d", "tick.cfg"), "w") as f:
        f.write(TICK)
    env = dict(os.environ)
    env.pop("CREDENTIALS_DIRECTORY", None)
    rc, out = sh([baton, "-c", cfg, "--check-config"], env=env)
    t.check(rc == 78 and "%s:2" % cfg in out and "password_file" in out
            and "CREDENTIALS_DIRECTORY" in out,
            "no $CREDENTIALS_DIRECTORY: exit 78 naming the setting and its line: %s" % out[-500:])
    creds = os.path.join(t.workdir, "creds")
    os.makedirs(creds)
    with open(os.path.join(creds, "redis-password"), "w") as f:
        f.write("s3cret-pw\n")
    env["CREDENTIALS_DIRECTORY"] = creds
    rc, out = sh([baton, "-c", cfg, "--check-config"], env=env)
    t.check(rc == 0, "with $CREDENTIALS_DIRECTORY: configuration OK: %s" % out[-500:])
    outp = os.path.join(t.workdir, "out.jsonl")
    errp = os.path.join(t.workdir, "err.log")
    with open(outp, "w") as o, open(errp, "w") as e:
        p = subprocess.Popen([baton, "-c", cfg], stdout=o, stderr=e, env=env,
                             stdin=subprocess.DEVNULL)
    t.cleanup(lambda: h.stop_process(p))

    def fired():
        with open(outp) as f:
            return sum(1 for line in f if '"tick"' in line)
    got = h.wait_until(lambda: fired() >= 2, 15)
    t.check(got, "slots fired with the password read from the credential (%d)" % fired())
    p.send_signal(signal.SIGTERM)
    t.check(p.wait(15) == 0, "exit 0 on SIGTERM")
    text = open(errp).read()
    t.check("WRONGPASS" not in text and "NOAUTH" not in text, "no authentication error logged")
    if not got:
        h.log(text[-2000:])


def pkg_env(dest):
    ld = libdir(dest)
    env = dict(os.environ)
    env["PKG_CONFIG_SYSROOT_DIR"] = dest
    env["PKG_CONFIG_LIBDIR"] = os.path.join(ld, "pkgconfig") + ":/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/lib/pkgconfig:/usr/share/pkgconfig"
    env.pop("PKG_CONFIG_PATH", None)
    return env


def test_examples_build(t):
    dest = installed(t)
    env = pkg_env(dest)
    rc, flags = sh(["pkg-config", "--cflags", "--libs", "baton-guard"], env=env)
    t.require(rc == 0, "pkg-config --cflags --libs baton-guard: %s" % flags)
    h.log("pkg-config:", flags.strip())
    t.check(dest in flags, "the flags point into the installed copy")
    out = os.path.join(_state["base"], "examples")
    os.makedirs(out, exist_ok=True)
    ex = os.path.join(h.SOURCE_DIR, "examples")
    cc = ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror"]
    for name in ["once_cron", "active_worker"]:
        rc, msg = sh(cc + [os.path.join(ex, name + ".c"), "-o", os.path.join(out, name)]
                     + flags.split(), env=env)
        t.check(rc == 0, "%s builds against the installed copy: %s" % (name, msg[-1500:]))
    rc, sflags = sh(["pkg-config", "--static", "--libs", "baton-guard"], env=env)
    ld = libdir(dest)
    static_libs = [f for f in sflags.split() if f != "-lbaton-guard"]
    rc, msg = sh(cc + [os.path.join(ex, "once_cron.c"), "-o", os.path.join(out, "once_cron_static")]
                 + sh(["pkg-config", "--cflags", "baton-guard"], env=env)[1].split()
                 + [os.path.join(ld, "libbaton-guard.a")] + static_libs, env=env)
    t.check(rc == 0, "once_cron links statically with libbaton-guard.a: %s" % msg[-1500:])
    rc, deps = sh(["ldd", os.path.join(out, "once_cron")],
                  env=dict(os.environ, LD_LIBRARY_PATH=ld))
    t.check(os.path.join(ld, "libbaton-guard.so.1") in deps,
            "once_cron loads the installed libbaton-guard.so.1: %s" % deps)
    rc, deps = sh(["ldd", os.path.join(out, "once_cron_static")])
    t.check(rc == 0 and "libbaton-guard" not in deps, "the static one needs no libbaton-guard.so")
    _state["examples"] = out


def example(t, name):
    if "examples" not in _state:
        test_examples_build(t)
    path = os.path.join(_state["examples"], name)
    t.require(os.path.exists(path), "%s was built" % name)
    return path


def run_bg(t, args, name):
    outp = os.path.join(t.workdir, name + ".out")
    errp = os.path.join(t.workdir, name + ".err")
    env = dict(os.environ, LD_LIBRARY_PATH=libdir(installed(t)))
    with open(outp, "w") as o, open(errp, "w") as e:
        p = subprocess.Popen(args, stdout=o, stderr=e, env=env, stdin=subprocess.DEVNULL)
    p.outp, p.errp, p.label = outp, errp, name
    t.cleanup(lambda: h.stop_process(p))
    return p


def lines(p):
    with open(p.outp) as f:
        return [line.rstrip("\n") for line in f if line.endswith("\n")]


def test_once_cron(t):
    dyn = example(t, "once_cron")
    stat = example(t, "once_cron_static")
    redis = t.redis()
    a = run_bg(t, [dyn, "-p", str(redis.port), "-n", "4"], "a")
    b = run_bg(t, [stat, "-p", str(redis.port), "-n", "4"], "b")
    t.check(a.wait(20) == 0 and b.wait(20) == 0, "both replicas exit 0")
    ran = [int(line.split()[2]) for p in (a, b) for line in lines(p) if line.startswith("ran slot")]
    h.log("slots run: a %d, b %d" % (len([l for l in lines(a) if l.startswith("ran")]),
                                     len([l for l in lines(b) if l.startswith("ran")])))
    h.log(open(a.errp).read().strip(), "|", open(b.errp).read().strip())
    t.check(len(ran) == len(set(ran)), "no slot ran twice: %s" % sorted(ran))
    slots = sorted(set(ran))
    t.check(len(slots) >= 4 and slots == list(range(slots[0], slots[0] + len(slots))),
            "every slot ran once: %s" % slots)


ITEM = re.compile(r"^item (\d+) epoch (\d+)$")


def items(p):
    return [(int(m.group(1)), int(m.group(2))) for m in map(ITEM.match, lines(p)) if m]


def test_active_worker(t):
    worker = example(t, "active_worker")
    redis = t.redis()
    args = [worker, "-p", str(redis.port), "-t", "2000"]
    a = run_bg(t, args, "a")
    t.require(h.wait_until(lambda: len(items(a)) >= 5, 10), "a leads and commits items")
    b = run_bg(t, args, "b")
    time.sleep(1.0)
    t.check(not items(b), "b stands by while a leads")
    # a paused beyond its ttl: b takes over
    a.send_signal(signal.SIGSTOP)
    time.sleep(0.2)  # every thread of a stopped; what it printed is in the file
    before = items(a)
    old_epoch = before[-1][1]
    t.require(h.wait_until(lambda: len(items(b)) >= 5, 10), "b takes over while a is paused")
    t.check(items(b)[0][1] > old_epoch, "b's epoch exceeds a's")
    a.send_signal(signal.SIGCONT)
    time.sleep(1.5)  # a wakes up in its old term: it must commit nothing in it
    a_after = items(a)[len(before):]
    # a line of the old term may still appear after SIGCONT: a commit made
    # before the pause whose line was not printed yet. It must then precede
    # b's first item; a commit in the old term after b took over would not.
    first_b = items(b)[0][0]
    late = [(n, e) for n, e in a_after if e == old_epoch and n >= first_b]
    t.check(not late, "a commits nothing in its old term after b took over (b began at item %d): %s"
            % (first_b, late[:5]))
    # b killed: a takes over again
    b_items = items(b)
    b.send_signal(signal.SIGKILL)
    b.wait(5)
    t.require(h.wait_until(lambda: any(e > b_items[-1][1] for _, e in items(a)), 10),
              "a takes over again after b is killed")
    time.sleep(0.5)
    a.send_signal(signal.SIGTERM)
    t.check(a.wait(10) == 0, "a exits 0 on SIGTERM (releasing the lease)")
    all_items = sorted(items(a) + items(b))
    h.log("items: a %d (epochs %s), b %d (epochs %s)" % (
        len(items(a)), sorted(set(e for _, e in items(a))), len(b_items),
        sorted(set(e for _, e in b_items))))
    nums = [n for n, _ in all_items]
    t.check(len(nums) == len(set(nums)), "no item committed twice: %s" %
            [n for n in nums if nums.count(n) > 1][:10])
    epochs = [e for _, e in all_items]
    t.check(epochs == sorted(epochs), "epochs never go backwards along the items")
    gaps = [(x, y) for x, y in zip(nums, nums[1:]) if y != x + 1]
    t.check(nums[0] == 1 and len(gaps) <= 2,
            "every takeover resumes after the last committed item (gaps %s; at most two of one "
            "item: a commit whose line was not printed before SIGSTOP / SIGKILL)" % gaps)
    t.check(all(y == x + 2 for x, y in gaps), "a gap is one item: %s" % gaps)
    t.check(len(set(epochs)) >= 3, "three terms: a, b, a again (%d)" % len(set(epochs)))
    h.log(open(a.errp).read()[-1500:])


def _remove_tree():
    base = _state.get("base")
    if base:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    import atexit
    atexit.register(_remove_tree)
    h.main(globals())
