"""Test certificates made with the openssl command line: a CA, a server
certificate for 127.0.0.1/localhost and a client certificate, in a directory
the test owns (world-readable: brokers that drop root must read them).

    tls = make_tls_files(h.mktemp())   # dict: ca, server_cert, server_key, client_cert, client_key
    other = make_ca(d, "other-ca")     # an unrelated CA: (cert, key)
"""

import os
import subprocess


def _openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def make_ca(d, name):
    """A self-signed CA in d: returns (cert path, key path)."""
    crt, key = os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=%s" % name, "-keyout", key, "-out", crt)
    return crt, key


def make_cert(d, name, ca, server):
    """A certificate for name signed by ca (a make_ca result); a server one
    names 127.0.0.1 and localhost. Returns (cert path, key path)."""
    crt, key, csr = (os.path.join(d, name + ext) for ext in (".crt", ".key", ".csr"))
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server
                else "extendedKeyUsage=clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=%s" % name, "-keyout", key,
             "-out", csr)
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
             "-days", "2", "-extfile", ext, "-out", crt)
    return crt, key


def make_tls_files(d):
    """CA, server and client certificates in d (world-readable: mosquitto drops
    root). Returns a dict: ca, server_cert, server_key, client_cert, client_key."""
    os.chmod(d, 0o755)
    ca = make_ca(d, "test-ca")
    srv = make_cert(d, "server", ca, server=True)
    cli = make_cert(d, "client", ca, server=False)
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)
    return {"ca": ca[0], "server_cert": srv[0], "server_key": srv[1],
            "client_cert": cli[0], "client_key": cli[1]}
