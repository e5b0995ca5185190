"""The first click: a new user's 16 pairs, the Train button's defaults (automatic budget),
through the product's path — import, queue, a real worker process, the registered version —
then every training pair translated back.

    python -m bench.first_click

Target (issue 9): the 16 pairs learned exactly, in ≤ 10 s of training. Reports the training
time, the steps and tokens/s, the time from the click to a ready version (including the worker
process start and tokenizer training), and how many pairs are reproduced exactly.
The last line printed is one JSON object.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from bench.quality import import_corpus, train_through_product

DEMO = Path(__file__).resolve().parents[1] / "workbench" / "corpus" / "demo_zh_en.tsv"
N_PAIRS = 16


def main() -> None:
    os.environ["WORKBENCH_HOME"] = tempfile.mkdtemp(prefix="wb-first-click-")
    os.environ.pop("WORKBENCH_DB_URL", None)
    rows = [line.split("\t") for line in DEMO.read_text(encoding="utf-8").splitlines()[1:]]
    pairs = [(r[0], r[1]) for r in rows if len(r) >= 2][:N_PAIRS]
    from workbench.models.translation import translate

    corpus_id, _ = import_corpus("first click", "zh", "en", pairs, [])
    ours = train_through_product(corpus_id, None)
    outputs = translate(ours["version_id"], [s for s, _ in pairs])
    exact = sum(o.text == t for o, (_, t) in zip(outputs, pairs, strict=True))
    m = ours["metrics"]
    print(
        json.dumps(
            {
                "bench": "first_click",
                "pairs": len(pairs),
                "reproduced_exactly": exact,
                "train_time_s": m.get("train_time_s"),
                "click_to_ready_s": ours["click_to_ready_s"],
                "steps": m.get("steps"),
                "tokens_per_s": m.get("tokens_per_s"),
                "stop_reason": m.get("stop_reason"),
                "parameters": m.get("parameters"),
                "threads": m.get("threads"),
            }
        )
    )


if __name__ == "__main__":
    main()
