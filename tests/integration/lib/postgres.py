"""A real PostgreSQL 15 for integration tests and benchmarks.

PostgreSQL refuses to run as root: PgServer runs initdb (trust auth) into a
temporary data directory owned by the `postgres` user, then `postgres` on a
free 127.0.0.1 port with its socket in that directory, all through
`runuser -u postgres`. Startup takes ~1-2 s. SQL goes through psql as the
superuser `postgres` over TCP. Always stopped at exit (harness cleanups).

    import postgres as pg
    srv = pg.PgServer()                 # started; registered for cleanup
    srv.sql("CREATE TABLE t (x int)")   # -> list of rows (tuples of str/None)
    srv.conninfo()                      # "host=127.0.0.1 port=P dbname=postgres user=postgres"
    srv.restart(); srv.kill()
"""

import os
import shutil
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
        h._cleanups.append(self.stop)
        if start:
            self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "postgres"),
             "-D", self.datadir, "-p", str(self.port), "-k", self.dir,
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=100", "-c", "logging_collector=off"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"), start_new_session=True)
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

    def stop(self):
        """Fast shutdown (SIGINT to the postmaster via pg_ctl), else kill."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "pg_ctl"),
                            "-D", self.datadir, "-m", "fast", "-w", "-t", "20", "stop"],
                           capture_output=True, timeout=40)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self):
        """SIGKILL to the postmaster's whole process group (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except OSError:
                pass
            self.proc.wait()
        self.proc = None
        pid = os.path.join(self.datadir, "postmaster.pid")
        if os.path.exists(pid):
            os.unlink(pid)

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
