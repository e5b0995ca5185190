"""The processes a benchmark (or a test) starts itself: a free loopback port for a server, and
stopping one by its PID only (never by name), reaped so that it leaves no zombie behind."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, then SIGKILL if it is still running after `grace_s` seconds; waits for it."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
