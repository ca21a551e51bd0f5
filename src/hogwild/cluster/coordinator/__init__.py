"""The coordinator: its server and the run it drives (server), the run state, the steps of a run."""
