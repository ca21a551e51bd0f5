"""This machine: whether an address is one that only it can reach, and the cores a process may use."""

from __future__ import annotations

import ipaddress
import os


def machine_cores() -> int:
    """The cores this process may run on (its affinity, which a container's cpuset narrows;
    else the CPU count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
