"""The command-line verbs, one module each (cli.py assembles them)."""
