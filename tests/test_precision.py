"""The mixed-precision policy: each policy is applied, outputs stay float32, float16 warns on CPU."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import default_policy

from tfpipe import models, precision
from tfpipe.config import PRECISIONS, PrecisionConfig

HAS_GPU = bool(tf.config.list_physical_devices("GPU"))


@pytest.fixture(autouse=True)
def _restore_policy():
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy", PRECISIONS)
def test_each_policy_sets_the_global_policy(policy):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert precision.apply_policy(PrecisionConfig(policy=policy)) == policy
    assert keras.mixed_precision.global_policy().name == policy
    dense = keras.layers.Dense(2)
    expected_compute = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}[
        policy
    ]
    assert dense.compute_dtype == expected_compute and dense.variable_dtype == "float32"


@pytest.mark.skipif(HAS_GPU, reason="the warning is for hosts without a GPU")
def test_mixed_float16_warns_without_gpu_but_applies():
    with pytest.warns(RuntimeWarning, match="mixed_float16"):
        precision.apply_policy(PrecisionConfig(policy="mixed_float16"))
    assert keras.mixed_precision.global_policy().name == "mixed_float16"


def test_bfloat16_warns_only_where_it_is_emulated():
    """No warning where the CPU has bf16 kernels (what `auto` picks there); elsewhere bf16 runs, with a warning.
    The host's kind is read by conftest, not by the code under test."""
    if HAS_GPU or default_policy() == "mixed_bfloat16":
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            precision.apply_policy(PrecisionConfig(policy="mixed_bfloat16"))
    else:
        with pytest.warns(RuntimeWarning, match="bfloat16 compute is emulated"):
            precision.apply_policy(PrecisionConfig(policy="mixed_bfloat16"))
    assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="float32"):
        precision.apply_policy(PrecisionConfig(policy="float8"))


def test_policy_scope_restores_the_previous_policy():
    with precision.policy_scope(PrecisionConfig(policy="mixed_bfloat16")) as name:
        assert name == "mixed_bfloat16" == precision.current_policy()
    assert precision.current_policy() == "float32"


def test_model_under_mixed_bfloat16_computes_in_bf16_and_outputs_float32(make_config):
    cfg = make_config("model.filters=[4]", "model.dense_units=8", "precision=mixed_bfloat16")
    precision.apply_policy(cfg.precision)
    model = models.build_model(cfg, num_classes=3)
    conv = model.get_layer("conv0")
    assert conv.compute_dtype == "bfloat16" and conv.kernel.dtype == "float32"
    assert model.get_layer("probabilities").compute_dtype == "float32"
    images = np.random.default_rng(0).integers(0, 256, size=(2, 32, 32, 3), dtype=np.uint8)
    out = model(images, training=False)
    assert out.dtype == tf.float32
    np.testing.assert_allclose(out.numpy().sum(axis=1), 1.0, atol=1e-5)


def test_auto_on_every_kind_of_host(tmp_path):
    """precision=auto on hosts this machine is not: device descriptions and CPU flags as TensorFlow and
    /proc/cpuinfo give them, and the policy each host must get (written out, not computed by the code)."""
    from tfpipe.hardware import resolve_policy

    amx, avx2 = tmp_path / "amx", tmp_path / "avx2"
    amx.write_text("model name\t: Intel Xeon\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    avx2.write_text("model name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n")
    ampere, turing = {"compute_capability": (8, 0), "device_name": "A100"}, {"compute_capability": (7, 5)}
    assert resolve_policy("auto", details=[ampere], cpuinfo_path=str(avx2)) == "mixed_bfloat16"
    assert resolve_policy("auto", details=[ampere, ampere], cpuinfo_path=str(avx2)) == "mixed_bfloat16"
    assert resolve_policy("auto", details=[turing], cpuinfo_path=str(amx)) == "float32"  # the GPU decides
    assert resolve_policy("auto", details=[ampere, turing], cpuinfo_path=str(amx)) == "float32"  # every GPU
    assert resolve_policy("auto", details=[{}], cpuinfo_path=str(amx)) == "float32"  # capability unknown
    assert (
        resolve_policy("auto", details=[], cpuinfo_path=str(amx), environ={}) == "mixed_bfloat16"
    )  # the CPU
    assert resolve_policy("auto", details=[], cpuinfo_path=str(avx2), environ={}) == "float32"
    capped = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}  # the AMX host with oneDNN held to emulated bf16
    assert resolve_policy("auto", details=[], cpuinfo_path=str(amx), environ=capped) == "float32"
    assert resolve_policy("float32", details=[ampere]) == "float32"  # an explicit policy stays
