"""The coordinator's checkpoint file: what it keeps, what a file without the newer fields gives,
early stopping going on across a resume exactly as without one, and how a resumed run treats
workers that are not back (yet)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hogwild.cluster.coordinator.checkpoints import checkpoint_file, fingerprint
from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint, WorkerEntry
from hogwild.cluster.coordinator.state import RunState
from hogwild.config import Settings
from hogwild.data.csr import CSRData
from hogwild.engine.stopping import EarlyStopping
from hogwild.errors import ClusterError, ConfigError, NotAllowed, StaleOrUnknown
from hogwild.outputs import artifacts


def _ckpt(**extra: object) -> Checkpoint:
    return Checkpoint(run_id="r1", w=np.arange(5, dtype=np.float64), round=7, elapsed=3.5,
                      deltas_received=12, bytes_received=4096, duplicates=1,
                      workers=[WorkerEntry(0, "127.0.0.1:5000", 2, examples=100, round=7)],
                      **{"history_rows": 1, **extra})  # type: ignore[arg-type]


def test_round_trip_keeps_early_stopping_and_the_best_model(tmp_path: Path) -> None:
    best = np.array([0.5, -1.0, 2.0, 0.0, 1.0])
    checkpoint_file.save(tmp_path, _ckpt(early={"best_loss": 0.25, "best_index": 3,
                                           "evaluations": 6, "since_best": 2}, best_w=best))
    got = checkpoint_file.load(tmp_path)
    assert got is not None
    assert got.early == {"best_loss": 0.25, "best_index": 3, "evaluations": 6, "since_best": 2}
    assert got.best_w is not None and got.best_w.tobytes() == best.tobytes()
    assert got.w.tobytes() == np.arange(5, dtype=np.float64).tobytes()
    assert (got.round, got.elapsed, got.workers[0].address) == (7, 3.5, "127.0.0.1:5000")


def test_a_file_without_early_stopping_fields_loads_with_none(tmp_path: Path) -> None:
    # What the previous version wrote: no best_w array, no "early" in the metadata.
    meta = {"run_id": "r1", "round": 2, "elapsed": 1.0, "deltas_received": 3,
            "bytes_received": 10, "duplicates": 0, "workers": [], "history": [],
            "format_version": 1}
    buffer = io.BytesIO()
    np.savez(buffer, w=np.zeros(3), meta=np.array(json.dumps(meta)))
    (tmp_path / checkpoint_file.CHECKPOINT_FILE).write_bytes(buffer.getvalue())
    got = checkpoint_file.load(tmp_path)
    assert got is not None and got.early == {} and got.best_w is None


def _history(n: int) -> list[dict[str, object]]:
    """Rows as the coordinator writes them, all before the checkpoint's 3.5 s (n <= 14)."""
    return [{"elapsed": 0.25 * i, "round": i, "examples": 100 * i, "val_loss": 1.0 / (i + 1),
             "val_accuracy": None, "train_loss": None, "deltas_received": 2 * i}
            for i in range(n)]


def test_the_evaluations_are_counted_in_the_checkpoint_and_read_back_from_metrics_jsonl(
        tmp_path: Path) -> None:
    rows = _history(5)
    artifacts.write_history(tmp_path, [*rows, {"elapsed": 9.0, "round": 99}])  # one after it
    checkpoint_file.save(tmp_path, _ckpt(history_rows=len(rows)))
    with np.load(tmp_path / checkpoint_file.CHECKPOINT_FILE) as archive:
        meta = json.loads(str(archive["meta"]))
    assert "history" not in meta and meta["history_rows"] == 5
    got = checkpoint_file.load(tmp_path)
    assert got is not None and got.history.rows.rows() == rows  # not the evaluation after it
    assert got.history_rows == 5
    # Where the five rows end in the file: the resumed run cuts it there and appends.
    text = (tmp_path / artifacts.HISTORY_FILE).read_bytes()
    assert got.history.end == len(b"".join(text.splitlines(keepends=True)[:5]))


def test_a_checkpoint_does_not_grow_with_the_run(tmp_path: Path) -> None:
    short, long = tmp_path / "short", tmp_path / "long"
    for where, n in ((short, 1), (long, 20_000)):
        where.mkdir()
        checkpoint_file.save(where, _ckpt(history_rows=n))
    size = [(d / checkpoint_file.CHECKPOINT_FILE).stat().st_size for d in (short, long)]
    assert size[1] - size[0] < 64, size  # the count's 4 more digits, not 20,000 rows


def test_evaluations_missing_from_metrics_jsonl_are_said_and_the_run_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = _history(4)
    checkpoint_file.save(tmp_path, _ckpt(history_rows=len(rows)))
    # Cut short mid-line, as by a crash of the machine after the checkpoint was written.
    text = "".join(json.dumps(r) + "\n" for r in rows[:2]) + json.dumps(rows[2])[:10]
    (tmp_path / artifacts.HISTORY_FILE).write_text(text, encoding="utf-8")
    with caplog.at_level("WARNING", logger="hogwild.coordinator"):
        got = checkpoint_file.load(tmp_path)
    assert got is not None and got.history.rows.rows() == rows[:2] and got.w.shape == (5,)
    assert "holds 2 of the checkpoint's 4 evaluations (line 3 is cut short)" in caplog.text
    (tmp_path / artifacts.HISTORY_FILE).unlink()
    caplog.clear()
    with caplog.at_level("WARNING", logger="hogwild.coordinator"):
        got = checkpoint_file.load(tmp_path)
    assert got is not None and got.history.rows.rows() == [] and got.history.end == 0
    assert "holds 0 of the checkpoint's 4 evaluations (cannot read it" in caplog.text


def test_rows_that_are_not_this_runs_evaluations_are_not_resumed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = _history(3)
    checkpoint_file.save(tmp_path, _ckpt(history_rows=len(rows)))
    # metrics.jsonl written since by `hogwild train` (its rows are epochs), or by a later run
    # (taken after the checkpoint's 3.5 s of training): neither is the curve to go on from.
    for foreign in ({"epoch": 1, "train_loss": 0.3, "val_loss": 0.2, "seconds": 0.1},
                    {**rows[1], "elapsed": 99.0}, {**rows[1], "val_loss": "low"}):
        artifacts.write_history(tmp_path, [rows[0], foreign, rows[2]])
        caplog.clear()
        with caplog.at_level("WARNING", logger="hogwild.coordinator"):
            got = checkpoint_file.load(tmp_path)
        assert got is not None and got.history.rows.rows() == rows[:1], foreign
        assert "holds 1 of the checkpoint's 3 evaluations (line 2 is not an evaluation of " \
               "this run)" in caplog.text


def test_a_damaged_checkpoint_is_refused_naming_the_key(tmp_path: Path) -> None:
    meta = {"run_id": "r1", "round": 2, "elapsed": 1.0, "deltas_received": 3,
            "bytes_received": 10, "duplicates": 0, "workers": [], "format_version": 2}
    buffer = io.BytesIO()
    np.savez(buffer, w=np.zeros(3), meta=np.array(json.dumps(meta)))
    (tmp_path / checkpoint_file.CHECKPOINT_FILE).write_bytes(buffer.getvalue())
    with pytest.raises(ConfigError, match="resume.*is damaged: it lacks 'history_rows'"):
        checkpoint_file.load(tmp_path)


def test_a_version_1_checkpoint_with_its_evaluations_inline_still_loads(tmp_path: Path) -> None:
    meta = {"run_id": "r1", "round": 2, "elapsed": 1.0, "deltas_received": 3,
            "bytes_received": 10, "duplicates": 0, "workers": [], "history": _history(3),
            "early": {}, "format_version": 1}
    buffer = io.BytesIO()
    np.savez(buffer, w=np.zeros(3), meta=np.array(json.dumps(meta)))
    (tmp_path / checkpoint_file.CHECKPOINT_FILE).write_bytes(buffer.getvalue())
    got = checkpoint_file.load(tmp_path)
    assert got is not None and got.history.rows.rows() == _history(3)
    assert got.history.inline == _history(3) and got.history_rows == 3


def test_a_checkpoint_of_an_unknown_format_version_is_refused_naming_the_key(
        tmp_path: Path) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, w=np.zeros(3), meta=np.array(json.dumps({"format_version": 9})))
    (tmp_path / checkpoint_file.CHECKPOINT_FILE).write_bytes(buffer.getvalue())
    with pytest.raises(ConfigError, match="resume.*format version 9, this hogwild reads 1, 2"):
        checkpoint_file.load(tmp_path)


def test_early_stopping_goes_on_across_a_resume_as_without_one() -> None:
    losses = [1.0, 0.8, 0.85, 0.9, 0.79, 0.95, 0.97, 0.99]
    whole = EarlyStopping(patience=3)
    decisions = [whole.update(x, np.full(2, x)) for x in losses]
    assert decisions[-1] == "early stopping" and decisions.count(None) == len(losses) - 1
    before = EarlyStopping(patience=3)
    for x in losses[:3]:
        assert before.update(x, np.full(2, x)) is None
    saved = json.loads(json.dumps(before.state()))  # as the checkpoint's metadata holds it
    after = EarlyStopping(patience=3)
    after.restore(saved, before.best_weights)
    assert [after.update(x, np.full(2, x)) for x in losses[3:]] == decisions[3:]
    assert after.best_loss == whole.best_loss == 0.79 and after.best_index == whole.best_index
    assert after.best_weights is not None and whole.best_weights is not None
    assert after.best_weights.tobytes() == whole.best_weights.tobytes()


def test_a_restored_state_without_any_evaluation_starts_fresh() -> None:
    fresh = EarlyStopping(patience=2)
    state = json.loads(json.dumps(fresh.state()))  # best_loss inf travels as null
    again = EarlyStopping(patience=2)
    again.restore(state, None)
    assert again.best_loss == float("inf") and again.best_index is None
    assert again.update(5.0) is None and again.best_loss == 5.0


def _resumed(n: int = 3) -> RunState:
    state = RunState(n, run_id="r1")
    state.restore(Checkpoint(
        run_id="r1", w=np.zeros(4), round=7, elapsed=3.5, deltas_received=12,
        bytes_received=4096, duplicates=0,
        workers=[WorkerEntry(w, f"127.0.0.1:{5000 + w}", 1, examples=10, round=7)
                 for w in range(n)]))
    return state


def test_a_resumed_coordinator_tells_a_worker_not_back_yet_to_register_again() -> None:
    """It issued that worker no key yet: FAILED_PRECONDITION (the worker leaves its old run
    and registers), not PERMISSION_DENIED, which a worker only logs, training on."""
    state = _resumed()
    with pytest.raises(StaleOrUnknown, match="register again"):
        state.roster.check_sender("r1", 0, "a key of the coordinator before the crash")
    state.roster.register("127.0.0.1:5000", 1, "host", 42)
    with pytest.raises(NotAllowed):
        state.roster.check_sender("r1", 0, "a key of the coordinator before the crash")
    assert state.roster.check_sender("r1", 0, state.roster.worker_key(0)).worker_id == 0


def test_a_resumed_run_goes_on_without_a_worker_that_does_not_come_back() -> None:
    state = _resumed()
    for w in (0, 2):
        state.roster.register(f"127.0.0.1:{5000 + w}", 1, "host", 40 + w)
    workers = state.roster.wait_for_workers(0.2, go_on_without=True)
    assert [r.worker_id for r in workers] == [0, 1, 2]
    assert [r.worker_id for r in workers if r.dead] == [1]
    assert "did not register again within register_timeout=0.2s" in workers[1].dead_reason
    assert state.roster.take_rejoins() == []
    # Back later: it rejoins like a restarted worker.
    assert state.roster.register("127.0.0.1:5001", 1, "host", 41) == 1
    assert state.roster.take_rejoins() == [1] and state.roster.workers[1].incarnation == 1


def test_a_worker_missing_from_a_resumed_run_is_refused_once_it_is_over() -> None:
    state = _resumed()
    state.roster.register("127.0.0.1:5000", 1, "host", 40)
    state.roster.wait_for_workers(0.1, go_on_without=True)
    state.model.start_model(4)
    state.seal()
    with pytest.raises(StaleOrUnknown, match="is over"):
        state.roster.register("127.0.0.1:5001", 1, "host", 41)
    assert state.roster.take_rejoins() == []


def test_a_resumed_run_with_nobody_back_is_an_error() -> None:
    with pytest.raises(ClusterError, match="only 0 of 3 workers registered"):
        _resumed().roster.wait_for_workers(0.1, go_on_without=True)
    # Without go_on_without (a tree), one missing is an error too.
    state = _resumed()
    for w in (0, 1):
        state.roster.register(f"127.0.0.1:{5000 + w}", 1, "host", 40 + w)
    with pytest.raises(ClusterError, match="only 2 of 3 workers registered"):
        state.roster.wait_for_workers(0.1)


def _rows(seed: int, n: int = 50) -> CSRData:
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 6, n)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = np.concatenate([np.sort(rng.choice(40, c, replace=False)) for c in counts])
    return CSRData(indptr, indices, rng.random(indptr[-1]), np.sign(rng.random(n) - 0.5), 40)


def test_the_data_fingerprint_is_the_rows_own() -> None:
    train, val = _rows(1), _rows(2)
    again = fingerprint.of_splits(CSRData(train.indptr.copy(), train.indices.copy(),
                                          train.values.copy(), train.labels.copy(), 40), val)
    assert fingerprint.of_splits(train, val) == again  # the same rows: the same print
    changed_value = train.values.copy()
    changed_value[7] += 0.5
    flipped = train.labels.copy()
    flipped[3] = -flipped[3]
    others = [
        (CSRData(train.indptr, train.indices, changed_value, train.labels, 40), val),
        (CSRData(train.indptr, train.indices, train.values, flipped, 40), val),
        (train, _rows(3)),                       # another validation split
        (val, train),                            # the split the other way round
        (CSRData(train.indptr, train.indices, train.values, train.labels, 41), val),
    ]
    prints = {fingerprint.of_splits(t, v) for t, v in others}
    assert len(prints) == len(others) and again not in prints


def test_a_checkpoint_keeps_the_data_fingerprint(tmp_path: Path) -> None:
    checkpoint_file.save(tmp_path, _ckpt(data="0f" * 16))
    got = checkpoint_file.load(tmp_path)
    assert got is not None and got.data == "0f" * 16


def test_a_resume_under_other_model_settings_is_refused_naming_the_setting(
        tmp_path: Path) -> None:
    taken = Settings(loss="hinge", resume=str(tmp_path))
    checkpoint_file.save(tmp_path, _ckpt(model=checkpoint_file.model_settings(taken)))
    got = checkpoint_file.load(tmp_path)
    assert got is not None and got.model["loss"] == "hinge"
    checkpoint_file.check_model_settings(got, taken)  # the same: goes on
    checkpoint_file.check_model_settings(got, replace(taken, learning_rate=0.5, time_budget=9.0,
                                                 hidden=(8,)))  # (a linear model's: unused)
    for changed, key in ((replace(taken, loss="logistic"), "loss"),
                         (replace(taken, model="mlp", hidden=(8,)), "model"),
                         (replace(taken, fit_bias=False), "fit_bias")):
        with pytest.raises(ConfigError, match=f"setting '{key}': the checkpoint in .* was "
                                              f"taken with {key}="):
            checkpoint_file.check_model_settings(got, changed)
    mlp = replace(taken, model="mlp", hidden=(16, 8))
    with pytest.raises(ConfigError, match="setting 'hidden': .* taken with hidden=\\[16, 8\\], "
                                          "these settings say \\[16\\]"):
        checkpoint_file.check_model_settings(_ckpt(model=checkpoint_file.model_settings(mlp)),
                                        replace(mlp, hidden=(16,)))
    older = _ckpt()  # a checkpoint that does not say: not refused for it
    checkpoint_file.check_model_settings(older, replace(taken, loss="logistic"))


def test_a_resumed_coordinator_gives_a_place_back_only_to_the_process_that_held_it(
        tmp_path: Path) -> None:
    """The checkpoint keeps each worker's secret digest: after a resume the same process
    registers again as before, another one claiming its address must prove it serves it."""
    from hogwild.cluster.coordinator.members.records import AddressClaimed

    before = RunState(2, run_id="r1")
    before.roster.register("127.0.0.1:5000", 1, "host", 40, secret=b"secret of worker 0")
    before.roster.register("127.0.0.1:5001", 1, "host", 41, secret=b"secret of worker 1")
    before.model.start_model(4)
    checkpoint_file.save(tmp_path, before.checkpoint(1.0, 0))
    saved = checkpoint_file.load(tmp_path)
    assert saved is not None
    state = RunState(2, run_id="r1")
    state.restore(saved)
    with pytest.raises(AddressClaimed):  # host and pid copied, not the secret
        state.roster.register("127.0.0.1:5000", 1, "host", 40, secret=b"a guess")
    assert not state.roster.workers[0].registered
    assert state.roster.register("127.0.0.1:5000", 1, "host", 40, secret=b"secret of worker 0") == 0
    # a restarted process proven to serve the address (verified) takes the place
    assert state.roster.register("127.0.0.1:5001", 1, "host", 77, secret=b"new", verified=True) == 1
