"""Shared fixtures: the real Hydra config, composed once and shrunk per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATASETS = ROOT.parent / "shared" / "datasets"

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture
def make_config():
    """Compose conf/ with Hydra overrides (the same grammar as `dvc exp run -S`) -> Config."""
    from tfpipe import config

    def _make(*overrides: str):
        return config.compose(list(overrides), config_dir=ROOT / "conf")

    return _make
