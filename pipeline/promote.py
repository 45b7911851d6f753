"""Promote a run's registered model: `python -m pipeline.promote RUN_ID --alias champion [--force]`.

Moves the registry alias to the run's version, registering the run's logged model first when it has no version
yet; refuses (exit 2, one line naming the metric and both values; nothing registered) a model worse than the
alias's current one unless --force. Exit codes: 0 promoted, 2 bad input or refused.
"""

import sys

from tfpipe.commands.promote import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
