"""`csv:`, `parquet:` and `arrow:` sources: the query read into the column mapping, data loaded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from hogwild.data._threads import default_threads
from hogwild.data.csr import CSRData
from hogwild.data.formats.columnar import pyarrow_modules, read_columns, table_read
from hogwild.data.formats.placedpairs import load_placed, pair_params, the_pair
from hogwild.data.hashing.tables import apply_columns, apply_hashing, fit_columns, fit_hashing
from hogwild.data.transform.encodings import DEFAULT_ONEHOT_MAX, HashOptions
from hogwild.errors import DataError


def names(raw: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in raw.split(",") if c.strip())


_SEPS = {"tab": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " "}


def _pairs(spec: str, raw: str) -> tuple[tuple[str, str], ...]:
    """``idx:val,idx2:val2`` -> ((idx, val), (idx2, val2))."""
    out = []
    for item in names(raw):
        index, colon, values = item.partition(":")
        if not colon or not index.strip() or not values.strip():
            raise DataError(f"{spec!r}: sparse={item!r}: expected INDICES:VALUES (two column "
                            "names)")
        out.append((index.strip(), values.strip()))
    return tuple(out)


def _crosses(raw: str) -> tuple[tuple[str, ...], ...]:
    """``a*b,a*c`` -> (("a", "b"), ("a", "c"))."""
    return tuple(tuple(c.strip() for c in item.split("*")) for item in names(raw))


def parse_csv_spec(rest: str, scheme: str = "csv") -> tuple[str, HashOptions]:
    """``FILE?label=COL&categorical=a,b&text=t&numeric=x,y&ignore=id&weight=w&sparse=i:v&
    cross=a*b&hash_bits=B&k=1&buckets=bits&onehot_max=65536&scale=maxabs&sep=tab&seed=0``
    -> (file, options); ``scheme`` names the source in errors (``sep`` is CSV's alone)."""
    spec = f"{scheme}:{rest}"
    path, _, query = rest.partition("?")
    if not path:
        raise DataError(f"{spec!r}: expected {scheme}:{'FILE' if scheme == 'csv' else 'PATH'}"
                        "?label=COL&categorical=a,b,...")
    params: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in params:
            raise DataError(f"{spec!r}: parameter {key!r} given twice")
        params[key] = value
    known = {"label", "categorical", "text", "numeric", "ignore", "hash_bits", "k",
             "buckets", "onehot_max", "scale", "seed", "weight", "sparse", "cross"}
    if scheme == "csv":
        known.add("sep")
    unknown = sorted(set(params) - known)
    if unknown:
        raise DataError(f"{spec!r}: unknown parameter(s) {', '.join(unknown)} (known: "
                        f"{', '.join(sorted(known))})")

    def integer(key: str, default: int | None) -> int | None:
        if key not in params:
            return default
        try:
            return int(params[key])
        except ValueError:
            raise DataError(f"{spec!r}: bad value {params[key]!r} for parameter {key!r}") \
                from None

    sep = params.get("sep")
    if sep is not None:
        sep = _SEPS.get(sep, sep)
    options = HashOptions(
        label=params.get("label") or None,
        categorical=names(params.get("categorical", "")),
        text=names(params.get("text", "")),
        numeric=names(params["numeric"]) if "numeric" in params else None,
        ignore=names(params.get("ignore", "")),
        hash_bits=integer("hash_bits", None), k=integer("k", None),
        buckets=params.get("buckets", "bits"),
        onehot_max=integer("onehot_max", DEFAULT_ONEHOT_MAX) or 0,
        scale=params.get("scale", "maxabs"), sep=sep, seed=integer("seed", 0) or 0,
        weight=params.get("weight") or None, sparse=_pairs(spec, params.get("sparse", "")),
        cross=_crosses(params.get("cross", "")))
    return path, options


def load_csv_source(rest: str, hashing: Mapping[str, Any] | None = None,
                    ) -> tuple[CSRData, dict[str, Any]]:
    """A ``csv:`` source: fitted on this file, or hashed with ``hashing`` (the training
    data's parameters, for test data). Returns the rows and the parameters used."""
    path, options = parse_csv_spec(rest)
    if hashing is not None:
        return apply_hashing(hashing, path, options.sep), dict(hashing)
    return fit_hashing(path, options)


def placed_table(path: str, options: HashOptions, hashing: Mapping[str, Any] | None,
                 shuffle_seed: int | None) -> tuple[CSRData, dict[str, Any]] | None:
    """A Parquet table of one sparse pair loaded into its shuffled places (in file order
    without ``shuffle_seed``) directly (data/formats/placedpairs.py), or None where the
    general path must read it."""
    read = table_read("parquet", path, options=options, params=hashing)
    if hashing is None:
        label, weight = options.label, options.weight
    else:
        label, weight = hashing.get("label"), hashing.get("weight")
        specs = list(hashing["columns"])
        # Applying: the pair's features from 0, and every column the mapping names present
        # (a missing label reads as NaN on the general path).
        if len(specs) != 1 or int(specs[0].get("offset", -1)) != 0 or \
                (label and label not in read.names) or (weight and weight not in read.names):
            return None
    pair = the_pair(read.needs, label, weight)
    if pair is None:
        return None
    width = None if hashing is None else int(hashing["columns"][0]["width"])
    # The first pass reads the pair's narrower column for the row lengths (int64 indices
    # and float32 values: the values, half the bytes to decode).
    narrower = min(pair, key=lambda c: read.item_bytes.get(c, 8))
    # The first pass (some columns) has nothing to run beside its reads: its row groups
    # are decoded on every core. The second reads one group ahead of the threads copying.
    readers = default_threads()
    placed = load_placed(lambda columns: read.parts(columns, 1 if columns is None else readers),
                         pair, label=label, weight=weight, width=width,
                         seed=shuffle_seed, source=path, count_with=narrower)
    # Arrow's pool keeps what the row groups used unless told: given back once the load is
    # done. Given back after each row group, it was faulted in again for the next: 1-2 s of
    # system time on 2M rows, where keeping it moved the peak by under 60 MB (bench/NOTES.md).
    pyarrow_modules()[0].default_memory_pool().release_unused()
    if placed is None:
        return None
    data, fitted = placed
    params = dict(hashing) if hashing is not None else pair_params(
        pair, fitted, label=label, weight=weight, seed=options.seed)
    return data, params


def load_columnar_source(scheme: str, rest: str, hashing: Mapping[str, Any] | None = None,
                         shuffle_seed: int | None = None) -> tuple[CSRData, dict[str, Any]]:
    """A ``parquet:`` or ``arrow:`` source, as :func:`load_csv_source`; rows placed in
    ``shuffle_order(n_rows, shuffle_seed)`` as they are assembled, when given."""
    import time

    path, options = parse_csv_spec(rest, scheme)
    started = time.perf_counter()
    if scheme == "parquet":
        placed = placed_table(path, options, hashing, shuffle_seed)
        if placed is not None:
            data, params = placed
            if hashing is None:
                params["fit_seconds"] = time.perf_counter() - started
            return data, params
    if hashing is not None:
        return (apply_columns(hashing, read_columns(scheme, path, params=hashing),
                              shuffle_seed), dict(hashing))
    data, params = fit_columns(read_columns(scheme, path, options=options), options,
                               shuffle_seed)
    params["fit_seconds"] = time.perf_counter() - started
    return data, params
