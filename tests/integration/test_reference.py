"""The configuration reference generated from the settings tables
(baton --print-reference, src/reference.c) against its committed copies,
the man pages' rendering, and the one-line usage errors.

- docs/reference.md is byte for byte `--print-reference=markdown`, and
  man/baton.cfg.5 `--print-reference=man`: on a difference the test prints
  the diff and the command that regenerates the file.
- man/baton.8 and man/baton.cfg.5 render without a warning
  (groff -ww -man -Tutf8 -z; skipped without groff, Debian's groff-base).
- every setting name (and older name) found in the setting tables of the
  sources is in the reference, with a few known names as a check on the
  scan itself; every endpoint and sink type has its section.
- a bad command line gets one line and a pointer to --help (exit 64);
  --help still prints the whole text.
Needs no broker: runs in about a second."""
import difflib
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

EXIT_USAGE = 64  # BATON_EXIT_USAGE (src/config.h)

# Where the setting tables live: the main file's (and what every endpoint
# and every sink has), the sinks', the endpoint types', the shared Redis ones.
TABLE_SOURCES = ["src/config.c", "src/sink_http.c", "src/sink_stdout.c", "src/sink_file.c",
                 "src/sink_redis_stream.c",
                 "endpoints/redis_psub.c", "endpoints/rabbitmq.c", "endpoints/mysql_cdc.c",
                 "endpoints/mqtt.c", "endpoints/schedule.c", "endpoints/redis_settings.c",
                 "endpoints/redis_settings.h"]
# Names known to be in the tables, from main, endpoint and sink tables alike:
# if the scan below misses them, the scan is broken, not the reference.
KNOWN = ["retries", "dead_letter", "fsync", "patterns", "ttl_ms", "drain_timeout_ms",
         "queue_batch_max", "server_id", "topics", "cron", "max_in_flight", "server_name"]


def reference(fmt):
    rc, out, err = h.run_baton(["--print-reference=%s" % fmt], timeout=20)
    return rc, out, err


def compare(t, fmt, rel):
    rc, out, err = reference(fmt)
    t.require(rc == 0 and out, "--print-reference=%s: exit %r, stderr %r" % (fmt, rc, err[-300:]))
    path = os.path.join(h.SOURCE_DIR, rel)
    with open(path, "rb") as f:
        committed = f.read().decode("utf-8")
    if committed == out:
        print("    %s: %d lines, equal to --print-reference=%s" % (rel, out.count("\n"), fmt))
        return
    diff = list(difflib.unified_diff(committed.splitlines(True), out.splitlines(True),
                                     fromfile=rel + " (committed)",
                                     tofile="baton --print-reference=%s" % fmt))
    sys.stdout.write("".join(diff[:300]))
    if len(diff) > 300:
        print("... (%d more diff lines)" % (len(diff) - 300))
    print("    regenerate with:  %s --print-reference=%s > %s" % (h.BATON_BIN, fmt, path))
    t.check(False, "%s differs from --print-reference=%s (diff above)" % (rel, fmt))


def test_markdown_is_committed(t):
    compare(t, "markdown", "docs/reference.md")


def test_man_is_committed(t):
    compare(t, "man", "man/baton.cfg.5")


def test_man_pages_render_cleanly(t):
    groff = shutil.which("groff")
    if not groff:
        t.skip("groff not found (Debian: groff-base)")
    for rel in ("man/baton.8", "man/baton.cfg.5"):
        path = os.path.join(h.SOURCE_DIR, rel)
        p = subprocess.run([groff, "-ww", "-man", "-Tutf8", "-z", path], capture_output=True,
                           text=True, timeout=30)
        t.check(p.returncode == 0 and p.stderr == "",
                "%s: groff -ww exit %d, warnings:\n%s" % (rel, p.returncode, p.stderr))
    # the page as this binary writes it, too (the committed one may be stale)
    rc, out, _ = reference("man")
    p = subprocess.run([groff, "-ww", "-man", "-Tutf8", "-z"], input=out, capture_output=True,
                       text=True, timeout=30)
    t.check(rc == 0 and p.returncode == 0 and p.stderr == "",
            "--print-reference=man: groff -ww warnings:\n%s" % p.stderr)


def table_names():
    """Every setting name and older name in the setting tables of the
    sources: { "name", SETTING_... and .old_name = "name"."""
    names = set()
    for rel in TABLE_SOURCES:
        with open(os.path.join(h.SOURCE_DIR, rel)) as f:
            text = f.read()
        names.update(re.findall(r'\{\s*"([a-z][a-z0-9_]*)"\s*,\s*SETTING_[A-Z]+', text))
        names.update(re.findall(r'\.old_name\s*=\s*"([a-z][a-z0-9_]*)"', text))
    return names


def test_every_setting_is_in_the_reference(t):
    names = table_names()
    missing_scan = [n for n in KNOWN if n not in names]
    t.require(not missing_scan, "the scan of the tables found none of %s" % missing_scan)
    rc, md, _ = reference("markdown")
    rc2, man, _ = reference("man")
    t.require(rc == 0 and rc2 == 0, "--print-reference failed")
    md_missing = sorted(n for n in names if "`%s`" % n not in md)
    man_missing = sorted(n for n in names
                         if not re.search(r"^\.B %s$|\\fB%s\\fR" % (re.escape(n), re.escape(n)),
                                          man, re.M))
    t.check(not md_missing, "not in the markdown reference: %s" % md_missing)
    t.check(not man_missing, "not in the man reference: %s" % man_missing)
    print("    %d setting names from the tables, all in both references" % len(names))
    # every setting says what it is for: "- `name` (type...): help"
    no_help = [line for line in md.splitlines() if line.startswith("- `") and "): " not in line]
    t.check(not no_help, "settings without a help text: %s" % no_help)

    # every type --help lists has its section
    rc, helptext, _ = h.run_baton(["--help"])
    types = {}
    for line in helptext.splitlines():
        for kind in ("endpoint", "sink"):
            if line.startswith("%s types:" % kind):
                types[kind] = line.split(":", 1)[1].split()
    t.require(types.get("endpoint") and types.get("sink"), "--help lists the types: %r" % helptext)
    for kind, label in (("endpoint", "Endpoint type"), ("sink", "Sink type")):
        for name in types[kind]:
            t.check("### %s `%s`" % (label, name) in md, "markdown: no section for %s %s" % (kind, name))
            t.check('.SS "%s %s"' % (label, name) in man, "man: no section for %s %s" % (kind, name))


def test_usage_errors_are_one_line(t):
    cases = [
        (["--no-such-option"], "unrecognized option"),
        (["status", "--no-such-option"], "unrecognized option"),
        ([], "missing -c FILE"),
        (["-c", "x.cfg", "extra"], "unexpected argument 'extra'"),
        (["--print-reference=pdf"], "expected markdown or man"),
        (["-c", "x.cfg", "--log-level", "loud"], "expected error, warn, info or debug"),
    ]
    for args, what in cases:
        rc, out, err = h.run_baton(args)
        lines = err.strip().splitlines()
        t.check(rc == EXIT_USAGE and out == "" and len(lines) == 2 and what in lines[0]
                and lines[1] == "baton: try 'baton --help'" and "usage:" not in err,
                "baton %s: exit %r, stderr %r" % (" ".join(args), rc, err))
    # getopt names the program, not "status"
    rc, _, err = h.run_baton(["status", "--no-such-option"])
    t.check(not err.startswith("status:"), "status: getopt's message names the program: %r" % err)
    rc, out, err = h.run_baton(["--help"])
    t.check(rc == 0 and out.startswith("usage: baton") and "--print-reference[=markdown|man]" in out
            and "exit status:" in out and err == "", "--help: the whole text (%r, %r)" % (rc, out))


if __name__ == "__main__":
    h.main(globals())
