"""`predict`, `eval` and `inspect`: their flags and handlers; the jobs are hogwild.commands.predict and .inspect."""

from __future__ import annotations

import argparse
from typing import Any

from hogwild.commands.common import add_output_flags, add_positional_or_flag, verbosity_of
from hogwild.errors import ConfigError, UsageError


def add_model_commands(sub: Any) -> None:
    """`predict`, `eval` and `inspect`: use a saved model (they take no settings)."""
    predict = sub.add_parser(
        "predict", help="predict a data file with a saved model",
        description="one prediction per line (the label, --raw margin or --proba probability); "
                    "accuracy and loss when the file's labels fit the model")
    evaluate = sub.add_parser(
        "eval", help="every metric of a saved model on a labelled data file",
        description="accuracy, precision, recall, F1, ROC AUC (classification) or RMSE, MAE, "
                    "R^2 (regression), and the model's loss")
    inspect = sub.add_parser(
        "inspect", help="a saved model's summary and its largest positive and negative weights",
        description="feature count, nonzero weights, bias, norm (an MLP's layer shapes) and "
                    "the top weights, each named: the feature id, or for a model trained on a "
                    "csv: source the column and value it stands for")
    add_positional_or_flag(inspect, "model", "--model", "MODEL",
                           "run directory (runs/latest), or its model.npz / model.json")
    inspect.add_argument("--top", type=int, default=10, metavar="N",
                         help="weights shown of each sign (0: the summary only)")
    inspect.add_argument("--json", action="store_true", help="one JSON object on stdout")
    for name, cmd in (("predict", predict), ("eval", evaluate)):
        add_output_flags(cmd, name)
        cmd.add_argument("--model", required=True, metavar="DIR|model.npz",
                         help="run directory, or its model.npz / model.json")
        cmd.add_argument("--data", required=True, metavar="FILE",
                         help="svmlight file (.gz ok) or bundled:NAME[/test], synthetic:...")
        cmd.add_argument("--threads", type=int, default=None,
                         help="scoring threads (default: one per core, at most 8)")
        cmd.add_argument("--zero-based", action=argparse.BooleanOptionalAction, default=None,
                         help="feature ids start at 0 (default: as when the model was trained)")
        cmd.add_argument("--any-feature-space", action="store_true",
                         help="score data that shares few of the model's most frequent "
                              "features (another vocabulary or hashing?) with a warning, "
                              "instead of refusing it")
    predict.add_argument("--out", metavar="FILE", default=None,
                         help="write the predictions here (default: standard output)")
    kind = predict.add_mutually_exclusive_group()
    kind.add_argument("--raw", action="store_true", help="the margin w.x + b instead of a label")
    kind.add_argument("--proba", action="store_true",
                      help="the probability of the positive class (logistic models only)")
    predict.add_argument("--metrics", action="store_true",
                         help="print every metric, not only accuracy and loss")
    evaluate.add_argument("--json", action="store_true", help="one JSON object on stdout")


def predict_or_eval(args: argparse.Namespace) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.commands.predict import eval_command, predict_command

    if args.threads is not None and args.threads < 1:
        raise ConfigError("threads", f"must be at least 1, got {args.threads}")
    zero_based: bool | None = args.zero_based
    level = verbosity_of(args).level
    if args.command == "eval":
        eval_command(args.model, args.data, as_json=args.json, threads=args.threads,
                     zero_based=zero_based, level=level,
                     any_feature_space=args.any_feature_space)
    else:
        if args.json and not args.out:
            raise UsageError("--json prints the summary on standard output: give --out FILE "
                             "for the predictions")
        output = "raw" if args.raw else "proba" if args.proba else "label"
        predict_command(args.model, args.data, out=args.out, output=output,
                        full_metrics=args.metrics, threads=args.threads, zero_based=zero_based,
                        as_json=args.json, level=level,
                        any_feature_space=args.any_feature_space)
    return 0


def inspect(args: argparse.Namespace) -> int:
    # Deferred: cli imports this module to build --help; the command's stack loads when it runs.
    from hogwild.commands.inspect import inspect_command

    inspect_command(args.model, top=args.top, as_json=args.json)
    return 0
