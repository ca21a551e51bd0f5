"""Process start-up: forking, pre-spawning, warm-up, signals."""
