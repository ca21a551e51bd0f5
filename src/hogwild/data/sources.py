"""Resolve a data-source string (a file path, or a scheme: bundled:, csv:, parquet:...) to CSRData."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from hogwild.data.csr import CSRData
from hogwild.data.formats.csvquery import load_columnar_source, load_csv_source
from hogwild.data.formats.rcv1 import RCV1_FEATURES, read_lyrl2004
from hogwild.data.formats.svmlight import read_svmlight
from hogwild.data.hashing.summary import encoding_lines
from hogwild.data.synthetic import make_rcv1_like, make_regression, make_seed000
from hogwild.data.transform.labels import LabelMap, summarize_labels
from hogwild.data.transform.split import shuffle_order
from hogwild.errors import DataError

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"
# Feature counts of the bundled sets, so that train and test files agree.
BUNDLED_FEATURES = {"spamassassin": 23941, "rcv1_vw_subset": 47236}
DEFAULT_SYNTHETIC_ROWS = 100_000
SCHEMES = ("bundled", "synthetic", "lyrl2004", "csv", "parquet", "arrow")
# Sources whose columns are mapped to features (the model keeps the mapping).
TABLE_SCHEMES = ("csv", "parquet", "arrow")


def bundled_names() -> list[str]:
    """Names of the data sets shipped inside the package."""
    return sorted(name for name in BUNDLED_FEATURES
                  if (BUNDLED_DIR / f"{name}.train.libsvm.gz").is_file())


def default_test_source(spec: str) -> str | None:
    """``bundled:NAME`` -> ``bundled:NAME/test``; any other source has no default test set."""
    if spec.startswith("bundled:") and "/" not in spec:
        return spec + "/test"
    return None


def describe(data: CSRData, labels: LabelMap | None = None) -> str:
    """One line: rows, features, non-zeros (and per row), and the labels (the positive share
    of two classes, the most common of a few values, else their range). ``labels``: the map
    the labels were encoded with, so that encoded rows (class indices, or -1/+1 for two
    classes) are described by the user's own label values."""
    per_row = data.nnz / data.n_rows if data.n_rows else 0.0
    y = data.labels if labels is None or labels.classes is None else labels.decode(data.labels)
    return (f"{data.n_rows:,} rows x {data.n_features:,} features, {data.nnz:,} non-zeros "
            f"({per_row:.1f} per row), {summarize_labels(y)}")


def data_lines(splits: Any, train_line: str | None = None) -> list[str]:
    """The console's lines about a job's data: the train, validation and test rows
    (``describe``; ``train_line`` instead for rows the job does not hold, e.g. a worker's
    own), then the encoding of each CSV column."""
    lines = [f"data: train {train_line or describe(splits.train, splits.labels)}",
             f"      validation {describe(splits.val, splits.labels)}",
             f"      test {describe(splits.test, splits.labels)}"]
    if splits.hashing is not None:
        lines += [f"      {line}" for line in encoding_lines(splits.hashing)]
    return lines


def load_source(spec: str, *, n_features: int | None = None, zero_based: bool = False,
                cache: bool = True, shuffle_seed: int | None = None) -> CSRData:
    """The data set named by ``spec`` (see :func:`load_source_hashed`)."""
    return load_source_hashed(spec, n_features=n_features, zero_based=zero_based,
                              cache=cache, shuffle_seed=shuffle_seed)[0]


def load_source_hashed(spec: str, *, n_features: int | None = None, zero_based: bool = False,
                       cache: bool = True, hashing: Mapping[str, Any] | None = None,
                       shuffle_seed: int | None = None,
                       ) -> tuple[CSRData, dict[str, Any] | None]:
    """Load the data set named by ``spec``.

    Forms: a svmlight/LIBSVM file path (.gz ok); ``bundled:NAME`` and ``bundled:NAME/test``;
    ``synthetic:rcv1?rows=N&noise=x&seed=s&n_features=d&avg_nnz=k``;
    ``synthetic:seed000?rows=N&n_features=d&min_nnz=a&max_nnz=b&binary=1&noise=x&seed=s``;
    ``synthetic:regression?rows=N&dim=d&min_nnz=a&max_nnz=b&noise=sd&seed=s`` (real targets);
    ``lyrl2004:VEC1,VEC2@QRELS#TOPIC``;
    ``csv:FILE?label=COL&categorical=a,b&text=t&hash_bits=B&...`` (see hogwild.data.formats.csvquery);
    ``parquet:PATH?...`` and ``arrow:PATH?...`` with the same keys (hogwild.data.formats.columnar).
    Errors (unknown scheme, missing file, bad query parameter) raise DataError.

    Returns the rows and, for a table (``csv:``, ``parquet:``, ``arrow:``), the fitted column
    mapping (else None). ``hashing``: a mapping fitted on the training data, applied to a
    table source instead of fitting.
    Rows come in the source's order, or with ``shuffle_seed`` in ``shuffle_order(n_rows,
    shuffle_seed)`` (text files are placed so while they are parsed).
    """
    data, params, shuffled = _load(spec, n_features=n_features, zero_based=zero_based,
                                   cache=cache, hashing=hashing, shuffle_seed=shuffle_seed)
    if shuffle_seed is not None and not shuffled:
        data = data.take(shuffle_order(data.n_rows, shuffle_seed))
    return data, params


def _load(spec: str, *, n_features: int | None, zero_based: bool, cache: bool,
          hashing: Mapping[str, Any] | None, shuffle_seed: int | None,
          ) -> tuple[CSRData, dict[str, Any] | None, bool]:
    """(data, hashing parameters, whether the rows already come in the shuffled order)."""
    spec = spec.strip()
    if not spec:
        raise DataError("empty data source")
    scheme, sep, rest = spec.partition(":")
    if sep and scheme in SCHEMES and not Path(spec).exists():
        if scheme == "csv":
            data, params = load_csv_source(rest, hashing)
        if scheme in ("parquet", "arrow"):
            data, params = load_columnar_source(scheme, rest, hashing, shuffle_seed)
        if scheme in TABLE_SCHEMES:
            if n_features is not None and n_features != data.n_features:
                data = data.with_n_features(n_features)
            return data, params, scheme != "csv"
        if scheme == "bundled":
            return _load_bundled(rest, n_features=n_features, cache=cache,
                                 shuffle_seed=shuffle_seed), None, True
        if scheme == "synthetic":
            return _load_synthetic(rest, n_features=n_features), None, False
        return _load_lyrl2004(rest, n_features=n_features), None, False
    path = Path(spec).expanduser()
    if not path.exists():
        if sep and scheme.isidentifier() and len(scheme) > 1:
            raise DataError(f"unknown data source scheme {scheme!r} in {spec!r} "
                            f"(known: {', '.join(SCHEMES)}, or a file path)")
        raise DataError(f"data file not found: {spec}")
    return read_svmlight(path, n_features=n_features, zero_based=zero_based, cache=cache,
                         shuffle_seed=shuffle_seed), None, True


def _load_bundled(rest: str, *, n_features: int | None, cache: bool,
                  shuffle_seed: int | None) -> CSRData:
    name, _, part = rest.partition("/")
    if name not in BUNDLED_FEATURES:
        raise DataError(f"unknown bundled data set {name!r} (available: "
                        f"{', '.join(bundled_names()) or 'none'})")
    if part not in ("", "train", "test"):
        raise DataError(f"bundled:{name}/{part}: the part must be 'train' or 'test'")
    path = BUNDLED_DIR / f"{name}.{part or 'train'}.libsvm.gz"
    if not path.is_file():
        raise DataError(f"bundled data file missing from the installation: {path}")
    nf = BUNDLED_FEATURES[name] if n_features is None else n_features
    return read_svmlight(path, n_features=nf, zero_based=False, cache=cache,
                         shuffle_seed=shuffle_seed)


def _query(spec: str, rest: str) -> tuple[str, dict[str, str]]:
    kind, _, query = rest.partition("?")
    params: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if key in params:
            raise DataError(f"{spec!r}: parameter {key!r} given twice")
        params[key] = value
    return kind, params


def _take(spec: str, params: dict[str, str], key: str, conv: Callable[[str], Any],
          default: Any) -> Any:
    if key not in params:
        return default
    raw = params.pop(key)
    try:
        return conv(raw)
    except ValueError:
        raise DataError(f"{spec!r}: bad value {raw!r} for parameter {key!r}") from None


def _flag(raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _load_synthetic(rest: str, *, n_features: int | None) -> CSRData:
    spec = f"synthetic:{rest}"
    kind, params = _query(spec, rest)
    rows = _take(spec, params, "rows", int, DEFAULT_SYNTHETIC_ROWS)
    seed = _take(spec, params, "seed", int, 0)
    kwargs: dict[str, Any] = {}
    if kind == "rcv1":
        kwargs["n_features"] = _take(spec, params, "n_features", int,
                                     n_features if n_features is not None else RCV1_FEATURES)
        kwargs["noise"] = _take(spec, params, "noise", float, 0.05)
        kwargs["avg_nnz"] = _take(spec, params, "avg_nnz", float, 75.0)
        make: Callable[..., CSRData] = make_rcv1_like
    elif kind == "seed000":
        kwargs["n_features"] = _take(spec, params, "n_features", int,
                                     n_features if n_features is not None else 1_000_000)
        kwargs["min_nnz"] = _take(spec, params, "min_nnz", int, 10)
        kwargs["max_nnz"] = _take(spec, params, "max_nnz", int, 60)
        kwargs["binary"] = _take(spec, params, "binary", _flag, False)
        kwargs["noise"] = _take(spec, params, "noise", float, 0.0)
        make = make_seed000
    elif kind == "regression":
        dim = _take(spec, params, "dim", int, n_features if n_features is not None else 1000)
        kwargs["n_features"] = dim
        kwargs["min_nnz"] = _take(spec, params, "min_nnz", int, min(10, max(dim, 1)))
        kwargs["max_nnz"] = _take(spec, params, "max_nnz", int, min(60, max(dim, 1)))
        kwargs["noise"] = _take(spec, params, "noise", float, 0.1)
        make = make_regression
    else:
        raise DataError(f"{spec!r}: unknown synthetic generator {kind!r} "
                        "(known: rcv1, seed000, regression)")
    if params:
        raise DataError(f"{spec!r}: unknown parameter(s) {', '.join(sorted(params))} for "
                        f"synthetic:{kind}")
    try:
        data = make(rows, seed=seed, **kwargs)
    except ValueError as exc:
        raise DataError(f"{spec!r}: {exc}") from None
    if n_features is not None and n_features != data.n_features:
        data = data.with_n_features(n_features)
    return data


def _load_lyrl2004(rest: str, *, n_features: int | None) -> CSRData:
    spec = f"lyrl2004:{rest}"
    vectors, at, tail = rest.partition("@")
    qrels, _, topic = tail.partition("#")
    if not at or not vectors or not qrels:
        raise DataError(f"{spec!r}: expected lyrl2004:VEC1,VEC2,...@QRELS#TOPIC")
    paths = [Path(p).expanduser() for p in vectors.split(",") if p]
    for p in [*paths, Path(qrels).expanduser()]:
        if not p.is_file():
            raise DataError(f"data file not found: {p}")
    return read_lyrl2004(paths, Path(qrels).expanduser(), topic=topic or "CCAT",
                         n_features=n_features if n_features is not None else RCV1_FEATURES)
