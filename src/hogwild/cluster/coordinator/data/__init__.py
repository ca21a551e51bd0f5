"""The coordinator's data: loaded or planned, split into the workers' parts, shipped."""
