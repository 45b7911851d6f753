"""The logged model serves its own input example (issue 52): `tracking.models` logs the model without MLflow's
serving check of the example (the SavedModel loaded a second time in the train process), so the claim that check
made is held here. A real SQLite MLflow store in tmp_path, tests/test_tracking.py's tiny SavedModels; no mocks."""

from __future__ import annotations

import json

import numpy as np
import pytest
import test_tracking
from test_tracking import IMAGE_CLASSES, _direct

clean_mlflow, project, cfg, saved_models = (
    test_tracking.clean_mlflow,
    test_tracking.project,
    test_tracking.cfg,
    test_tracking.saved_models,
)  # fixtures

CASES = {
    "image": (
        IMAGE_CLASSES,
        np.random.default_rng(0).integers(0, 256, size=(2, 8, 8, 3), dtype=np.uint8),
        "image",
    ),
    "text": (["neg", "pos"], ["good film", "awful film"], "text"),
}


@pytest.fixture
def serving_checks(monkeypatch):
    """How often MLflow's serving check of an input example ran (a pass-through counter around it)."""
    import mlflow.models.utils

    calls = []
    real = mlflow.models.utils._validate_serving_input

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(mlflow.models.utils, "_validate_serving_input", counted)
    return calls


@pytest.mark.filterwarnings(
    "ignore:.*validate_serving_input:FutureWarning"
)  # deprecated, still MLflow's check
@pytest.mark.parametrize("modality", sorted(CASES))
def test_the_logged_model_serves_its_own_serving_input_example(
    cfg, project, saved_models, serving_checks, modality, tmp_path
):
    """log_model loads nothing (MLflow's check did not run), and the logged files are whole: the example and its
    serving form, which the logged model answers through MLflow's scoring path with what the SavedModel says."""
    import mlflow
    import mlflow.models

    from tfpipe import tracking

    class_names, example, input_name = CASES[modality]
    with tracking.start_run(cfg, project, stage="train") as run:
        model_uri = run.log_model(
            saved_models[modality], modality=modality, input_example=example, class_names=class_names
        )
    assert serving_checks == [], "log_model ran MLflow's serving check (the SavedModel loaded a second time)"

    mlflow.set_tracking_uri(f"sqlite:///{project / 'mlflow.db'}")
    local = mlflow.artifacts.download_artifacts(model_uri, dst_path=str(tmp_path / "model"))
    mlmodel = mlflow.models.Model.load(local)
    assert mlmodel.saved_input_example_info["serving_input_path"] == "serving_input_example.json"
    assert mlmodel.metadata["class_names"] == list(class_names)
    assert "python_function" in mlmodel.flavors
    serving_input = (tmp_path / "model" / "serving_input_example.json").read_text(encoding="utf-8")
    assert json.loads(serving_input)  # MLflow's own conversion of the example, as a client would send it

    answer = mlflow.models.validate_serving_input(model_uri, serving_input)  # the scoring server's parsing
    assert len(serving_checks) == 1
    assert list(answer.columns) == ["class", *class_names]
    expected = _direct(saved_models[modality], **{input_name: np.asarray(example)})
    np.testing.assert_allclose(answer[list(class_names)].to_numpy(), expected, atol=1e-6)
    assert list(answer["class"]) == [class_names[i] for i in expected.argmax(axis=1)]
