"""Output CSR arrays that a loader copies each block's rows into, at their final places."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from hogwild.base.regions import given_back_after, rows_array
from hogwild.data._threads import Runner, default_threads, run_parallel
from hogwild.data.csr import CSRData
from hogwild.data.formats import _rowcopy as rc
from hogwild.data.transform.split import shuffle_order
from hogwild.errors import DataError


@dataclass
class RowTarget:
    """Output arrays sized from the row lengths (or their upper bounds) of the whole input;
    input row g goes to output row pos_of[g]."""

    pos_of: np.ndarray
    start: np.ndarray      # int64 n_rows + 1: slot starts, then the row pointer
    length: np.ndarray     # int64 n_rows: real row lengths
    indices: np.ndarray
    values: np.ndarray
    labels: np.ndarray
    threads: int
    filled: list[int] = field(default_factory=lambda: [0])
    run: Runner = run_parallel   # how a block's pieces run side by side

    @classmethod
    def create(cls, caps: np.ndarray, seed: int | None, threads: int,
               run: Runner = run_parallel) -> RowTarget:
        n = int(caps.shape[0])
        start = np.zeros(n + 1, dtype=np.int64)
        if seed is None:
            pos_of = np.arange(n, dtype=np.int64)
            np.cumsum(caps, out=start[1:])
        else:
            order = shuffle_order(n, seed)
            pos_of = np.empty(n, dtype=np.int64)
            pos_of[order] = np.arange(n, dtype=np.int64)
            np.cumsum(caps[order], out=start[1:])
            del order
        total = int(start[-1])
        return cls(pos_of, start, np.zeros(n, dtype=np.int64),
                   rows_array(total, np.int32),
                   rows_array(total, np.float32),
                   np.empty(n, dtype=np.float32), threads, run=run)

    def put(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
            labels: np.ndarray, first_row: int, source: str) -> None:
        """Copy a block's rows (``first_row`` = their row number in the whole input)."""
        bad = self.run(self.place, [(indptr, indices, values, labels, r0, r1, first_row)
                                        for r0, r1 in self._pieces(indptr)])
        if sum(bad):
            raise DataError(f"{source}: the file changed while it was read")

    def place(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
              labels: np.ndarray, r0: int, r1: int, first_row: int) -> int:
        """Copy rows ``r0:r1`` on the calling thread (rows of one block go to disjoint
        slots, so threads may place them side by side); the number that did not fit."""
        return int(rc.scatter_rows(indptr, indices, values, labels, r0, r1, first_row,
                                   self.pos_of, self.start, self.indices, self.values,
                                   self.labels, self.length))

    def put_pairs(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
                  labels: np.ndarray, first_row: int, width: int, source: str) -> bool:
        """:meth:`put` for a table's sparse pair, leaving out zero values and indices at or
        above ``width`` as it copies; False (nothing more to do: the caller takes a path that
        sorts) if a row's indices are not strictly increasing."""
        got = self.run(rc.scatter_pairs, [
            (indptr, indices, values, labels, r0, r1, first_row, self.pos_of, self.start,
             self.indices, self.values, self.labels, self.length, width)
            for r0, r1 in self._pieces(indptr)])
        if sum(int(d) for _, d in got):
            return False
        if sum(int(b) for b, _ in got):
            raise DataError(f"{source}: the file changed while it was read")
        return True

    def _pieces(self, indptr: np.ndarray) -> list[tuple[int, int]]:
        """A block's rows cut into one range per thread (none under 2,048 rows)."""
        n = int(indptr.shape[0] - 1)
        pieces = max(1, min(self.threads, n // 2048))
        return [(n * i // pieces, n * (i + 1) // pieces) for i in range(pieces)]

    def finish(self, n_features: int, label_note: str | None = None) -> CSRData:
        """The CSR result (gaps left by loose bounds closed, arrays trimmed in place)."""
        indptr, indices, values = self.start, self.indices, self.values
        nnz = int(indptr[-1])
        if int(self.length.sum()) != nnz:
            nnz = int(rc.close_gaps(indptr, self.length, indices, values))
            indices, values = given_back_after(indices, nnz), given_back_after(values, nnz)
        return CSRData(indptr, indices, values, self.labels, n_features, label_note)


def permuted(data: CSRData, seed: int, threads: int | None = None) -> CSRData:
    """The rows in ``shuffle_order(n_rows, seed)``, physically copied so that a kernel streams
    them in order: what ``data.take`` of that order gives, bit for bit, copied the other way
    round. Each row is read in order and written to its place (as the loaders place rows),
    where a gather reads the rows in random order and stalls on each: a worker's 1M rows
    (73M non-zeros) took 1.0 s to gather on two threads (bench/NOTES.md); a synthetic 1M
    rows 0.25 s scattered against 0.38 s gathered."""
    target = RowTarget.create(np.diff(data.indptr), seed,
                              threads if threads is not None else default_threads())
    target.put(data.indptr, data.indices, data.values, data.labels, 0, "rows in memory")
    out = target.finish(data.n_features, data.label_note)
    if data.weights is None:
        return out
    weights = np.empty_like(data.weights)
    weights[target.pos_of] = data.weights
    return dataclasses.replace(out, weights=weights)
