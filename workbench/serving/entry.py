"""The entry point of ``python -m workbench serve``: uvicorn with the app of ``http_app``, in one
or several processes.

Each process loads the served versions once (the registry caches loaded versions) and keeps
its own batcher, limits and metrics. The config reaches the processes through the
environment (``settings.serve_config``), which ``--workers`` needs: uvicorn starts each
worker from the app's import path.
"""

from __future__ import annotations

import copy
import errno
import ipaddress
import os
import socket
import sys

from workbench import settings
from workbench.errors import WorkbenchError
from workbench.messages import N_
from workbench.serving.config import ServeConfig

APP_FACTORY = "workbench.serving.http_app:app_from_environment"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_anonymous_network(host: str, config: ServeConfig, allow_anonymous: bool) -> None:
    """Refuse (``WorkbenchError``) to listen beyond this machine without keys unless anonymous
    access was asked for: anyone on the network could then translate and read
    ``/v1/versions`` and ``/metrics``."""
    if config.require_keys and allow_anonymous:
        raise WorkbenchError(
            N_(
                "--require-keys and --allow-anonymous contradict each other: choose one "
                "(--allow-anonymous serves without keys)"
            )
        )
    if config.require_keys or allow_anonymous or is_loopback(host):
        return
    raise WorkbenchError(
        N_(
            "not serving on {host} without API keys: anyone who can reach this machine could "
            "use it. Create keys and add --require-keys, or add --allow-anonymous to serve "
            "everyone"
        ),
        host=host,
    )


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host``:``port`` now, bound as uvicorn binds
    (connections of an earlier server still closing do not count); any other reason not to
    listen there (an address not of this machine, a name that does not resolve) is a
    ``WorkbenchError``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise WorkbenchError(
                N_("cannot listen on {host} port {port}: {reason}"),
                host=host,
                port=port,
                reason=exc.strerror or exc,
            ) from None
    return True


def startup_lines(host: str, port: int, workers: int, config: ServeConfig) -> list[str]:
    """What the server says when it starts: where it listens and who may use it."""
    lines = [
        f"Serving translations on http://{host}:{port} ({workers} process"
        f"{'es' if workers > 1 else ''}; LibreTranslate protocol and /v1, docs at /docs)"
    ]
    if config.require_keys:
        lines.append("API keys are required (create them on the Models page or `api-key-create`).")
    elif is_loopback(host):
        lines.append(
            f"API keys are off, so the server listens on {host} only: programs on this machine "
            "can use it. To serve others, create keys and start with --require-keys --host 0.0.0.0."
        )
    else:
        lines.append(
            f"warning: API keys are off (--allow-anonymous) and the server listens on {host}: "
            "anyone who can reach this machine can use it."
        )
    if workers > 1 and config.requests_per_minute:
        lines.append("Rate limits are counted in each process: a client may reach N times them.")
    return lines


def run_server(host: str, port: int, workers: int, config: ServeConfig) -> None:
    """Serve until interrupted; a port already taken is one ``WorkbenchError`` line, before
    uvicorn starts (it would log its own failure over several lines and exit 3)."""
    if not port_free(host, port):
        raise WorkbenchError(N_("port {port} on {host} is already in use"), port=port, host=host)
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    os.environ[settings.ENV_SERVE_CONFIG] = config.to_json()
    for line in startup_lines(host, port, workers, config):
        print(line, file=sys.stderr, flush=True)
    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["loggers"]["workbench"] = {"handlers": ["default"], "level": "INFO"}
    uvicorn.run(
        APP_FACTORY,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,  # the app logs each request itself, without its query string
        log_config=log_config,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=int(config.timeout_s),
    )
