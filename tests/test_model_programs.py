"""Models are programs (issue 50 item 4): a SavedModel's serving function can read and write files, run Python or
print to a file. `tfpipe.models.program.check` reads saved_model.pb without loading it and refuses every op off its
allowlist, in one line naming the op and the function; predict, serve and evaluate call it before TensorFlow loads
the model, so the file such a model writes never appears. Class names answer from inside the seal (relabelled
class_names.json / MLmodel metadata are refused), and an MLmodel artifact path outside the model folder is refused.

The hostile models are built here with tf.Module + tf.function; ours are real tfpipe exports, logged to a real
SQLite MLflow store."""

from __future__ import annotations

import json
import re
import shutil
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import IMAGE_CLASSES, TINY_VOCAB, run_in_project, seed_store

from tfpipe.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
DOC = "(allowed ops: docs/explanation/security.md#models)"
# kind -> (the op refused, the function it is in, why)
HOSTILE = {
    "read": ("ReadFile", "serve", "reads files"),
    "write": ("WriteFile", "serve", "writes files"),
    "python": ("EagerPyFunc", "serve", "runs Python"),
    "print": ("PrintV2", "serve", "prints (to a file, too)"),
    "nested": ("WriteFile", "plant", "writes files"),  # in a function the serving function calls
    "save": ("SaveV2", "serve", "writes files"),  # a checkpoint op outside the saver's own functions
}


def hostile_model(folder: Path, kind: str, planted: Path) -> Path:
    """A sealed SavedModel whose serving function takes uint8 images [N, H, W, 3] and answers three class
    probabilities, and by `kind` also does what HOSTILE names to `planted` (writes it, prints to it, reads it)."""
    import tensorflow as tf

    from tfpipe import files

    module = tf.Module()
    module.scale = tf.Variable(1.0)

    @tf.function
    def plant(x):
        tf.io.write_file(str(planted), "planted by the model")
        return x

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8, name="image")])
    def serve(image):
        x = tf.reduce_mean(tf.cast(image, tf.float32), axis=[1, 2]) * module.scale
        if kind == "read":
            x += 0.0 * tf.cast(tf.strings.length(tf.io.read_file(str(planted))), tf.float32)
        elif kind == "write":
            tf.io.write_file(str(planted), "planted by the model")
        elif kind == "python":
            x = tf.py_function(lambda t: t, [x], tf.float32)
        elif kind == "print":
            tf.print("planted by the model", output_stream=f"file://{planted}")
        elif kind == "nested":
            x = plant(x)
        elif kind == "save":
            tf.raw_ops.SaveV2(prefix=str(planted), tensor_names=["x"], shape_and_slices=[""], tensors=[x])
        return {"probabilities": tf.nn.softmax(x)}

    module.serve = serve
    tf.saved_model.save(module, str(folder), signatures={"serving_default": serve.get_concrete_function()})
    files.seal(folder)
    return folder


def _export(folder: Path, *overrides: str, modality: str = "image") -> Path:
    """A built-in model (cfg `overrides`) exported by tfpipe's own export_saved_model, untrained."""
    from tfpipe import config, models

    cfg = config.compose(list(overrides), config_dir=ROOT / "conf")
    if modality == "image":
        model = models.build_model(cfg, 3, normalization={"mean": [0.5] * 3, "std": [0.25] * 3})
        shape = list(model.inputs[0].shape[1:])
        models.export_saved_model(
            model, folder, modality="image", image_shape=shape, class_names=list(IMAGE_CLASSES)
        )
    else:
        model = models.build_model(cfg, 2, vocab_size=len(TINY_VOCAB))
        vectorizer = models.make_text_vectorizer(TINY_VOCAB, cfg.dataset.sequence_length)
        models.export_saved_model(
            model, folder, modality="text", vectorizer=vectorizer, class_names=["neg", "pos"]
        )
    return folder


# ----------------------------------------------------------------------------- the check itself


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_serving_function_that_touches_files_runs_python_or_prints_is_refused_in_one_line(tmp_path, kind):
    from tfpipe.models import program

    planted = tmp_path / "planted.txt"
    folder = hostile_model(tmp_path / "model", kind, planted)
    with pytest.raises(UserError) as refused:
        program.check(folder, "model")
    op, function, why = HOSTILE[kind]
    line = str(refused.value)
    assert re.fullmatch(
        rf"model: refused: op {op} in function __inference_{function}_\d+ {re.escape(why)} ",
        line[: -len(DOC)],
    )
    assert line.endswith(DOC) and "\n" not in line
    assert not planted.exists()


@pytest.fixture(scope="module")
def own_exports(tmp_path_factory) -> dict:
    """Our own exports: the built-in image cnn, the text model and airbench, untrained."""
    root = tmp_path_factory.mktemp("exports")
    return {
        "cnn": _export(root / "cnn", "model.filters=[4,8]", "model.dense_units=8"),
        "text": _export(root / "text", "dataset=imdb", "dataset.sequence_length=12", modality="text"),
        "airbench": _export(root / "airbench", "model=airbench"),
    }


@pytest.mark.parametrize("name", ["cnn", "text", "airbench"])
def test_our_own_exports_pass_and_their_savers_write_checkpoints(own_exports, name):
    """What our exports run is allowed, their traced save and restore included: those hold the checkpoint ops
    allowed nowhere else (so the saver rule is what lets them pass)."""
    from tfpipe.models import program

    program.check(own_exports[name])
    (meta,) = program.read(own_exports[name]).meta_graphs
    by_function = {f.signature.name: {n.op for n in f.node_def} for f in meta.graph_def.library.function}
    savers = [name for name, ops in by_function.items() if ops & program.SAVER_OPS]
    assert savers and all("_traced_save_" in n or "_traced_restore_" in n for n in savers), savers


def _surgery(folder: Path, tmp_path: Path, change) -> Path:
    """A copy of the SavedModel `folder` whose saved_model.pb `change(meta graph, traced save's name)` edited."""
    from tfpipe.models import program

    copy = tmp_path / "edited"
    shutil.copytree(folder, copy)
    saved = program.read(copy)
    meta = saved.meta_graphs[0]
    (save,) = [
        f.signature.name for f in meta.graph_def.library.function if "_traced_save_" in f.signature.name
    ]
    change(meta, save)
    (copy / "saved_model.pb").write_bytes(saved.SerializeToString())
    return copy


def _call_from_serving(meta, save):
    serve = next(
        f for f in meta.graph_def.library.function if f.signature.name.startswith("__inference_serve_")
    )
    serve.node_def.add(name="call_save", op="StatefulPartitionedCall").attr["f"].func.name = save


def _graph_node_calls(meta, save):
    meta.graph_def.node.add(name="call_save", op="StatefulPartitionedCall").attr["f"].func.name = save


def _loaded_function(meta, save):
    meta.object_graph_def.concrete_functions[save].CopyFrom(
        next(iter(meta.object_graph_def.concrete_functions.values()))
    )


def _gradient(meta, save):
    serve = next(n for n in meta.object_graph_def.concrete_functions if n.startswith("__inference_serve_"))
    meta.graph_def.library.gradient.add(function_name=serve, gradient_func=save)


def _stand_in(meta, save):
    function = next(f for f in meta.graph_def.library.function if f.signature.name == save)
    function.attr["api_implements"].s = b"serve"


def _saver_op_in_graph(meta, save):
    meta.graph_def.node.add(name="save_in_graph", op="SaveV2")


@pytest.mark.parametrize(
    "change",
    [_call_from_serving, _graph_node_calls, _loaded_function, _gradient, _stand_in, _saver_op_in_graph],
)
def test_checkpoint_ops_only_in_functions_that_the_saver_alone_reaches(own_exports, tmp_path, change):
    """The traced save writes files: allowed only while nothing but the saver's own graph node reaches it. Called
    from the serving function, from another graph node, listed as a loaded object's function, named as a
    gradient or marked as a stand-in for another function (which TensorFlow may swap in), it is refused."""
    from tfpipe.models import program

    edited = _surgery(own_exports["cnn"], tmp_path, change)
    with pytest.raises(
        UserError,
        match=r"refused: op (SaveV2|MergeV2Checkpoints|ShardedFilename) in (function "
        r"__inference__traced_save_\d+|the graph \(node save_in_graph\))",
    ):
        program.check(edited)


def test_the_allowlist_names_real_ops_none_of_which_touches_files_python_or_processes():
    from tensorflow.python.framework import op_def_registry

    from tfpipe.models import program

    assert not [op for op in program.ALLOWED_OPS | program.SAVER_OPS if op_def_registry.get(op) is None]
    assert not [op for op in program.ALLOWED_OPS if program.why(op) != "is not an op a model may run"]
    assert not program.ALLOWED_OPS & program.SAVER_OPS
    assert (
        program.why("ReadFile") == "reads files"
        and program.why("SomeNewOp") == "is not an op a model may run"
    )


# ----------------------------------------------------------------------------- the commands that load a model


@pytest.fixture(scope="module")
def store(tmp_path_factory, own_exports) -> dict:
    """A project whose SQLite store holds a hostile model (its serving function writes project/planted.txt) and
    our own cnn export, each logged by its own run: {project, uri, planted, hostile: run id, ours: run id}."""
    from tfpipe import config, tracking

    project = tmp_path_factory.mktemp("programs")
    seed_store(project)
    uri = f"sqlite:///{project / 'mlflow.db'}"
    planted = project / "planted.txt"
    cfg = config.compose(["experiment=smoke", f"tracking.uri={uri}"], config_dir=ROOT / "conf")
    logged = {"project": project, "uri": uri, "planted": planted}
    folders = {"hostile": hostile_model(project / "hostile", "write", planted), "ours": own_exports["cnn"]}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        for name, folder in folders.items():
            size = 8 if name == "hostile" else 32
            with tracking.start_run(cfg, project, stage="train") as run:
                example = np.zeros((1, size, size, 3), np.uint8)
                run.log_model(
                    folder, modality="image", input_example=example, class_names=list(IMAGE_CLASSES)
                )
            logged[name] = run.run_id
    planted.unlink(missing_ok=True)  # logging never runs the model now (tracking.models._log_unvalidated)
    return logged


def _copy(store: dict, name: str, dest: Path, monkeypatch) -> Path:
    """The logged model `name` as the store holds it, downloaded into `dest` (a local MLflow model folder)."""
    from tfpipe.tracking import model_uri

    monkeypatch.chdir(store["project"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    local, _ = model_uri.download(f"runs:/{store[name]}/model", store["uri"], dest, "MODEL_URI")
    return Path(local)


def test_predict_refuses_a_model_whose_serving_function_writes_files_and_the_file_never_appears(
    store, image_dir
):
    """The real command line, as a process: exit 2, one line naming the op and its function, nothing written by
    the model or by predict."""
    project, planted, out = store["project"], store["planted"], store["project"] / "predictions.csv"
    spec = f"runs:/{store['hostile']}/model"
    args = [sys.executable, "-m", "tfpipe", "predict", spec, str(image_dir / "test"), "--out", str(out)]
    done = run_in_project([*args, "--tracking-uri", store["uri"]], project)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert re.fullmatch(
        rf"predict: error: MODEL_URI='{spec}': refused: op WriteFile in function __inference_serve_\d+ writes "
        rf"files {re.escape(DOC)}",
        lines[0],
    ), lines[0]
    assert not planted.exists() and not out.exists()


def _serve(local: Path) -> int:
    """`tfpipe serve` of the local model folder, in process, on a port already taken: a model that passed the
    checks would be refused for the port (exit 2, another line) instead of starting a server."""
    from tfpipe.commands import serve

    with socket.create_server(("127.0.0.1", 0)) as taken:
        return serve.main([str(local), "--port", str(taken.getsockname()[1])])


def test_serve_refuses_it_before_any_server_starts(store, tmp_path, monkeypatch, capsys):
    local = _copy(store, "hostile", tmp_path / "m", monkeypatch)
    capsys.readouterr()
    assert _serve(local) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refused: op WriteFile in function __inference_serve_" in err[0], err
    assert not store["planted"].exists()


def test_evaluate_refuses_it_before_tensorflow_loads_it(prepared_image, tmp_path):
    """The evaluate stage's scorer on a SavedModel whose serving function calls a function that writes a file."""
    from tfpipe import evaluation

    planted = tmp_path / "planted.txt"
    folder = hostile_model(tmp_path / "saved_model", "nested", planted)
    with pytest.raises(
        UserError, match=r"refused: op WriteFile in function __inference_plant_\d+ writes files"
    ):
        evaluation.evaluate(folder, prepared_image.prepared_dir)
    assert not planted.exists()


# ----------------------------------------------------------------------------- class names and artifact paths


def _edit_mlmodel(local: Path, edit) -> None:
    mlmodel = yaml.safe_load((local / "MLmodel").read_text(encoding="utf-8"))
    edit(mlmodel)
    (local / "MLmodel").write_text(yaml.safe_dump(mlmodel), encoding="utf-8")


def _relabel_json(local: Path) -> None:
    (local / "artifacts" / "class_names.json").write_text(
        json.dumps(list(IMAGE_CLASSES)[::-1]), encoding="utf-8"
    )


def _relabel_metadata(local: Path) -> None:
    _edit_mlmodel(local, lambda m: m["metadata"].update(class_names=list(IMAGE_CLASSES)[::-1]))


@pytest.mark.parametrize(
    "relabel, what", [(_relabel_json, "class_names.json"), (_relabel_metadata, "MLmodel metadata")]
)
def test_relabelled_class_names_outside_the_seal_are_refused(
    store, image_dir, tmp_path, monkeypatch, capsys, relabel, what
):
    """class_names.json and the MLmodel metadata lie outside the SavedModel's seal: predict refuses a model whose
    either names other classes than the sealed assets/class_names.txt (the unedited copy is scored)."""
    from tfpipe.commands import predict

    local = _copy(store, "ours", tmp_path / "m", monkeypatch)
    args = [str(local), str(image_dir / "test"), "--tracking-uri", store["uri"]]
    assert predict.main([*args, "--out", str(tmp_path / "fine.csv")]) == 0
    assert (tmp_path / "fine.csv").read_text().splitlines()[
        0
    ] == "file,label,probability,p_blue,p_green,p_red"
    relabel(local)
    capsys.readouterr()
    assert predict.main([*args, "--out", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"relabelled: its {what} names ['red', 'green', 'blue']" in err[0], err
    assert "its sealed assets/class_names.txt ['blue', 'green', 'red']" in err[0]
    assert not (tmp_path / "p.csv").exists()


def test_the_served_answer_carries_the_sealed_class_names_whatever_class_names_json_says(
    store, tmp_path, monkeypatch
):
    """serving_model.py itself, loaded by MLflow with none of tfpipe's checks (a notebook's mlflow.pyfunc.load_model):
    the answer's columns are the sealed names."""
    import mlflow.pyfunc

    local = _copy(store, "ours", tmp_path / "m", monkeypatch)
    _relabel_json(local)
    answer = mlflow.pyfunc.load_model(str(local)).predict(np.zeros((2, 32, 32, 3), np.uint8))
    assert list(answer.columns) == ["class", *IMAGE_CLASSES]


def _absolute(local: Path, secret: Path) -> None:
    _edit_mlmodel(
        local, lambda m: m["flavors"]["python_function"]["artifacts"]["class_names"].update(path=str(secret))
    )


def _up(local: Path, secret: Path) -> None:
    up = Path(*[".."] * len(local.parts[1:])) / secret.relative_to("/")
    _edit_mlmodel(
        local, lambda m: m["flavors"]["python_function"]["artifacts"]["class_names"].update(path=str(up))
    )


def _symlink(local: Path, secret: Path) -> None:
    (local / "artifacts" / "class_names.json").unlink()
    (local / "artifacts" / "class_names.json").symlink_to(secret)


@pytest.mark.parametrize("escape", [_absolute, _up, _symlink])
def test_an_artifact_path_outside_the_model_folder_is_refused(store, tmp_path, monkeypatch, capsys, escape):
    """The MLmodel's class_names artifact naming a host file (absolute, through `..`, or a symlink out): `tfpipe
    serve` refuses it in one line before any server starts, so no client is handed the file."""
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(["host", "secret", "here"]), encoding="utf-8")
    local = _copy(store, "ours", tmp_path / "m", monkeypatch)
    escape(local, secret)
    capsys.readouterr()
    assert _serve(local) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its MLmodel's artifact 'class_names' is " in err[0], err
    assert "outside the model folder; refused" in err[0] and "host" not in err[0]
