"""Fitted hashing parameters told to people: a line per column, the value of a one-hot feature."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# Columns named one per line in `hogwild hash` and the training log; the rest are counted.
SUMMARY_LINES = 24


def column_summary(params: Mapping[str, Any], first_id: int = 0,
                   limit: int | None = SUMMARY_LINES) -> Iterator[str]:
    """One line per column (the first ``limit``, then one line counting the rest): its
    encoding and why, feature ids (counted from ``first_id``: 1 for the ids an svmlight file
    holds), distinct values and full-code collisions."""
    columns = list(params["columns"])
    shown = columns if limit is None else columns[:limit]
    for col in shown:
        kind = col["kind"]
        first = col["offset"] + first_id
        line = f"  {col['name']}: {kind}, features {first}..{first + col['width'] - 1}"
        if kind == "onehot":
            line += f" ({col['width']:,} values, one feature each)"
        elif kind in ("hashed", "text"):
            share = col["code_collisions"] / max(col["distinct"], 1)
            what = "tokens" if kind == "text" else "values"
            why = (f" > onehot_max {col['onehot_max']:,}" if "onehot_max" in col else "")
            rule = " (sqrt rule)" if col.get("rule") == "sqrt" else ""
            signed = " signed" if col.get("signed") else ""
            line += (f" ({col['distinct']:,} distinct {what}{why} -> {col['k']} x "
                     f"{col['buckets']:,}{signed} buckets{rule}; {col['code_collisions']:,} "
                     f"({100 * share:.2f}%) share their whole code with another)")
        elif kind == "numeric":
            line += f" (scale {col['scale']:.6g})"
        elif kind == "sparse":
            line += f" (indices of {col['indices']}, values of {col['values']})"
        elif kind == "cross":
            line += (f" ({' x '.join(col['columns'])}: {col['distinct']:,} distinct crossed "
                     f"values -> {col['buckets']:,} signed buckets)")
        yield line
    if len(shown) < len(columns):
        rest = columns[len(shown):]
        kinds = sorted({c["kind"] for c in rest})
        yield f"  ... and {len(rest):,} more columns ({', '.join(kinds)})"


def onehot_value(params: Mapping[str, Any], feature: int) -> tuple[str, str] | None:
    """(column, value) of a 0-based feature id in a one-hot block, else None: a one-hot
    feature stands for exactly one value of the stored vocabulary."""
    for col in params["columns"]:
        offset = int(col["offset"])
        if col["kind"] == "onehot" and offset <= feature < offset + int(col["width"]):
            return str(col["name"]), str(col["values"][feature - offset])
    return None


def encoding_lines(params: Mapping[str, Any]) -> list[str]:
    """The training log's account of a ``csv:`` source: which encoding each column got
    (bounded as :func:`column_summary`), feature ids 0-based as the model's weights."""
    return ["columns (table source, feature ids from 0):",
            *column_summary(params, first_id=0)]
