"""Why a worker's calls fail before any handler runs: TLS on one side only, a certificate the
other side's CA did not sign, a server name the certificate lacks, or a run token on one side
only or different on both; each told in one line that names the setting to fix.

gRPC reports most of these as UNAVAILABLE ("Socket closed", "failed to connect"), the words
of a server still starting, which a client retries until its deadline. So when a call fails
that way, :func:`diagnose_tls` opens one connection of its own with Python's ``ssl`` module
(a TLS ClientHello, with this process's certificate where it has one) and reads what the
server answers: a TLS server completes the handshake or sends an alert; a plain-text gRPC
server answers HTTP/2, which is not a TLS record.
"""

from __future__ import annotations

import socket
import ssl

from hogwild.config import Settings

# The UNAUTHENTICATED details a server's token gate gives (security.TokenGate); a client
# tells the three apart by these words.
NO_TOKEN = "the call carries no run token and this server requires one"
WRONG_TOKEN = "the call carries a run token other than this server's"
UNEXPECTED_TOKEN = "the call carries a run token and this server has none"

_CERTS = "tls_ca, tls_cert and tls_key (--tls-ca, --tls-cert, --tls-key; `hogwild certs` makes them)"


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _token_setting(settings: Settings) -> str:
    if settings.auth_token_file:
        return f"auth_token_file={settings.auth_token_file}"
    return "auth_token"


def explain_token(details: str, settings: Settings, server: str) -> str | None:
    """The line for an UNAUTHENTICATED answer whose ``details`` are the token gate's; None
    for any other refusal."""
    if NO_TOKEN in details:
        return (f"{server} requires a run token and this worker has none: set "
                "auth_token_file (--auth-token-file) to a copy of its token file")
    if WRONG_TOKEN in details:
        return (f"{server} has another run token than this worker's "
                f"({_token_setting(settings)}): give both the same token file "
                "(auth_token_file)")
    if UNEXPECTED_TOKEN in details:
        return (f"{server} has no run token and this worker sends one "
                f"({_token_setting(settings)}): set the same auth_token_file on both, or "
                "none here")
    return None


def _context(settings: Settings) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_alpn_protocols(["h2"])
    if not settings.tls_ca:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    context.load_verify_locations(cafile=settings.tls_ca)
    context.load_cert_chain(settings.tls_cert, settings.tls_key)
    return context


def diagnose_tls(address: str, settings: Settings, server: str,
                 timeout: float = 2.0) -> tuple[str, str] | None:
    """(setting, line) when the server at ``address`` and this process's settings disagree on
    TLS; None when they agree, or when the server cannot be reached or does not answer
    within ``timeout`` (it may still be starting: the caller retries)."""
    host, port = _split(address)
    try:
        context = _context(settings)
    except (OSError, ssl.SSLError):
        return None  # unreadable files: reported where the credentials are loaded
    name = settings.tls_server_name or host
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None
    # A second handle on the connection, which a failed handshake does not close: a plain
    # server is left to hang up first, so its side keeps the connection's trace for a minute
    # and names this peer in its own log (hogwild.cluster.transport.handshakes).
    with raw, raw.dup() as kept:
        raw.settimeout(timeout)
        try:
            with context.wrap_socket(raw, server_hostname=name) as tls:
                # TLS 1.3: a server that refuses this process's certificate says so after
                # the handshake, by closing the connection (or an alert) in place of its
                # first HTTP/2 frame.
                answer = tls.recv(1)
        except ssl.SSLCertVerificationError as exc:
            return _verify_failed(exc, settings, server, name)
        except ssl.SSLError as exc:
            found = _handshake_failed(exc, settings, server)
            if found is not None:
                _until_closed(kept, timeout)
            return found
        except OSError:
            return None
    if not settings.tls_ca:
        return ("tls_ca", (f"{server} serves mutual TLS and this worker plain text (no "
                           f"tls_ca; insecure): give it the coordinator's CA and a certificate "
                           f"of its own: {_CERTS}"))
    if not answer:
        return _refused_certificate(settings, server, "it closed the connection")
    return None


def _until_closed(sock: socket.socket, timeout: float) -> None:
    """Read what the server still sends until it closes the connection (or ``timeout``)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass


def _refused_certificate(settings: Settings, server: str, how: str) -> tuple[str, str]:
    return ("tls_cert", (f"{server} refuses this worker's certificate "
                         f"(tls_cert={settings.tls_cert}; {how}): it must be signed by the "
                         "coordinator's tls_ca"))


def _verify_failed(exc: ssl.SSLCertVerificationError, settings: Settings, server: str,
                   name: str) -> tuple[str, str]:
    if exc.verify_code == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
        return ("tls_server_name", (f"{server} presents a certificate that does not name "
                                    f"{name!r}: set tls_server_name (--tls-server-name) to a "
                                    "name it carries, or make the certificates with that "
                                    "host (`hogwild certs --hosts`)"))
    return ("tls_ca", (f"{server} presents a certificate that this worker's CA "
                       f"(tls_ca={settings.tls_ca}) did not sign ({exc.verify_message}): give "
                       "both sides the same tls_ca, and certificates it signed"))


def _handshake_failed(exc: ssl.SSLError, settings: Settings,
                      server: str) -> tuple[str, str] | None:
    reason = str(exc.reason or exc)
    if "WRONG_VERSION_NUMBER" in reason or "RECORD_LAYER" in reason:
        if not settings.tls_ca:
            return None  # plain text on both sides: not a TLS matter
        return ("tls_ca", (f"{server} serves plain text and this worker mutual TLS "
                           f"(tls_ca={settings.tls_ca}): give the coordinator the same "
                           f"{_CERTS}, or drop them here and pass --insecure (insecure: true) "
                           "on both"))
    if "ALERT" in reason and settings.tls_ca:
        return _refused_certificate(settings, server, reason)
    return None

