"""The documentation's relative links resolve, in the source tree and installed.

  1. source_tree: tests/check_doc_links.py over README.md, docs/,
     guard/README.md and every examples/**/README.md: every relative link
     names a file that exists and, with an anchor, a heading of it.
  2. installed: `cmake --install` of this build into a scratch DESTDIR (the
     configured prefix, as a package would), then the same check over the
     installed doc dir (<prefix>/share/doc/baton: README.md, docs/,
     guard/README.md), so the installed README and pages link only to what
     is installed beside them (a link to the source tree's examples/ or
     bench/ is dead there).

A few seconds: no broker, no baton process.
"""
import glob
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

ORDER = ["test_source_tree", "test_installed"]
CHECKER = os.path.join(h.SOURCE_DIR, "tests", "check_doc_links.py")


def check(t, what, roots, cwd):
    """Runs the checker over roots; fails the test with its report."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, CHECKER] + roots, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    h.log("%s: %s (%.2f s)" % (what, p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "",
                                time.monotonic() - t0))
    t.check(p.returncode == 0, "%s: no dead links (exit %d):\n%s" % (what, p.returncode, p.stdout))
    return p


def test_source_tree(t):
    src = h.SOURCE_DIR
    roots = ["README.md", "docs"]
    if os.path.exists(os.path.join(src, "guard", "README.md")):
        roots.append(os.path.join("guard", "README.md"))
    roots += sorted(os.path.relpath(p, src) for p in
                    glob.glob(os.path.join(src, "examples", "**", "README.md"), recursive=True))
    t.require(os.path.isdir(os.path.join(src, "docs")), "docs/ in the source tree")
    check(t, "source tree (%s)" % " ".join(roots), roots, src)


def cache_value(build, key):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def test_installed(t):
    build = h.BUILD_DIR
    t.require(os.path.exists(os.path.join(build, "CMakeCache.txt")),
              "a configured build at %s (BATON_BUILD_DIR)" % build)
    dest = h.mktemp("baton-doc-links-")
    t0 = time.monotonic()
    p = subprocess.run(["cmake", "--install", build], env=dict(os.environ, DESTDIR=dest),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    t.require(p.returncode == 0, "DESTDIR install: %s" % p.stdout[-2000:])
    h.log("installed into a DESTDIR in %.2f s" % (time.monotonic() - t0))
    # the configured prefix and doc dir (GNUInstallDirs: share/doc/<project>)
    prefix = cache_value(build, "CMAKE_INSTALL_PREFIX") or "/usr/local"
    docdir = cache_value(build, "CMAKE_INSTALL_DOCDIR") or "share/doc/baton"
    if not os.path.isabs(docdir):
        docdir = os.path.join(prefix, docdir)
    doc = os.path.join(dest, docdir.lstrip("/"))
    t.require(os.path.isfile(os.path.join(doc, "README.md")),
              "the README installed in %s: %s" % (docdir, sorted(os.listdir(dest))))
    t.check(os.path.isdir(os.path.join(doc, "docs")), "docs/ installed beside the README")
    check(t, "installed doc dir %s" % docdir, ["."], doc)


if __name__ == "__main__":
    h.main(globals())
