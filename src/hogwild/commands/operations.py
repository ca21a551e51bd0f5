"""`health` and `certs`: the commands that help operate a cluster."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from hogwild import config
from hogwild.errors import ConfigError


def add_health(sub: Any) -> None:
    """`health`: ask a server's health service."""
    health = sub.add_parser("health", help="ask a server's grpc.health.v1 service if it is serving",
                            description="exit 0 if the server at ADDRESS reports SERVING, else 1")
    health.add_argument("address", metavar="ADDRESS", help="host:port of a coordinator or worker")
    health.add_argument("--timeout", type=float, default=3.0, help="deadline in seconds")
    health.add_argument("--service", default="",
                        help="service name to ask about (default: the whole server)")
    health.add_argument("--tls", action="store_true",
                        help="connect with mutual TLS, using tls_ca/tls_cert/tls_key from "
                             "$HOGWILD_CONFIG or ./settings.yaml and HOGWILD_TLS_* variables")


def add_certs(sub: Any) -> None:
    """`certs`: development credentials for mutual TLS."""
    certs = sub.add_parser("certs", help="write a development CA, per-role certificates and a "
                                         "run token for mutual TLS",
                           description="write ca.crt, coordinator/worker/client certificates "
                                       "and keys (0600) and a random token into --out")
    certs.add_argument("--out", required=True, metavar="DIR", help="output directory")
    certs.add_argument("--hosts", default="", metavar="H1,H2,...",
                       help="names (DNS, *.wildcard, or IP) the coordinator and workers are "
                            "reached by; localhost and 127.0.0.1 are always added")
    certs.add_argument("--days", type=int, default=365, help="validity in days")
    certs.add_argument("--force", action="store_true", help="replace existing files")


def health(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.cluster.transport.health import check

    if args.tls:
        # deferred: security loads grpc; `hogwild --help` imports this module
        from hogwild.cluster.transport.security import from_settings

        settings = config.load(config.default_config_path(environ), environ)
        if not settings.tls_ca:
            raise ConfigError("tls_ca", "--tls needs tls_ca, tls_cert and tls_key settings")
        status = check(args.address, timeout=args.timeout, service=args.service,
                       channel_factory=from_settings(settings).channel)
    else:
        status = check(args.address, timeout=args.timeout, service=args.service)
    print(status)
    return 0 if status == "SERVING" else 1


def certs(args: argparse.Namespace) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.cluster.transport.certs import main as certs_main

    return certs_main(args.out, args.hosts, args.days, args.force)
