"""The column mapping of table sources: each column's role, and what a fit or apply reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hogwild.data.formats.columns import Needs
from hogwild.data.transform.encodings import HashOptions
from hogwild.errors import DataError

FORMAT = "hogwild-hashing"
# 2: hashed columns may be signed (``"signed": true``). Version 1 parameters (no sign) are
# still applied as they were fitted; an older hogwild refuses version 2 rather than drop signs.
VERSION = 2
READABLE_VERSIONS = (1, 2)
HASH = "xxh3_128"
KINDS = ("numeric", "onehot", "hashed", "text", "sparse", "cross")


def roles(path: str, names: list[str], options: HashOptions) -> list[tuple[str, str]]:
    """(column, role) in file order; role is label/weight/categorical/text/numeric/ignore,
    sparse (a pair's index column) or sparse_values (its value column)."""
    named = {c: "categorical" for c in options.categorical}
    named.update({c: "text" for c in options.text})
    named.update({c: "ignore" for c in options.ignore})
    if options.numeric is not None:
        named.update({c: "numeric" for c in options.numeric})
    for index, values in options.sparse:
        named[index], named[values] = "sparse", "sparse_values"
    if options.label is not None:
        named[options.label] = "label"
    if options.weight is not None:
        named[options.weight] = "weight"
    crossed = [c for cross in options.cross for c in cross]
    missing = list(dict.fromkeys(c for c in [*named, *crossed] if c not in names))
    if missing:
        raise DataError(f"{path}: no column(s) {', '.join(missing)} (columns: "
                        f"{', '.join(names)})")
    default = "numeric" if options.numeric is None else "ignore"
    return [(c, named.get(c, default)) for c in names]


def fit_needs(path: str, names: list[str], options: HashOptions) -> Needs:
    """The columns fitting ``options`` reads, and as what."""
    numeric: dict[str, bool] = {}
    categorical: set[str] = set()
    tokens: set[str] = set()
    for name, role in roles(path, names, options):
        if role in ("label", "weight", "numeric"):
            numeric[name] = role != "numeric"
        elif role == "categorical":
            categorical.add(name)
        elif role == "text":
            tokens.add(name)
    return Needs(numeric, frozenset(categorical), frozenset(tokens), frozenset(options.sparse))


def apply_needs(params: Mapping[str, Any], path: str, names: list[str]) -> Needs:
    """The columns applying fitted ``params`` reads: every fitted column (DataError naming
    the missing ones), the label and weight columns where the data has them."""
    check_params(params)
    specs = list(params["columns"])
    missing = [c for c in dict.fromkeys(_sources(specs)) if c not in names]
    if missing:
        raise DataError(f"{path}: no column(s) {', '.join(missing)}, which the model "
                        "was trained on")
    numeric = {str(c["name"]): False for c in specs if c["kind"] == "numeric"}
    for key in ("label", "weight"):
        if params.get(key) and params[key] in names:
            numeric[str(params[key])] = True
    return Needs(numeric,
                 frozenset(str(c["name"]) for c in specs if c["kind"] in ("onehot", "hashed")),
                 frozenset(str(c["name"]) for c in specs if c["kind"] == "text"),
                 frozenset((str(c["indices"]), str(c["values"])) for c in specs
                           if c["kind"] == "sparse"))


def _sources(specs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The file columns fitted specs read (a cross reads its operands' own)."""
    out: list[str] = []
    for spec in specs:
        if spec["kind"] == "sparse":
            out += [str(spec["indices"]), str(spec["values"])]
        elif spec["kind"] != "cross":
            out.append(str(spec["name"]))
    return out


def check_params(params: Mapping[str, Any]) -> None:
    """DataError unless ``params`` are hashing parameters this version can apply."""
    if not isinstance(params, Mapping) or params.get("format") != FORMAT:
        raise DataError("not hogwild hashing parameters (format 'hogwild-hashing' expected)")
    if params.get("version") not in READABLE_VERSIONS or params.get("hash") != HASH:
        raise DataError(f"hashing parameters version {params.get('version')} / hash "
                        f"{params.get('hash')} are not supported (expected {VERSION} / {HASH})")
    for col in params.get("columns", []):
        if col.get("kind") not in KINDS:
            raise DataError(f"hashing parameters: column {col.get('name')!r} has unknown kind "
                            f"{col.get('kind')!r}")
