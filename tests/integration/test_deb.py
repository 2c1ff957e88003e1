"""The Debian packages (packaging/cpack.cmake, packaging/build-deb.sh).

packaging/build-deb.sh builds them once per run of this file, into a
temporary directory, from a build directory cached under the test build
directory ($BATON_BUILD_DIR/deb-build: a rerun only re-links what changed).
Every test below uses those .debs:

  1. fields: three packages, named <name>_<version>_<arch>.deb after
     project(baton VERSION ...) and `dpkg --print-architecture`; their
     control fields (Package, Version, Architecture, Section, Maintainer,
     a description with a summary line); Depends computed by dpkg-shlibdeps
     (baton: libc6, libhiredis, libsystemd0, libconfig, ...;
     libbaton-guard1: libhiredis, libssl, libjson-c), libcurl4 only
     recommended (loaded on first use); libbaton-guard-dev
     depends on libbaton-guard1 (= version); libbaton-guard1 has a shlibs
     file for its SONAME.
  2. contents: baton holds /usr/bin/baton, /etc/baton/baton.cfg and every
     config/endpoints.d file, the unit (its ExecStart the installed paths),
     the README and, when man/ is in the source tree, its pages gzip'd;
     libbaton-guard1 only the library (.so.1 -> .so.1.<minor>.<patch>, the
     version CMakeLists.txt's BATON_GUARD_VERSION says); the -dev
     package the .so link, the .a, the headers and baton-guard.pc; nothing
     in /usr/local or /usr/etc, no path in two packages.
  3. conffiles: every file under /etc/baton is a conffile, nothing else;
     the maintainer scripts are valid sh, reload systemd only where it runs
     (/run/systemd/system) and neither enable nor start the service.
  4. install: `dpkg --root=<scratch> --unpack` of the three (dpkg's own
     checks, a scratch database: the system's is never touched, no
     maintainer script runs, so nothing is configured) registers the
     conffiles and places the files, each conffile as <name>.dpkg-new;
     moved into place as `dpkg --configure` would on a first install, the
     unpacked `baton --check-config` passes on the unpacked
     /etc/baton/baton.cfg; a program built against the unpacked -dev
     package with pkg-config loads the unpacked libbaton-guard.so.1.
  5. lintian: runs on the three and prints its tags (docs/install.md,
     "Known lintian tags", says why each is left); fails only when lintian
     cannot run.

Time: the build is bounded at 480 s (ctest's limit is 600 s). Measured on
2 cores: 41 s with an empty build directory (the build 33 s; 63 s while a CI
run shared the machine), 20 s on a rerun (lintian about 7 s of it).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402

ORDER = ["test_fields", "test_contents", "test_conffiles", "test_install", "test_lintian"]

TOOLS = ["cmake", "cpack", "dpkg-deb", "dpkg-shlibdeps", "file", "lintian"]

_state = {}


def sh(args, timeout=600, env=None, cwd=None):
    """Runs args; returns (exit status, stdout + stderr)."""
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       env=env, cwd=cwd, text=True)
    return p.returncode, p.stdout


def version():
    text = open(os.path.join(h.SOURCE_DIR, "CMakeLists.txt")).read()
    return re.search(r"project\(baton VERSION ([0-9.]+)", text).group(1)


def arch():
    return sh(["dpkg", "--print-architecture"])[1].strip()


def debs(t):
    """{package name: path of its .deb}, built once per run of this file."""
    if "debs" in _state:
        return _state["debs"]
    missing = [x for x in TOOLS if not shutil.which(x)]
    if missing:
        t.skip("not installed: %s (bash .ci/deps.sh: dpkg-dev, lintian, file)" % ", ".join(missing))
    out = h.mktemp("baton-deb-")
    build = os.path.join(h.BUILD_DIR, "deb-build")
    cache = os.path.join(build, "CMakeCache.txt")
    if os.path.exists(cache):
        home = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", open(cache).read(), re.M)
        if not home or os.path.realpath(home.group(1)) != os.path.realpath(h.SOURCE_DIR):
            shutil.rmtree(build)  # configured for another source tree
    env = dict(os.environ, BATON_DEB_BUILD_DIR=build, BATON_JOBS="2")
    t0 = time.monotonic()
    rc, text = sh(["bash", os.path.join(h.SOURCE_DIR, "packaging", "build-deb.sh"), out],
                  env=env, timeout=480)
    h.log("build-deb.sh: %.1f s (build directory %s)" % (time.monotonic() - t0, build))
    t.require(rc == 0, "packaging/build-deb.sh: %s" % text[-3000:])
    printed = [line.strip() for line in text.splitlines() if line.strip().endswith(".deb")]
    found = sorted(glob.glob(os.path.join(out, "*.deb")))
    t.require(sorted(printed) == found and found, "the .debs printed are those in OUTDIR: %s %s"
              % (printed, found))
    result = {}
    for path in found:
        rc, name = sh(["dpkg-deb", "-f", path, "Package"])
        t.require(rc == 0, "dpkg-deb -f %s: %s" % (path, name))
        result[name.strip()] = path
        h.log("%s: %d bytes" % (os.path.basename(path), os.path.getsize(path)))
    _state["debs"] = result
    _state["out"] = out
    return result


def fields(path):
    rc, text = sh(["dpkg-deb", "-f", path])
    out = {}
    key = None
    for line in text.splitlines():
        if line.startswith(" ") and key:
            out[key] += "\n" + line
        elif ":" in line:
            key, value = line.split(":", 1)
            out[key] = value.strip()
    return out


def contents(path):
    """{path without the leading '.': (mode string, link target or None)}"""
    rc, text = sh(["dpkg-deb", "-c", path])
    out = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        name, target = parts[5], None
        if " -> " in name:
            name, target = name.split(" -> ", 1)
        out[name[1:].rstrip("/") or "/"] = (parts[0], target)
    return out


def control_dir(t, name):
    d = os.path.join(_state["out"], "control-" + name)
    if not os.path.isdir(d):
        rc, text = sh(["dpkg-deb", "-e", debs(t)[name], d])
        t.require(rc == 0, "dpkg-deb -e %s: %s" % (name, text))
    return d


def lib_package():
    return "libbaton-guard1"


def test_fields(t):
    d = debs(t)
    v, a = version(), arch()
    t.require(sorted(d) == ["baton", "libbaton-guard-dev", "libbaton-guard1"],
              "three packages: %s" % sorted(d))
    for name, path in sorted(d.items()):
        t.check(os.path.basename(path) == "%s_%s_%s.deb" % (name, v, a),
                "file name %s is <package>_<version>_<arch>.deb" % os.path.basename(path))
        f = fields(path)
        h.log("%s: Depends: %s" % (name, f.get("Depends", "")))
        t.check(f.get("Package") == name and f.get("Version") == v and f.get("Architecture") == a,
                "%s: Package, Version %s, Architecture %s: %s" % (name, v, a, f))
        t.check(f.get("Maintainer") and "@" in f["Maintainer"], "%s: a Maintainer" % name)
        desc = f.get("Description", "").split("\n")
        t.check(desc[0] and len(desc) > 1 and all(line.startswith(" ") for line in desc[1:]),
                "%s: a summary line and an extended description: %r" % (name, desc))
        t.check(f.get("Depends"), "%s: Depends not empty" % name)
    base = fields(d["baton"])
    t.check(base.get("Section") == "net", "baton: Section net (%s)" % base.get("Section"))
    for dep in ["libc6", "libhiredis", "libsystemd0", "libconfig", "librabbitmq", "libmariadb",
                "libpaho-mqtt", "libssl", "libjson-c"]:
        t.check(dep in base.get("Depends", ""), "baton depends on %s (computed)" % dep)
    t.check("libcurl" not in base.get("Depends", ""),
            "no libcurl dependency: baton loads libcurl.so.4 on first use")
    t.check("libcurl4" in base.get("Recommends", ""), "baton recommends libcurl4: %s"
            % base.get("Recommends"))
    lib = fields(d[lib_package()])
    for dep in ["libc6", "libhiredis", "libssl", "libjson-c"]:
        t.check(dep in lib.get("Depends", ""), "libbaton-guard1 depends on %s (computed)" % dep)
    for dep in ["libsystemd", "libconfig", "librabbitmq", "libmariadb", "libpaho"]:
        t.check(dep not in lib.get("Depends", ""), "libbaton-guard1 does not depend on %s" % dep)
    dev = fields(d["libbaton-guard-dev"])
    t.check("libbaton-guard1 (= %s)" % v in dev.get("Depends", ""),
            "libbaton-guard-dev depends on libbaton-guard1 (= %s): %s" % (v, dev.get("Depends")))
    shlibs = os.path.join(control_dir(t, lib_package()), "shlibs")
    t.check(os.path.exists(shlibs) and open(shlibs).read().startswith(
        "libbaton-guard 1 libbaton-guard1 (>= %s)" % v),
        "libbaton-guard1's shlibs names its SONAME libbaton-guard.so.1")


def test_contents(t):
    d = debs(t)
    c = {name: contents(path) for name, path in d.items()}
    base, lib, dev = c["baton"], c[lib_package()], c["libbaton-guard-dev"]
    for p in ["/usr/bin/baton", "/etc/baton/baton.cfg", "/usr/share/doc/baton/README.md"]:
        t.check(p in base, "baton holds %s" % p)
    t.check(base.get("/usr/bin/baton", ("",))[0].startswith("-rwxr-xr-x"), "/usr/bin/baton 0755")
    for f in sorted(os.listdir(os.path.join(h.SOURCE_DIR, "config", "endpoints.d"))):
        t.check("/etc/baton/endpoints.d/" + f in base, "baton holds /etc/baton/endpoints.d/%s" % f)
    units = [p for p in base if p.endswith("/systemd/system/baton.service")]
    t.check(units == ["/usr/lib/systemd/system/baton.service"],
            "the unit in /usr/lib/systemd/system: %s" % units)
    for page, sect in [("baton.8", "8"), ("baton.cfg.5", "5")]:
        if os.path.exists(os.path.join(h.SOURCE_DIR, "man", page)):
            t.check("/usr/share/man/man%s/%s.gz" % (sect, page) in base,
                    "baton holds the man page %s, gzip'd" % page)
    ma = sh(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"])[1].strip()
    libdir = "/usr/lib/" + ma
    files = sorted(p for p, (mode, _) in lib.items() if not mode.startswith("d"))
    with open(os.path.join(h.SOURCE_DIR, "CMakeLists.txt")) as f:
        version = re.search(r"set\(BATON_GUARD_VERSION (1\.[0-9]+\.[0-9]+)\)", f.read())
    t.require(version, "CMakeLists.txt sets BATON_GUARD_VERSION 1.x.y")
    real = "libbaton-guard.so." + version.group(1)
    t.check(files == [libdir + "/libbaton-guard.so.1", libdir + "/" + real],
            "libbaton-guard1 holds the library alone (%s): %s" % (real, files))
    t.check(lib.get(libdir + "/libbaton-guard.so.1", (None, None))[1] == real,
            "libbaton-guard.so.1 -> %s" % real)
    t.check(dev.get(libdir + "/libbaton-guard.so", (None, None))[1] == "libbaton-guard.so.1",
            "the -dev package holds the link libbaton-guard.so -> libbaton-guard.so.1")
    for p in [libdir + "/libbaton-guard.a", libdir + "/pkgconfig/baton-guard.pc",
              "/usr/include/baton/guard.h", "/usr/include/baton/active_guard.h",
              "/usr/include/baton/once_guard.h", "/usr/include/baton/locker.h"]:
        t.check(p in dev, "libbaton-guard-dev holds %s" % p)
    for name, cont in c.items():
        bad = [p for p in cont if p.startswith(("/usr/local", "/usr/etc", "/home", "/root",
                                                "/tmp", "/work"))]
        t.check(not bad, "%s: nothing outside the FHS paths: %s" % (name, bad[:5]))
    owners = {}
    for name, cont in c.items():
        for p, (mode, _) in cont.items():
            if not mode.startswith("d"):
                owners.setdefault(p, []).append(name)
    shared = {p: n for p, n in owners.items() if len(n) > 1}
    t.check(not shared, "no file in two packages: %s" % shared)
    _state["multiarch"] = ma


def test_conffiles(t):
    d = debs(t)
    ctl = control_dir(t, "baton")
    conffiles_path = os.path.join(ctl, "conffiles")
    t.require(os.path.exists(conffiles_path), "baton has a conffiles file")
    conffiles = sorted(open(conffiles_path).read().split())
    etc = sorted(p for p, (mode, _) in contents(d["baton"]).items()
                 if p.startswith("/etc/") and not mode.startswith("d"))
    h.log("conffiles: %s" % " ".join(conffiles))
    t.check("/etc/baton/baton.cfg" in conffiles, "/etc/baton/baton.cfg is a conffile")
    t.check(conffiles == etc, "every file under /etc is a conffile, nothing else: %s vs %s"
            % (conffiles, etc))
    for name in d:
        if name != "baton":
            t.check(not os.path.exists(os.path.join(control_dir(t, name), "conffiles")),
                    "%s has no conffiles" % name)
    for script in ["postinst", "postrm"]:
        path = os.path.join(ctl, script)
        t.require(os.path.exists(path), "baton has a %s" % script)
        text = open(path).read()
        rc, out = sh(["sh", "-n", path])
        t.check(rc == 0, "%s is valid sh: %s" % (script, out))
        t.check(os.access(path, os.X_OK), "%s is executable" % script)
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        t.check("[ -d /run/systemd/system ]" in code and "daemon-reload" in code,
                "%s reloads systemd only where it runs" % script)
        t.check(not re.search(r"\b(enable|start|restart|deb-systemd-invoke)\b", code),
                "%s neither enables nor starts the service" % script)
    triggers = os.path.join(control_dir(t, lib_package()), "triggers")
    t.check(os.path.exists(triggers) and "activate-noawait ldconfig" in open(triggers).read(),
            "libbaton-guard1 activates the ldconfig trigger")


def host_has_baton():
    rc, out = sh(["dpkg-query", "-W", "-f=${Status}", "baton"])
    return rc == 0 and "installed" in out


def test_install(t):
    d = debs(t)
    root = os.path.join(_state["out"], "root")
    admin = os.path.join(root, "var", "lib", "dpkg")
    for sub in ["info", "updates", "triggers"]:
        os.makedirs(os.path.join(admin, sub), exist_ok=True)
    for f in ["status", "available"]:
        open(os.path.join(admin, f), "a").close()
    before = host_has_baton()
    # --unpack: the files and the database entries, no maintainer script
    # (they would run on this system: systemctl, ldconfig)
    rc, out = sh(["dpkg", "--root=" + root, "--log=" + os.path.join(root, "dpkg.log"),
                  "--force-not-root", "--force-depends", "--unpack",
                  d[lib_package()], d["libbaton-guard-dev"], d["baton"]])
    t.require(rc == 0, "dpkg --root --unpack of the three: %s" % out[-2000:])
    t.check(host_has_baton() == before, "the system's package database is untouched")
    rc, out = sh(["dpkg-query", "--admindir=" + admin, "-W",
                  "-f=${Package} ${Version} ${Status}\n"])
    h.log("scratch database:", out.strip().replace("\n", "; "))
    for name in d:
        t.check(re.search(r"(?m)^%s %s .*unpacked$" % (re.escape(name), version()), out),
                "%s registered (unpacked) in the scratch database" % name)
    rc, out = sh(["dpkg-query", "--admindir=" + admin, "-W", "-f=${Conffiles}\n", "baton"])
    t.check("/etc/baton/baton.cfg " in out, "dpkg registered /etc/baton/baton.cfg as a conffile: %s"
            % out.strip())
    # a conffile is unpacked as <name>.dpkg-new; `dpkg --configure` (not run:
    # it runs the postinst) moves it into place on a first install: done here
    conffiles = sorted(line.split()[0] for line in out.splitlines() if line.strip())
    for p in conffiles:
        new = os.path.join(root, p.lstrip("/") + ".dpkg-new")
        t.check(os.path.exists(new), "conffile %s unpacked as %s.dpkg-new" % (p, p))
        if os.path.exists(new):
            os.rename(new, new[:-len(".dpkg-new")])
    baton = os.path.join(root, "usr/bin/baton")
    cfg = os.path.join(root, "etc/baton/baton.cfg")
    t.require(os.path.exists(baton) and os.path.exists(cfg), "unpacked: the binary and baton.cfg")
    rc, out = sh([baton, "-c", cfg, "--check-config"], timeout=60)
    t.check(rc == 0 and "configuration OK" in out,
            "the unpacked baton --check-config passes on the unpacked baton.cfg: %s" % out[-800:])
    rc, out = sh([baton, "--version"], timeout=30)
    t.check(version() in out, "the unpacked baton --version names %s: %s" % (version(), out[-200:]))
    unit = open(os.path.join(root, "usr/lib/systemd/system/baton.service")).read()
    t.check("ExecStart=/usr/bin/baton -c /etc/baton/baton.cfg\n" in unit,
            "the unit runs /usr/bin/baton with /etc/baton/baton.cfg")
    # a program built against the unpacked -dev package
    ma = _state.get("multiarch") or sh(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"])[1].strip()
    libdir = os.path.join(root, "usr/lib", ma)
    env = dict(os.environ, PKG_CONFIG_SYSROOT_DIR=root,
               PKG_CONFIG_LIBDIR=os.path.join(libdir, "pkgconfig")
               + ":/usr/lib/%s/pkgconfig:/usr/lib/pkgconfig:/usr/share/pkgconfig" % ma)
    env.pop("PKG_CONFIG_PATH", None)
    rc, flags = sh(["pkg-config", "--cflags", "--libs", "baton-guard"], env=env)
    t.require(rc == 0, "pkg-config baton-guard on the unpacked -dev package: %s" % flags)
    prog = os.path.join(_state["out"], "once_cron")
    rc, out = sh(["cc", "-std=c11", "-Wall", "-Werror",
                  os.path.join(h.SOURCE_DIR, "examples", "once_cron.c"), "-o", prog]
                 + flags.split(), env=env)
    t.check(rc == 0, "examples/once_cron.c builds against the unpacked -dev package: %s"
            % out[-1500:])
    if rc == 0:
        rc, out = sh(["ldd", prog], env=dict(os.environ, LD_LIBRARY_PATH=libdir))
        t.check(os.path.join(libdir, "libbaton-guard.so.1") in out and "not found" not in out,
                "it loads the unpacked libbaton-guard.so.1: %s" % out)


def test_lintian(t):
    d = debs(t)
    args = ["lintian", "--no-cfg", "--fail-on", "none", "--display-info"]
    if os.geteuid() == 0:
        args.append("--allow-root")
    rc, out = sh(args + sorted(d.values()), timeout=300)
    tags = [line for line in out.splitlines() if re.match(r"^[EWIPXO]: ", line)]
    h.log("lintian (exit %d): %d tags" % (rc, len(tags)))
    for line in tags:
        h.log("  " + line)
    other = [line for line in out.splitlines() if line.strip() and line not in tags]
    if other:
        h.log("lintian also said: %s" % " | ".join(other)[-1500:])
    t.check(rc == 0, "lintian ran (exit %d): %s" % (rc, out[-1500:]))


if __name__ == "__main__":
    h.main(globals())
