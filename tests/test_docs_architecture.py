"""The architecture picture of the documentation site (docs/hooks/architecture.py): drawn from the imports, it
shows the walls of docs/architecture.md (nothing in tfpipe imports pipeline/, only tracking imports mlflow), puts
every module of src/tfpipe in exactly one room, and is an SVG with a labelled box per room.

Expected facts are written here by hand, never computed with the hook; the modules are listed by a walk of their
own. No site is built, nothing of tfpipe, TensorFlow or MLflow is imported.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import architecture  # noqa: E402 - docs/hooks is not a package: importable once on sys.path

SVG = "{http://www.w3.org/2000/svg}"
OWN_ROOMS = "audit commands config data launch models report scaffold tracking training tuning"  # subpackages
PACKAGES = set(OWN_ROOMS.split())
GROUPS = {"cli", "entry", "stages", "runtime", "loop", "helpers"}  # top-level modules, by role
OUTSIDE = {"tensorflow", "mlflow", "dvc", "hydra"}


@pytest.fixture(scope="module")
def graph() -> tuple:
    return architecture.room_graph()


def test_the_rooms_are_the_expected_ones(graph):
    rooms, _ = graph
    assert set(rooms) == {"pipeline"} | PACKAGES | GROUPS | OUTSIDE
    assert "other" not in rooms


def test_pipeline_imports_the_entry_points_and_nothing_imports_pipeline(graph):
    _, edges = graph
    assert {("pipeline", "commands"), ("pipeline", "launch"), ("pipeline", "stages")} <= edges
    assert not [a for a, b in edges if b == "pipeline"]


def test_only_tracking_imports_mlflow(graph):
    _, edges = graph
    assert {a for a, b in edges if b == "mlflow"} == {"tracking"}


def test_training_and_models_import_tensorflow_and_helpers_does_not(graph):
    _, edges = graph
    assert {("training", "tensorflow"), ("models", "tensorflow"), ("data", "tensorflow")} <= edges
    assert ("helpers", "tensorflow") not in edges and ("config", "tensorflow") not in edges
    assert ("audit", "dvc") in edges  # the audit reads DVC's lock


def test_the_rooms_have_no_import_circle(graph):
    rooms, edges = graph
    _, red = architecture.layers(rooms, edges)
    assert red == set()


def test_every_module_of_src_tfpipe_is_in_exactly_one_room(graph):
    rooms, _ = graph
    walked = {
        p.relative_to(ROOT / "src").with_suffix("").as_posix() for p in (ROOT / "src/tfpipe").rglob("*.py")
    }
    walked = {m.removesuffix("/__init__").replace("/", ".") for m in walked}
    assert {"tfpipe", "tfpipe.cli", "tfpipe.training.loop", "tfpipe.tracking"} <= walked and len(walked) > 100
    placed = [m for members in rooms.values() for m in members if m.startswith("tfpipe")]
    assert sorted(placed) == sorted(walked)  # each once: a list, not a set
    assert set(rooms["pipeline"]) == {
        "pipeline." + p.stem if p.stem != "__init__" else "pipeline" for p in (ROOT / "pipeline").glob("*.py")
    }
    assert "tfpipe.training.loop" in rooms["training"] and "tfpipe.distribute" in rooms["runtime"]
    assert "tfpipe.commands.audit" in rooms["commands"] and "tfpipe.errors" in rooms["helpers"]
    assert "tfpipe.commands.entry" in rooms["commands"] and "tfpipe.launch.local" in rooms["launch"]


def test_a_module_in_no_room_fails_the_build():
    with pytest.raises(ValueError, match="in no room"):
        architecture.room_of("tfpipe.brand_new_module")


def test_imports_inside_functions_and_relative_ones_count(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text(
        "from . import sibling\n\ndef f():\n    import mlflow.keras\n    from tfpipe.errors import X\n"
    )
    found = architecture.imports(source, "tfpipe.pkg.mod", {"tfpipe.errors", "tfpipe.pkg.sibling"})
    assert found == {"tfpipe.pkg.sibling", "mlflow", "tfpipe.errors"}


def test_a_circle_between_rooms_is_drawn_red():
    rows, red = architecture.layers({"a", "b", "c"}, {("a", "b"), ("b", "a"), ("b", "c")})
    assert red == {("a", "b"), ("b", "a")} and rows == [["a", "b"], ["c"]]


def test_the_svg_parses_and_has_one_labelled_box_per_room(graph):
    rooms, _ = graph
    text = architecture.architecture_svg()
    svg = ET.fromstring(text)
    assert svg.tag == f"{SVG}svg" and not list(svg.iter(f"{SVG}script")) and "href=" not in text
    assert 900 <= float(svg.get("width")) <= 1200  # readable on a page, not shrunk
    boxes = {g.get("id"): g for g in svg.iter(f"{SVG}g") if g.get("class") == "room"}
    assert set(boxes) == {f"room-{room}" for room in rooms}
    for room, g in boxes.items():
        assert len(list(g.iter(f"{SVG}rect"))) == 1
        label, count = (t.text for t in g.iter(f"{SVG}text"))
        assert room.removeprefix("room-") in label, (room, label)
        assert re.fullmatch(r"1 module|\d+ modules|outside package", count), (room, count)
    training = len(list((ROOT / "src/tfpipe/training").glob("*.py")))
    assert boxes["room-training"].findtext(f"{SVG}text[2]") == f"{training} modules"


def test_the_arrows_into_mlflow_leave_only_the_tracking_box():
    svg = ET.fromstring(architecture.architecture_svg())
    bottoms = {}  # the bottom edge of each box: (y, x from, x to) -> room
    for g in svg.iter(f"{SVG}g"):
        if g.get("class") == "room":
            r = next(g.iter(f"{SVG}rect"))
            x, y, w, h = (float(r.get(k)) for k in ("x", "y", "width", "height"))
            bottoms[(y + h, x, x + w)] = g.get("id")
    starts = set()
    for path in svg.iter(f"{SVG}path"):
        if path.get("stroke") == architecture.MLFLOW:
            x, y = map(float, path.get("d").split()[0].removeprefix("M").split(","))
            starts |= {room for (yb, x0, x1), room in bottoms.items() if abs(y - yb) < 0.2 and x0 <= x <= x1}
    assert starts == {"room-tracking"}


def test_no_module_imports_another_module_s_private_names():
    """Issue 53: a name with a leading underscore is its module's own; another module that needs it gets a public
    name (a leading underscore seen across modules hid 16 seams). `import x as _y` of a public name is fine."""
    import ast

    found = []
    for path in sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "pipeline").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                "tfpipe",
                "pipeline",
            ):
                found += [
                    f"{path.relative_to(ROOT)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not found, found
