"""CPU the Streamlit server spends while one browser tab watches a training run on Train, or
sits idle on any page.

Starts, on a fresh WORKBENCH_HOME: a worker training a long tiny run on the demo corpus, the
app (`streamlit run streamlit_app.py`, as `make run` does: with `.streamlit/config.toml`), and
one headless Chromium tab on /train. Once the live panel shows progress, it samples the server
process' CPU time (user + system, /proc) over `--seconds`. With `--idle` no run is queued: the
tab watches a page with nothing in progress (`--page`: train, corpus, models, …; an idle app
should cost next to nothing, issue 37). Everything started here is stopped by PID at the end.
Prints one JSON object as the last line: cpu_s, share_of_a_core, steps trained meanwhile, and
the warning lines the app logged.

    .venv/bin/python bench/live_panel_cpu.py --seconds 60 [--idle [--page models]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (not its children), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer in time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--idle", action="store_true", help="no run: nothing in progress")
    parser.add_argument("--page", default="train", help="the page the tab shows (with --idle)")
    args = parser.parse_args()
    if args.page != "train" and not args.idle:
        parser.error("--page is for --idle: a run is watched on train")

    home = Path(tempfile.mkdtemp(prefix="live_panel_cpu_"))
    env = {**os.environ, "WORKBENCH_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("WORKBENCH_DB_URL", None)
    os.environ.update(WORKBENCH_HOME=str(home))
    os.environ.pop("WORKBENCH_DB_URL", None)
    sys.path.insert(0, str(ROOT))
    from bench.processes import free_port, stop
    from workbench.corpus import demo
    from workbench.team import access
    from workbench.training import run_info, runs

    access.use_actor_source(access.local_admin)  # a benchmark acts as the command line does
    info = demo.ensure_demo_corpus()
    run_id = None
    procs: list[subprocess.Popen] = []
    log = open(home / "processes.log", "wb")  # noqa: SIM115 — closed at the end
    try:
        if not args.idle:
            run_id = runs.enqueue_training(info.id, preset="tiny", epochs=200, min_epoch_steps=50)
            worker = [sys.executable, "-m", "workbench", "worker", "--once"]
            procs.append(
                subprocess.Popen(worker, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            )
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "streamlit_app.py",
             "--server.port", str(port), "--server.address", "127.0.0.1",
             "--server.headless", "true", "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append(server)
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/_stcore/health")
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 1000})
                page.goto(f"{url}/{args.page}")
                if args.idle and args.page == "train":
                    page.get_by_text("No run yet").wait_for(timeout=120_000)
                elif args.idle:  # the page's first run is over once its header shows
                    page.locator('[data-testid="stHeading"]').first.wait_for(timeout=120_000)
                    page.wait_for_timeout(5000)
                else:
                    page.get_by_text("Run #1").first.wait_for(timeout=120_000)
                    chart = page.locator('[data-testid="stVegaLiteChart"]').first
                    chart.wait_for(timeout=180_000)
                page.wait_for_timeout(3000)  # past the page's first full render
                step0 = run_info.get_run(run_id).progress_step if run_id else 0
                cpu0, t0 = cpu_seconds(server.pid), time.monotonic()
                page.wait_for_timeout(args.seconds * 1000)
                cpu1, t1 = cpu_seconds(server.pid), time.monotonic()
                run = run_info.get_run(run_id) if run_id else None
            finally:
                browser.close()
        if run_id:
            runs.cancel_run(run_id)
    finally:
        for proc in reversed(procs):
            stop(proc, grace_s=10)
        log.close()
    warnings = [
        line
        for line in (home / "processes.log").read_text(errors="replace").splitlines()
        if "warning" in line.lower() or "Traceback" in line
    ]
    print(
        json.dumps(
            {
                "seconds": round(t1 - t0, 1),
                "cpu_s": round(cpu1 - cpu0, 2),
                "share_of_a_core": round((cpu1 - cpu0) / (t1 - t0), 3),
                "run_status": run.status if run else None,
                "steps_trained": run.progress_step - step0 if run else 0,
                "page": args.page,
                "warning_lines": len(warnings),
                "first_warning": warnings[0] if warnings else None,
                "home": str(home),
            }
        )
    )


if __name__ == "__main__":
    main()
