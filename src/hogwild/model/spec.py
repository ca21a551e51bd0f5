"""What a model is (linear or sparse-input MLP) and where its parameters sit in the flat vector.

Every model kind keeps ALL its parameters in one float64 vector ``w`` (threads share it, the
delta exchange diffs it, the coordinator sums deltas into it), so the parts of the system
that move weights around only need three numbers from here: ``dim`` (the vector's length),
``shared_from`` (parameters at and after this index are touched by every example: a worker
averages its changes to them over the contributing workers instead of summing, see
worker/node.py) and the initial vector (every node starts from the same one).

* ``linear``: ``w = [weights (n_features), bias]``; shared: the bias.
* ``mlp``: ``w = [rows (n_features x (H1 + 1), row-major: feature f's embedding W1[f] then
  its wide weight u[f]), b1, W2, b2, ..., Wo (HL), bo]`` (layout in mlp_kernels.py); shared:
  everything after the rows. W1 starts small and random, hidden layers He-style
  (N(0, 2 / fan_in)), the wide weights, the output layer Wo and the biases at zero, all from
  ``seed``, so every process that builds the same spec with the same seed starts from the
  same vector, and that vector is the linear model's start: the deep part adds nothing until
  Wo moves.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

MODEL_KINDS: tuple[str, ...] = ("linear", "mlp")
# Standard deviation of the first layer's initial weights. Rows of tf-idf data have unit L2
# norm, so z1 then starts with a standard deviation of about this much per unit.
W1_INIT_SCALE = 0.1
# The flat vector is indexed with int32 on the wire (deltas) and by the codec.
MAX_DIM = 2**31 - 1


def check_hidden(hidden: object) -> tuple[int, ...]:
    """``hidden`` as a tuple of positive ints; ValueError saying what is wrong otherwise."""
    if isinstance(hidden, (str, bytes)) or not isinstance(hidden, (list, tuple)):
        # ValueError like every other bad setting: callers report it with the key's name.
        raise ValueError(  # noqa: TRY004
            f"must be a list of layer sizes such as [64], got {hidden!r}")
    if not hidden:
        raise ValueError("must list at least one hidden layer size, got []")
    for size in hidden:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"layer sizes must be positive integers, got {size!r} in "
                             f"{list(hidden)!r}")
    return tuple(int(size) for size in hidden)


@dataclass(frozen=True)
class ModelSpec:
    """The kind and shape of a model; validated on construction (ValueError)."""

    kind: str
    n_features: int
    hidden: tuple[int, ...] = ()
    binary_features: bool = False

    def __post_init__(self) -> None:
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"model must be one of {', '.join(MODEL_KINDS)}, got {self.kind!r}")
        if isinstance(self.n_features, bool) or not isinstance(self.n_features,
                                                                 (int, np.integer)) \
                or self.n_features < 1:
            raise ValueError(f"n_features must be a positive integer, got {self.n_features!r}")
        object.__setattr__(self, "n_features", int(self.n_features))
        if self.kind == "mlp":
            object.__setattr__(self, "hidden", check_hidden(self.hidden))
            if self.dim > MAX_DIM:
                raise ValueError(f"an MLP with hidden {list(self.hidden)} on {self.n_features} "
                                 f"features has {self.dim} parameters, more than {MAX_DIM}")
        else:
            object.__setattr__(self, "hidden", ())

    @classmethod
    def linear(cls, n_features: int) -> ModelSpec:
        return cls("linear", n_features)

    @property
    def is_mlp(self) -> bool:
        return self.kind == "mlp"

    @property
    def dense_size(self) -> int:
        """Parameters after W1 (MLP) or after the feature weights (linear: the bias)."""
        if not self.is_mlp:
            return 1
        h = self.hidden
        size = h[0]
        for a, b in itertools.pairwise(h):
            size += a * b + b
        return size + h[-1] + 1

    @property
    def shared_from(self) -> int:
        """First index of the parameters every example updates (averaged across workers)."""
        return self.n_features * self.row_width if self.is_mlp else self.n_features

    @property
    def row_width(self) -> int:
        """Parameters per input feature: H1 embedding weights + the wide weight (MLP), or the
        one weight (linear)."""
        return self.hidden[0] + 1 if self.is_mlp else 1

    @property
    def dim(self) -> int:
        """Length of the flat parameter vector."""
        return self.shared_from + self.dense_size

    def check(self, w: F64, writeable: bool = True) -> F64:
        """``w`` itself if it is a usable parameter vector (1-D float64 of ``dim`` entries,
        C-contiguous, writeable when asked); ValueError otherwise. Never copies."""
        if not isinstance(w, np.ndarray) or w.dtype != np.float64 or w.shape != (self.dim,):
            got = w.shape if isinstance(w, np.ndarray) else type(w).__name__
            raise ValueError(f"the {self.kind} model's parameters must be a float64 vector of "
                             f"{self.dim} entries, got {got}")
        if not w.flags.c_contiguous or (writeable and not w.flags.writeable):
            raise ValueError("the parameters must be C-contiguous and writeable")
        return w

    def hidden_array(self) -> npt.NDArray[np.int64]:
        """The hidden sizes as the int64 array the kernels take."""
        return np.asarray(self.hidden, dtype=np.int64)

    def initial_weights(self, seed: int) -> F64:
        """The starting vector: zeros (linear), or the seeded random MLP initialisation."""
        w = np.zeros(self.dim, dtype=np.float64)
        if not self.is_mlp:
            return w
        rng = np.random.default_rng([seed, 0x4D4C50])
        d, h = self.n_features, self.hidden
        rows = w[: self.shared_from].reshape(d, self.row_width)
        rows[:, : h[0]] = rng.standard_normal((d, h[0])) * W1_INIT_SCALE
        pos = self.shared_from + h[0]
        # Hidden-to-hidden layers only: the output layer Wo starts at zero (see above).
        for fan_in, fan_out in itertools.pairwise(h):
            n = fan_in * fan_out
            w[pos:pos + n] = rng.standard_normal(n) * np.sqrt(2.0 / fan_in)
            pos += n + fan_out  # the layer's biases stay 0
        return w

    def arrays(self, w: F64) -> dict[str, F64]:
        """Named copies of the parameters: the MLP's W1, b1, W2, b2, ... (the output layer
        last, as W{L+1} of shape (HL, 1) and b{L+1} of shape (1,)) and ``wide`` (d,), the
        wide part's weights; the linear model's ``w``."""
        w = np.asarray(w, dtype=np.float64)
        if w.shape != (self.dim,):
            raise ValueError(f"expected {self.dim} parameters, got shape {w.shape}")
        if not self.is_mlp:
            return {"w": w.copy()}
        d, h1 = self.n_features, self.hidden[0]
        rows = w[: self.shared_from].reshape(d, h1 + 1)
        out: dict[str, F64] = {"W1": rows[:, :h1].copy()}
        pos = self.shared_from
        sizes = (h1, *self.hidden[1:], 1)
        out["b1"] = w[pos:pos + h1].copy()
        pos += h1
        for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes), start=2):
            out[f"W{layer}"] = w[pos:pos + fan_in * fan_out].reshape(fan_in, fan_out).copy()
            pos += fan_in * fan_out
            out[f"b{layer}"] = w[pos:pos + fan_out].copy()
            pos += fan_out
        out["wide"] = rows[:, h1].copy()
        return out

    def flatten(self, arrays: Mapping[str, npt.ArrayLike]) -> F64:
        """The inverse of :meth:`arrays`; ValueError naming a missing or misshapen array. An
        MLP without ``wide`` (saved before the wide part existed) gets zero wide weights: the
        same network."""
        if not self.is_mlp:
            w = np.asarray(arrays["w"], dtype=np.float64)
            if w.shape != (self.dim,):
                raise ValueError(f"array w: expected shape ({self.dim},), got {w.shape}")
            return w.copy()
        def get(name: str, shape: tuple[int, ...]) -> F64:
            if name not in arrays:
                raise ValueError(f"array {name} is missing")
            part = np.asarray(arrays[name], dtype=np.float64)
            if part.shape != shape:
                raise ValueError(f"array {name}: expected shape {shape}, got {part.shape}")
            return part

        d, h1 = self.n_features, self.hidden[0]
        rows = np.empty((d, h1 + 1), dtype=np.float64)
        rows[:, :h1] = get("W1", (d, h1))
        # A model saved before the wide part existed is the same network with it at zero.
        rows[:, h1] = get("wide", (d,)) if "wide" in arrays else 0.0
        parts = [rows.ravel(), get("b1", (h1,)).ravel()]
        sizes = (h1, *self.hidden[1:], 1)
        for layer, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes), start=2):
            parts.append(get(f"W{layer}", (fan_in, fan_out)).ravel())
            parts.append(get(f"b{layer}", (fan_out,)).ravel())
        return np.concatenate(parts)

    def restore(self, w: F64, new_id_of_old: npt.ArrayLike) -> F64:
        """A vector trained on renumbered features, over the input files' feature ids (new
        array): feature f's weight (linear) or W1 row (MLP) is the one of id new_id_of_old[f]."""
        w = np.asarray(w, dtype=np.float64)
        order = np.asarray(new_id_of_old)
        if w.shape != (self.dim,) or order.shape != (self.n_features,):
            raise ValueError(f"expected {self.dim} parameters and {self.n_features} ids, got "
                             f"{w.shape} and {order.shape}")
        width = self.row_width
        d = self.n_features
        if d and (order.min() < 0 or order.max() >= d):
            raise IndexError(f"feature ids must lie in [0, {d})")
        # Gathered straight into the new array: a copy and a gathered temporary cost 16
        # bytes per feature (np.take's default mode buffers ``out`` too; the ids are checked).
        out = np.empty_like(w)
        np.take(w[: d * width].reshape(d, width), order, axis=0,
                out=out[: d * width].reshape(d, width), mode="clip")
        out[d * width:] = w[d * width:]
        return out
