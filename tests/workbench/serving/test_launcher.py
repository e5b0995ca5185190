"""The HTTP server the Models page starts and stops (``serving.launcher``), for real:
a stopped server leaves no ``<defunct>`` child under the app and no PID in ``server.json``
(issue 37: both stayed after "Stop the server")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import free_port
from workbench import settings
from workbench.serving import launcher


def _children() -> dict[int, str]:
    """This process' child processes and their state letter ("Z": exited, not reaped)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == os.getpid():
            found[int(stat.parent.name)] = fields[0]
    return found


def test_a_stopped_server_is_reaped_and_forgotten(
    wb_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(settings.ENV_SERVE_PORT, str(free_port()))
    state = launcher.start_server()
    pid = state.pid
    try:
        assert state.answering and pid is not None
        assert json.loads(settings.server_record_path().read_text())["pid"] == pid
        assert pid in _children(), "the server is this process' child: it must reap it"
    finally:
        launcher.stop_server()
    assert pid not in _children(), f"the stopped server is still a child: {_children()}"
    assert not settings.server_record_path().exists(), "server.json still names the PID"
    assert launcher.server_state().status == "down"
    with pytest.raises(launcher.WorkbenchError, match="No server started by this app"):
        launcher.stop_server()


@pytest.mark.parametrize("raw", ["\u00b2", "9" * 5000, "0", "65536", "http"])
def test_a_serve_port_that_is_no_port_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    """Digits int() cannot read ("²".isdigit() is true) are refused like any other bad value."""
    monkeypatch.setenv(settings.ENV_SERVE_PORT, raw)
    with pytest.raises(launcher.WorkbenchError, match="must be a port number from 1 to 65535"):
        launcher.serve_port()
