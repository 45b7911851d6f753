"""The generated references of the documentation site (docs/hooks/reference.py, docs/hooks/commands.py): the config page lists every key
of the default composition, a key's row carries its comment from conf/ or the schema source and the values its
check allows, and the commands page holds every `tfpipe` subcommand's --help; MkDocs adds both pages.

Expected values are read from params.yaml (as committed: the workspace's may be an applied experiment's),
conf/, the schema and command sources, `tfpipe.choices` and `tfpipe.cli.USAGE` directly, never computed with
the hook. No site is built and no TensorFlow is imported.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import committed_text

from tfpipe import choices, strategies
from tfpipe.cli import USAGE

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import commands  # noqa: E402 - docs/hooks is not a package: importable once on sys.path
import reference  # noqa: E402

HYDRA_APPS = {"sweep"}  # Hydra's own command line (tfpipe.cli's docstring): no argparse usage line


@pytest.fixture(scope="module")
def config_page() -> str:
    return reference.config_reference()


@pytest.fixture(scope="module")
def commands_page() -> str:
    return commands.commands_reference()


def _leaves(tree: dict, prefix: str = "") -> list:
    keys = []
    for key, value in tree.items():
        keys += _leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]
    return keys


def _rows(page: str, key: str) -> list:
    """The table rows of a dotted key (a model key has one per model), Markdown escapes removed."""
    rows = [line for line in page.splitlines() if line.startswith(f"| `{key}` |")]
    assert rows, f"{key}: no row on the config page"
    return [row.replace("\\", "").replace("&lt;", "<") for row in rows]


def _section(page: str, sub: str) -> str:
    assert f"\n## tfpipe {sub}\n" in page, f"tfpipe {sub}: no section on the commands page"
    return page.split(f"\n## tfpipe {sub}\n", 1)[1].split("\n## ", 1)[0]


def _subcommands() -> list:
    return USAGE.split("{", 1)[1].split("}", 1)[0].split(",")


def test_every_key_of_the_default_composition_has_a_row(config_page):
    params = yaml.safe_load(committed_text("params.yaml"))  # as committed: not an applied experiment's
    keys = _leaves(params)
    assert len(keys) > 80 and "train.optimizer.learning_rate" in keys  # the walk found the nested keys
    missing = [key for key in keys if f"| `{key}` |" not in config_page]
    assert not missing, missing


def test_the_page_says_it_is_generated_and_how_to_override_a_key(config_page):
    intro = config_page.split("\n## ", 1)[0]
    for text in ("generated", "src/tfpipe/config", "conf/", "dvc exp run -S", "tfpipe train", "--cfg job"):
        assert text in intro, text


@pytest.mark.parametrize(
    "source, key",
    [
        ("conf/train/default.yaml", "train.optimizer.learning_rate"),
        ("conf/tracking/default.yaml", "tracking.promote_mode"),
        ("src/tfpipe/config/schema.py", "strategy.num_logical_cpus"),  # one_device.yaml does not set it
        ("src/tfpipe/config/custom_model_schema.py", "model.builder"),  # no conf/ file: the schema's comment
    ],
)
def test_a_keys_comment_in_conf_or_the_schema_is_on_its_row(config_page, source, key):
    field = key.rsplit(".", 1)[1]
    line = next(s for s in (ROOT / source).read_text().splitlines() if s.strip().startswith(f"{field}:"))
    comment = line.split("#", 1)[1].strip()
    assert len(comment) > 10
    assert any(comment in row for row in _rows(config_page, key)), (comment, _rows(config_page, key))


@pytest.mark.parametrize(
    "key, allowed",
    [
        ("precision.policy", choices.PRECISION_CHOICES),
        ("train.optimizer.name", choices.OPTIMIZERS),
        ("train.lr_schedule.name", choices.LR_SCHEDULES),
        ("data.source", choices.SOURCES),
        ("strategy.name", strategies.names()),
        ("train.shard_policy", choices.SHARD_POLICIES),
        ("dataset.standardize", choices.STANDARDIZERS),
        ("train.early_stopping.monitor", choices.EARLY_STOPPING_MONITORS),
    ],
)
def test_a_key_checked_against_a_choices_tuple_lists_exactly_its_values(config_page, key, allowed):
    (row,) = _rows(config_page, key)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[0] == f"`{key}`" and cells[3], cells  # Key | Type | Default | Allowed | Meaning
    assert re.findall(r"`([^`]*)`", cells[3]) == list(allowed)


def test_each_model_has_its_own_table(config_page):
    models = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml"))
    for name in models:
        assert f"\n### model={name}\n" in config_page, name
    embedding = config_page.split("\n### model=embedding_gap\n", 1)[1].split("\n### ", 1)[0]
    assert "| `model.embedding_dim` |" in embedding and "| `model.filters` |" not in embedding


@pytest.mark.slow  # starts a process: `tfpipe sweep --help`, Hydra's
def test_every_subcommand_has_its_section_with_its_help(commands_page):
    subcommands = _subcommands()
    assert {"train", "audit", "sweep", "init"} <= set(subcommands)
    for sub in subcommands:
        section = _section(commands_page, sub)
        if sub in HYDRA_APPS:
            assert "Hydra" in section or f"tfpipe {sub} --help" in section, section[:500]
        else:
            assert f"usage: tfpipe {sub} " in section, section[:500]


@pytest.mark.slow  # starts a process: `tfpipe sweep --help`, Hydra's
def test_a_commands_exit_codes_come_from_its_docstring(commands_page):
    promote = (ROOT / "src" / "tfpipe" / "commands" / "promote.py").read_text()
    line = next(s for s in promote.splitlines() if s.startswith("Exit codes:"))
    assert line in _section(commands_page, "promote").replace("\\", "")
    audit_codes, compare_codes = re.findall(
        r"Exit codes: [^.]*\.", (ROOT / "src/tfpipe/commands/audit.py").read_text()
    )
    audit, compare = _section(commands_page, "audit"), _section(commands_page, "compare")
    assert audit_codes in audit and compare_codes not in audit
    assert compare_codes in compare and audit_codes not in compare


@pytest.mark.slow  # starts a process: MkDocs's plugin events run in it, as in a build, without building
def test_mkdocs_adds_both_pages_and_nothing_imports_tensorflow(tmp_path):
    script = f"""
import sys
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
config = MkDocsConfig()
config.load_dict({{"site_name": "t", "docs_dir": {str(ROOT / "docs")!r}, "site_dir": {str(tmp_path)!r},
                  "hooks": [{str(ROOT / "docs" / "hooks" / "reference.py")!r},
                            {str(ROOT / "docs" / "hooks" / "commands.py")!r}]}})
assert config.validate() == ([], []), config.validate()
files = config.plugins.on_files(Files([]), config=config)
for f in files:
    print(f.src_uri, len(f.content_string))
print(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "mlflow")))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    *pages, imported = proc.stdout.strip().splitlines()
    assert [page.split()[0] for page in pages] == ["reference/config.md", "reference/commands.md"]
    assert all(int(page.split()[1]) > 5000 for page in pages), pages
    assert imported == "[]", imported
