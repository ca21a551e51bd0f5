"""Which features a thread buffers in its own view of ``w`` (the kernels' ``hot`` argument)."""

from __future__ import annotations

import numpy as np

from hogwild.model import kernels
from hogwild.model.arrays import CSRArrays, feature_counts

# hot_features for data renumbered by frequency (hogwild.data.transform.reorder): every feature of a
# data set up to this size goes through the per-thread view; 2 x 8 bytes per buffered feature
# and thread, so at most 4 MiB per thread on larger feature spaces.
RENUMBERED_HOT_FEATURES = 1 << 18
# With buffered features a kernel call costs O(hot) on top of its rows (view filled at the
# start, everything published at the end): calls get at least this many rows per feature.
ROWS_PER_HOT_FEATURE = 4
# Buffering is used only if no buffered feature would get more than this many expected own
# updates between two publications (a bound that data ranked by frequency meets: at most
# max(BIAS_FLUSH_ROWS, HOT_TIER_GROWTH x non-zeros per row)); otherwise the trainer falls
# back to the unbuffered kernel instead of letting threads drift apart on frequent features.
MAX_STALENESS_FACTOR = 2.0
def choose_hot_features(a: CSRArrays, n_features: int, requested: int, n_threads: int,
                        call_rows: int) -> int:
    """The ``hot`` argument for kernels.sgd_range: ``min(requested, n_features)`` when more
    than one thread shares ``w`` and the data's ids are ranked by frequency, else 0.

    Ranked means that no buffered feature would get more than MAX_STALENESS_FACTOR x the
    bound of ranked data in expected own updates between two publications (its share of rows
    x its publication interval, capped by ``call_rows``, the rows per kernel call). The
    per-feature counts are computed once per index array (cached).
    """
    hot = min(max(requested, 0), n_features)
    if n_threads < 2 or hot == 0 or a.n_rows == 0:
        return 0
    share = feature_counts(a.indices, n_features)[:hot] / a.n_rows
    interval = np.full(hot, float(kernels.BIAS_FLUSH_ROWS))
    span = kernels.BIAS_FLUSH_ROWS
    while span < hot:
        interval[span:] *= kernels.HOT_TIER_GROWTH
        span *= kernels.HOT_TIER_GROWTH
    staleness = float(np.max(share * np.minimum(interval, max(call_rows, 1))))
    nnz_per_row = a.indices.shape[0] / a.n_rows
    bound = max(kernels.BIAS_FLUSH_ROWS, kernels.HOT_TIER_GROWTH * nnz_per_row)
    return hot if staleness <= MAX_STALENESS_FACTOR * bound else 0

