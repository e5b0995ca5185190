"""How fast the app answers while a run trains on every core, against an idle machine.

    python -m bench.responsiveness [--data multi30k] [--precision fp32] [--repeats 20]
        [--not-nicer]

On a fresh WORKBENCH_HOME holding the corpus and a small trained version, this process (the
app's priority) times what a user waits for: a Translate click (`translation.translate` of one
sentence, beam 4, the model already loaded) and a Train page run (the page script under
Streamlit's AppTest, live panel included). First with nothing else running, then while a real
worker (`python -m workbench worker`, its data-parallel ranks with it) trains a run with the
product's defaults. The worker runs nicer than the app (`worker.WORKER_NICENESS`), as the
product starts it; `--not-nicer` puts it and its ranks back at the app's priority, to show what
that buys. Everything started here is stopped by PID. Prints one JSON object as the last line:
median and 90th-percentile seconds of each, idle and under load, and their ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = {
    "multi30k": "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
    "tatoeba": "我们明天去公园吧。",
}


def timed(action: Callable[[], object], repeats: int) -> dict[str, float]:
    """Median and 90th percentile of `repeats` timed calls (after one untimed warm-up)."""
    action()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    seconds.sort()
    return {
        "median_s": round(statistics.median(seconds), 4),
        "p90_s": round(seconds[int(0.9 * (len(seconds) - 1))], 4),
    }


def children_of(pid: int) -> list[int]:
    """Direct children of `pid` (the worker's ranks), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=("multi30k", "tatoeba"), default="multi30k")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--not-nicer", action="store_true", help="worker at the app's priority")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="wb-responsiveness-"))
    os.environ["WORKBENCH_HOME"] = str(home)
    os.environ.pop("WORKBENCH_DB_URL", None)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    from streamlit.testing.v1 import AppTest
    from streamlit.util import calc_hash

    from bench import data
    from bench.quality import import_corpus, train_through_product
    from ui import navigation
    from workbench.models import translation
    from workbench.team import access
    from workbench.training import run_info, runs

    access.use_actor_source(access.local_admin)
    pairs = data.splits(args.data)
    src, tgt = data.DATASETS[args.data]
    corpus_id, _ = import_corpus("bench", src, tgt, pairs["train"], pairs["valid"])
    version_id = train_through_product(corpus_id, None, 60_000, args.precision, processes=1)[
        "version_id"
    ]
    sentence = SENTENCE[args.data]

    def translate() -> None:
        translation.translate(version_id, [sentence], beam=4)

    def train_page() -> None:
        at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=120)
        at._page_hash = calc_hash(navigation.TRAIN.url_path)
        at.run()
        assert not at.exception, [e.value for e in at.exception]

    idle = {"translate": timed(translate, args.repeats), "train_page": timed(train_page, 5)}

    run_id = runs.enqueue_training(corpus_id, minutes=30, precision=args.precision)
    worker = subprocess.Popen(
        [sys.executable, "-m", "workbench", "worker", "--once"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while run_info.get_run(run_id).progress_step < 20:  # past the timing of layouts
            if worker.poll() is not None:
                raise SystemExit(f"error: the worker ended: {run_info.get_run(run_id).error}")
            time.sleep(1)
        ranks = children_of(worker.pid)
        if args.not_nicer:
            for pid in [worker.pid, *ranks]:
                os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, 0))
        step0, t0 = run_info.get_run(run_id).progress_step, time.monotonic()
        loaded = {"translate": timed(translate, args.repeats), "train_page": timed(train_page, 5)}
        run = run_info.get_run(run_id)
        steps_per_s = (run.progress_step - step0) / (time.monotonic() - t0)
    finally:
        runs.cancel_run(run_id)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    ratios = {what: round(loaded[what]["median_s"] / idle[what]["median_s"], 2) for what in idle}
    print(
        json.dumps(
            {
                "bench": "responsiveness",
                "data": args.data,
                "precision": args.precision,
                "worker_nicer": not args.not_nicer,
                "processes_training": 1 + len(ranks),
                "cpus": os.cpu_count(),
                "idle": idle,
                "during_run": loaded,
                "ratio_during_run_to_idle": ratios,
                "training_steps_per_s_meanwhile": round(steps_per_s, 2),
                "home": str(home),
            }
        )
    )


if __name__ == "__main__":
    main()
