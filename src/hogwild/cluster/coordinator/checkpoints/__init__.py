"""The run's checkpoint: its file, its writing as the run goes, the data it was taken on."""
