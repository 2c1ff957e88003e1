"""--check-config and start-up report every configuration error in one run:
each as file:line: message on stderr, then a count, exit 78 (EX_CONFIG).

  1. three_mistakes: a main file with a bad locker port and a bad log level,
     an endpoint file with a bad value: three file:line: lines, the count,
     exit 78, both with --check-config and when starting (-c FILE).
  2. one_mistake: one error is printed as before, on one line (no count).
  3. no_endpoint_enabled: a configuration whose only endpoint is disabled
     starts, warns that baton will do nothing, and /readyz answers 503
     saying so.

No broker is needed (3 runs in single-process mode).

Run standalone: BATON_BIN=/path/baton python3 tests/integration/test_check_config.py [test_name ...]
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

LOCATED = re.compile(r"^(/\S+\.cfg):(\d+): ")


def write(d, rel, text):
    path = os.path.join(d, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def located(err):
    """The (file, line) of each 'file:line: message' line of stderr."""
    out = []
    for line in err.splitlines():
        m = LOCATED.match(line)
        if m:
            out.append((os.path.basename(m.group(1)), int(m.group(2))))
    return out


def test_three_mistakes(t):
    d = h.mktemp()
    main = write(d, "baton.cfg",
                 'locker = {\n'                      # 1
                 '  host = "127.0.0.1";\n'           # 2
                 '  port = 70000;\n'                 # 3: out of range
                 '};\n'                              # 4
                 'log = { level = "loud"; };\n'      # 5: no such level
                 'sinks = ( { name = "out"; type = "stdout"; } );\n')
    write(d, "endpoints.d/tick.cfg",
          'name = "tick";\n'                         # 1
          'type = "schedule";\n'                     # 2
          'sink = "out";\n'                          # 3
          'cron = "* * * * * *";\n'                  # 4
          'queue_size = 0;\n')                       # 5: out of range
    want = [("baton.cfg", 3), ("baton.cfg", 5), ("tick.cfg", 5)]
    for args in (["-c", main, "--check-config"], ["-c", main]):
        rc, out, err = h.run_baton(args, timeout=20)
        h.log("%s -> %d\n%s" % (" ".join(args[2:]) or "start", rc, err))
        t.check(rc == 78, "%s: exit %d, wanted 78 (EX_CONFIG)" % (args, rc))
        t.check(located(err) == want, "%s: errors at %s, wanted %s: %r" % (args, located(err), want, err))
        t.check("3 errors in the configuration" in err, "%s: no count line: %r" % (args, err))
        t.check("port = 70000" in err and "level = \"loud\"" in err and "queue_size = 0" in err,
                "%s: a message is missing: %r" % (args, err))
        t.check("started" not in err, "%s: baton started: %r" % (args, err))


def test_one_mistake(t):
    d = h.mktemp()
    main = write(d, "baton.cfg", 'sinks = ( { name = "out"; type = "stdout"; } );\nlog = { level = "loud"; };\n')
    os.makedirs(os.path.join(d, "endpoints.d"))
    rc, out, err = h.run_baton(["-c", main, "--check-config"], timeout=20)
    t.check(rc == 78, "exit %d, wanted 78" % rc)
    lines = [l for l in err.splitlines() if l.strip()]
    t.check(len(lines) == 1 and "baton.cfg:2: log: level" in lines[0] and "errors in the" not in err,
            "one error, one line: %r" % err)


def test_no_endpoint_enabled(t):
    mport = h.free_port()
    main = h.main_cfg(extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)
    b = t.baton(main, {"tick.cfg": 'name = "tick"; type = "schedule"; sink = "out"; '
                                   'cron = "* * * * * *"; enabled = false;\n'})
    t.require(h.wait_until(lambda: "started" in b.stderr_text(), 10, 0.05), "baton did not start")
    log = b.stderr_text()
    t.check("WARN gateway: no endpoint is enabled" in log and "baton will do nothing" in log,
            "no WARN about nothing enabled: %r" % log)

    def readyz():
        return h.readyz(mport)
    # the observer's first round (about a second after the start)
    t.check(h.wait_until(lambda: readyz()[0] == 503 and "no endpoint is enabled" in readyz()[1], 5, 0.1),
            "/readyz is not 503 naming the reason: %r" % (readyz(),))
    code, body = readyz()
    h.log("/readyz %s %s" % (code, body.strip()))
    t.check(code != 503 or json.loads(body).get("ready") is False, "/readyz body: %r" % body)
    t.check(b.term() == 0, "SIGTERM exits 0")


if __name__ == "__main__":
    h.main(globals())
