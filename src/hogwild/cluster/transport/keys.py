"""Sender keys: one secret per (sender, receiver) pair of a run, issued by the coordinator.

The coordinator derives every key from one random secret of its own; a worker learns only the
keys of the calls it makes or receives (at Register and in its RunConfig, over the
authenticated channel), so no worker can present another one's key to a third node.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

COORDINATOR = "coordinator"
# Delta.worker_id of the coordinator's own deltas (topology star: the sum of the other
# workers' deltas); no worker id can take it (ids count up from 0).
COORDINATOR_SENDER_ID = 0xFFFFFFFF


class KeyRing:
    """The coordinator's key derivation: ``key(sender, receiver)`` for worker ids or
    :data:`COORDINATOR`."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def key(self, sender: int | str, receiver: int | str) -> str:
        """32 hex digits, the same for the same pair for the life of the run."""
        label = f"{sender}>{receiver}".encode()
        return hmac.new(self._secret, label, hashlib.sha256).hexdigest()[:32]
