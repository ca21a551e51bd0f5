"""Sparse weight deltas on the wire: encoding (parts, dense form), decoding and value bounds.

Decoding validates everything a compiled kernel would otherwise trust: index range and
order, finiteness, the value bound of a legitimate delta. Content faults raise
:class:`InvalidMessage`; version mismatches raise :class:`StaleOrUnknown`. The arrays inside
a delta are encoded by ``hogwild.cluster.wire.arrays``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hogwild.base.jit import njit
from hogwild.cluster.wire import PROTOCOL_VERSION, pb
from hogwild.cluster.wire.arrays import (
    MAX_CHUNK_BYTES,
    RAW,
    ArrayCodec,
    decode_array,
    encode_array,
    fill_array,
)
from hogwild.errors import InvalidMessage, RefusedValues, StaleOrUnknown
from hogwild.model.compression import dense_pays
from hogwild.settings.rules import BOUNDS

# The smallest payload a part of a split delta carries (encode_delta_parts refuses to cut
# finer; nodes cut at chunk_bytes, which settings keep at 4096 or more): a delta therefore
# never has more than max_delta_parts(dim) parts, and a receiver refuses a larger count.
MIN_DELTA_CHUNK_BYTES = 1 << 10
# Rounds and example counts in a delta are compared, summed and sent on (uint64 on the
# wire). No run comes near these: 2**40 rounds are 35 years of 1 ms rounds, 2**53 examples
# 2.8 years at 10**8 a second; beyond them a label could only be a sender's lie, and near
# 2**64 one overflows what the receiver sends on (a relay's summed example counts).
MAX_ROUND = 1 << 40
MAX_EXAMPLES = 1 << 53

INT32_MAX = int(np.iinfo(np.int32).max)  # (np.iinfo is built anew at every call)

IndexArray = npt.NDArray[np.int32]
ValueArray = npt.NDArray[np.float32]


def check_version(version: int, what: str) -> None:
    """StaleOrUnknown unless ``version`` is the protocol version this code speaks."""
    if version != PROTOCOL_VERSION:
        raise StaleOrUnknown(
            f"{what}: protocol version {version}, this node speaks {PROTOCOL_VERSION}")


# ------------------------------------------------------------------------------- deltas


@njit(nogil=True, cache=True)
def count_faults(idx: Any, val: Any, dim: int,
                 limit: float) -> tuple[int, int]:  # pragma: no cover - compiled
    """(indices outside [0, dim), values not finite or above ``limit`` in magnitude):
    branch-free, so it vectorises."""
    bad_idx = 0
    bad_val = 0
    for k in range(idx.shape[0]):
        i = idx[k]
        bad_idx += (i < 0) | (i >= dim)
        v = val[k]
        # NaN and +-inf give NaN in v - v, finite values 0; NaN > limit is False.
        bad_val += ((v - v) != 0.0) | (abs(v) > limit)
    return bad_idx, bad_val


@njit(nogil=True, cache=True)
def _scatter(full: Any, idx: Any, val: Any) -> int:  # pragma: no cover - compiled
    """``full[idx] = val``; returns how many indices fell outside ``full`` (those are
    skipped). numpy's fancy assignment first widens int32 indices to intp: 0.16 ms for a
    47k-entry delta against 0.03 ms here, on every dense delta a worker or the relay sends."""
    n = full.shape[0]
    bad = 0
    for k in range(idx.shape[0]):
        i = idx[k]
        if i < 0 or i >= n:
            bad += 1
        else:
            full[i] = val[k]
    return bad


def _scan_delta(idx: Any, val: Any, dim: int, limit: float = math.inf) -> tuple[int, int]:
    """(0, -1) if every index is in [0, dim) and every value finite and at most ``limit``
    in magnitude; else (code, position) of the first fault: code 1 index out of range,
    2 value not finite, 3 value beyond ``limit``."""
    bad_idx, bad_val = count_faults(idx, val, dim, limit)
    if not bad_idx and not bad_val:
        return 0, -1
    # The slow path only runs for a message that is rejected anyway.
    idx_fault = np.flatnonzero((idx < 0) | (idx >= dim))
    val_fault = np.flatnonzero(~np.isfinite(val) | (np.abs(val) > limit))
    first_idx = int(idx_fault[0]) if idx_fault.size else idx.shape[0]
    first_val = int(val_fault[0]) if val_fault.size else val.shape[0]
    if first_idx <= first_val:
        return 1, first_idx
    return (2 if not np.isfinite(val[first_val]) else 3), first_val


def warmup() -> None:
    """Load the compiled validation kernel now rather than inside the first RPC, for the
    arrays a received delta has: read-only views of the message (numba compiles read-only
    arrays apart; loading one more variant inside the first delta's RPC took 5-6 ms), and
    a dense part's index range built on receipt."""
    for idx, val in _received_forms():
        _scan_delta(idx, val, 1)
    encode_delta_parts(DeltaHeader("warmup", 0, 1, 1, 2), np.array([0, 1], dtype=np.int32),
                       np.ones(2, dtype=np.float32))


def _received_forms() -> list[tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]]:
    """(indices, values) typed as decode_delta returns them: sparse and dense."""
    idx, val = np.zeros(1, np.int32), np.zeros(1, np.float32)
    idx_ro, val_ro = idx.copy(), val.copy()
    idx_ro.flags.writeable = False
    val_ro.flags.writeable = False
    return [(idx, val), (idx_ro, val_ro), (idx, val_ro)]


@dataclass(frozen=True)
class DeltaHeader:
    """Who sent a delta and where it sits in the sender's sequence."""

    run_id: str
    worker_id: int
    round: int
    seq: int
    dim: int
    part: int = 0
    parts: int = 1
    final: bool = False
    examples: int = 0
    # Topology tree, async (see engine/tree.py): (origin, count) pairs, ascending by origin.
    covers: tuple[tuple[int, int], ...] = ()
    resent: bool = False
    applied: tuple[tuple[int, int], ...] = ()
    # Topology tree, async (see engine/treeview.py): a parent's resync to a child adopted
    # around a dead one, and the child's own count the dead edge carried.
    resync: bool = False
    resync_cut: int = 0


@dataclass(frozen=True)
class DecodedDelta:
    """A validated delta: header plus read-only views of its int32 indices / float32 values
    (for a dense part, ``indices`` is the coordinate range it covers, built on receipt)."""

    header: DeltaHeader
    indices: IndexArray
    values: ValueArray
    dense: bool = False

    @property
    def key(self) -> tuple[int, int, int]:
        """(worker_id, seq, part): what makes a delta message unique (dedup key)."""
        return self.header.worker_id, self.header.seq, self.header.part

    @property
    def nbytes(self) -> int:
        """Payload bytes as they travelled."""
        return int(self.values.nbytes if self.dense else self.indices.nbytes + self.values.nbytes)


# How much larger than the most a run's SGD steps could move a weight a delta value may be
# before it is refused: the bound below is loose already; this is headroom on top.
VALUE_BOUND_FACTOR = 4.0
# Losses whose gradient is bounded: |dloss/dmargin| <= |y| = 1 for hinge and logistic on
# +-1 labels (hogwild.model.kernels.point_dloss).
_BOUNDED_GRADIENT_LOSSES = frozenset({"hinge", "logistic"})


def value_bound(*, model: str, loss: str, lr_schedule: str, learning_rate: float,
                lr_decay: float, l2: float, max_abs_value: float | None, run_threads: int,
                round_size: int, max_rounds: int,
                class_weights: tuple[float, ...] = ()) -> float:
    """The largest |value| a legitimate delta of a run may carry; inf where no simple sound
    bound exists (then only finiteness is checked).

    One step of ``sgd_range`` changes weight j by ``lr * (g * x_j + l2 * w_j)`` (the bias:
    ``lr * g``), with |g| <= 1 (hinge, logistic), |x_j| <= X (the largest |x| of the
    training rows; 1 for the bias) and lr at most its value at t = 1 (``inverse``,
    ``invscaling``; ``constant`` with lr_decay <= 1). The L2 part only moves a weight towards
    0 (while lr * l2 <= 1), so no weight outgrows G, the sum of all the run's gradient steps.

    A delta is a sum of such steps: of one worker's rounds (coalesced while queued; the
    compression residual and the final delta carry changes back to round 1), or of several
    workers' (a star relay sums W - 1 workers, a tree hop a subtree, and an async hop labels
    that sum with its own round, not theirs). So the bound counts every step of every worker
    in every round, not the rounds a message is labelled with: S = run_threads x round_size
    steps a round, max_rounds + 2 rounds (the label one past the last, a star relay's final
    aggregate, and slack):

        bound = factor * lr * S * rounds * (X + l2 * G),  G = lr * X * S * rounds

    Loose by design (it must refuse 1e30, never a legitimate delta). No bound for the
    squared loss, whose gradient m - y grows with the weights (a run whose step is too large
    for its data legitimately diverges, so no finite bound is both sound and useful); for
    the MLP, whose hidden layers' gradients are products of weights; and where a setting is
    unknown (an older coordinator, shipping local) or voids the argument (lr_decay > 1 with
    the constant schedule, lr * l2 > 1).

    Class weights scale a row's gradient (and its L2 shrink) by its class's weight: the
    bound takes lr times the largest weight above 1 as the step.
    """
    if model not in ("", "linear") or loss not in _BOUNDED_GRADIENT_LOSSES:
        return math.inf
    if max_abs_value is None or not 0.0 <= max_abs_value < math.inf:
        return math.inf
    if run_threads < 1 or round_size < 1 or max_rounds < 1:
        return math.inf
    if lr_schedule == "constant" and lr_decay not in BOUNDS["lr_decay"]:  # (> 1: it grows)
        return math.inf
    # The step at t = 1: every schedule's largest (see kernel_schedule).
    lr = learning_rate * max((1.0, *class_weights))
    if (learning_rate not in BOUNDS["learning_rate"] or l2 not in BOUNDS["l2"]
            or lr == math.inf or lr * l2 > 1.0):  # (a class weight may overflow lr)
        return math.inf
    x = max(max_abs_value, 1.0)  # the bias's "feature" is 1
    steps = float(run_threads) * float(round_size) * float(max_rounds + 2)
    mass = lr * x * steps
    bound = VALUE_BOUND_FACTOR * lr * steps * (x + l2 * mass)
    return bound if math.isfinite(bound) else math.inf


def delta_entries_per_part(chunk_bytes: int) -> int:
    """How many (index, value) pairs fit in one delta message of at most ``chunk_bytes``."""
    return max(1, min(chunk_bytes, MAX_CHUNK_BYTES) // 8)


def max_delta_parts(dim: int) -> int:
    """The most parts a delta of a ``dim``-long model is cut into: at least
    MIN_DELTA_CHUNK_BYTES of payload per part, and a sparse entry (8 bytes) is the largest
    per coordinate (a dense part holds twice or four times as many)."""
    return max(1, -(-dim // delta_entries_per_part(MIN_DELTA_CHUNK_BYTES)))


def _wire_dtype(values: npt.NDArray[Any]) -> type[np.floating[Any]]:
    """float16 values travel as float16 (delta_dtype float16); everything else as float32."""
    return np.float16 if values.dtype == np.float16 else np.float32


def encode_delta(header: DeltaHeader, indices: npt.NDArray[Any], values: npt.NDArray[Any],
                 codec: ArrayCodec = RAW) -> pb.Delta:
    """One ``Delta`` message (no splitting: see :func:`encode_delta_parts`)."""
    idx = np.asarray(indices)
    val = np.asarray(values)
    if idx.shape != val.shape:
        raise ValueError(f"{idx.shape[0]} indices but {val.shape[0]} values")
    message = pb.Delta(
        protocol_version=PROTOCOL_VERSION, run_id=header.run_id, worker_id=header.worker_id,
        round=header.round, seq=header.seq, dim=header.dim,
        part=header.part, parts=header.parts, final=header.final, examples=header.examples)
    fill_array(message.indices, idx.astype(np.int32, copy=False), codec)
    fill_array(message.values, val.astype(_wire_dtype(val), copy=False), codec)
    return message


def encode_delta_parts(header: DeltaHeader, indices: npt.NDArray[Any],
                       values: npt.NDArray[Any], chunk_bytes: int = MAX_CHUNK_BYTES,
                       codec: ArrayCodec = RAW, dense: bool | None = None) -> list[pb.Delta]:
    """A delta cut into messages of at most ``chunk_bytes`` of payload each (>= 1 message,
    even when empty: an empty delta still marks the round as done). Dense parts are sent
    instead of (index, value) pairs when ``dense`` is True, or, by default, when that is
    smaller (:func:`dense_pays`)."""
    if chunk_bytes < MIN_DELTA_CHUNK_BYTES:
        raise ValueError(f"delta parts of {chunk_bytes} bytes: at least "
                         f"{MIN_DELTA_CHUNK_BYTES} (receivers refuse finer cuts)")
    n = int(np.asarray(indices).shape[0])
    if dense if dense is not None else dense_pays(n, header.dim):
        return _encode_dense_parts(header, indices, values, chunk_bytes, codec)
    per = delta_entries_per_part(chunk_bytes)
    parts = max(1, -(-n // per))
    out = []
    for p in range(parts):
        lo, hi = p * per, min(n, (p + 1) * per)
        head = DeltaHeader(header.run_id, header.worker_id, header.round, header.seq,
                           header.dim, p, parts, header.final, header.examples)
        out.append(encode_delta(head, indices[lo:hi], values[lo:hi], codec))
    return out


def _encode_dense_parts(header: DeltaHeader, indices: npt.NDArray[Any],
                        values: npt.NDArray[Any], chunk_bytes: int,
                        codec: ArrayCodec) -> list[pb.Delta]:
    wire = _wire_dtype(np.asarray(values))
    full = np.zeros(header.dim, dtype=wire)
    idx, val = np.asarray(indices), np.asarray(values, dtype=wire)
    if wire is np.float32 and idx.dtype == np.int32:
        if _scatter(full, idx, val):
            raise ValueError(f"delta index outside [0, {header.dim})")
    else:
        full[idx] = val  # float16 values: numpy's scatter
    per = max(1, min(chunk_bytes, MAX_CHUNK_BYTES) // full.itemsize)
    parts = max(1, -(-header.dim // per))
    empty = encode_array(np.zeros(0, dtype=np.int32), codec)
    out = []
    for p in range(parts):
        lo, hi = p * per, min(header.dim, (p + 1) * per)
        message = pb.Delta(
            protocol_version=PROTOCOL_VERSION, run_id=header.run_id,
            worker_id=header.worker_id, round=header.round, seq=header.seq, dim=header.dim,
            indices=empty, part=p, parts=parts, final=header.final,
            examples=header.examples, dense=True, dense_offset=lo)
        # Filled in place: a finished Array given to the constructor is copied once more
        # (its whole payload), 0.1 ms a dense part.
        fill_array(message.values, full[lo:hi], codec)
        out.append(message)
    return out


# Tree bookkeeping entries one delta may carry: one per worker of a run.
MAX_ORIGINS = 1 << 16


def _origin_counts(entries: Any, field: str) -> tuple[tuple[int, int], ...]:
    """A delta's (origin, count) list, validated: at most MAX_ORIGINS, one per origin."""
    if not entries:  # every delta but a tree's in async mode
        return ()
    if len(entries) > MAX_ORIGINS:
        raise InvalidMessage(f"delta {field} lists {len(entries)} workers, more than "
                             f"{MAX_ORIGINS}")
    out = {int(e.origin): int(e.count) for e in entries}
    if len(out) != len(entries):
        raise InvalidMessage(f"delta {field} lists a worker twice")
    return tuple(sorted(out.items()))


def _decode_values(message: pb.Array, max_length: int) -> ValueArray:
    """A delta's values as float32, whichever of float32 or float16 the message declares
    (float16 is widened exactly; an infinite float16 stays infinite and is rejected later)."""
    if message.dtype == pb.DTYPE_FLOAT16:
        half = decode_array(message, np.float16, "delta values", max_length=max_length)
        return half.astype(np.float32)
    return decode_array(message, np.float32, "delta values", max_length=max_length)


def decode_delta(message: pb.Delta, dim: int | None = None,
                 max_value: float = math.inf) -> DecodedDelta:
    """Validate a ``Delta`` and return zero-copy views of its arrays.

    ``dim`` is the receiver's weight-vector length; the message must declare the same one.
    Raises StaleOrUnknown on a protocol version mismatch and InvalidMessage on any content
    fault (dim, dtype, lengths, part numbering, index >= dim or < 0, non-finite value, a
    |value| above ``max_value`` (see :func:`value_bound`), a round or example count no run
    reaches). How far ahead of the receiver a round may be is the receiver's to judge (it
    knows its own round).
    """
    check_version(message.protocol_version, "delta")
    declared = int(message.dim)
    if dim is not None and declared != dim:
        raise InvalidMessage(f"delta declares dim {declared}, which is not this model's size")
    if declared < 1 or declared > INT32_MAX:
        raise InvalidMessage(f"delta declares dim {declared}")
    if message.parts < 1 or message.part >= message.parts:
        raise InvalidMessage(f"delta part {message.part} of {message.parts}")
    if message.parts > max_delta_parts(declared):
        # Each part counts as a delta and takes a place in the receiver's dedup window.
        raise InvalidMessage(f"delta cut into {message.parts} parts, more than its model "
                             "size allows")
    if message.seq < 1:
        raise InvalidMessage("delta seq must be at least 1")
    if message.round > MAX_ROUND:
        raise InvalidMessage(f"delta round {message.round} is beyond any run's")
    if message.examples > MAX_EXAMPLES:
        raise InvalidMessage(f"delta example count {message.examples} is beyond any run's")
    if message.dense:
        if message.HasField("indices"):  # must be empty
            decode_array(message.indices, np.int32, "delta indices", max_length=0)
        offset = int(message.dense_offset)
        if offset >= declared:
            raise InvalidMessage(f"dense delta offset {offset} outside [0, {declared})")
        val = _decode_values(message.values, max_length=declared - offset)
        idx = np.arange(offset, offset + val.shape[0], dtype=np.int32)
    else:
        idx = decode_array(message.indices, np.int32, "delta indices", max_length=declared)
        val = _decode_values(message.values, max_length=declared)
    if idx.shape[0] != val.shape[0]:
        raise InvalidMessage(f"delta has {idx.shape[0]} indices but {val.shape[0]} values")
    if val.shape[0] == 0 and message.parts > 1:
        # A delta is only split when its entries overflow one part, and every part then
        # carries some; empty ones would only fill the receiver's dedup window.
        raise InvalidMessage(f"empty part {message.part} of a delta in {message.parts} parts")
    code, pos = _scan_delta(idx, val, declared, max_value)
    # RefusedValues: faults of the content itself, which no honest sender's delta has (its
    # sender is quarantined); the faults above may be a version's or a label's.
    if code == 1:
        raise RefusedValues(f"delta index {int(idx[pos])} at position {pos} outside "
                            f"[0, {declared})")
    if code == 2:
        raise RefusedValues(f"delta value {float(val[pos])} at position {pos} is not finite")
    if code == 3:
        raise RefusedValues(_beyond(float(val[pos]), pos, max_value))
    header = DeltaHeader(message.run_id, int(message.worker_id), int(message.round),
                         int(message.seq), declared, int(message.part), int(message.parts),
                         bool(message.final), int(message.examples),
                         _origin_counts(message.covers, "covers"), bool(message.resent),
                         _origin_counts(message.applied, "applied"),
                         bool(message.resync), int(message.resync_cut))
    return DecodedDelta(header, idx, val, dense=bool(message.dense))


def _beyond(value: float, pos: int, max_value: float) -> str:
    return (f"delta value {value:g} at position {pos} is beyond what this run's SGD steps "
            f"can make (|value| <= {max_value:.3g})")


def check_values(delta: DecodedDelta, max_value: float) -> None:
    """RefusedValues if a value of an already decoded ``delta`` is above ``max_value`` in
    magnitude (for a receiver that holds a delta decoded elsewhere)."""
    if max_value == math.inf:
        return
    code, pos = _scan_delta(delta.indices, delta.values, delta.header.dim, max_value)
    if code == 3:
        raise RefusedValues(_beyond(float(delta.values[pos]), pos, max_value))
