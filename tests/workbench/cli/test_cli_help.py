"""``python -m workbench --help`` (in a real process) and ``<command> --help`` (through the
same ``main`` in the test's process: a fresh Python per command cost ~0.35 s, 14 s for all):
the first thing a new user types, and what every usage error points to."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import cli, cli_in_process
from workbench.cli.dispatch import COMMANDS


def _help(*args: str, in_process: bool = True) -> str:
    proc = (cli_in_process if in_process else cli)(*args, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and proc.stderr == ""
    assert proc.stdout.startswith("usage: python -m workbench")
    return proc.stdout


def test_program_help_lists_every_command(wb_home: Path) -> None:
    text = _help(in_process=False)
    for cmd in COMMANDS:
        assert cmd.name in text
    # the "95%" of compare's summary is printed as written (it crashed argparse before)
    assert "95% intervals" in text and "%%" not in text


@pytest.mark.parametrize("command", [cmd.name for cmd in COMMANDS])
def test_every_command_has_help(wb_home: Path, command: str) -> None:
    text = _help(command)
    assert "%%" not in text
    summary = next(cmd.help for cmd in COMMANDS if cmd.name == command)
    assert " ".join(summary.split()) in " ".join(text.split())


def test_api_key_create_help_says_the_default_role(wb_home: Path) -> None:
    text = " ".join(_help("api-key-create").split())
    assert "(default viewer: read and translate only)" in text
