"""The progress rows and the `done` line: formatted in outputs/console alone, one column list
and one line builder per command, the text as users have read it."""

from __future__ import annotations

import re
from pathlib import Path

from hogwild.outputs.console import (
    RUN_ROWS,
    SIMULATE_ROWS,
    TRAIN_ROWS,
    DoneLine,
    run_done,
    run_saved_line,
    simulate_done,
    train_done,
    train_saved_line,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "hogwild"


def test_each_commands_rows_come_from_one_list_of_columns() -> None:
    assert TRAIN_ROWS.header() == "epoch  elapsed train_loss  val_loss  val_acc"
    assert TRAIN_ROWS.row({"epoch": 5, "elapsed": 0.30412, "train_loss": 0.012345,
                           "val_loss": 0.0456, "val_accuracy": None}) == (
        "    5    0.30s     0.0123    0.0456        -")
    assert RUN_ROWS.header() == (
        " elapsed  round   examples  epochs  val_loss  val_acc  deltas    MB_in stale")
    assert RUN_ROWS.row({"elapsed": 12.3456, "round": 40, "examples": 43520, "epochs": 10.0,
                         "val_loss": 0.0307, "val_accuracy": 0.99174, "delta_rounds": 80,
                         "bytes_received": 2_670_000, "max_staleness": 1}) == (
        "  12.35s     40      43520   10.00    0.0307   0.9917      80     2.67     1")
    assert SIMULATE_ROWS.header() == " epoch    sim_ms train_loss  val_loss  val_acc"
    assert SIMULATE_ROWS.row({"epoch": 1.25, "elapsed": 0.0123, "train_loss": None,
                              "val_loss": 0.5, "val_accuracy": 0.9}) == (
        "  1.25     12.30          -    0.5000   0.9000")


def test_done_lines_and_a_field_added_to_one() -> None:
    assert train_done("max epochs", 10, 10, 0.0912, 0.04651, 0.98843).text("runs/x") == (
        "done (max epochs): 10 epochs in 0.09s, test loss 0.0465, test accuracy 0.9884; "
        "outputs in runs/x")
    assert train_done("early stopping", 5, 2, 0.004, 0.1, None).text("o") == (
        "done (early stopping): 5 epochs (model of epoch 2) in 4ms, test loss 0.1000, "
        "test accuracy -; outputs in o")
    line = run_done("max epochs", 10.0, 9.875, 40, 0.1712, 2, "sync", 0.0443, 0.98843, 80,
                    1_204_000)
    assert line.text("runs/y") == (
        "done (max epochs): 10.00 epochs (model of epoch 9.88), 40 rounds in 0.17s with 2 "
        "worker(s) (sync); test loss 0.0443, test accuracy 0.9884; 80 deltas, 1.2 MB "
        "received; outputs in runs/y")
    # A new figure is one call: in a group of its own, or beside the ones it belongs with.
    line.add("speed", "3.1x one worker").add("training", "0.02s evaluating")
    assert line.text("o").endswith(
        "(sync), 0.02s evaluating; test loss 0.0443, test accuracy 0.9884; 80 deltas, "
        "1.2 MB received; 3.1x one worker; outputs in o")
    shares = {"training": 0.8, "waiting": 0.15, "sending": 0.3}
    assert simulate_done(40, 1.2345, 0.5, 160, 2_000_000, 2, 0.9876, 0.9811, 1.61, 0.178,
                         shares).text("s") == (
        "done: 40 rounds in 1.23 simulated s (0.50s here), 160 messages, 2.0 MB, max "
        "staleness 2; test accuracy 0.9876 (best validated model; the last one 0.9811); "
        "1.61x one worker's time for the same epochs (0.178 s), worker time 80% training, "
        "15% waiting, their senders busy 30%; outputs in s")
    # Many workers on little data: thousands of times slower than one, each said in full.
    tiny = simulate_done(15, 0.105, 1.2, 256, 3_200_000, 1, 0.97, 0.97, 0.00768, 0.000807,
                         shares).text("s")
    assert "0.00768x one worker's time for the same epochs (0.000807 s)" in tiny, tiny
    assert DoneLine().add("a", "b").text("o") == "done: b; outputs in o"


def test_the_saved_model_lines() -> None:
    assert train_saved_line(2, 0.31, 0.95) == (
        "saved the model of epoch 2, the best validated one (validation accuracy 0.9500, "
        "loss 0.3100)")
    assert train_saved_line(0, 0.31, None) == (
        "saved the model of epoch 0, the best validated one (validation loss 0.3100)")
    saved = {"round": 12, "epochs": 3.0, "val_loss": 0.2, "val_accuracy": 0.9}
    last = {"round": 40, "epochs": 10.0, "val_loss": 0.3, "val_accuracy": None}
    assert run_saved_line(saved, last) == (
        "saved the best validated model, from round 12 (epoch 3.00, validation accuracy "
        "0.9000, validation loss 0.2000) rather than the last one (validation loss 0.3000)")


def test_no_other_module_formats_a_done_line_or_a_progress_row() -> None:
    """A field added to the done line or the rows is added in outputs/console.py: nowhere
    else writes `done (...)`/`done:` or a row header of its own."""
    done = re.compile(r"""f["']done[ :(]""")  # (a log record's "done: ..." is no result)
    header = re.compile(r"""\{'(val_acc|val_loss|train_loss|elapsed|deltas)':>\d+\}""")
    offenders = []
    for path in SRC.rglob("*.py"):
        if path == SRC / "outputs" / "console.py" or "generated" in path.parts:
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(SRC)}: {m.group(0)}"
                      for pattern in (done, header) for m in pattern.finditer(text)]
    assert not offenders, offenders


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _printed(offers: list[tuple[str, bool]], gap: float = 1.0) -> list[str]:
    """The rows a normal-verbosity throttle prints of ``offers`` (text, best), one per
    0.1 s of a fake clock, then its flush at the end."""
    import io

    from hogwild.outputs.console import RowThrottle

    clock = _Clock()
    rows = RowThrottle(gap=gap, clock=clock)
    out = io.StringIO()
    for text, best in offers:
        clock.now += 0.1
        rows.offer(text, out, best=best)
    rows.flush(out)
    return out.getvalue().splitlines()


def test_the_row_of_the_model_saved_and_the_last_row_are_always_printed_in_order() -> None:
    # Epochs 1-10: the best at 7 (neither a power of two nor a second after the last row
    # printed), worse after it.
    best_so_far = {1, 2, 3, 4, 5, 6, 7}
    offers = [(f"epoch {e}", e in best_so_far) for e in range(1, 11)]
    assert _printed(offers) == ["epoch 1", "epoch 2", "epoch 4", "epoch 7", "epoch 8",
                                "epoch 10"]
    # A steadily improving run prints what it printed before: each row is the best so far.
    improving = [(f"epoch {e}", True) for e in range(1, 11)]
    assert _printed(improving) == ["epoch 1", "epoch 2", "epoch 4", "epoch 8", "epoch 10"]
    # The best row last of all is printed once.
    late = [(f"epoch {e}", e in (1, 10)) for e in range(1, 11)]
    assert _printed(late) == ["epoch 1", "epoch 2", "epoch 4", "epoch 8", "epoch 10"]
    # The best among rows held back after the last printed one comes before the last.
    held = [(f"epoch {e}", e <= 9) for e in range(1, 12)]
    assert _printed(held) == ["epoch 1", "epoch 2", "epoch 4", "epoch 8", "epoch 9",
                              "epoch 11"]


def test_the_closing_row_of_a_run_is_timed_as_the_done_line(tmp_path: Path) -> None:
    """The closing evaluation sees deltas that arrive after the workers were stopped (they
    were made before): its row is placed at the training time the done line prints, not at
    the moment it was scored, which came after it."""
    import io

    import numpy as np

    from hogwild.cluster.coordinator.watch.evaluations import Evaluator
    from hogwild.data.csr import CSRData
    from hogwild.model.losses import get_loss
    from hogwild.model.spec import ModelSpec
    from hogwild.outputs.console import Console, Verbosity
    from hogwild.outputs.history import EvalHistory

    from .test_coordinator_state import DIM, _delta, _started

    state = _started()
    assert state.model.apply_delta(_delta(state, 0, 1))
    val = CSRData(np.array([0, 1], dtype=np.int64), np.array([1], dtype=np.int32),
                  np.ones(1, dtype=np.float32), np.array([1.0], dtype=np.float32), DIM - 1)
    history = EvalHistory(tmp_path)
    history.begin()
    out = io.StringIO()
    ev = Evaluator(state, ModelSpec.linear(DIM - 1), val, get_loss("hinge"), history, None,
                   Console(out, Verbosity()), 100, 1, 0.1, curve_points=True)
    ev.header()
    row = ev.evaluate(0.0, state.seal(), closing=True, at=0.26)
    ev.announce(row, last=True)
    assert row["elapsed"] == 0.26 and row["delta_rounds"] == 1
    assert out.getvalue().splitlines()[-1].startswith("   0.26s")
