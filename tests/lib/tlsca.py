"""tlsca.py - a test CA and certificates made with the openssl command in a
private directory (nothing fetched), for the TLS tests:

    ca = TestCA()                    # ca.ca: the CA's certificate (PEM)
    crt, key = ca.issue("srv", ["IP:127.0.0.1", "DNS:localhost"])
    crt, key = ca.issue("old", ["IP:127.0.0.1"], days=0)   # expired in 1 s
    crt, key = ca.issue("client")    # no names: a client certificate
    other = TestCA("other")          # a CA nobody trusts

Keys are P-256 (fast to make). tls_args(crt, key, ca) gives the
redis-server options of a TLS-only server (port 0). The directory goes
when the interpreter exits.
"""
import atexit
import os
import shutil
import subprocess
import tempfile

SUBJ = "/O=delayq tests/CN="


def _openssl(*args, cwd):
    p = subprocess.run(["openssl", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=30)
    if p.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {p.stderr.decode(errors='replace')[-300:]}")


class TestCA:
    def __init__(self, name="ca"):
        self.dir = tempfile.mkdtemp(prefix="delayq-tlsca.", dir=os.environ.get("TMPDIR", "/tmp"))
        atexit.register(shutil.rmtree, self.dir, True)
        self.name = name
        self.ca = os.path.join(self.dir, name + ".crt")
        self.key = os.path.join(self.dir, name + ".key")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", self.key, "-out", self.ca, "-days", "3", "-subj", SUBJ + "delayq test " + name,
                 cwd=self.dir)

    def issue(self, name, sans=(), days=3):
        """A certificate signed by this CA for the subject alternative names
        sans ("IP:...", "DNS:..."), valid for days (0: it expires within a
        second). Returns (certificate path, key path)."""
        crt, key, csr = (os.path.join(self.dir, name + ext) for ext in (".crt", ".key", ".csr"))
        ext = os.path.join(self.dir, name + ".ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\n")
            if sans:
                f.write("subjectAltName=" + ",".join(sans) + "\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
                 "-out", csr, "-subj", SUBJ + name, cwd=self.dir)
        _openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.key, "-CAcreateserial",
                 "-out", crt, "-days", str(days), "-extfile", ext, cwd=self.dir)
        return crt, key


def tls_args(port, crt, key, ca, auth_clients=False):
    """redis-server options for TLS only on port: no plain port."""
    return ["--port", "0", "--tls-port", str(port), "--tls-cert-file", crt, "--tls-key-file", key,
            "--tls-ca-cert-file", ca, "--tls-auth-clients", "yes" if auth_clients else "no"]
