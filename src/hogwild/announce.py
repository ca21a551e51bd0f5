"""Lines a server prints for the process that started it (kept light: the launcher imports it)."""

# The coordinator's first line once its port is bound; the launcher waits for it and parses
# the port that follows.
READY_PREFIX = "coordinator listening on port "
