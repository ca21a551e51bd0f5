"""`import hogwild` in a fresh interpreter stays cheap: it loads neither numba, scikit-learn
nor grpc; scikit-learn comes with the first use of an estimator."""

from __future__ import annotations

import subprocess
import sys


def test_import_hogwild_stays_cheap() -> None:
    code = ("import sys, hogwild; "
            "assert not {'numba', 'sklearn', 'grpc'} & set(sys.modules), sys.modules.keys(); "
            "assert hogwild.HogwildClassifier.__name__ == 'HogwildClassifier'; "
            "assert 'sklearn' in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
