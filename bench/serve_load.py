"""The HTTP server under load: N concurrent clients against one small model.

    python -m bench.serve_load [--minutes M | --version ID] [--seconds S] [--clients 1 8 32]

The real server (`python -m workbench serve` on a free 127.0.0.1 port) serves one version:
by default a model trained for M minutes through the product (bench/quality.py's path) on
Multi30k de→en in a fresh WORKBENCH_HOME; with --version, that version of the current
WORKBENCH_HOME (which then becomes the served version of its pair). Each client sends one
Multi30k validation sentence per LibreTranslate request (`POST /translate`), the next as
soon as the answer arrives, for S seconds; all clients draw from one shuffled pool in the
same order, so every run translates a prefix of the same sequence. The server is stopped
(by its PID) after each part; the clients run in this process, on the same CPU.

First the baseline: one sequential client against the server started with --no-batching
(every request decoded on its own). Then the batching server with 1, 8 and 32 clients.
For each: requests/s, sentences/s, p50/p95/p99 latency, errors (must be 0) and the server's
mean decoder batch (from /metrics). Target: ≥ 4× the baseline's sentences/s at 32 clients.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench import data
from bench.processes import free_port, stop
from workbench.serving.metrics import percentile

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 4.0


def percentile_ms(values: list[float], q: float) -> float:
    """The q-quantile of latencies in seconds, in milliseconds."""
    return round(percentile(values, q) * 1000, 1)


def start_server(*args: str) -> tuple[subprocess.Popen, str]:
    """`workbench serve` (one uvicorn process) on a free 127.0.0.1 port, once healthy."""
    port = free_port()
    command = ["serve", "--host", "127.0.0.1", "--port", str(port), *args]
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", *command],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"error: the server exited with {proc.returncode}")
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    return proc, url
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise SystemExit("error: the server did not become ready")
    except BaseException:
        stop(proc, grace_s=30)
        raise


def decoder_counters(url: str, version_id: int) -> tuple[float, float]:
    """(decoder batches, sentences decoded) of the version, from /metrics."""
    values = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        for name in ("workbench_decoder_batches_total", "workbench_sentences_translated_total"):
            if line.startswith(f'{name}{{version="{version_id}"}} '):
                values[name] = float(line.split()[-1])
    return (
        values.get("workbench_decoder_batches_total", 0.0),
        values.get("workbench_sentences_translated_total", 0.0),
    )


async def send_load(url: str, pool: list[str], clients: int, seconds: float) -> dict:
    """`clients` concurrent clients, each sending its next sentence when answered."""
    latencies: list[float] = []
    errors: list[str] = []
    position = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as session:

        async def client() -> None:
            nonlocal position
            while time.monotonic() < stop_at:
                text = pool[position % len(pool)]
                position += 1
                sent = time.monotonic()
                try:
                    answer = await session.post(
                        f"{url}/translate", json={"q": text, "source": "de", "target": "en"}
                    )
                except httpx.HTTPError as exc:
                    errors.append(type(exc).__name__)
                    continue
                try:
                    body = answer.json()
                except ValueError:
                    body = None
                translated = body.get("translatedText") if isinstance(body, dict) else None
                if answer.status_code != 200 or not isinstance(translated, str):
                    errors.append(f"{answer.status_code} {answer.text[:100]}")
                    continue
                latencies.append(time.monotonic() - sent)

        started = time.monotonic()
        stop_at = started + seconds
        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed = time.monotonic() - started
    return {
        "clients": clients,
        "seconds": round(elapsed, 2),
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / elapsed, 2),
        "sentences_per_s": round(len(latencies) / elapsed, 2),  # one sentence per request
        "p50_ms": percentile_ms(latencies, 0.5),
        "p95_ms": percentile_ms(latencies, 0.95),
        "p99_ms": percentile_ms(latencies, 0.99),
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:3],
    }


def measure(url: str, version_id: int, pool: list[str], clients: int, seconds: float) -> dict:
    asyncio.run(send_load(url, pool[:64], 1, 3.0))  # warm-up: first calls, allocator, caches
    before = decoder_counters(url, version_id)
    result = asyncio.run(send_load(url, pool, clients, seconds))
    after = decoder_counters(url, version_id)
    batches, sentences = after[0] - before[0], after[1] - before[1]
    result["mean_decoder_batch"] = round(sentences / batches, 2) if batches else None
    print(json.dumps(result), file=sys.stderr, flush=True)
    return result


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def main() -> None:
    from workbench.team import access

    access.use_actor_source(access.local_admin)  # a benchmark acts as the command line does
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--minutes", type=float, default=2.0, help="train a model this long")
    which.add_argument("--version", type=int, help="serve this version of WORKBENCH_HOME")
    p.add_argument("--seconds", type=float, default=15.0, help="length of each load run")
    p.add_argument("--clients", type=positive, nargs="+", default=[1, 8, 32])
    p.add_argument("--pool", type=int, default=1000, help="validation sentences to draw from")
    args = p.parse_args()

    pool = [s for s, _ in data.multi30k("val")][: args.pool]
    random.Random(0).shuffle(pool)
    if args.version is None:
        os.environ["WORKBENCH_HOME"] = tempfile.mkdtemp(prefix="serve_load_")
        os.environ.pop("WORKBENCH_DB_URL", None)
        from bench.quality import import_corpus, train_through_product

        print(f"training a model for {args.minutes:g} min…", file=sys.stderr, flush=True)
        corpus_id, _ = import_corpus(
            "multi30k", "de", "en", data.multi30k("train"), data.multi30k("val")[:200]
        )
        trained = train_through_product(corpus_id, args.minutes)
        version_id = trained["version_id"]
    else:
        version_id = args.version
    from workbench.models.registry import get_version
    from workbench.serving.served import serve_version

    serve_version(version_id)
    info = get_version(version_id)
    model = {
        "version_id": version_id,
        "pair": f"{info.src_lang}→{info.tgt_lang}",
        "parameters": info.param_count,
        "training_steps": info.metrics.get("steps"),
        "valid_bleu": info.metrics.get("bleu"),
    }

    proc, url = start_server("--no-batching")
    try:
        baseline = measure(url, version_id, pool, 1, args.seconds)
    finally:
        stop(proc, grace_s=30)
    proc, url = start_server()
    try:
        batched = {str(n): measure(url, version_id, pool, n, args.seconds) for n in args.clients}
    finally:
        stop(proc, grace_s=30)

    most = str(max(args.clients))
    ratio = batched[most]["sentences_per_s"] / max(baseline["sentences_per_s"], 1e-9)
    errors = baseline["errors"] + sum(r["errors"] for r in batched.values())
    print(
        json.dumps(
            {
                "model": model,
                "seconds_per_run": args.seconds,
                "baseline_sequential_unbatched": baseline,
                "batched": batched,
                f"ratio_{most}_clients_vs_baseline": round(ratio, 2),
                "target_ratio": TARGET_RATIO,
                "errors": errors,
                "target_met": ratio >= TARGET_RATIO and errors == 0,
                "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
