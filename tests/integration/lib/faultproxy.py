"""The fault-injecting TCP proxy (tests/support/faultproxy.py) for the
integration tests: listening on a free 127.0.0.1 port from the harness's
range, closed with the test (or at exit).

    import faultproxy
    p = faultproxy.start(t, redis.port)     # t: harness.TestContext (or None)
    main = h.main_cfg(p.port, ...)          # baton's locker goes through it
    p.set_delay(600, names={"baton-lease"}) # the lease connection's replies late
    p.stall(); p.resume(); p.cut()

See tests/support/faultproxy.py for the controls.
"""

import importlib.util
import os
import sys

import harness as h

# loaded under its own name: this module is "faultproxy" too
_path = os.path.join(h.SOURCE_DIR, "tests", "support", "faultproxy.py")
_spec = importlib.util.spec_from_file_location("baton_support_faultproxy", _path)
_mod = importlib.util.module_from_spec(_spec)
sys.modules["baton_support_faultproxy"] = _mod
_spec.loader.exec_module(_mod)
FaultProxy = _mod.FaultProxy


def start(t, target_port, target_host="127.0.0.1"):
    """A FaultProxy in front of target_host:target_port on a free port."""
    last = None
    for _ in range(20):
        try:
            p = FaultProxy(target_port, target_host, port=h.free_port())
            break
        except OSError as e:  # the port was taken meanwhile: another one
            last = e
    else:
        raise RuntimeError("no free port for the fault proxy: %s" % last)
    h._cleanups.append(p.close)
    if t is not None:
        t.cleanup(p.close)
    return p
