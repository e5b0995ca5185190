"""Score versions on held-out pairs with sacreBLEU (BLEU, chrF) and compare them side by side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import sacrebleu

from core_model.metrics import bleu_tokenizer_for, score
from workbench.errors import WorkbenchError
from workbench.registry import get_version
from workbench.translation import MAX_SENTENCES, translate


def _check(pairs: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
    if not pairs:
        raise WorkbenchError("No pairs to evaluate on: add pairs to the test split first.")
    return [s for s, _ in pairs], [t for _, t in pairs]


def _outputs(version_id: int, sources: list[str], beam: int) -> list[str]:
    """Translations of any number of sentences (the service takes them in chunks)."""
    return [
        r.text
        for start in range(0, len(sources), MAX_SENTENCES)
        for r in translate(version_id, sources[start : start + MAX_SENTENCES], beam=beam)
    ]


def evaluate(version_id: int, pairs: Sequence[tuple[str, str]], beam: int = 1) -> dict:
    """{'bleu', 'chrf', 'n'} of the version's translations against the references."""
    sources, references = _check(pairs)
    outputs = _outputs(version_id, sources, beam)
    return score(outputs, references, bleu_tokenizer_for(references))


@dataclass
class Comparison:
    metrics: pd.DataFrame  # one row per version: version, name, bleu, chrf, n
    sentences: pd.DataFrame  # source, reference, then per version: output and chrF; differs


def compare(
    version_ids: Sequence[int], pairs: Sequence[tuple[str, str]], beam: int = 1
) -> Comparison:
    """Translate the same pairs with every version; corpus scores plus per-sentence chrF."""
    if len(set(version_ids)) < 2:
        raise WorkbenchError("Pick at least two different versions to compare.")
    sources, references = _check(pairs)
    tokenize = bleu_tokenizer_for(references)
    sentences = pd.DataFrame({"source": sources, "reference": references})
    metric_rows = []
    output_columns = []
    for version_id in version_ids:
        label = f"#{version_id}"
        outputs = _outputs(version_id, sources, beam)
        metric_rows.append(
            {"version": version_id, "name": get_version(version_id).name}
            | score(outputs, references, tokenize)
        )
        sentences[label] = outputs
        sentences[f"chrF {label}"] = [
            round(sacrebleu.sentence_chrf(o, [r]).score, 1)
            for o, r in zip(outputs, references, strict=True)
        ]
        output_columns.append(label)
    sentences["differs"] = sentences[output_columns].nunique(axis=1) > 1
    return Comparison(pd.DataFrame(metric_rows), sentences)
