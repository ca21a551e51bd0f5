"""Rows written as Parquet for the tests: a label and a sparse pair of list columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hogwild.data.csr import CSRData

# A parquet: source of files written by write_parquet.
QUERY = "label=label&sparse=indices:values"


def write_parquet(data: CSRData, path: Path, rows_per_group: int, *,
                  statistics: bool = True, first: int = 0, stop: int | None = None) -> Path:
    """Rows ``first:stop`` of ``data`` as ``path``, in row groups of ``rows_per_group``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stop = data.n_rows if stop is None else stop
    writer = None
    try:
        for r0 in range(first, stop, rows_per_group):
            r1 = min(stop, r0 + rows_per_group)
            a, b = int(data.indptr[r0]), int(data.indptr[r1])
            offsets = pa.array((data.indptr[r0:r1 + 1] - a).astype(np.int32))
            table = pa.table({
                "label": pa.array(data.labels[r0:r1].astype(np.float64)),
                "indices": pa.ListArray.from_arrays(offsets, pa.array(
                    data.indices[a:b].astype(np.int64))),
                "values": pa.ListArray.from_arrays(offsets, pa.array(data.values[a:b])),
            })
            if writer is None:
                writer = pq.ParquetWriter(str(path), table.schema, write_statistics=statistics)
            writer.write_table(table, row_group_size=rows_per_group)
    finally:
        if writer is not None:
            writer.close()
    return path
