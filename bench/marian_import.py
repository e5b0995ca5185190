"""A real-size Marian (OPUS-MT) model in the workbench: import, translate, inspect, fine-tune.

    python -m bench.marian_import [--workdir DIR] [--threads N] [--seconds S]

Builds a **random** MarianMTModel of OPUS-MT's size (6+6 layers, d_model 512, 8 heads, FFN
2048, opus-mt-de-en's 58,101-piece vocabulary: 74M parameters; opus-mt-zh-en's 65,001
pieces make 77M; bench/marian_checkpoint.py, nothing is downloaded) and measures, in a fresh
WORKBENCH_HOME:

- import: `model_import.import_version` of the folder (convert, check, digest, register), and
  `core_model.marian.read_marian` alone (target: under 10 s);
- translate: one 10-word sentence through the CLI (`python -m workbench translate`, a new
  process: Python and torch start-up included) and through the Translate page (AppTest);
- inspect: the Inspect page (AppTest) on that sentence, greedy: 6 layers x 8 heads = 48
  maps per attention kind (target: under 3 s), and the service it calls;
- fine-tuning throughput: full training steps (forward, label-smoothed loss, backward,
  clipping, Adam; `core_model.training.calibration.measure`, the loop's own math) in fp32 on
  the CPU, for this model and for the CPU `small` preset (8k vocabulary): source + target
  tokens per second, and the ratio the recipe's `relative_cost` predicts.

The last line printed is one JSON object. Timings depend on the machine and on whatever else
runs on it: say so when reporting them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "我 每天 早上 在 学校 和 朋友 喝 一杯 咖啡"  # 10 words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="where the files go (default: a temp dir)")
    parser.add_argument("--threads", type=int, default=torch_threads(), help="CPU threads")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed training seconds")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench.home import fresh_home

    workdir = fresh_home(args.workdir, "marian-bench-")

    import torch

    torch.set_num_threads(args.threads)
    from bench.marian_checkpoint import OPUS_MT_SIZE, save_random_marian
    from core_model.marian import read_marian
    from workbench.models import model_import, registry

    report: dict = {"threads": args.threads, "cpu_count": os.cpu_count()}
    started = time.perf_counter()
    folder = save_random_marian(workdir / "opus-mt-zh-en", spm_size=2_000, **OPUS_MT_SIZE)
    report["build_random_checkpoint_s"] = round(time.perf_counter() - started, 2)
    report["checkpoint_mb"] = round(sum(f.stat().st_size for f in folder.iterdir()) / 2**20, 1)

    started = time.perf_counter()
    opened = read_marian(folder)
    report["read_marian_s"] = round(time.perf_counter() - started, 2)
    report["parameters"] = opened.model.num_parameters()
    del opened
    registry.list_versions()  # the database exists before the clock starts
    started = time.perf_counter()
    version_id = model_import.import_version(folder)
    report["import_s"] = round(time.perf_counter() - started, 2)

    report |= translate_cli(version_id)
    report |= time_pages(version_id)
    report |= throughput(args.seconds, args.threads)
    print(json.dumps(report))


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def translate_cli(version_id: int) -> dict:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "translate", "--version", str(version_id), SENTENCE],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return {
        "translate_cli_s": round(time.perf_counter() - started, 2),
        "translate_cli_output_chars": len(done.stdout.strip()),
    }


def time_pages(version_id: int) -> dict:
    """The Translate and Inspect pages under AppTest, and the inspection service."""
    from streamlit.testing.v1 import AppTest
    from streamlit.util import calc_hash

    from ui import navigation
    from workbench.evaluation.inspection import inspect

    out: dict = {}
    started = time.perf_counter()
    seen = inspect(version_id, SENTENCE, beam=1)
    out["inspect_service_first_s"] = round(time.perf_counter() - started, 2)  # loads the model
    started = time.perf_counter()
    seen = inspect(version_id, SENTENCE, beam=1)
    out["inspect_service_s"] = round(time.perf_counter() - started, 2)
    maps = seen.inspection.encoder_self
    out["maps_per_attention_kind"] = len(maps) * len(maps[0])
    out["source_pieces"] = len(seen.inspection.src_pieces)
    out["output_pieces"] = len(seen.inspection.out_pieces)

    for name, page, text_key, button in (
        ("translate", navigation.TRANSLATE, "translate_input", "translate"),
        ("inspect", navigation.INSPECT, "inspect_text", "inspect"),
    ):
        at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=600)
        at.run()
        at._page_hash = calc_hash(page.url_path)
        at.run()
        if name == "translate":
            at.text_area(key=text_key).input(SENTENCE)
        else:
            at.text_input(key=text_key).input(SENTENCE)
            at.button_group(key="inspect_mode").set_value("Greedy")
        started = time.perf_counter()
        at.button(key=button).click().run()
        out[f"{name}_page_s"] = round(time.perf_counter() - started, 2)
        assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    return out


def throughput(seconds: float, threads: int) -> dict:
    """Training tokens per second (fp32, CPU) of this model and of the `small` preset."""
    import torch

    from bench.marian_checkpoint import opus_mt_config
    from core_model.training import recipe
    from core_model.training.calibration import measure
    from core_model.transformer import ModelConfig

    marian = opus_mt_config()
    small = ModelConfig.from_preset("small", src_vocab_size=8_000, tgt_vocab_size=8_000)
    cpu = torch.device("cpu")
    out: dict = {}
    for name, cfg in (("marian", marian), ("small", small)):
        for batch in recipe.CPU_BATCH_TOKENS:
            speed = measure(cfg, batch, [(20, 20)] * 64, cpu, "fp32", threads, seconds=seconds)
            out[f"train_tokens_per_s_{name}_batch{batch}"] = speed.tokens_per_s
    ratios = [
        out[f"train_tokens_per_s_small_batch{b}"] / out[f"train_tokens_per_s_marian_batch{b}"]
        for b in recipe.CPU_BATCH_TOKENS
    ]
    out["measured_slowdown_vs_small"] = [round(r, 1) for r in ratios]
    out["predicted_slowdown_vs_small"] = round(recipe.relative_cost(marian), 1)
    return out


if __name__ == "__main__":
    main()
