"""svmlight text with the awkward parts of real files, for the tests of reading files by ranges."""

from __future__ import annotations

from hogwild.data.synthetic import make_rcv1_like


def svmlight_text(rows: int, seed: int = 1) -> bytes:
    """``rows`` RCV1-like rows (300 features) with a header comment, blank and comment lines
    between rows, and no final newline."""
    data = make_rcv1_like(rows, n_features=300, avg_nnz=12, seed=seed)
    lines = []
    for r in range(data.n_rows):
        a, b = int(data.indptr[r]), int(data.indptr[r + 1])
        feats = " ".join(f"{int(i) + 1}:{float(v):.6g}" for i, v in
                         zip(data.indices[a:b], data.values[a:b]))
        lines.append(f"{int(data.labels[r])} {feats}")
        if r % 97 == 5:
            lines.append("# a comment line")
        if r % 131 == 7:
            lines.append("   ")
    return ("# header comment\n" + "\n".join(lines)).encode()
