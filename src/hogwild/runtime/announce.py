"""Lines a server prints for the process that started it (kept light: the launcher imports it)."""

# The coordinator's first line once its port is bound; the launcher waits for it and parses
# the port that follows.
READY_PREFIX = "coordinator listening on port "

# A worker's line once the coordinator has given it its id (after each registration): the
# launcher then names the worker's output by that id, as the coordinator names the worker.
REGISTERED_PREFIX = "worker registered with id "

# With --json the coordinator's metrics are its only line that starts with this (one JSON
# object); `hogwild run --json` takes it from the coordinator's output and prints it.
RESULT_START = "{"
