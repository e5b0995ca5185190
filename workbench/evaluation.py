"""Score versions on held-out pairs with sacreBLEU (BLEU, chrF) and compare them side by side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import sacrebleu

from core_model.artifact import ArtifactError, read_config
from core_model.metrics import bleu_tokenizer_for, score
from workbench.errors import WorkbenchError
from workbench.registry import artifact_dir, get_version
from workbench.translation import MAX_SENTENCES, decoding_label, translate

# A comparison on fewer test pairs than this is mostly chance: the UI warns (and so should
# any other front end that shows a BLEU difference).
MIN_RELIABLE_PAIRS = 50


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


# --------------------------------------------------------------- what a score measures


@dataclass(frozen=True)
class ScoreBasis:
    """The data and decoding behind a BLEU/chrF: scores on different bases do not compare."""

    split: str  # "validation" or "test"
    pairs: int
    beam: int | None  # None: not recorded

    def __str__(self) -> str:
        decoding = "" if self.beam is None else f" · {decoding_label(self.beam)}"
        return f"{self.split} · {self.pairs:,} pair{'' if self.pairs == 1 else 's'}{decoding}"


def training_scores_basis(version_id: int) -> ScoreBasis | None:
    """What the BLEU/chrF recorded at the end of a version's training measure: its run's
    validation pairs (at most the run's `valid_max_sentences`), decoded with `valid_beam`.
    None when the version has no such scores."""
    info = get_version(version_id)
    if info.metrics.get("bleu") is None:
        return None
    try:
        training = read_config(artifact_dir(version_id)).get("training") or {}
    except ArtifactError:  # files missing: say what is known
        training = {}
    pairs = int(info.metrics.get("valid_pairs") or 0)
    if training.get("valid_max_sentences") is not None:
        pairs = min(pairs, int(training["valid_max_sentences"]))
    beam = training.get("valid_beam")
    return ScoreBasis("validation", pairs, None if beam is None else int(beam))
