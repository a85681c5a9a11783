"""``memproxy --help`` and each command's ``--help`` explain themselves: every command has a
description and every option a help text; ``--tenant`` says it takes a tenant id, not a token."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from memproxy.cli import build_parser


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_is_listed_with_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    listing = capsys.readouterr().out
    for name in commands():
        line = next(line for line in listing.splitlines() if line.strip().startswith(name + " "))
        assert len(line.split(name, 1)[1].strip()) > 10, line


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_command_and_option_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    command = commands()[name]
    assert command.description and len(command.description) > 40, name
    for action in command._actions:
        if not isinstance(action, argparse._HelpAction):
            assert action.help, f"memproxy {name} {action.option_strings or action.dest}: no help text"
    with pytest.raises(SystemExit):
        build_parser().parse_args([name, "--help"])
    assert command.description.split(".")[0] in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("name", ["export", "import"])
def test_tenant_says_it_is_the_tenant_id_not_the_token(name: str) -> None:
    (tenant,) = [a for a in commands()[name]._actions if "--tenant" in a.option_strings]
    assert tenant.help and "not a token" in tenant.help and "pt_" in tenant.help
    assert "memproxy tenant --token" in tenant.help


def test_version_is_the_projects() -> None:
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    expected = tomllib.loads(pyproject.read_text())["project"]["version"]
    done = subprocess.run([sys.executable, "-m", "memproxy", "--version"], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert done.stdout.strip() == f"memproxy {expected}"
