"""`hogwild certs`: a development CA, a certificate per role and a run token, for mutual TLS.

Writes into one directory:

    ca.crt                       the CA every node trusts (its private key is not kept)
    coordinator.crt / .key       server + client certificate of the coordinator
    worker.crt / .key            server + client certificate shared by the workers
    client.crt / .key            client-only certificate for tools (e.g. `hogwild health --tls`)
    token                        a random run token (auth_token_file)

Server certificates name every host given (DNS names, wildcards such as
``*.hogwild-workers.hogwild.svc.cluster.local``, or IP addresses) plus localhost and
127.0.0.1. Private keys and the token are written with mode 0600. Keys are ECDSA P-256: a
handshake costs a fraction of an RSA one.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hogwild.errors import ConfigError

DEFAULT_HOSTS = ("localhost", "127.0.0.1")
ROLES = ("coordinator", "worker", "client")
FILES = ("ca.crt", "coordinator.crt", "coordinator.key", "worker.crt", "worker.key",
         "client.crt", "client.key", "token")


@dataclass(frozen=True)
class Bundle:
    """Paths of one directory of credentials."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    def cert(self, role: str) -> Path:
        return self.directory / f"{role}.crt"

    def key(self, role: str) -> Path:
        return self.directory / f"{role}.key"

    @property
    def token(self) -> Path:
        return self.directory / "token"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hogwild"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    seen: set[str] = set()
    for host in hosts:
        host = host.strip().strip("[]")
        if not host or host in seen:
            continue
        seen.add(host)
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


def host_names(hosts: Iterable[str]) -> list[str]:
    """``hosts`` then localhost and 127.0.0.1, each name once (DNS names compared without
    case, IP addresses by value), in the order first given."""
    names: list[str] = []
    seen: set[str] = set()
    for host in [*hosts, *DEFAULT_HOSTS]:
        bare = host.strip().strip("[]")
        try:
            key = str(ipaddress.ip_address(bare))
        except ValueError:
            key = bare.lower()
        if bare and key not in seen:
            seen.add(key)
            names.append(host.strip())
    return names


def _check_hosts(hosts: Sequence[str]) -> None:
    for host in hosts:
        bare = host.strip().strip("[]")
        try:
            ipaddress.ip_address(bare)
            continue
        except ValueError:
            pass
        labels = bare.split(".")
        ok = bool(bare) and all(
            label and len(label) <= 63 and (label == "*" and i == 0 or all(
                c.isalnum() or c == "-" for c in label))
            for i, label in enumerate(labels))
        if not ok:
            raise ConfigError("hosts", f"{host!r} is neither a DNS name nor an IP address")


def _certificate(subject: str, issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey,
                 key: ec.EllipticCurvePrivateKey, days: int, ca: bool,
                 hosts: Sequence[str] = (), usages: Sequence[x509.ObjectIdentifier] = ()
                 ) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject)).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None),
                              critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                              critical=False))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=False, crl_sign=False,
            content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        if hosts:
            builder = builder.add_extension(_san(hosts), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` with ``mode`` from the first byte on (a key is never world-readable,
    not even for a moment), replacing any earlier file."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def write_bundle(directory: str | Path, hosts: Sequence[str] = (), days: int = 365,
                 overwrite: bool = False) -> Bundle:
    """Make a CA, one certificate per role naming ``hosts`` (+ localhost, 127.0.0.1) and a
    token in ``directory``; ConfigError if it already holds credentials and not
    ``overwrite``."""
    _check_hosts(hosts)
    if days < 1:
        raise ConfigError("days", f"must be at least 1, got {days}")
    out = Path(directory)
    if not overwrite and any((out / name).exists() for name in FILES):
        raise ConfigError("out", f"{out} already holds credentials (use --force to replace "
                                 "them)")
    try:
        out.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigError("out", f"cannot create {out}: {exc.strerror}") from None
    names = host_names(hosts)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("hogwild development CA")
    ca_cert = _certificate("hogwild development CA", ca_name, ca_key, ca_key, days, ca=True)
    bundle = Bundle(out)
    try:
        write_file(bundle.ca, _pem_cert(ca_cert), 0o644)
        both = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
        for role in ROLES:
            key = ec.generate_private_key(ec.SECP256R1())
            server = role != "client"
            cert = _certificate(f"hogwild-{role}", ca_name, ca_key, key, days, ca=False,
                                hosts=names if server else (),
                                usages=both if server else (ExtendedKeyUsageOID.CLIENT_AUTH,))
            write_file(bundle.key(role), _pem_key(key), 0o600)
            write_file(bundle.cert(role), _pem_cert(cert), 0o644)
        write_file(bundle.token, (secrets.token_urlsafe(32) + "\n").encode(), 0o600)
    except OSError as exc:
        # e.g. a directory Docker created for a bind mount: root's, not this user's.
        # A CA without its certificates is of no use: nothing partial stays behind.
        for name in FILES:
            if not overwrite:
                (out / name).unlink(missing_ok=True)
        raise ConfigError("out", f"cannot write credentials to {out}: "
                                 f"{exc.strerror or exc}") from None
    return bundle


def role_settings(bundle: Bundle, role: str) -> dict[str, str]:
    """The settings that give ``role`` (coordinator, worker) these credentials: absolute
    paths, so that they hold from any working directory."""
    return {"tls_ca": str(bundle.ca.resolve()), "tls_cert": str(bundle.cert(role).resolve()),
            "tls_key": str(bundle.key(role).resolve()),
            "auth_token_file": str(bundle.token.resolve())}


def role_flags(bundle: Bundle, role: str) -> str:
    """The same settings as command-line flags, quoted for a POSIX shell."""
    return " ".join(f"--{key.replace('_', '-')} {shlex.quote(value)}"
                    for key, value in role_settings(bundle, role).items())


def main(out: str, hosts: str, days: int, force: bool) -> int:
    """The `hogwild certs` command: writes the credentials, then prints, for each role, the
    flags to paste after `hogwild coordinator` / `hogwild worker` and the same settings as a
    settings.yaml snippet."""
    names = [h for h in (part.strip() for part in hosts.split(",")) if h]
    bundle = write_bundle(out, names, days=days, overwrite=force)
    print(f"wrote a CA, coordinator/worker/client certificates and a token to {bundle.directory}"
          f" (valid {days} days; names: {', '.join(host_names(names))})")
    for role in ("coordinator", "worker"):
        print(f"\n{role} flags:\n  hogwild {role} {role_flags(bundle, role)}")
    for role in ("coordinator", "worker"):
        snippet = yaml.safe_dump(role_settings(bundle, role), sort_keys=False,
                                 default_flow_style=False)
        print(f"\n# settings.yaml of the {role}\n{snippet}", end="")
    return 0
