"""A throwaway certificate authority (made with the openssl command) and a PostgreSQL that takes TCP
logins over TLS only, for the tests of tern's TLS toward servers and the bench's --server-tls.

Standard library only.

    directory = certificate_directory()                     # a temp dir the caller removes
    ca = ThrowawayCA(directory, "ca")                       # ca.crt, ca.key
    server = ca.issue("server", "tern test server", dns=("localhost",))
    with tls_only_cluster(ca, server) as pg:                # PgCluster, started
        ...  # psql "host=localhost sslmode=verify-full sslrootcert=" + ca.crt works;
             # host=127.0.0.1 fails verify-full (the certificate names localhost alone);
             # a TCP login without TLS is refused by pg_hba.conf

Every file is owned by the postgres OS user when running as root (PostgreSQL runs as that user through
runuser, see pgcluster.py, and refuses a key file readable by others); keys are mode 0600, certificates
0644, the directory 0755.
"""

import collections
import os
import pwd
import secrets
import subprocess
import tempfile

try:
    from . import pgcluster as _pgc  # imported as a package
except ImportError:
    import pgcluster as _pgc

__all__ = ["Certificate", "ThrowawayCA", "certificate_directory", "TlsHarnessError", "tls_only_cluster", "TLS_ONLY_HBA"]

# Days a certificate is valid: a run lasts minutes; two days leave room for a clock set a day off.
CERTIFICATE_DAYS = 2

# pg_hba.conf lines (placed before pgcluster's trust lines) that refuse every TCP login without TLS,
# replication included, and trust those over TLS: a tern component that skips TLS fails visibly.
TLS_ONLY_HBA = [
    "hostnossl all all 0.0.0.0/0 reject",
    "hostnossl replication all 0.0.0.0/0 reject",
    "hostssl all all 127.0.0.1/32 trust",
    "hostssl replication all 127.0.0.1/32 trust",
]

Certificate = collections.namedtuple("Certificate", "crt key")


class TlsHarnessError(RuntimeError):
    """The openssl command failed."""


def _postgres_owner():
    """(uid, gid) of the postgres OS user when we are root (PostgreSQL runs as it), else None."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def _openssl(argv, what):
    r = subprocess.run(["openssl"] + argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise TlsHarnessError("openssl %s failed (%s): %s" % (what, " ".join(argv), r.stderr.strip()[-2000:]))


def certificate_directory(prefix="tern-tls-"):
    """A new temp dir (the caller removes it) that the postgres OS user may enter: mkdtemp's 0700 would
    keep PostgreSQL from its certificate ("Permission denied") though the files are its own."""
    directory = tempfile.mkdtemp(prefix=prefix)
    os.chmod(directory, 0o755)
    return directory


class ThrowawayCA:
    """A certificate authority whose key and certificate are NAME.key and NAME.crt in `directory`
    (created, mode 0755, owned by the postgres OS user when root); issue() signs leaf certificates."""

    def __init__(self, directory, name="ca", common_name=None):
        self.directory = directory
        self.name = name
        self._owner = _postgres_owner()
        os.makedirs(directory, exist_ok=True)
        os.chmod(directory, 0o755)
        self._own(directory)
        self.crt = os.path.join(directory, name + ".crt")
        self.key = os.path.join(directory, name + ".key")
        config = self._write(name + "-ca.cnf",
                             "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = %s\n"
                             "[ca_ext]\nbasicConstraints = critical, CA:TRUE\n"
                             "keyUsage = critical, keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n"
                             % (common_name or "tern test CA " + name))
        _openssl(["req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-days", str(CERTIFICATE_DAYS),
                  "-config", config, "-extensions", "ca_ext", "-keyout", self.key, "-out", self.crt],
                 "req (CA %s)" % name)
        self._settle(self.crt, self.key)

    def issue(self, name, common_name, dns=(), ips=()):
        """A key and a certificate signed by this CA, for a server and a client alike (serverAuth and
        clientAuth); subjectAltName lists `dns` and `ips` (none: the common name alone names it, as a
        PostgreSQL cert login wants). Returns Certificate(crt, key) paths in the CA's directory."""
        crt = os.path.join(self.directory, name + ".crt")
        key = os.path.join(self.directory, name + ".key")
        csr = os.path.join(self.directory, name + ".csr")
        alt = ["DNS:" + d for d in dns] + ["IP:" + i for i in ips]
        extensions = self._write(name + ".ext",
                                 "basicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature, "
                                 "keyEncipherment\nextendedKeyUsage = serverAuth, clientAuth\n"
                                 "authorityKeyIdentifier = keyid\n"
                                 + ("subjectAltName = %s\n" % ", ".join(alt) if alt else ""))
        _openssl(["req", "-new", "-nodes", "-newkey", "rsa:2048", "-subj", "/CN=" + common_name,
                  "-keyout", key, "-out", csr], "req (%s)" % name)
        _openssl(["x509", "-req", "-in", csr, "-CA", self.crt, "-CAkey", self.key,
                  "-set_serial", "0x%s" % secrets.token_hex(12), "-days", str(CERTIFICATE_DAYS),
                  "-extfile", extensions, "-out", crt], "x509 -req (%s)" % name)
        os.unlink(csr)
        self._settle(crt, key)
        return Certificate(crt, key)

    def _write(self, name, text):
        path = os.path.join(self.directory, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def _own(self, path):
        if self._owner is not None:
            os.chown(path, *self._owner)

    def _settle(self, crt, key):
        """PostgreSQL refuses a key others may read; the certificate is for everyone."""
        os.chmod(crt, 0o644)
        os.chmod(key, 0o600)
        self._own(crt)
        self._own(key)


def tls_only_cluster(ca, server, with_replica=True, hba_lines=(), extra_conf=None, **kw):
    """A PgCluster (not started) with ssl = on: `server` (a Certificate) is its certificate, `ca`'s
    certificate the one client certificates are checked against (ssl_ca_file: a client may present one,
    none is asked for unless an hba line says cert); pg_hba.conf takes `hba_lines`, then TLS_ONLY_HBA.
    The replica's copy of postgresql.conf (pg_basebackup) points at the same files; its streaming
    connection uses TLS too (pg_basebackup -R writes sslmode=prefer)."""
    conf = {"ssl": True, "ssl_cert_file": server.crt, "ssl_key_file": server.key, "ssl_ca_file": ca.crt}
    conf.update(extra_conf or {})
    return _pgc.PgCluster(with_replica=with_replica, hba_lines=list(hba_lines) + TLS_ONLY_HBA,
                          extra_conf=conf, **kw)
