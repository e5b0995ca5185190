"""The HTTP server the Models page starts: one local ``python -m workbench serve`` per data
folder, started on demand as the training worker is (``training.worker_process``), its state,
and stopping it.

What a user expects of "Serve this version" is that the request shown beside it is answered,
so the page starts the server when none answers. The choices:

* **Address**: 127.0.0.1 on ``serve_port()`` (``WORKBENCH_SERVE_PORT``, default 5000,
  LibreTranslate's), API keys off: programs on this machine only, as ``serve`` with no option.
  Serving others (keys required, another host) is the command line's ``serve``.
* **Port taken** by another program: one error line that names it and the setting to change;
  nothing is started.
* **Lifetime**: the process runs in a session of its own, so it outlives the page and a
  restart of the app (a client must not lose its translator when a tab closes), and never
  exits on its own when idle; "Stop the server" ends it, as does the machine's shutdown.
* **PID**: the process holds a shared lock on ``server.lock`` from its start (inherited, as
  the worker's is), and ``server.json`` records its PID and port (until it is stopped here:
  then the process is reaped and the record removed). A held lock means the
  recorded process is alive, so stopping signals that PID and no other (never a reused one).
* **State**: whether the address answers ``/health``, whoever started the server (this page,
  or ``serve`` in a terminal): that is what decides whether the request is answered.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from workbench import settings, worker_lock
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.serving.config import DEFAULT_HOST, DEFAULT_PORT
from workbench.serving.entry import port_free
from workbench.serving.served import base_url
from workbench.team.access import Permission, require

HEALTH_TIMEOUT_S = 1.0  # a loopback server answers /health in milliseconds
START_WAIT_S = 60.0  # importing torch and FastAPI on a busy laptop takes seconds
STOP_WAIT_S = 15.0


@dataclass(frozen=True)
class ServerState:
    """The page's server address and what it answers now."""

    url: str
    status: str  # "ok" | "loading" (versions still loading) | "error" | "starting" | "down"
    served: dict[str, int] = field(default_factory=dict)  # "zh→en" -> the version answering
    error: str | None = None  # why a served version cannot load, or why the start failed
    pid: int | None = None  # the server this app started, while it runs (it can stop it)

    @property
    def answering(self) -> bool:
        return self.status in ("ok", "loading", "error")


def serve_port() -> int:
    """The port of the server the app starts (``WORKBENCH_SERVE_PORT``, else 5000)."""
    raw = settings.serve_port_as_set()
    if raw is None:
        return DEFAULT_PORT
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 5) or not 1 <= int(raw) <= 65535:
        raise WorkbenchError(
            N_("{variable} must be a port number from 1 to 65535, not “{value}”."),
            variable=settings.ENV_SERVE_PORT,
            value=raw,
        )
    return int(raw)


def server_url() -> str:
    return base_url(DEFAULT_HOST, serve_port())


def server_state() -> ServerState:
    """What answers at ``server_url()`` (reading it changes nothing)."""
    url, pid = server_url(), _started_pid()
    body = _health(url)
    if body is None:  # nothing listens (or not our server): is ours on its way?
        return ServerState(url, "starting" if pid else "down", pid=pid)
    served = {f"{p['source']}→{p['target']}": int(p["version"]) for p in body.get("served", [])}
    status = body.get("status") if body.get("status") in ("ok", "loading", "error") else "ok"
    return ServerState(url, status, served, body.get("error"), pid)


def _health(url: str) -> dict | None:
    """The server's /health (200, or 503 while a version loads or cannot); None when no
    workbench server answers there."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=HEALTH_TIMEOUT_S) as reply:
            return json.load(reply)
    except urllib.error.HTTPError as reply:
        try:
            return json.load(reply)
        except ValueError:
            return None
    except (OSError, ValueError):
        return None


def start_server() -> ServerState:
    """Start the server unless one answers (or is starting), and wait until it answers.

    Raises WorkbenchError when the port is taken by another program or the server stops
    before it answers (with the last line it printed); a server still loading after
    START_WAIT_S is returned as "starting"."""
    require(Permission.SERVE)
    state = server_state()
    if state.answering or state.status == "starting":
        return state
    port = serve_port()
    with open(settings.spawn_lock_path(), "a+") as spawn_lock:
        fcntl.flock(spawn_lock, fcntl.LOCK_EX)
        if _started_pid() is None:
            if not port_free(DEFAULT_HOST, port):
                raise WorkbenchError(
                    N_(
                        "Port {port} on {host} is in use by another program, so the server "
                        "cannot start there: set {variable} to a free port and restart the app."
                    ),
                    port=port,
                    host=DEFAULT_HOST,
                    variable=settings.ENV_SERVE_PORT,
                )
            _spawn(port)
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        state = server_state()
        if state.answering:
            return state
        if state.pid is None:  # it exited before answering
            raise WorkbenchError(
                N_("The server stopped before it answered: {reason}"), reason=_last_log_line()
            )
        time.sleep(0.3)
    return state


def stop_server() -> None:
    """Stop the server this app started (SIGTERM to its PID; its lock tells it is ours), wait
    until it is gone and reaped, and forget its PID (``server.json``)."""
    require(Permission.SERVE)
    pid = _started_pid()
    if pid is None:
        raise WorkbenchError(N_("No server started by this app is running."))
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_stopped(STOP_WAIT_S):  # it did not finish its requests in time
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_stopped(STOP_WAIT_S)
    worker_lock.wait_reaped(pid, STOP_WAIT_S)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = settings.server_record_path()
        if int(json.loads(record.read_text())["pid"]) == pid:  # not a newer server's record
            record.unlink()


def _wait_stopped(timeout_s: float) -> bool:
    """Whether the server's lock was released (its process ended) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while _started_pid() is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _started_pid() -> int | None:
    """The PID of the server this app started, while it runs (its lock is held)."""
    if not worker_lock.lock_held(settings.server_lock_path()):
        return None
    try:
        return int(json.loads(settings.server_record_path().read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _spawn(port: int) -> None:
    """A detached ``python -m workbench serve`` holding the lock from its first instant (the
    caller holds spawn.lock)."""
    record = settings.server_record_path()
    record.unlink(missing_ok=True)  # a dead server's record is never read for this one
    pid = worker_lock.spawn_holding(
        settings.server_lock_path(),
        settings.server_log_path(),
        "serve",
        "--host",
        DEFAULT_HOST,
        "--port",
        str(port),
    )
    record.write_text(json.dumps({"pid": pid, "port": port}))


def _last_log_line() -> str:
    try:
        lines = settings.server_log_path().read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"
