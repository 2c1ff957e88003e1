"""A real mosquitto broker for the integration tests: 127.0.0.1, a free port,
a generated config file in a temporary directory, optional password file;
always stopped afterwards. Publishing goes through mosquitto_pub (package
mosquitto-clients).

    b = Mosquitto()                                  # anonymous
    b = Mosquitto(users={"baton": "secret"})         # password file, no anonymous
    b = Mosquitto(tls=make_tls_files(dir))           # plus a TLS listener on b.tls_port (tlsfiles.py)
    b.publish("a/b", "hello", qos=1)
    b.publish_lines("a/b", ["m-1", "m-2"], qos=1)     # one message per line
"""

import os
import subprocess
import time

import harness as h


class Mosquitto:
    def __init__(self, port=None, users=None, start=True, tls=None):
        self.port = port or h.free_port()
        self.dir = h.mktemp("baton-mosquitto-")
        os.chmod(self.dir, 0o755)  # mosquitto drops root for its own user
        self.users = dict(users or {})
        self.conf = os.path.join(self.dir, "mosquitto.conf")
        self.log_path = os.path.join(self.dir, "mosquitto.log")
        lines = [
            "listener %d 127.0.0.1" % self.port,
            "persistence false",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "max_queued_messages 100000",
        ]
        if self.users:
            pw = os.path.join(self.dir, "passwd")
            open(pw, "w").close()
            for u, p in self.users.items():
                subprocess.run(["mosquitto_passwd", "-b", pw, u, p], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.chmod(pw, 0o644)
            lines += ["allow_anonymous false", "password_file %s" % pw]
        else:
            lines += ["allow_anonymous true"]
        self.tls_port = None
        if tls:
            # a second listener: TLS with client certificates (mutual TLS)
            self.tls_port = h.free_port()
            lines += ["listener %d 127.0.0.1" % self.tls_port,
                      "cafile %s" % tls["ca"], "certfile %s" % tls["server_cert"],
                      "keyfile %s" % tls["server_key"], "require_certificate true"]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(self.conf, 0o644)
        self.proc = None
        h._cleanups.append(self.stop)
        if start:
            self.start()

    def start(self):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["mosquitto", "-c", self.conf], stdout=self._log,
                                     stderr=self._log, stdin=subprocess.DEVNULL)
        self._log.close()
        ports = [p for p in (self.port, self.tls_port) if p]
        if not h.wait_until(lambda: all(h.port_open(p) for p in ports) or self.proc.poll() is not None,
                            10, 0.05) \
                or self.proc.poll() is not None:
            raise RuntimeError("mosquitto did not start on port %d: %s" % (self.port, self.log_text()))
        return self

    def stop(self):
        h.stop_process(self.proc)
        self.proc = None

    def log_text(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def _auth(self, user, password):
        if user is None and self.users:
            user, password = next(iter(self.users.items()))
        return (["-u", user, "-P", password] if user else [])

    def publish(self, topic, payload=None, qos=1, retain=False, v5=True, props=(), file=None,
                user=None, password=None, timeout=30):
        """One message. payload: str or bytes (bytes go through a file).
        props: MQTT 5 publish properties as (name, value...) tuples for -D,
        e.g. ("user-property", "k", "v"), ("content-type", "text/plain")."""
        args = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(self.port), "-t", topic,
                "-q", str(qos)] + self._auth(user, password)
        if v5:
            args += ["-V", "mqttv5"]
            for p in props:
                args += ["-D", "publish"] + list(p)
        if retain:
            args += ["-r"]
        if isinstance(payload, bytes):
            file = os.path.join(self.dir, "payload-%d.bin" % time.monotonic_ns())
            with open(file, "wb") as f:
                f.write(payload)
        if file:
            args += ["-f", file]
        elif payload is None:
            args += ["-n"]
        else:
            args += ["-m", payload]
        subprocess.run(args, check=True, timeout=timeout, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    def publish_lines(self, topic, lines, qos=1, v5=True, user=None, password=None, timeout=120):
        """Many messages over one connection: one per line (mosquitto_pub -l)."""
        args = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(self.port), "-t", topic,
                "-q", str(qos), "-l"] + self._auth(user, password)
        if v5:
            args += ["-V", "mqttv5"]
        data = ("\n".join(lines) + "\n").encode()
        subprocess.run(args, input=data, check=True, timeout=timeout,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def shared_broker():
    """The test file's one anonymous Mosquitto, started on first use
    (h.shared)."""
    return h.shared("mosquitto", Mosquitto)
