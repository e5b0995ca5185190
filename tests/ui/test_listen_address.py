"""``make run`` listens on loopback only: without sign-in configured, whoever can reach the UI
is its admin (README: "Opening the UI to a team")."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from bench.processes import stop
from tests.helpers import ROOT, free_port, wait_for

LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp*


def _listening_addresses(port: int) -> set[str]:
    """The local addresses on which some process listens on TCP `port` (IPv4 and IPv6), read
    from /proc/net/tcp and /proc/net/tcp6, e.g. {"127.0.0.1"} or {"0.0.0.0", "::"}."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] != LISTEN or int(hex_port, 16) != port:
                continue
            # the kernel writes each 32-bit word of the address in host (little-endian) order
            raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, width, 8))
            found.add(_text(raw))
    return found


def _text(raw: bytes) -> str:
    ip = ipaddress.ip_address(raw)
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def test_the_config_says_loopback() -> None:
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["server"]["address"] == "127.0.0.1"


def test_streamlit_run_binds_loopback_only(tmp_path: Path) -> None:
    """The real command of `make run` (with only the port changed) listens on 127.0.0.1 and
    on no other address."""
    port = free_port()
    env = {**os.environ, "WORKBENCH_HOME": str(tmp_path / "wb_home")}
    env.pop("WORKBENCH_DB_URL", None)
    log = tmp_path / "streamlit.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "streamlit_app.py",
             "--server.port", str(port), "--server.headless", "true"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(
            lambda: proc.poll() is not None or bool(_listening_addresses(port)),
            timeout=60,
            what="streamlit to listen",
        )
        assert proc.poll() is None, log.read_text()
        assert _listening_addresses(port) == {"127.0.0.1"}, log.read_text()
    finally:
        stop(proc, grace_s=20)
