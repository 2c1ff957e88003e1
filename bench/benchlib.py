"""What the Python benchmarks share: the environment bench/run gives them
(or the defaults when one is run by hand), the tests' harness, and the
per-process figures read from /proc.

    import benchlib
    h = benchlib.harness()          # BUILD_DIR from argv[1], BATON_* set
    cpu_s = benchlib.ticks(pid) / benchlib.HZ
    cpu_s = benchlib.wait_cpu(popen, timeout)  # a child's CPU in all, at its exit
    ns = benchlib.cpu_ns(pid)       # every thread's run time, ns (schedstat)
    n = benchlib.LineCounter(path)  # lines of a growing file, read once
    benchlib.run(main)              # main's exit status, harness cleanups done
"""
import os
import subprocess
import sys
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
HZ = os.sysconf("SC_CLK_TCK")


def harness():
    """Sets BATON_BUILD_DIR (argv[1], else $BATON_BUILD_DIR, else ./build),
    BATON_BIN and BATON_SOURCE_DIR, and returns tests/integration/lib's
    harness module."""
    if len(sys.argv) > 1:
        os.environ["BATON_BUILD_DIR"] = os.path.abspath(sys.argv[1])
    os.environ.setdefault("BATON_BUILD_DIR", os.path.join(SRC, "build"))
    os.environ.setdefault("BATON_BIN", os.path.join(os.environ["BATON_BUILD_DIR"], "baton"))
    os.environ.setdefault("BATON_SOURCE_DIR", SRC)
    lib = os.path.join(SRC, "tests", "integration", "lib")
    if lib not in sys.path:
        sys.path.insert(0, lib)
    import harness as h
    return h


def ticks(pid):
    """CPU time of pid so far, utime + stime, in clock ticks (HZ per s)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15


def wait_cpu(p, timeout):
    """Waits for the subprocess.Popen p like p.wait(timeout)
    (subprocess.TimeoutExpired after it) and returns the CPU seconds (user +
    system) the process used in all, from wait4."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_utime + ru.ru_stime
        if time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(p.args, timeout)
        time.sleep(0.01)


def cpu_ns(pid):
    """Run time of every thread of pid so far, in ns."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total


def status_kb(pid, what):
    """A "<what>: N kB" field of /proc/<pid>/status (VmHWM, VmRSS) or a count
    (Threads); 0 when absent."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(what + ":"):
                return int(line.split()[1])
    return 0


def thread_wakes(pid):
    """Voluntary context switches (a thread going to sleep, so one per
    wake-up) of every thread of pid, summed by thread kind: the part of
    its name before ':' ("lease", "psub", "renewer", "acquirer"...)."""
    out = {}
    base = "/proc/%d/task" % pid
    for tid in os.listdir(base):
        try:
            with open("%s/%s/comm" % (base, tid)) as f:
                kind = f.read().strip().split(":")[0]
            with open("%s/%s/status" % (base, tid)) as f:
                n = next(int(ln.split()[1]) for ln in f if ln.startswith("voluntary_ctxt_switches"))
        except (OSError, StopIteration):
            continue  # the thread ended meanwhile
        out[kind] = out.get(kind, 0) + n
    return out


def wakes_per_s(before, after, seconds):
    """Per-kind wake-ups per second between two thread_wakes() readings
    (kinds whose threads all ended are left out)."""
    return {k: round((after[k] - before.get(k, 0)) / seconds, 1) for k in sorted(after)}


def lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


class LineCounter:
    """Lines of a growing file, reading only what was appended since the
    last call (re-reading ~100 MB of envelopes every 10 ms would take a core
    from the subject being measured)."""

    def __init__(self, path):
        self.path, self.off, self.n = path, 0, 0

    def __call__(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.off)
                data = f.read()
        except FileNotFoundError:
            return self.n
        self.off += len(data)
        self.n += data.count(b"\n")
        return self.n


def run(main, budget_s=None):
    """Runs main(), stops whatever the harness started, exits with main's
    status. SIGTERM exits (the cleanups still run); budget_s: a SIGALRM
    after that many seconds raises TimeoutError inside main (which reports
    it like any other failure)."""
    import harness as h
    import signal
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    if budget_s:
        name = os.path.basename(sys.argv[0])

        def over(*_a):
            raise TimeoutError("%s: over its %d s budget" % (name, budget_s))
        signal.signal(signal.SIGALRM, over)
        signal.alarm(int(budget_s))
    try:
        rc = main()
    finally:
        h._run_cleanups()
    sys.exit(rc)
