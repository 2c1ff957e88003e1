"""A real mariadb-server for integration tests and benchmarks.

MariaServer runs `mariadb-install-db` into a temporary datadir, then
`mariadbd` on a free 127.0.0.1 port with its socket in the same directory,
ROW binlog with FULL row metadata (binlog=False: binary logging off).
Startup takes ~4 s: start one server per test file. SQL goes through the
`mariadb` command-line client over the socket as root.

    import mariadb as mdb
    srv = mdb.MariaServer()            # started; registered for cleanup
    srv.sql("CREATE DATABASE d")       # -> list of rows (tuples of str/None)
    p = srv.sql_background(script)     # Popen running a script
    srv.create_user("cdc", "pw")       # REPLICATION SLAVE/CLIENT + SELECT
    srv.restart()
"""

import os
import subprocess
import threading
import time

import harness as h


class SqlError(Exception):
    pass


class MariaServer:
    def __init__(self, binlog=True, extra_args=(), start=True):
        self.port = h.free_port()
        self.dir = h.mktemp("baton-mariadb-")
        self.datadir = os.path.join(self.dir, "data")
        self.socket = os.path.join(self.dir, "mysqld.sock")
        self.binlog = binlog
        self.extra = list(extra_args)
        self.proc = None
        self.log = os.path.join(self.dir, "server.log")
        p = subprocess.run(["mariadb-install-db", "--no-defaults", "--datadir=" + self.datadir,
                            "--user=root", "--auth-root-authentication-method=normal"],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError("mariadb-install-db failed: %s" % p.stderr[-2000:])
        h._cleanups.append(self.stop)
        if start:
            self.start()

    def start(self):
        args = ["mariadbd", "--no-defaults", "--datadir=" + self.datadir, "--user=root",
                "--port=%d" % self.port, "--socket=" + self.socket,
                "--bind-address=127.0.0.1", "--server-id=1",
                "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
                "--skip-name-resolve", "--innodb-buffer-pool-size=64M",
                "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0",
                "--log-error=" + self.log, "--pid-file=" + os.path.join(self.dir, "m.pid")]
        if self.binlog:
            args += ["--log-bin=" + os.path.join(self.datadir, "binlog"),
                     "--binlog-format=ROW", "--binlog-row-metadata=FULL"]
        args += self.extra
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ok = h.wait_until(self._ready, 60, 0.1)
        if not ok:
            self.stop()
            raise RuntimeError("mariadbd did not start on port %d (log %s)" % (self.port, self.log))

    def _ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError("mariadbd exited with %s: %s" % (self.proc.returncode, self._tail()))
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
        h.stop_process(self.proc, 30)
        self.proc = None

    def restart(self, down_s=0.0):
        self.stop()
        if down_s:
            time.sleep(down_s)
        self.start()

    def _client(self, user="root", password=None):
        a = ["mariadb", "--no-defaults", "-S", self.socket, "-u", user, "-N", "-B",
             "--default-character-set=utf8mb4"]
        if password:
            a.append("-p" + password)
        return a

    def sql(self, text, timeout=60, user="root", password=None):
        """Runs statements; returns the rows of the output (tab separated,
        NULL as None)."""
        p = subprocess.run(self._client(user, password), input=text.encode(),
                           capture_output=True, timeout=timeout)
        if p.returncode != 0:
            raise SqlError(p.stderr.decode(errors="replace").strip())
        rows = []
        for line in p.stdout.decode(errors="replace").splitlines():
            rows.append(tuple(None if v == "NULL" else v for v in line.split("\t")))
        return rows

    def sql_background(self, text):
        """Starts the client on a script; returns the Popen (wait() it).
        The script is fed from a thread: written here, a script larger than
        the pipe buffer would block until the client had run most of it."""
        p = subprocess.Popen(self._client(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        h._cleanups.append(lambda: p.poll() is None and p.kill())

        def feed():
            try:
                p.stdin.write(text.encode())
                p.stdin.close()
            except OSError:  # the client died: its exit status tells
                pass
        threading.Thread(target=feed, daemon=True).start()
        return p

    def master_status(self):
        rows = self.sql("SHOW MASTER STATUS")
        return (rows[0][0], int(rows[0][1])) if rows else None

    def create_user(self, user, password, grants="REPLICATION SLAVE, REPLICATION CLIENT, SELECT"):
        self.sql("CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s';\n"
                 "GRANT %s ON *.* TO '%s'@'%%';\nFLUSH PRIVILEGES;\n"
                 % (user, password, grants, user))
