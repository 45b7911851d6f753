"""TensorFlow imported without its C++ start-up lines, for the commands' output.

TensorFlow 2.21 writes four lines to stderr while it imports (absl's "All log messages before
absl::InitializeLog() is called are written to STDERR" and an INFO note that oneDNN is on, each twice), and
TF_CPP_MIN_LOG_LEVEL no longer silences them (tensorflow/tensorflow#100442): they are logged before TensorFlow
reads it. What it does: `import_quietly()` imports TensorFlow with file descriptor 2 pointed at a temporary file,
then writes back every line but absl's pre-initialisation warning and INFO/VLOG lines, so warnings, errors and
Python's own messages still reach stderr in their order. What it does not: filter anything logged after the
import (TF_CPP_MIN_LOG_LEVEL does that), or anything at all when TF_CPP_MIN_LOG_LEVEL is 0 (what a person sets
to see everything). No kept library filters a C library's writes to a descriptor; os.dup2 is the way.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

# absl's line when a C++ library logs before InitializeLog, and absl/glog INFO lines ("I0000 00:00:... file:line]")
START_UP = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|I\d{4} [\d:.]+ +\d+ \S+:\d+\] .*)$"
)


def wanted(line: str) -> bool:
    """Whether a line written while TensorFlow imports is worth a person's attention."""
    return not START_UP.match(line.rstrip("\r\n"))


def import_quietly() -> None:
    """Import TensorFlow (once per process) with its start-up lines left out of stderr."""
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip() in ("", "0"):
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as caught:
        os.dup2(caught.fileno(), 2)
        try:
            import tensorflow  # noqa: F401  (the import is the point)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines = caught.read().decode("utf-8", "replace").splitlines(True)
            kept = [line for line in lines if wanted(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
