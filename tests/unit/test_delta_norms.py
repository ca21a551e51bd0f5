"""The relative bound on a sender's delta (protocol/deltanorms.py) and its settings."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild import config
from hogwild.cluster.wire.codec import DecodedDelta, DeltaHeader
from hogwild.cluster.wire.deltanorms import HISTORY, MIN_HISTORY, NormWatch
from hogwild.errors import ConfigError, RefusedValues


def delta(sender: int, round_: int, values: list[float], final: bool = False) -> DecodedDelta:
    val = np.asarray(values, dtype=np.float32)
    idx = np.arange(val.shape[0], dtype=np.int32)
    return DecodedDelta(DeltaHeader("run", sender, round_, round_, 16, final=final), idx, val)


def warm(watch: NormWatch, senders: int = 4, rounds: int = HISTORY) -> int:
    """Honest deltas of norm about 1 a round from ``senders`` senders; the next round."""
    rng = np.random.default_rng(0)
    for round_ in range(1, rounds + 1):
        for s in range(senders):
            watch.check(delta(s, round_, list(rng.normal(0, 0.5, 4) * (1 + 0.2 * s))))
    return rounds + 1


def test_a_delta_far_beyond_the_median_is_refused_after_the_warm_up() -> None:
    watch = NormWatch(bound=20)
    # Until 3 senders were heard from, 4 times each, nothing is judged.
    warm(watch, senders=2)
    warm(watch, senders=3, rounds=MIN_HISTORY - 1)
    assert watch.reference() == 0
    assert watch.check(delta(3, 1, [1e5] * 4)).values[0] == pytest.approx(1e5)
    watch = NormWatch(bound=20)
    round_ = warm(watch)
    honest = watch.check(delta(0, round_, [2.0, -1.0, 0.5, 0.0]))  # a few times the median
    assert honest.values[0] == 2.0
    with pytest.raises(RefusedValues, match="times the median"):
        watch.check(delta(3, round_, [1e5, 1e5, 1e5, 1e5]))  # under any absolute bound
    with pytest.raises(RefusedValues):
        watch.check(delta(3, round_ + 1, [30.0, -30.0, 30.0, 30.0]))  # x ~100 an honest one
    assert watch.stats.refused == 2
    assert 1 < watch.stats.peak_ratio < 20


def test_one_sender_cannot_move_the_reference_however_often_it_sends() -> None:
    watch = NormWatch(bound=20)
    round_ = warm(watch)
    before = watch.reference()
    for r in range(round_, round_ + 50):  # sender 3 at 15x, just under the bound, often
        watch.check(delta(3, r, [7.5, 7.5, 7.5, 7.5]))
    assert watch.reference() == pytest.approx(before, rel=0.5)
    with pytest.raises(RefusedValues):
        watch.check(delta(3, round_ + 50, [30.0, 30.0, 30.0, 30.0]))


def test_a_delta_of_several_rounds_is_judged_per_round_up_to_a_cap() -> None:
    watch = NormWatch(bound=20)
    round_ = warm(watch)
    # Sender 0 was last at round_ - 1; a sum of 6 rounds at 10x the median each passes.
    watch.check(delta(0, round_ + 5, [5.0, 5.0, 5.0, 5.0]))
    # Labelling a delta far ahead buys no more than MAX_SPAN rounds of headroom.
    with pytest.raises(RefusedValues):
        watch.check(delta(1, round_ + 10_000, [1e4, 1e4, 1e4, 1e4]))


def test_clipping_scales_a_large_delta_down_and_a_final_one_is_never_refused() -> None:
    watch = NormWatch(bound=20, clip=3)
    round_ = warm(watch)
    big = delta(2, round_, [10.0, -10.0, 10.0, 10.0])  # ~20x the median: clipped, not refused
    out = watch.check(big)
    norm = float(np.linalg.norm(out.values))
    assert norm < float(np.linalg.norm(big.values)) / 4
    assert np.all(np.sign(out.values) == np.sign(big.values))  # the direction is kept
    assert watch.stats.clipped == 1 and watch.stats.refused == 0
    final = watch.check(delta(1, round_, [1e3] * 4, final=True))
    assert float(np.linalg.norm(final.values)) == pytest.approx(norm, rel=0.3)
    small = delta(0, round_, [0.1, 0.1, 0.1, 0.1])
    assert watch.check(small) is small


def test_off_checks_nothing() -> None:
    watch = NormWatch(bound=0)
    for r in range(1, 40):
        watch.check(delta(0, r, [1.0]))
    d = delta(1, 40, [1e6])
    assert watch.check(d) is d


def test_norm_clip_needs_the_star_topology() -> None:
    with pytest.raises(ConfigError) as err:
        config.load(None, {}, {"norm_clip": 3.0})
    assert err.value.key == "norm_clip" and "topology star" in str(err.value)
    assert config.load(None, {}, {"norm_clip": 3.0, "topology": "star"}).norm_clip == 3.0
    with pytest.raises(ConfigError) as err:
        config.load(None, {}, {"delta_norm_bound": 1.5})
    assert err.value.key == "delta_norm_bound"
