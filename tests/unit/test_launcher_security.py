"""`hogwild run`'s credentials: throw-away TLS files and token by default, a token never on a
command line, plain text only when asked."""

from __future__ import annotations

import stat
from pathlib import Path

from hogwild import config
from hogwild.cluster.localrun.launcher import _secure, setting_flags


def _base(**overrides: object) -> config.Settings:
    return config.load(None, {}, {"bind_host": "127.0.0.1", **overrides})


def test_default_is_mutual_tls_and_a_token_file(tmp_path: Path) -> None:
    coordinator, worker = _secure(_base(), tmp_path, insecure=False)
    assert coordinator.tls_cert.endswith("coordinator.crt")
    assert worker.tls_cert.endswith("worker.crt") and worker.tls_ca == coordinator.tls_ca
    for role in (coordinator, worker):
        assert role.auth_token == "" and role.auth_token_file
        token = Path(role.auth_token_file)
        assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text()) > 30
        assert stat.S_IMODE(Path(role.tls_key).stat().st_mode) == 0o600


def test_a_configured_token_reaches_children_as_a_file(tmp_path: Path) -> None:
    coordinator, worker = _secure(_base(auth_token="s3cret-token"), tmp_path, insecure=True)
    for role, name in ((coordinator, "coordinator"), (worker, "worker")):
        assert not role.tls_ca  # insecure: plain text, but the token still counts
        assert Path(role.auth_token_file).read_text().strip() == "s3cret-token"
        assert not any("s3cret-token" in flag for flag in setting_flags(role, name))


def test_insecure_without_a_token_is_plain(tmp_path: Path) -> None:
    coordinator, worker = _secure(_base(), tmp_path, insecure=True)
    assert not coordinator.tls_ca and not worker.auth_token_file and not worker.auth_token
    assert not list(tmp_path.iterdir())
    # The children are `hogwild coordinator` and `worker`, which serve plain text only when
    # it is asked for: the launcher asks for them.
    for role, name in ((coordinator, "coordinator"), (worker, "worker")):
        assert role.insecure and "--insecure=true" in setting_flags(role, name)
    secured, _ = _secure(_base(), tmp_path, insecure=False)
    assert secured.tls_ca and not secured.insecure
