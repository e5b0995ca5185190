"""No way in by default (issue 37): ``serve`` on an address other machines reach, without
``--require-keys``, refuses to start (one ``error:`` line, exit 2, nothing listening) unless
``--allow-anonymous`` says so; loopback addresses serve as before. A port already in use and
contradicting options are one ``error:`` line too."""

from __future__ import annotations

import socket

import pytest

from tests.helpers import IMPORT_LOG, cli, free_port, imports_of
from workbench.errors import WorkbenchError
from workbench.serving.config import ServeConfig
from workbench.serving.entry import refuse_anonymous_network, startup_lines


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_serve_on_every_interface_without_keys_is_refused(wb_home, host: str) -> None:
    port = free_port()
    done, imported = imports_of(
        cli("serve", "--host", host, "--port", str(port), timeout=120, env=IMPORT_LOG)
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: not serving on {host} without API keys: anyone who can reach this machine "
        "could use it. Create keys and add --require-keys, or add --allow-anonymous to serve "
        "everyone"
    ]
    assert not _listening(port)
    # a refusal answers at once (~1.2 s on a 2-core Xeon, 5-6 s with torch's import)
    assert "workbench.serving.entry" in imported and "torch" not in imported


def test_serve_on_a_port_in_use_is_one_error_line(wb_home) -> None:
    """Not uvicorn's eight lines of log and exit 3: one ``error:`` line, exit 2."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", "--port", str(port), timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [f"error: port {port} on 127.0.0.1 is already in use"]


def test_require_keys_and_allow_anonymous_together_are_refused(wb_home) -> None:
    port = free_port()
    done = cli("serve", "--require-keys", "--allow-anonymous", "--port", str(port), timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: --require-keys and --allow-anonymous contradict each other: choose one "
        "(--allow-anonymous serves without keys)"
    ]
    assert not _listening(port)


def test_keys_loopback_or_an_explicit_allow_let_it_start() -> None:
    open_config, keyed = ServeConfig(), ServeConfig(require_keys=True)
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        refuse_anonymous_network(host, open_config, allow_anonymous=False)
    refuse_anonymous_network("0.0.0.0", keyed, allow_anonymous=False)
    refuse_anonymous_network("0.0.0.0", open_config, allow_anonymous=True)
    with pytest.raises(WorkbenchError, match=r"not serving on 192\.168\.1\.5 without API keys"):
        refuse_anonymous_network("192.168.1.5", open_config, allow_anonymous=False)
    said = startup_lines("0.0.0.0", 5000, 1, open_config)[1]
    assert said.startswith("warning: API keys are off (--allow-anonymous)")
