"""`hogwild hash IN.csv --out OUT.svm`: hash a CSV/TSV file's columns into svmlight rows."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from hogwild.base import atomic
from hogwild.data.formats.columnmap import check_params
from hogwild.data.formats.svmlight import write_svmlight
from hogwild.data.hashing.summary import column_summary
from hogwild.data.hashing.tables import apply_hashing, fit_hashing
from hogwild.data.sources import describe
from hogwild.data.transform.encodings import HashOptions
from hogwild.errors import DataError, OutputError
from hogwild.outputs import artifacts


def params_path(out: str | Path) -> Path:
    """Where the parameters of ``out`` are written: OUT.hashing.json beside it."""
    return Path(f"{out}.hashing.json")


def hash_command(source: str, out: str, options: HashOptions, *, params_file: str | None = None,
                 stream: TextIO | None = None) -> dict[str, Any]:
    """Hash ``source`` (fitting the parameters, or applying ``params_file``), write the
    svmlight file (and, when fitted, its parameters); return the parameters."""
    stream = sys.stdout if stream is None else stream
    # Both outputs are written after the whole file is hashed: prove them writable first.
    artifacts.check_out_file(out)
    if params_file is None:
        artifacts.check_out_file(params_path(out))
    started = time.perf_counter()
    if params_file is not None:
        try:
            params: dict[str, Any] = json.loads(Path(params_file).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read hashing parameters {params_file}: {exc}") from None
        if isinstance(params, dict) and isinstance(params.get("hashing"), dict):
            params = params["hashing"]  # a model.json holds them under "hashing"
        check_params(params)
        data = apply_hashing(params, source, options.sep)
    else:
        data, params = fit_hashing(source, options)
    seconds = time.perf_counter() - started
    size = Path(source).stat().st_size
    with artifacts.writing(out):
        write_svmlight(data, out)
    if params_file is None:
        try:
            with artifacts.writing(params_path(out)):
                atomic.atomic_write_text(params_path(out), json.dumps(params, indent=1) + "\n")
        except OutputError:
            # Rows without their parameters cannot be reproduced on new files: keep neither.
            Path(out).unlink(missing_ok=True)
            raise
    print(f"hashed {source}: {describe(data)}", file=stream)
    if data.label_note is not None:
        # The rows are written as they are held (32-bit labels); training a classifier on
        # them refuses the file, so say here what happened and what to do.
        print(f"hogwild hash: warning: {data.label_note}, and is written so: as class labels "
              "such values may merge; renumber the classes (e.g. 0..K-1)", file=sys.stderr)
    print(f"  in {seconds:.2f}s ({data.n_rows / max(seconds, 1e-9):,.0f} rows/s, "
          f"{size / 1e6 / max(seconds, 1e-9):.1f} MB/s of text)", file=stream)
    # The ranges are given as the written file numbers its features: 1-based svmlight ids.
    print(f"  columns (feature ids as in {out}, from 1):", file=stream)
    for line in column_summary(params, first_id=1):
        print(line, file=stream)
    if params_file is None:
        print(f"wrote {out} and {params_path(out)} (pass it as --params to hash other files "
              "the same way)", file=stream)
    else:
        print(f"wrote {out} (parameters from {params_file})", file=stream)
    return params
