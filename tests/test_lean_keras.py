"""Keras imported in a tfpipe process leaves out the extras it would import for features tfpipe does not use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("matplotlib", "sklearn", "pandas", "IPython")


def _run(code: str, **env: str) -> str:
    full = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TF_CPP_MIN_LOG_LEVEL="3", **env)
    proc = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # starts processes
def test_keras_skips_its_extras_and_everyone_else_still_imports_them():
    """After `import tfpipe`, Keras (here through TensorFlow, as the stages import it) loads without matplotlib,
    scikit-learn, pandas or IPython; code outside Keras then imports each of them as usual."""
    code = f"""
import json, sys
import tfpipe, tensorflow, keras
loaded = [m for m in {EXTRAS!r} if m in sys.modules]
import matplotlib.pyplot, sklearn.metrics, pandas
print(json.dumps({{"after_keras": loaded, "later": sklearn.metrics.accuracy_score([1, 0], [1, 1])}}))
"""
    result = json.loads(_run(code))
    assert result == {"after_keras": [], "later": 0.5}


def test_the_extras_stay_when_asked_for():
    """TFPIPE_KERAS_EXTRAS=1: no finder is installed, so Keras imports what it finds (no TensorFlow needed here)."""
    code = "import sys, tfpipe; print(sum(type(f).__name__ == '_RefuseKerasExtras' for f in sys.meta_path))"
    assert _run(code) == "1"
    assert _run(code, TFPIPE_KERAS_EXTRAS="1") == "0"
