"""Mutual TLS for the cluster: a private CA, one certificate per host, Dask's Security.

A Dask scheduler or worker runs whatever code a connected client sends it, and
benchmark hosts run mallocbench as root: every connection is therefore TLS in both
directions, and only a certificate of the cluster's own CA gets in. Dask checks the
chain, not host names (its contexts turn check_hostname off), so the CA's key is what
must stay private: `cluster init` keeps it in its directory, and each host receives
only its own subdirectory (the CA's certificate, its certificate and its key).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mallocbench.errors import MallocbenchError

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
CERT = "cert.pem"
KEY = "key.pem"
VALID_DAYS = 5 * 365
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")

INSECURE_HELP = (
    "Plain TCP, no TLS and no authentication: anyone who can reach the listening "
    "address can run any code as this user (root on a benchmark host). Only for a "
    "network nobody else can reach."
)


def _write_private(path: Path, data: bytes) -> None:
    """A new file readable by its owner alone (0600 from its creation, whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


def _new_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _key_bytes(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _cert_bytes(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def _builder(subject: str, issuer: str, public_key: Any) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _load_or_make_ca(directory: Path) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    key_path, cert_path = directory / CA_KEY, directory / CA_CERT
    if key_path.exists() and cert_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        return key, x509.load_pem_x509_certificate(cert_path.read_bytes())
    if key_path.exists() or cert_path.exists():
        raise MallocbenchError(
            f"{directory} holds only one of {CA_CERT} and {CA_KEY}: give an empty directory "
            "or the one `mallocbench cluster init` made"
        )
    key = _new_key()
    name = f"mallocbench cluster CA ({directory.name})"
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_private(key_path, _key_bytes(key))
    _write_private(cert_path, _cert_bytes(cert))
    return key, cert


def _host_cert(name: str, ca_key: Any, ca_cert: Any, key: Any) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    issuer = ca_cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        alt = x509.DNSName(name)
    # One certificate serves every role of its host: it accepts connections (scheduler,
    # worker) and makes them (worker to scheduler, the run's client).
    usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    return (
        _builder(name, str(issuer), key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def init(directory: Path, names: list[str]) -> tuple[list[Path], list[Path]]:
    """The CA in `directory` (made if missing) and a subdirectory per name with its
    certificate; the subdirectories made, and those that existed and were kept."""
    for name in names:
        if not _NAME.match(name) or name in (CA_CERT, CA_KEY):
            raise MallocbenchError(
                f"host name {name!r} cannot name a certificate directory: use letters, "
                "digits, '.', '-' and '_' (e.g. db1, sched.lan)"
            )
    try:
        _private_dir(directory)
        ca_key, ca_cert = _load_or_make_ca(directory)
        made, kept = [], []
        for name in dict.fromkeys(names):
            host_dir = directory / name
            if host_dir.exists():
                kept.append(host_dir)
                continue
            _private_dir(host_dir)
            key = _new_key()
            _write_private(host_dir / KEY, _key_bytes(key))
            _write_private(host_dir / CERT, _cert_bytes(_host_cert(name, ca_key, ca_cert, key)))
            _write_private(host_dir / CA_CERT, _cert_bytes(ca_cert))
            made.append(host_dir)
    except OSError as exc:
        raise MallocbenchError(
            f"cannot write the cluster's certificates into {directory}: {exc.strerror}"
            + (f" ({exc.filename})" if exc.filename else "")
        ) from exc
    return made, kept


def security(tls_dir: Path) -> Any:
    """Dask's Security for a host directory `cluster init` made: TLS required, this
    host's certificate presented in every role, only the cluster's CA trusted."""
    from distributed.security import Security

    paths = {name: tls_dir / name for name in (CA_CERT, CERT, KEY)}
    missing = [name for name, path in paths.items() if not path.is_file()]
    if missing:
        raise MallocbenchError(
            f"--tls {tls_dir} has no {', '.join(missing)}: give a host's directory made by "
            "`mallocbench cluster init DIR NAME` (DIR/NAME, not DIR itself)"
        )
    mode = stat.S_IMODE(paths[KEY].stat().st_mode)
    if mode & 0o077:
        raise MallocbenchError(
            f"{paths[KEY]} is readable by others (mode {mode:04o}): whoever reads it joins "
            f"the cluster; chmod 600 {paths[KEY]}"
        )
    ca, cert, key = (str(paths[n]) for n in (CA_CERT, CERT, KEY))
    return Security(
        tls_ca_file=ca,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
        require_encryption=True,
    )


@dataclass(frozen=True)
class Access:
    """How to reach or serve the cluster: the protocol, and the security when TLS."""

    protocol: str  # "tls" or "tcp"
    security: Any  # distributed.security.Security, or None for --insecure

    def address(self, address: str) -> str:
        """`address` with this protocol's scheme; a scheme that contradicts it is refused."""
        scheme, sep, rest = address.partition("://")
        if not sep:
            return f"{self.protocol}://{address}"
        if scheme != self.protocol:
            if self.protocol == "tls":
                fix = f"use tls://{rest}"
            else:
                fix = f"use tcp://{rest} with --insecure, or --tls DIR without it"
            raise MallocbenchError(f"{address}: this cluster speaks {self.protocol}://: {fix}")
        return address


def access(tls_dir: Path | None, insecure: bool) -> Access:
    """--tls DIR or --insecure, exactly one of them."""
    if tls_dir is not None and insecure:
        raise MallocbenchError("--tls and --insecure contradict each other: give one of them")
    if tls_dir is not None:
        return Access("tls", security(tls_dir))
    if insecure:
        return Access("tcp", None)
    raise MallocbenchError(
        "the cluster needs --tls DIR (a host's certificates: `mallocbench cluster init`), or "
        "--insecure for plain TCP that lets anyone who reaches it run code on the hosts"
    )
