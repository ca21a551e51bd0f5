"""Loss classes: derivative against finite differences, stability, lookup by name."""

from __future__ import annotations

import numpy as np
import pytest

from hogwild.model.losses import (
    HINGE,
    LOGISTIC,
    LOSS_NAMES,
    SQUARED,
    Hinge,
    Logistic,
    Loss,
    Squared,
    get_loss,
)

ALL = [Hinge(), Logistic(), Squared()]


def _points(loss: Loss) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    margins = rng.uniform(-4.0, 4.0, size=200)
    if loss.is_classifier:
        y = rng.choice([-1.0, 1.0], size=200)
    else:
        y = rng.normal(size=200)
    if isinstance(loss, Hinge):
        # Stay clear of the kink y*m == 1, where the derivative is not defined.
        keep = np.abs(y * margins - 1.0) > 1e-3
        margins, y = margins[keep], y[keep]
    return margins, y


@pytest.mark.parametrize("loss", ALL, ids=lambda x: x.name)
def test_dloss_matches_central_finite_difference(loss: Loss) -> None:
    m, y = _points(loss)
    h = 1e-6
    numeric = (loss.value(m + h, y) - loss.value(m - h, y)) / (2 * h)
    np.testing.assert_allclose(loss.dloss(m, y), numeric, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss", ALL, ids=lambda x: x.name)
def test_values_are_non_negative_and_zero_where_expected(loss: Loss) -> None:
    m, y = _points(loss)
    assert np.all(loss.value(m, y) >= 0.0)
    if isinstance(loss, Squared):
        assert loss.value(2.5, 2.5) == 0.0
    if isinstance(loss, Hinge):
        assert loss.value(1.5, 1.0) == 0.0 and loss.value(-1.5, -1.0) == 0.0
        assert loss.value(0.0, 1.0) == 1.0


def test_hinge_subgradient_at_kink_is_zero() -> None:
    assert Hinge().dloss(1.0, 1.0) == 0.0
    assert Hinge().dloss(0.999, 1.0) == -1.0


def test_logistic_is_stable_for_large_margins() -> None:
    lg = Logistic()
    m = np.array([-1e4, -800.0, -50.0, 0.0, 50.0, 800.0, 1e4])
    y = np.ones_like(m)
    v = lg.value(m, y)
    d = lg.dloss(m, y)
    assert np.all(np.isfinite(v)) and np.all(np.isfinite(d))
    np.testing.assert_allclose(v[0], 1e4)  # ~ -y m when badly wrong
    assert v[-1] == 0.0 or v[-1] < 1e-300
    np.testing.assert_allclose(v[3], np.log(2.0))
    np.testing.assert_allclose(d[:2], -1.0)
    assert abs(d[-1]) < 1e-300
    np.testing.assert_allclose(d[3], -0.5)


def test_codes_and_classifier_flags() -> None:
    assert (Hinge.code, Logistic.code, Squared.code) == (HINGE, LOGISTIC, SQUARED) == (0, 1, 2)
    assert Hinge.is_classifier and Logistic.is_classifier and not Squared.is_classifier


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_get_loss_by_name(name: str) -> None:
    loss = get_loss(name)
    assert loss.name == name


def test_get_loss_unknown_name_raises_value_error() -> None:
    with pytest.raises(ValueError, match="huber"):
        get_loss("huber")
