"""HogwildClassifier / HogwildRegressor with device="cuda": the GPU trainer behind the estimator."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hogwild.estimators import HogwildClassifier

from .test_gpu import simulate


def test_a_device_that_is_no_device_names_the_parameter() -> None:
    X = sp.random(20, 5, density=0.5, format="csr", random_state=1, dtype=np.float64)
    y = np.arange(20) % 2
    with pytest.raises(ValueError, match=r"HogwildClassifier: device must be cpu, cuda or "
                                         r"cuda:N, got 'gpu'"):
        HogwildClassifier(device="gpu").fit(X, y)


def test_the_gpu_estimator_learns_as_the_cpu_one_on_the_simulator() -> None:
    # One warp in flight (serial): the GPU's steps are the CPU serial trainer's, in float32.
    got = simulate("""
        import json
        import numpy as np
        import scipy.sparse as sp
        from hogwild.estimators import HogwildClassifier
        rng = np.random.default_rng(0)
        X = sp.random(200, 30, density=0.2, format="csr", random_state=1, dtype=np.float64)
        y = np.where(X @ rng.normal(size=30) > 0, 1, 0)
        out = {}
        for device in ("cpu", "cuda"):
            clf = HogwildClassifier(device=device, trainer="serial", threads=1, epochs=3)
            clf.fit(X, y)
            out[device] = {"coef": clf.coef_.ravel().tolist(), "score": clf.score(X, y)}
        bad = HogwildClassifier(device="cuda", batch_size=4)
        try:
            bad.fit(X, y)
            out["refused"] = ""
        except ValueError as exc:
            out["refused"] = str(exc)
        print(json.dumps(out))
    """)
    cpu, gpu = np.array(got["cpu"]["coef"]), np.array(got["cuda"]["coef"])
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)
    assert got["cuda"]["score"] == pytest.approx(got["cpu"]["score"], abs=0.02)
    assert got["cuda"]["score"] > 0.8
    assert got["refused"].startswith("HogwildClassifier: bad parameter for device cuda: "
                                     "batch_size"), got["refused"]
