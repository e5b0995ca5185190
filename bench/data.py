"""The shared evaluation data (../shared/data, never copied into the repo), read the same way
by every benchmark.

- Multi30k de→en (task 1, raw): `train`, `val`, `test_2016_flickr`.
- Tatoeba zh→en: no official split, so the product's own rule (``workbench.corpus.splits``): ≈ 90 %
  train, 5 % valid, 5 % test by groups of pairs that share a normalised Chinese or English
  sentence, so no valid/test sentence, on either side, is seen in training. (Until issue 20
  the split went by the English side alone: 261 of its 1,431 test pairs had their Chinese
  sentence in train.)
"""

from __future__ import annotations

import gzip
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MULTI30K = SHARED / "multi30k"
TATOEBA = SHARED / "tatoeba-cmn-eng" / "cmn-eng.tsv.gz"
DATASETS = {"multi30k": ("de", "en"), "tatoeba": ("zh", "en")}

Pairs = list[tuple[str, str]]


def require_file(path: Path) -> None:
    if not path.exists():
        raise SystemExit(f"error: {path} not found (the shared data; see ../shared/data/README.md)")


def read_gz_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def multi30k(split: str) -> Pairs:
    """Pairs of one Multi30k split: 'train', 'val' or 'test_2016_flickr'."""
    require_file(MULTI30K)
    src, tgt = (
        read_gz_lines(MULTI30K / f"{split}.de.gz"),
        read_gz_lines(MULTI30K / f"{split}.en.gz"),
    )
    if len(src) != len(tgt):
        raise SystemExit(f"error: {split}: {len(src)} de lines but {len(tgt)} en lines")
    return list(zip(src, tgt, strict=True))


def tatoeba() -> dict[str, Pairs]:
    """zh→en pairs by split (column 1 of the file is English, column 2 Chinese), normalised and
    de-duplicated as an import stores them, split as an import into an empty corpus would."""
    from workbench.corpus.splits import fresh_splits
    from workbench.corpus.text_rules import normalize_text

    require_file(TATOEBA)
    pairs: dict[tuple[str, str], None] = {}
    for line in read_gz_lines(TATOEBA):
        cols = line.lstrip("\ufeff").split("\t")
        if len(cols) >= 2:
            pair = (normalize_text(cols[1]), normalize_text(cols[0]))
            if all(pair):
                pairs.setdefault(pair)
    ordered = list(pairs)
    out: dict[str, Pairs] = {"train": [], "valid": [], "test": []}
    for pair, split in zip(ordered, fresh_splits(ordered), strict=True):
        out[split].append(pair)
    return out


def splits(dataset: str) -> dict[str, Pairs]:
    """{'train', 'valid', 'test'} pairs of a dataset ('multi30k' | 'tatoeba')."""
    if dataset == "multi30k":
        return {
            "train": multi30k("train"),
            "valid": multi30k("val"),
            "test": multi30k("test_2016_flickr"),
        }
    if dataset == "tatoeba":
        return tatoeba()
    raise SystemExit(f"error: unknown dataset {dataset!r}; use one of {', '.join(DATASETS)}")
