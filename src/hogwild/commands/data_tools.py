"""`gen-data`, `analyze` and `hash`: the commands that make, study or convert a data set."""

from __future__ import annotations

import argparse
from typing import Any

from hogwild.commands.common import add_positional_or_flag
from hogwild.errors import ConfigError, DataError


def add_gen_data(sub: Any) -> None:
    """`gen-data`: a synthetic data set."""
    gen = sub.add_parser("gen-data", help="write a synthetic data set as svmlight text",
                         description="write a synthetic data set as svmlight text (.gz by suffix)")
    gen.add_argument("kind", choices=("rcv1", "seed000"),
                     help="rcv1: RCV1-shaped tf-idf rows; seed000: uniform sparse rows")
    gen.add_argument("--rows", type=int, default=100_000, help="number of rows")
    gen.add_argument("--features", type=int, default=None,
                     help="feature count (default 47236 for rcv1, 1000000 for seed000)")
    gen.add_argument("--noise", type=float, default=None, help="share of flipped labels")
    gen.add_argument("--min-nnz", type=int, default=None, help="seed000: fewest non-zeros per row")
    gen.add_argument("--max-nnz", type=int, default=None, help="seed000: most non-zeros per row")
    gen.add_argument("--binary", action="store_true", help="seed000: all values 1.0")
    gen.add_argument("--seed", type=int, default=0, help="random seed")
    gen.add_argument("--test-rows", type=int, default=0,
                     help="also write this many test rows (same separator) to OUT's .test twin")
    gen.add_argument("--out", required=True, metavar="FILE", help="output file (.gz to compress)")


def add_analyze(sub: Any) -> None:
    """`analyze`: conflict statistics."""
    analyze = sub.add_parser(
        "analyze", help="conflict statistics of a data set and a safe HOGWILD! concurrency",
        description="feature popularity, the row conflict graph (Ω, Δ, ρ) and the safe number "
                    "of examples in flight, τ <= n/(2Δ), as threads x workers x round size")
    add_positional_or_flag(analyze, "data", "--data", "DATA",
                           "a data source, as the `data` setting")
    analyze.add_argument("--threads", type=int, default=2, help="threads per worker")
    analyze.add_argument("--workers", type=int, default=1, help="workers")
    analyze.add_argument("--round-size", type=int, default=1,
                         help="examples per thread between exchanges")
    analyze.add_argument("--zero-based", action=argparse.BooleanOptionalAction, default=None,
                         help="svmlight ids start at 0 (default: off)")
    analyze.add_argument("--exact-budget", type=int, default=None,
                         help="largest Σ df(f)² for an exact conflict graph (default 4e8)")
    analyze.add_argument("--sample-rows", type=int, default=None,
                         help="rows whose degree is estimated when sampling (default 1000)")
    analyze.add_argument("--partners", type=int, default=None,
                         help="rows each sampled row is checked against (default 4096)")
    analyze.add_argument("--seed", type=int, default=0, help="sampling seed")
    analyze.add_argument("--json", action="store_true", help="print the statistics as JSON")


def add_hash(sub: Any) -> None:
    """`hash`: a CSV/TSV file hashed to svmlight."""
    hsh = sub.add_parser(
        "hash", help="hash a CSV/TSV file's categorical, text and numeric columns to svmlight",
        description="feature hashing of a CSV/TSV file (header line required): one-hot for "
                    "categorical columns of up to --onehot-max values, signed hashing (xxh3) "
                    "into 2**18 buckets for larger ones and for text (--buckets sqrt: about "
                    "sqrt(distinct) buckets), numeric columns as values; writes OUT and "
                    "OUT.hashing.json")
    hsh.add_argument("input", metavar="IN", help="CSV or TSV file (.gz ok)")
    hsh.add_argument("--out", required=True, metavar="FILE", help="svmlight output (.gz ok)")
    hsh.add_argument("--label", help="label column (numeric)")
    hsh.add_argument("--categorical", default="", metavar="A,B", help="categorical columns")
    hsh.add_argument("--text", default="", metavar="A,B", help="text columns (word counts)")
    hsh.add_argument("--numeric", default=None, metavar="A,B",
                     help="numeric columns (default: every column not named otherwise)")
    hsh.add_argument("--ignore", default="", metavar="A,B", help="columns to leave out")
    hsh.add_argument("--hash-bits", type=int, default=None,
                     help="2**B buckets per sub-block of a hashed column (default: 18)")
    hsh.add_argument("--buckets", choices=("bits", "sqrt"), default="bits",
                     help="bits: 2**hash_bits signed buckets; sqrt: about sqrt(distinct values) "
                          "unsigned buckets, k=2 (small blocks, e.g. for an MLP's first layer)")
    hsh.add_argument("--k", type=int, default=None,
                     help="hashes (sub-blocks) per value, 1-4 (default: 1; 2 with --buckets "
                          "sqrt)")
    hsh.add_argument("--onehot-max", type=int, default=2 ** 16,
                     help="one-hot for categorical columns with at most this many values")
    hsh.add_argument("--scale", choices=("maxabs", "none"), default="maxabs",
                     help="maxabs: numeric columns divided by their largest magnitude; "
                          "none: as they are")
    hsh.add_argument("--sep", default=None,
                     help="field separator (default: tab for .tsv/.tab, else comma)")
    hsh.add_argument("--seed", type=int, default=0, help="hash seed")
    hsh.add_argument("--params", default=None, metavar="JSON",
                     help="hash with these parameters (OUT.hashing.json of an earlier run, or "
                          "a model.json) instead of fitting new ones")


def gen_data(args: argparse.Namespace) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.data.formats.svmlight import write_svmlight
    from hogwild.data.sources import describe
    from hogwild.data.synthetic import make_rcv1_like, make_seed000
    from hogwild.outputs import artifacts  # (numpy: as above)

    if args.rows < 1 or args.test_rows < 0:
        raise ConfigError("rows", "must be at least 1 (and --test-rows non-negative)")
    # The files are written once every row is made: prove them writable before that.
    artifacts.check_out_file(args.out)
    test_path = _test_twin(args.out) if args.test_rows else None
    if test_path is not None:
        artifacts.check_out_file(test_path)
    total = args.rows + args.test_rows
    options: dict[str, Any] = {"seed": args.seed}
    if args.features is not None:
        options["n_features"] = args.features
    if args.noise is not None:
        options["noise"] = args.noise
    if args.kind != "rcv1":
        if args.min_nnz is not None:
            options["min_nnz"] = args.min_nnz
        if args.max_nnz is not None:
            options["max_nnz"] = args.max_nnz
    try:
        data = (make_rcv1_like(total, **options) if args.kind == "rcv1"
                else make_seed000(total, binary=args.binary, **options))
    except ValueError as exc:  # flags that do not fit together: a usage error, exit 2
        raise ConfigError("gen-data", str(exc)) from None
    train = data.slice(0, args.rows)
    with artifacts.writing(args.out):
        write_svmlight(train, args.out)
    print(f"wrote {args.out}: {describe(train)}")
    if test_path is not None:
        test = data.slice(args.rows, total)
        with artifacts.writing(test_path):
            write_svmlight(test, test_path)
        print(f"wrote {test_path}: {describe(test)}")
    return 0


def _test_twin(path: str) -> str:
    """data.svm -> data.test.svm; data.svm.gz -> data.test.svm.gz."""
    head, gz = (path[:-3], ".gz") if path.endswith(".gz") else (path, "")
    stem, dot, ext = head.rpartition(".")
    return f"{stem}.test.{ext}{gz}" if dot and "/" not in ext else f"{head}.test{gz}"


def analyze(args: argparse.Namespace) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.commands.analyze import analyze_command

    if min(args.threads, args.workers, args.round_size) < 1:
        raise ConfigError("threads", "--threads, --workers and --round-size must be at least 1")
    options = {key: value for key, value in (("exact_budget", args.exact_budget),
                                             ("sample_rows", args.sample_rows),
                                             ("partners", args.partners)) if value is not None}
    analyze_command(args.data, threads=args.threads, workers=args.workers,
                    round_size=args.round_size, zero_based=bool(args.zero_based), seed=args.seed,
                    as_json=args.json, **options)
    return 0


def hash_file(args: argparse.Namespace) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.commands.hash_csv import hash_command
    from hogwild.data.formats.csvquery import names
    from hogwild.data.transform.encodings import HashOptions

    sep = {"tab": "\t", "\\t": "\t"}.get(args.sep, args.sep)
    try:
        options = HashOptions(label=args.label, categorical=names(args.categorical),
                              text=names(args.text), ignore=names(args.ignore),
                              numeric=None if args.numeric is None else names(args.numeric),
                              hash_bits=args.hash_bits, k=args.k, buckets=args.buckets,
                              onehot_max=args.onehot_max,
                              scale=args.scale, sep=sep, seed=args.seed)
    except DataError as exc:  # a bad flag: a usage error, exit 2
        raise ConfigError("hash", str(exc).removeprefix("hashing: ")) from None
    hash_command(args.input, args.out, options, params_file=args.params)
    return 0
