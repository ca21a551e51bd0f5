"""Whether a data source names an fsspec URL (``scheme://...``) or a local path."""

from __future__ import annotations

import re

# scheme:// (two letters or more, so a Windows drive letter is not taken for one)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")


def is_url(spec: str) -> bool:
    """Whether ``spec`` is an fsspec URL (``scheme://...``) rather than a local path."""
    return bool(_URL.match(spec.strip()))
