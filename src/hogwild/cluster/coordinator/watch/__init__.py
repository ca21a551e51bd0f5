"""Watching the run: evaluations, the swing guard, the stop rules, the trace and the report."""
