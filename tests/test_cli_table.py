"""`tfpipe --help` lists every subcommand with what it does, from the one table the console script dispatches from
(issue 53); an unknown subcommand is one line, exit 2."""

from __future__ import annotations

import pytest

from tfpipe import cli

SUBCOMMANDS = [  # written out here, not read from the code under test
    "prepare", "train", "evaluate", "run-all", "launch", "audit", "compare", "report",
    "promote", "tune", "predict", "serve", "sweep", "init",
]  # fmt: skip


def test_help_lists_each_subcommand_with_what_it_does(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("usage: tfpipe {prepare,train,evaluate,")
    listed = [line.split()[0] for line in lines[2:]]
    assert listed == SUBCOMMANDS
    assert all(len(line.split()) > 2 for line in lines[2:])  # each with a few words on what it does
    assert "  promote   register a run's model and move a registry alias to it" in lines


def test_an_unknown_subcommand_is_one_line(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["trian"])
    err = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and len(err) == 1 and "unknown subcommand 'trian'" in err[0]
