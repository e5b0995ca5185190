"""The PostgreSQL client tools a backup and a restore run: ``pg_dump`` / ``pg_restore`` at
least as new as the server (``pg_tool``), a connection for them that keeps the password off
the command line (``libpq``), and running one with its first error line as a
``WorkbenchError`` (``run_pg``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL

from workbench import settings
from workbench.errors import WorkbenchError
from workbench.messages import N_

_PG_VERSION = re.compile(r"\(PostgreSQL\)\s+(\d+)")


def server_major(conn: Connection) -> int:
    return int(conn.execute(text("SHOW server_version_num")).scalar_one()) // 10000


def libpq(url: URL) -> tuple[str, dict[str, str]]:
    """A libpq connection URI for the tools (the password goes in the environment, never
    on a command line that ``ps`` shows)."""
    conninfo = url.set(drivername="postgresql", password=None)
    env = {**os.environ}
    if url.password:
        env["PGPASSWORD"] = str(url.password)
    return conninfo.render_as_string(hide_password=False), env


def pg_tool(name: str, server_major: int) -> str:
    """``pg_dump`` / ``pg_restore`` at least as new as the server: from WORKBENCH_PG_BINDIR,
    the server version's own bin folder, PATH, or any installed version."""
    candidates: list[Path] = []
    configured = settings.pg_bindir()
    if configured:
        candidates.append(configured / name)
    candidates.append(Path(f"/usr/lib/postgresql/{server_major}/bin/{name}"))
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    candidates += sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
        reverse=True,
    )
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            version = _tool_major(candidate)
            if version is not None and version >= server_major:
                return str(candidate)
    raise WorkbenchError(
        N_(
            "{tool} {major} or newer is needed for this PostgreSQL server: install the "
            "PostgreSQL {major} client tools or set {variable}"
        ),
        tool=name,
        major=server_major,
        variable=settings.ENV_PG_BINDIR,
    )


def _tool_major(tool: Path) -> int | None:
    try:
        out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    match = _PG_VERSION.search(out.stdout)
    return int(match.group(1)) if match else None


def run_pg(command: list[str], env: dict[str, str]) -> str:
    """Run a PostgreSQL tool; its first error line becomes a ``WorkbenchError``."""
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        reason = next(
            (line for line in lines if "error" in line.lower()), lines[0] if lines else ""
        )
        raise WorkbenchError(
            N_("{tool} failed: {reason}"), tool=Path(command[0]).name, reason=reason.strip()
        )
    return done.stdout
