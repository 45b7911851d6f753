"""The strategy registry (issue 53): one descriptor per strategy in tfpipe.strategies, the one place strategy names
are written in src/ and pipeline/; the rest of the code asks a descriptor (multi_process, coordinated, the device
rule, ...) and a new descriptor is all the config, the checks, the launchers and the tags need to know of one.

The scan reads every module with ast: docstrings and comments may name strategies (they explain, they decide
nothing); string literals and comparisons may not, outside tfpipe/strategies.py and conf/ (not scanned)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tfpipe import strategies
from tfpipe.errors import ConfigError, UserError

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_MODULE = ROOT / "src" / "tfpipe" / "strategies.py"
# Names that are also other words of the config: only `strategy=NAME` text and comparisons with a strategy
# expression count for them, any whole-word use for the other names.
OTHER_MEANINGS = {
    "auto": "a value of strategy.communication, data.source, train.shard_policy and precision.policy",
    "tpu": "a device type (/tpu:N) and the key strategy.tpu",
}


def _docstrings(tree: ast.AST) -> set:
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, owners)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _named(text: str, names) -> list:
    """The strategy names a piece of text writes: as a whole word, or (any name) after strategy= / strategy.name=."""
    found = []
    for name in names:
        word = rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])"
        if name not in OTHER_MEANINGS and re.search(word, text):
            found.append(name)
        elif re.search(rf"strategy(?:\.name)?=['\"]?{word}", text):
            found.append(name)
    return found


def strategy_literals(source: str, names) -> list:
    """(line, what) for each strategy name a module writes in code: a string literal (an f-string's text too)
    naming one, or a strategy expression compared with one. Docstrings and comments are not code."""
    tree = ast.parse(source)
    docs, found = _docstrings(tree), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found += [(node.lineno, f"{name!r} in {node.value[:60]!r}") for name in _named(node.value, names)]
        if isinstance(node, ast.Compare) and "strateg" in ast.unparse(node):
            for leaf in ast.walk(node):
                if isinstance(leaf, ast.Constant) and leaf.value in names:
                    found.append((node.lineno, f"compared: {ast.unparse(node)[:80]}"))
    return found


def _sources() -> list:
    return sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "pipeline").rglob("*.py")])


def test_the_scan_finds_names_in_code_and_leaves_docstrings_comments_and_other_meanings():
    source = '''"""A docstring may say multi_worker_mirrored."""
def f(cfg, kind):
    """So may this one: strategy=tpu."""
    # and a comment: mirrored
    a = cfg.strategy.name == "auto"
    b = "parameter_server"
    c = f"strategy={cfg.strategy.name}; use strategy=tpu"
    d = kind == "tpu" or cfg.precision.policy == "auto" or "strategy.tpu=null"
    e = cfg.strategy.name in ("one_device", "x")
'''
    found = strategy_literals(source, strategies.names())
    assert sorted({line for line, _ in found}) == [5, 6, 7, 9], found


def test_strategy_names_are_written_only_in_the_registry():
    """Outside tfpipe/strategies.py, src/ and pipeline/ ask a descriptor; no module compares or writes a name."""
    names = strategies.names()
    assert set(OTHER_MEANINGS) <= set(names)  # the exceptions name registered strategies, or are stale
    written = {
        f"{path.relative_to(ROOT)}:{line}": what
        for path in _sources()
        if path != REGISTRY_MODULE
        for line, what in strategy_literals(path.read_text(), names)
    }
    templates = [p for p in (ROOT / "src" / "tfpipe" / "deploy").rglob("*") if p.is_file()]
    for path in templates:  # the rendered jobs' text, comments left out
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if not line.lstrip().startswith("#") and _named(line, names):
                written[f"{path.relative_to(ROOT)}:{i}"] = line.strip()[:80]
    assert len(_sources()) > 100 and templates  # the walk found the code (a wrong root passes vacuously)
    assert not written, f"strategy names outside tfpipe/strategies.py (ask strategies.spec(name)): {written}"


def test_only_the_registry_builds_strategies():
    """No module but tfpipe/strategies.py calls a tf.distribute strategy class (`...Strategy(`)."""
    built = {
        f"{path.relative_to(ROOT)}:{node.lineno}": ast.unparse(node.func)
        for path in _sources()
        if path != REGISTRY_MODULE
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Strategy")
    }
    assert not built, f"strategies built outside tfpipe/strategies.py: {built}"
    assert "tf.distribute.MirroredStrategy" in REGISTRY_MODULE.read_text()


def test_the_descriptors_answer_what_the_code_asked_of_names():
    """What the code compared names for, answered by the built-in descriptors exactly as before."""
    assert strategies.names() == (
        "one_device",
        "auto",
        "mirrored",
        "central_storage",
        "multi_worker_mirrored",
        "parameter_server",
        "tpu",
    )
    assert strategies.names(multi_process=True) == ("multi_worker_mirrored", "parameter_server")
    assert strategies.names(coordinated=True) == ("parameter_server",)
    assert (
        strategies.names(stops_together=True)
        == strategies.names(workers_only=True)
        == ("multi_worker_mirrored",)
    )
    assert strategies.names(joins_cluster=True) == ("multi_worker_mirrored", "parameter_server", "tpu")
    assert strategies.names(splits_cpu=True) == ("mirrored", "central_storage")
    assert strategies.names(needs_tpu=True) == ("tpu",)
    keys = {s.name: s.device_keys for s in strategies.REGISTRY.values() if s.device_keys}
    assert keys == {
        "one_device": ("device",),
        "mirrored": ("devices",),
        "central_storage": ("device", "devices"),
    }
    ps, mwms = strategies.spec("parameter_server"), strategies.spec("multi_worker_mirrored")
    assert ps.task_counts(2, 3) == {"chief": 1, "worker": 2, "ps": 3} and mwms.task_counts(2, 3) == {
        "worker": 2
    }
    assert strategies.DEFAULT == "one_device" and strategies.local_examples() == "one_device, mirrored"


def test_a_descriptor_refuses_what_the_code_could_not_ask():
    with pytest.raises(ValueError, match="replicas='gpus'"):
        strategies.StrategySpec("x", lambda cfg: None, replicas="gpus")
    with pytest.raises(ValueError, match="needs multi_process"):
        strategies.StrategySpec("x", lambda cfg: None, replicas="cluster", coordinated=True)
    with pytest.raises(ValueError, match="registered twice"):
        strategies.register(strategies.spec("mirrored"))
    with pytest.raises(
        ConfigError, match="strategy.name='mirorred': unknown strategy; allowed: one_device, auto"
    ):
        strategies.spec("mirorred")


@pytest.fixture
def registered():
    """Register descriptors for one test, and take them out again."""
    added = []

    def _register(*specs):
        added.extend(strategies.register(s).name for s in specs)

    yield _register
    for name in added:
        strategies.REGISTRY.pop(name)


def test_a_new_descriptor_is_all_config_checks_launchers_and_tags_need(make_config, registered, monkeypatch):
    """A strategy registered at run time (no conf file, no other module touched) is accepted by validation,
    built by the factory, and asked by preflight, the launchers, the TF_CONFIG check and the tags."""
    import tensorflow as tf

    from tfpipe import preflight, tracking
    from tfpipe.launch import cluster

    def one_cpu(cfg):
        return tf.distribute.OneDeviceStrategy(cfg.device)

    registered(
        strategies.StrategySpec("test_only_cpu", one_cpu, replicas="device"),
        strategies.StrategySpec("test_only_ps", one_cpu, "cluster", multi_process=True, coordinated=True),
    )
    cfg = make_config("strategy.name=test_only_cpu")
    assert cfg.strategy.name == "test_only_cpu" and cfg.strategy.device == "/cpu:0"
    assert isinstance(strategies.build_strategy(cfg.strategy), tf.distribute.OneDeviceStrategy)
    tags = tracking.run_tags(cfg, None, None, {})
    assert (tags["replicas"], tags["device"]) == ("1", "/cpu:0")  # one replica on strategy.device
    with pytest.raises(
        ConfigError, match=r"strategy.device='/cpu:3': no such device; test_only_cpu has 1 CPU"
    ):
        preflight.check_devices(make_config("strategy.name=test_only_cpu", "strategy.device=/cpu:3"))
    with pytest.raises(
        UserError, match="'test_only_cpu': not a multi-process strategy; allowed: .*, test_only_ps"
    ):
        cluster.local_cluster("test_only_cpu", 2)

    ps = make_config("strategy=parameter_server", "strategy.name=test_only_ps")
    assert cluster.roles(cluster.local_cluster("test_only_ps", 2, 1)) == [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
        ("ps", 0),
    ]
    tf_config = '{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}'
    with pytest.raises(UserError, match="lack chief, ps for strategy.name=test_only_ps"):
        preflight.check_tf_config(ps, {"TF_CONFIG": tf_config})
    for overrides, needle in (
        (("strategy.num_ps=0",), "strategy.num_ps=0: must be > 0"),
        (("train.grad_accumulation_steps=2",), "not supported with strategy.name=test_only_ps"),
        (
            ("+strategy.launcher=ray",),
            "Ray Train runs only multi_worker_mirrored, not strategy.name='test_only_ps'",
        ),
    ):
        with pytest.raises(ConfigError, match=re.escape(needle)):
            make_config("strategy=parameter_server", "strategy.name=test_only_ps", *overrides)


def test_validation_refuses_an_unregistered_name_in_one_line_with_the_registrys_names(
    make_config, registered
):
    registered(strategies.StrategySpec("test_only_extra", lambda cfg: None, replicas="host"))
    allowed = ", ".join(strategies.names())
    assert allowed.endswith(", tpu, test_only_extra")
    with pytest.raises(ConfigError) as err:
        make_config("strategy.name=mirorred")
    assert (
        str(err.value)
        == f"strategy.name='mirorred': not allowed (did you mean 'mirrored'?); allowed: {allowed}"
    )


def test_the_cli_refuses_an_unknown_name_with_exit_2(scratch_root, capsys):
    """The stage entry point: one stderr line naming the registry's strategies, exit code 2, nothing run."""
    from pipeline import _cli
    from tfpipe.exits import EXIT_BAD_INPUT

    reached = []

    def run(cfg, root):
        reached.append(cfg)

    code = _cli.cli("train", run, "test", ["strategy.name=nope"], scratch_root, configure_logging=False)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert (code, reached) == (EXIT_BAD_INPUT, [])
    assert lines == [
        f"train: error: strategy.name='nope': not allowed; allowed: {', '.join(strategies.names())}"
    ]
