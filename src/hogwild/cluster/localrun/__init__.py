"""`hogwild run` on one machine: the launcher, its pre-spawned processes and its forked children."""
