"""The file sink through the whole daemon: a redis_psub endpoint (Redis
locker and source) writing JSON lines to a file.

  a. 300 messages: each in the file once, in publish order
  b. rotation: max_bytes 4096, keep 3: at most keep + 1 files, none over
     4096 bytes, the newest lines present, no line twice, no gap
  c. SIGHUP after the file was renamed away: the new file holds the new
     lines, the renamed one the old, none lost
  d. disk full (a 64 KiB tmpfs, filled): errors logged naming sink and
     path, whole lines only, baton alive; room again: all 50 arrive whole,
     once, in order within 10 s, and the failed attempts are counted
     (baton_sink_errors_total is credited when the send returns, so it
     grows once delivery resumed, not while the disk is still full)
  e. --check-config refuses a missing directory and a bad fsync word
"""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

ENDPOINT = """name = "orders"; type = "redis_psub"; sink = "f";
host = "127.0.0.1"; port = %d; patterns = [ "orders.*" ];
"""
ERRORS = 'baton_sink_errors_total{endpoint="orders"}'


def metrics(port):
    status, body = h.http_get(port, "/metrics", timeout=2)
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def start(t, path, settings=""):
    """A Redis, one baton whose sink 'f' writes path, subscribed; returns
    (redis client, baton, metrics port)."""
    redis = t.redis()
    mport = h.free_port()
    sinks = '{ name = "f"; type = "file"; path = "%s"; %s }' % (path, settings)
    main = h.main_cfg(redis.port, sinks=sinks,
                      extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    b = t.baton(main, {"orders.cfg": ENDPOINT % redis.port})
    t.require(h.wait_until(lambda: "consuming as leader" in b.stderr_text(), 10),
              "baton leads: %s" % b.stderr_text()[-500:])
    pub = redis.client()
    t.require(h.wait_until(lambda: pub.cmd("PUBSUB", "NUMPAT") == 1, 10), "baton subscribed")
    return pub, b, mport


def read_lines(path):
    """The payloads of path's lines; a line that is not whole (no newline at
    the end, or not one JSON envelope) is reported as None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    out = []
    parts = data.split(b"\n")
    tail = parts.pop()
    for line in parts:
        try:
            out.append(json.loads(line)["payload"])
        except (ValueError, KeyError):
            out.append(None)
    if tail:
        out.append(None)
    return out


def publish(pub, fmt, rng):
    for i in rng:
        pub.cmd("PUBLISH", "orders.new", fmt % i)


def test_a_lines_in_order(t):
    path = os.path.join(t.workdir, "out.jsonl")
    pub, b, _ = start(t, path)
    publish(pub, "m %03d", range(300))
    want = ["m %03d" % i for i in range(300)]
    t.require(h.wait_until(lambda: len(read_lines(path)) >= 300, 10),
              "300 lines, got %d" % len(read_lines(path)))
    time.sleep(0.2)
    got = read_lines(path)
    t.check(got == want, "each once, in order (%d lines, first difference at %s)"
            % (len(got), next((i for i, (a, w) in enumerate(zip(got, want)) if a != w), None)))
    with open(path) as f:
        rec = json.loads(f.readline())
    t.check(rec.get("endpoint") == "orders", "an envelope: %s" % rec)
    t.check(b.alive(), "baton alive")


def test_b_rotation(t):
    path = os.path.join(t.workdir, "out.jsonl")
    pub, b, _ = start(t, path, 'max_bytes = 4096; keep = 3; fsync = "never";')
    n = 200  # about 250 bytes a line: 50 KB, a dozen rotations
    publish(pub, "r %03d", range(n))
    last = "r %03d" % (n - 1)
    t.require(h.wait_until(lambda: last in read_lines(path), 10), "the newest line arrives")
    time.sleep(0.2)
    names = sorted(f for f in os.listdir(t.workdir) if f.startswith("out.jsonl"))
    t.check(names == ["out.jsonl", "out.jsonl.1", "out.jsonl.2", "out.jsonl.3"],
            "path and keep = 3 rotated files: %s" % names)
    got = []
    for name in ["out.jsonl.3", "out.jsonl.2", "out.jsonl.1", "out.jsonl"]:  # oldest first
        p = os.path.join(t.workdir, name)
        if os.path.exists(p):
            t.check(os.path.getsize(p) <= 4096, "%s: %d bytes <= max_bytes" % (name, os.path.getsize(p)))
            got += read_lines(p)
    t.check(None not in got, "whole lines only")
    want = ["r %03d" % i for i in range(n)]
    t.check(len(got) > 0 and got == want[-len(got):],
            "the files hold the newest %d lines in order, each once" % len(got))
    t.check(len(got) >= 3 * 4096 // 300, "the rotated files are not empty: %d lines" % len(got))
    h.log("rotation: %d files, the newest %d of %d lines" % (len(names), len(got), n))


def test_c_sighup_reopen(t):
    path = os.path.join(t.workdir, "out.jsonl")
    moved = path + ".moved"
    pub, b, _ = start(t, path)
    publish(pub, "h %03d", range(50))
    t.require(h.wait_until(lambda: len(read_lines(path)) >= 50, 10), "50 lines before SIGHUP")
    os.rename(path, moved)
    b.signal(signal.SIGHUP)
    t.require(h.wait_until(lambda: "SIGHUP" in b.stderr_text(), 5), "SIGHUP handled")
    publish(pub, "h %03d", range(50, 100))
    t.require(h.wait_until(lambda: len(read_lines(path)) >= 50, 10),
              "50 lines in the new file, got %d" % len(read_lines(path)))
    time.sleep(0.2)
    t.check(read_lines(moved) == ["h %03d" % i for i in range(50)], "the renamed file: the old 50")
    t.check(read_lines(path) == ["h %03d" % i for i in range(50, 100)], "the new file: the new 50")
    t.check(b.alive(), "baton alive")


def test_d_disk_full(t):
    mnt = os.path.join(t.workdir, "small")
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        t.skip("cannot mount a tmpfs: %s" % (r.stderr.strip() or "exit %d" % r.returncode))

    def umount():
        if subprocess.run(["umount", mnt], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mnt], capture_output=True)
    t.cleanup(umount)  # registered first: runs after baton is stopped

    path = os.path.join(mnt, "out.jsonl")
    pub, b, mport = start(t, path)
    filler = os.path.join(mnt, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for block in (4096, 1):  # to the last byte
            try:
                while True:
                    os.write(fd, b"\0" * block)
            except OSError:
                pass
    finally:
        os.close(fd)
    t0 = time.monotonic()
    publish(pub, "d %02d", range(50))
    t.check(h.wait_until(lambda: "No space left on device" in b.stderr_text(), 5),
            "the write error is logged")
    time.sleep(1.0)
    err = b.stderr_text()
    line = next((x for x in err.splitlines() if "No space left" in x), "")
    t.check("sink 'f'" in line and path in line, "the log names the sink and the path: %s" % line)
    t.check(b.alive(), "baton alive on a full disk")
    partial = read_lines(path)
    t.check(None not in partial, "only whole lines while full: %s" % partial[-3:])
    os.unlink(filler)
    want = ["d %02d" % i for i in range(50)]
    t.check(h.wait_until(lambda: read_lines(path) == want, 10),
            "all 50 whole, once, in order within 10 s of room: %d lines" % len(read_lines(path)))
    took = time.monotonic() - t0
    errors = metrics(mport).get(ERRORS, 0)
    t.check(errors > 0, "%s counts the failed attempts: %s" % (ERRORS, errors))
    t.check("delivered again after" in b.stderr_text(), "recovery is logged")
    t.check(b.alive(), "baton alive")
    h.log("disk full: %d failed attempts counted, 50 delivered %.1f s after publishing"
          % (errors, took))


def test_e_config_check(t):
    """--check-config: a missing directory and a bad fsync word are refused
    (exit 78) naming the file, line, sink and path."""
    d = os.path.join(t.workdir, "cfg")
    os.makedirs(os.path.join(d, "endpoints.d"))
    with open(os.path.join(d, "endpoints.d", "tick.cfg"), "w") as f:
        f.write('name = "tick"; type = "schedule"; sink = "f"; cron = "* * * * * *";\n')
    main = os.path.join(d, "baton.cfg")
    missing = os.path.join(t.workdir, "no", "such", "out.jsonl")
    ok = os.path.join(t.workdir, "out.jsonl")
    cases = [
        ('path = "%s";' % missing, 78, "directory '%s' does not exist" % os.path.dirname(missing)),
        ('path = "%s"; fsync = "sometimes";' % ok, 78, "'fsync' expected"),
        ('path = "%s"; fsync = "always"; max_bytes = 0; keep = 0;' % ok, 0, "configuration OK"),
    ]
    for settings, want, needle in cases:
        with open(main, "w") as f:
            f.write('sinks = ( { name = "f"; type = "file"; %s } );\n' % settings)
        rc, out, err = h.run_baton(["-c", main, "--check-config"])
        t.check(rc == want and needle in out + err and (want == 0 or "sink 'f'" in err),
                "check-config %s: expected %d with %r, got %d: %s"
                % (settings, want, needle, rc, (out + err).strip()[:300]))


if __name__ == "__main__":
    h.main(globals())
