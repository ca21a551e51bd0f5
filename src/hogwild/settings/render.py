"""The documented settings.yaml, rendered from the schema (`python -m hogwild.config` prints it)."""

from __future__ import annotations

from dataclasses import fields

import yaml

from hogwild.settings.schema import Settings, help_text

SECTIONS = {
    "coordinator_address": "Cluster: who listens where, how many nodes and threads, how they synchronise",
    "register_timeout": "Deadlines, in seconds: nobody waits forever",
    "loss": "Model and optimiser",
    "epochs": "When to stop",
    "data": "Data",
    "tls_ca": "Security: mutual TLS, run token, what the servers expose",
    "out_dir": "Output",
}


def render_settings_yaml() -> str:
    """The documented settings file with every key at its default (the top-level settings.yaml)."""
    import textwrap

    lines = [
        "# hogwild settings. Every key is documented here; the built-in defaults are the values",
        "# below. Override any key with an environment variable HOGWILD_<KEY> (e.g.",
        "# HOGWILD_WORKERS=4) or a flag (e.g. --workers 4); flags win over the environment, which",
        "# wins over this file. Unknown keys and bad values stop the program at start, naming the",
        "# key. (Generated from the schema by `python -m hogwild.config`; copy it to make your own.)",
    ]
    for f in fields(Settings):
        if f.name in SECTIONS:
            title = SECTIONS[f.name]
            lines += ["", f"# --- {title} " + "-" * max(3, 90 - len(title) - 7)]
        lines += ["# " + line for line in textwrap.wrap(help_text(f.name), 94)]
        if isinstance(f.default, tuple):  # a list of numbers reads best on one line
            lines.append(f"{f.name}: [{', '.join(str(v) for v in f.default)}]")
        else:
            lines.append(yaml.safe_dump({f.name: f.default}, default_flow_style=False).strip())
    return "\n".join(lines) + "\n"
