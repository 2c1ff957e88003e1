"""A real PostgreSQL 15 for integration tests and benchmarks.

PostgreSQL refuses to run as root: PgServer runs initdb (trust auth) into a
temporary data directory owned by the `postgres` user, then `postgres` on a
free 127.0.0.1 port with its socket in that directory, all through
`runuser -u postgres`. Startup takes ~1-2 s. SQL goes through psql as the
superuser `postgres` over TCP. Always stopped at exit (harness cleanups).

self.proc is runuser; the postmaster is its child (postmaster_pid(), from
postmaster.pid) and every backend or auxiliary process is a child of the
postmaster in a session of its own (PostgreSQL setsid()s them), so
signals meant for the whole server go to server_pids(), not to a process
group.

    import postgres as pg
    srv = pg.PgServer()                 # started; registered for cleanup
    srv.sql("CREATE TABLE t (x int)")   # -> list of rows (tuples of str/None)
    srv.conninfo()                      # "host=127.0.0.1 port=P dbname=postgres user=postgres"
    srv.restart(); srv.kill()
    srv.pause(); srv.resume()           # SIGSTOP / SIGCONT, backends too
"""

import os
import shutil
import signal
import subprocess
import time

import harness as h

PG_BIN = os.environ.get("BATON_PG_BIN", "/usr/lib/postgresql/15/bin")


def available():
    """None when PostgreSQL 15 can run here, else why not."""
    if not os.path.exists(os.path.join(PG_BIN, "postgres")):
        return "PostgreSQL 15 is not installed (%s; apt-get install postgresql)" % PG_BIN
    if not shutil.which("psql"):
        return "psql is not installed"
    if not shutil.which("runuser"):
        return "runuser is not available"
    return None


class SqlError(Exception):
    pass


_setpriv = None


def _pdeathsig():
    """`setpriv --pdeathsig KILL` (util-linux >= 2.33) to run postgres with:
    the postmaster dies with its runuser (PR_SET_PDEATHSIG; its backends
    follow, they watch it), which dies with a parent that set the same for
    it (tests/support/brokers.py), so that a killed launcher leaves no
    server behind; [] when setpriv cannot."""
    global _setpriv
    if _setpriv is None:
        try:
            p = subprocess.run(["setpriv", "--help"], capture_output=True, text=True, timeout=10)
            ok = "--pdeathsig" in p.stdout
        except (OSError, subprocess.SubprocessError):
            ok = False
        _setpriv = ["setpriv", "--pdeathsig", "KILL"] if ok else []
    return _setpriv


class PgServer:
    def __init__(self, start=True, port=None):
        self.port = port or h.free_port()
        self.dir = h.mktemp("baton-pg-")
        os.chmod(self.dir, 0o755)
        self.datadir = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        subprocess.run(["chown", "postgres:postgres", self.dir], check=True)
        p = subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "initdb"),
                            "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync",
                            "-D", self.datadir], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError("initdb failed: %s" % p.stderr[-2000:])
        self.proc = None
        self.paused = False
        h._cleanups.append(self.stop)
        if start:
            self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["runuser", "-u", "postgres", "--"] + _pdeathsig() + [os.path.join(PG_BIN, "postgres"),
             "-D", self.datadir, "-p", str(self.port), "-k", self.dir,
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
             "-c", "synchronous_commit=on", "-c", "full_page_writes=off",
             "-c", "max_connections=100", "-c", "logging_collector=off"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"), start_new_session=True)
        self.paused = False
        if not h.wait_until(self._ready, 60, 0.1):
            self.stop()
            raise RuntimeError("postgres did not start on port %d (log %s)" % (self.port, self.log))

    def _ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError("postgres exited with %s: %s" % (self.proc.returncode, self._tail()))
        try:
            self.sql("SELECT 1", timeout=5)
            return True
        except (SqlError, subprocess.TimeoutExpired):
            return False

    def _tail(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def postmaster_pid(self):
        """The postmaster's pid (the first line of postmaster.pid), or 0 when
        it is not running."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                pid = int(f.readline())
        except (OSError, ValueError):
            return 0
        return pid if _ppid(pid) == self.proc.pid else 0

    def server_pids(self):
        """The postmaster and its children (backends, auxiliary processes);
        [] when it is not running."""
        pm = self.postmaster_pid()
        return [pm] + _children(pm) if pm else []

    def stop(self):
        """Fast shutdown (SIGINT to the postmaster via pg_ctl), else kill."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            if self.paused:
                self.resume()
            subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "pg_ctl"),
                            "-D", self.datadir, "-m", "fast", "-w", "-t", "20", "stop"],
                           capture_output=True, timeout=40)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def kill(self):
        """SIGKILL to runuser, the postmaster and all its children (a crash:
        the data stays); returns once they are gone."""
        if self.proc is not None and self.proc.poll() is None:
            pids = self.server_pids()
            for pid in pids:  # the postmaster first: it forks no more
                _signal(pid, signal.SIGKILL)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
            h.wait_until(lambda: all(_state(p) in (None, "Z", "X") for p in pids), 10, 0.01)
        self.proc = None
        self.paused = False
        # the lock files name the dead postmaster's pid, which can linger as
        # a zombie until init reaps it: a restart would take it for a live
        # postmaster ("lock file ... already exists")
        for f in (os.path.join(self.datadir, "postmaster.pid"),
                  os.path.join(self.dir, ".s.PGSQL.%d.lock" % self.port)):
            if os.path.exists(f):
                os.unlink(f)

    def pause(self):
        """SIGSTOP to the postmaster, then (it forks no more) to all its
        children: no new connection is accepted, no existing one answers.
        Returns once all of them are stopped."""
        pm = self.postmaster_pid()
        if not pm:
            raise RuntimeError("postgres is not running")
        self.paused = True
        _stop_all([pm])
        _stop_all(_children(pm))

    def resume(self):
        """SIGCONT to the postmaster and all its children, and to runuser
        (which stopped itself when it saw its child stop)."""
        for pid in self.server_pids()[::-1]:
            _signal(pid, signal.SIGCONT)
        if self.proc is not None and self.proc.poll() is None:
            _signal(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def restart(self, down_s=0.0):
        self.stop()
        if down_s:
            time.sleep(down_s)
        self.start()

    def conninfo(self, port=None, dbname="postgres"):
        return "host=127.0.0.1 port=%d dbname=%s user=postgres" % (port or self.port, dbname)

    def sql(self, text, timeout=60):
        """Runs statements (psql -At, stop on the first error); returns the
        rows of the output (tab separated; empty strings for NULL)."""
        p = subprocess.run(["psql", "-X", "-q", "-At", "-F", "\t", "-v", "ON_ERROR_STOP=1",
                            "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                            "-d", "postgres"], input=text.encode(), capture_output=True,
                           timeout=timeout)
        if p.returncode != 0:
            raise SqlError(p.stderr.decode(errors="replace").strip())
        return [tuple(line.split("\t")) for line in p.stdout.decode(errors="replace").splitlines()]


def _stat(pid):
    """The fields of /proc/PID/stat after the command (state, ppid, ...), or
    None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _state(pid):
    st = _stat(pid)
    return st[0] if st else None


def _ppid(pid):
    st = _stat(pid)
    return int(st[1]) if st else 0


def _children(pid):
    """The pids whose parent is pid."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _ppid(int(name)) == pid:
            out.append(int(name))
    return out


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _stop_all(pids, timeout=5.0):
    """SIGSTOP to each, then waits until each is stopped (or gone)."""
    for pid in pids:
        _signal(pid, signal.SIGSTOP)
    if not h.wait_until(lambda: all(_state(p) in (None, "T", "t", "Z", "X") for p in pids),
                        timeout, 0.005):
        raise RuntimeError("postgres processes %s did not stop" % pids)
