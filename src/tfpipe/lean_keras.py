"""Keras without the optional extras it imports for features tfpipe never uses.

Keras 3 imports matplotlib.pyplot (its image gallery), scikit-learn (its scikit-learn wrappers), pandas
(`fit` on a DataFrame) and IPython (notebook detection) whenever they are installed, each inside its own
`try: import ... except ImportError`. tfpipe installs them for other reasons (evaluation's metrics and plots,
MLflow), and Keras importing them is about 3 of the 8 seconds every stage spends importing TensorFlow
(`python -X importtime -c "import tensorflow"`, 2-core AVX2 EPYC).

What it does: `install()` (called when the `tfpipe` package is imported) puts a finder first on
`sys.meta_path` that refuses those imports when a Keras module makes them, so Keras runs as it does where they
are not installed. The same packages imported by anyone else (tfpipe's evaluation, MLflow, a user's hook) load
as usual. What it does not know: whether a user's code wants Keras's gallery, its scikit-learn wrappers or
`fit` on a DataFrame (tfpipe's loop uses none); set TFPIPE_KERAS_EXTRAS=1 to get them back.
No kept library does this; a meta path finder is the import system's documented hook for it.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from types import FrameType

EXTRAS = frozenset({"matplotlib", "sklearn", "pandas", "IPython"})  # top-level package names
KEEP_ENV = "TFPIPE_KERAS_EXTRAS"


class _RefuseKerasExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in EXTRAS and _importer().startswith("keras."):
            raise ModuleNotFoundError(f"{fullname} not imported for Keras (tfpipe.lean_keras)", name=fullname)
        return None  # every other import: the next finder


def _importer() -> str:
    """The module whose code asked for the import: the first frame outside the import machinery."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


def install() -> None:
    """Refuse Keras's optional imports from now on in this process (once; not when TFPIPE_KERAS_EXTRAS=1)."""
    if os.environ.get(KEEP_ENV, "").strip().lower() in ("1", "true", "yes"):
        return
    if not any(isinstance(finder, _RefuseKerasExtras) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RefuseKerasExtras())
