"""`hogwild certs`: a CA and role certificates that chain, name the hosts, keep keys private."""

from __future__ import annotations

import ipaddress
import shlex
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from hogwild import config
from hogwild.cli import build_parser, main, settings_from_args
from hogwild.cluster.transport.certs import FILES, Bundle, write_bundle
from hogwild.errors import ConfigError


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_bundle_chains_names_hosts_and_keeps_keys_private(tmp_path: Path) -> None:
    hosts = ["coordinator", "*.hogwild-workers.hogwild.svc.cluster.local", "10.1.2.3"]
    bundle = write_bundle(tmp_path / "certs", hosts)
    ca = _load(bundle.ca)
    for role in ("coordinator", "worker", "client"):
        cert = _load(bundle.cert(role))
        cert.verify_directly_issued_by(ca)
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.CLIENT_AUTH in usage
        assert stat.S_IMODE(bundle.key(role).stat().st_mode) == 0o600
        if role == "client":
            assert ExtendedKeyUsageOID.SERVER_AUTH not in usage
            continue
        assert ExtendedKeyUsageOID.SERVER_AUTH in usage
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = san.get_values_for_type(x509.DNSName)
        ips = san.get_values_for_type(x509.IPAddress)
        assert {"coordinator", "*.hogwild-workers.hogwild.svc.cluster.local",
                "localhost"} <= set(dns)
        assert {ipaddress.ip_address("10.1.2.3"), ipaddress.ip_address("127.0.0.1")} <= set(ips)
    assert stat.S_IMODE(bundle.token.stat().st_mode) == 0o600
    assert len(bundle.token.read_text().strip()) >= 32
    assert not list((tmp_path / "certs").glob("ca.key"))  # the CA's key is not kept


def test_existing_credentials_are_not_overwritten_without_force(tmp_path: Path) -> None:
    first = write_bundle(tmp_path)
    before = first.ca.read_bytes()
    with pytest.raises(ConfigError, match="--force"):
        write_bundle(tmp_path)
    assert first.ca.read_bytes() == before
    write_bundle(tmp_path, overwrite=True)
    assert first.ca.read_bytes() != before


def test_bad_host_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="hosts"):
        write_bundle(tmp_path, ["not a host"])


def test_cli_writes_every_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "--out", str(tmp_path / "c"), "--hosts", "a.example,10.0.0.1"]) == 0
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == sorted(FILES)
    assert "--tls-ca" in capsys.readouterr().out
    assert main(["certs", "--out", str(tmp_path / "c")]) == 2  # exists: one line, exit 2


@pytest.mark.parametrize("role", ["coordinator", "worker"])
def test_printed_flags_and_yaml_give_the_role_its_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, role: str) -> None:
    """What `hogwild certs` prints can be pasted: the flag line after the command, the YAML
    snippet as a settings file; both name the role's files (from any directory)."""
    monkeypatch.chdir(tmp_path)
    assert main(["certs", "--out", "c"]) == 0
    out = capsys.readouterr().out
    bundle = Bundle(tmp_path / "c")
    expected = {"tls_ca": bundle.ca, "tls_cert": bundle.cert(role), "tls_key": bundle.key(role),
                "auth_token_file": bundle.token}
    command = next(line.strip() for line in out.splitlines()
                   if line.strip().startswith(f"hogwild {role} "))
    args = build_parser().parse_args(shlex.split(command)[1:])
    from_flags = settings_from_args(args, {})
    snippet = out.split(f"# settings.yaml of the {role}\n")[1].split("\n\n")[0]
    (tmp_path / "settings.yaml").write_text(snippet)
    from_yaml = config.load(tmp_path / "settings.yaml", {}, {})
    for settings in (from_flags, from_yaml):
        for key, path in expected.items():
            assert Path(getattr(settings, key)) == path.resolve(), (key, out)


def test_a_directory_it_cannot_write_is_one_line_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import hogwild.cluster.transport.certs

    written = []
    write = hogwild.cluster.transport.certs.write_file

    def refuse_after_two(path: Path, data: bytes, mode: int) -> None:
        if len(written) == 2:  # as in a root-owned directory Docker made for a bind mount
            raise PermissionError(13, "Permission denied", str(path))
        written.append(path)
        write(path, data, mode)

    monkeypatch.setattr(hogwild.cluster.transport.certs, "write_file", refuse_after_two)
    out = tmp_path / "secrets"
    assert main(["certs", "--out", str(out), "--hosts", "hogwild"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [(f"hogwild certs: error: setting 'out': cannot write credentials to {out}: "
                    "Permission denied")], err
    assert list(out.iterdir()) == []  # no CA without its certificates
