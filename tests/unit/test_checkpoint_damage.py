"""A damaged checkpoint: every kind of damage (cut short, emptied, a bit or a byte changed,
another file in its place) is refused with one line naming the file, never a traceback, and a
checkpoint that does load holds exactly what was saved."""

from __future__ import annotations

import io
import random
import zipfile
from pathlib import Path

import numpy as np
import pytest

from hogwild.cluster.coordinator.checkpoints import checkpoint_file
from hogwild.cluster.coordinator.checkpoints.checkpoint_file import Checkpoint, WorkerEntry
from hogwild.errors import ConfigError


def _saved(directory: Path) -> tuple[Checkpoint, bytes]:
    ckpt = Checkpoint(run_id="r1", w=np.linspace(-1.0, 1.0, 40), round=7, elapsed=3.5,
                      deltas_received=12, bytes_received=4096, duplicates=1,
                      workers=[WorkerEntry(0, "127.0.0.1:5000", 2, examples=100, round=7)],
                      early={"best_loss": 0.25, "best_index": 3, "evaluations": 6,
                             "since_best": 2},
                      best_w=np.linspace(0.0, 2.0, 40))
    checkpoint_file.save(directory, ckpt)
    return ckpt, (directory / checkpoint_file.CHECKPOINT_FILE).read_bytes()


def _load_or_refusal(directory: Path, data: bytes) -> Checkpoint | ConfigError:
    (directory / checkpoint_file.CHECKPOINT_FILE).write_bytes(data)
    try:
        got = checkpoint_file.load(directory)
    except ConfigError as exc:
        return exc
    assert got is not None
    return got


def _check(directory: Path, data: bytes, saved: Checkpoint, what: str) -> bool:
    """True if ``data`` was refused as damaged, False if it loaded (then as saved)."""
    got = _load_or_refusal(directory, data)
    if isinstance(got, ConfigError):
        text = str(got)
        assert "\n" not in text, (what, text)
        assert text.startswith("setting 'resume': the checkpoint "
                               f"{directory / checkpoint_file.CHECKPOINT_FILE} is damaged: "), \
            (what, text)
        assert "start the run anew without resume" in text, (what, text)
        return True
    # Damage the zip format does not see (a timestamp, an attribute): the same checkpoint.
    assert got.w.tobytes() == saved.w.tobytes(), what
    assert got.best_w is not None and saved.best_w is not None, what
    assert got.best_w.tobytes() == saved.best_w.tobytes(), what
    assert (got.run_id, got.round, got.elapsed, got.workers, got.early) == (
        saved.run_id, saved.round, saved.elapsed, saved.workers, saved.early), what
    return False


def test_a_checkpoint_cut_short_anywhere_is_refused_as_damaged(tmp_path: Path) -> None:
    saved, good = _saved(tmp_path)
    lengths = {0, 1, 4, 30, len(good) // 3, len(good) // 2, len(good) - 100, len(good) - 22,
               len(good) - 1}
    lengths |= set(random.Random(11).sample(range(len(good)), 40))
    for n in sorted(lengths):
        assert _check(tmp_path, good[:n], saved, f"cut to {n} bytes"), n


def test_a_bit_or_byte_changed_anywhere_is_refused_or_changes_nothing(tmp_path: Path) -> None:
    saved, good = _saved(tmp_path)
    rng = random.Random(1234)
    refused = 0
    # Every byte of the zip directory at the end and of the first member's headers, where
    # one bit changes what is read; a sample of the rest (array data, the other headers).
    directory = good.find(b"PK\x01\x02")
    offsets = sorted({*range(200), *range(directory, len(good)),
                      *rng.sample(range(200, directory), 600)})
    for offset in offsets:
        damaged = bytearray(good)
        damaged[offset] ^= 1 << rng.randrange(8)
        refused += _check(tmp_path, bytes(damaged), saved, f"bit flipped at {offset}")
    for offset in rng.sample(range(len(good)), 300):  # a whole byte replaced
        damaged = bytearray(good)
        damaged[offset] = (good[offset] + rng.randrange(1, 256)) % 256
        refused += _check(tmp_path, bytes(damaged), saved, f"byte replaced at {offset}")
    assert refused > (len(offsets) + 300) * 3 // 4, refused  # most bytes matter


def test_another_file_in_its_place_is_refused_as_damaged(tmp_path: Path) -> None:
    saved, _ = _saved(tmp_path)
    lone = io.BytesIO()
    np.save(lone, np.zeros(3))  # an .npy, which numpy loads as an array, not an archive
    pickled = io.BytesIO()
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    others = {"random bytes": random.Random(5).randbytes(3000), "a lone array": lone.getvalue(),
              "an array of objects": pickled.getvalue(), "text": b"checkpoint\n"}
    for what, data in others.items():
        assert _check(tmp_path, data, saved, what), what
        assert "pickle" not in str(_load_or_refusal(tmp_path, data)), what


def test_a_zip_directory_that_loses_the_best_model_is_refused(tmp_path: Path) -> None:
    """The zip reader takes the entries its directory names, and numpy reads best_w only if
    one is named so: a damaged name, or an entry that swallows the next, would resume
    without the best model so far. Both are refused."""
    saved, good = _saved(tmp_path)
    renamed = 0
    for offset in range(good.find(b"PK\x01\x02"), len(good)):  # the directory at the end
        for bit in range(8):
            damaged = bytearray(good)
            damaged[offset] ^= 1 << bit
            try:
                names = zipfile.ZipFile(io.BytesIO(damaged)).namelist()
            except (zipfile.BadZipFile, ValueError, NotImplementedError, EOFError):
                continue
            if "best_w.npy" not in names and {"w.npy", "meta.npy"} <= set(names):
                renamed += 1
                (tmp_path / checkpoint_file.CHECKPOINT_FILE).write_bytes(bytes(damaged))
                with pytest.raises(ConfigError, match="is damaged: it holds an array named"):
                    checkpoint_file.load(tmp_path)
    assert renamed >= 10, renamed
    # Its entry gone from the directory (as one swallowed by the entry before it would be).
    kept = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as archive, zipfile.ZipFile(kept, "w") as copy:
        for name in ("w.npy", "meta.npy"):
            copy.writestr(name, archive.read(name))
    (tmp_path / checkpoint_file.CHECKPOINT_FILE).write_bytes(kept.getvalue())
    with pytest.raises(ConfigError, match="is damaged: it lacks the array 'best_w'"):
        checkpoint_file.load(tmp_path)
    assert not _check(tmp_path, good, saved, "intact")
