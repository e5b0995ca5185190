"""Score versions on held-out pairs with sacreBLEU (BLEU, chrF) and compare them side by side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import sacrebleu

from core_model.artifact import ArtifactError, read_config
from core_model.metrics import bleu_tokenizer_for, score
from workbench.corpus.glossary import Glossary, term_hits
from workbench.errors import WorkbenchError
from workbench.evaluation import significance
from workbench.messages import N_, Message
from workbench.models.registry import artifact_dir, get_version
from workbench.models.translation import MAX_SENTENCES, decoding_label, translate


def _check(pairs: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
    if not pairs:
        raise WorkbenchError(N_("No pairs to evaluate on: add pairs to the test split first."))
    return [s for s, _ in pairs], [t for _, t in pairs]


def _outputs(
    version_id: int, sources: list[str], beam: int, glossary: Glossary | None = None
) -> list[str]:
    """Translations of any number of sentences (the service takes them in chunks)."""
    return [
        r.text
        for start in range(0, len(sources), MAX_SENTENCES)
        for r in translate(
            version_id, sources[start : start + MAX_SENTENCES], beam=beam, glossary=glossary
        )
    ]


def _term_scores(sources: list[str], outputs: list[str], glossary: Glossary | None) -> dict:
    """{'term_hits', 'terms', 'term_hit_rate'} when there is a glossary, else {}."""
    if not glossary:
        return {}
    hits, required = term_hits(sources, outputs, glossary)
    rate = round(hits / required, 4) if required else None
    return {"term_hits": hits, "terms": required, "term_hit_rate": rate}


def evaluate(
    version_id: int,
    pairs: Sequence[tuple[str, str]],
    beam: int = 1,
    glossary: Glossary | None = None,
    enforce: bool = False,
) -> dict:
    """{'bleu', 'chrf', 'n'} of the version's translations against the references; with a
    `glossary`, also how many of its required terms the outputs contain ('term_hits' of
    'terms', 'term_hit_rate'), and with `enforce` the translations obey it."""
    sources, references = _check(pairs)
    outputs = _outputs(version_id, sources, beam, glossary if enforce else None)
    scores = score(outputs, references, bleu_tokenizer_for(references))
    return scores | _term_scores(sources, outputs, glossary)


@dataclass
class Comparison:
    """Versions scored on the same pairs; the first version is the baseline of the paired
    bootstrap (``workbench.evaluation.significance``)."""

    # One row per version: version, name, bleu, bleu_low, bleu_high, chrf, chrf_low,
    # chrf_high (95 % percentile intervals), p_value (BLEU, vs the baseline; None for it and
    # when `withheld`), chrf_p_value, n; with a glossary also term_hits, terms, term_hit_rate.
    metrics: pd.DataFrame
    # source, reference, then per version: output and chrF, and for every version after the
    # first "Δ chrF #id" (its sentence chrF minus the baseline's); differs.
    sentences: pd.DataFrame
    # per version after the first, in words (see significance.verdict); ``Message``s: a page
    # shows them through ``ui.i18n.localized``
    verdicts: list[Message]
    seed: str  # the bootstrap's seed
    # Why there are no p-values and no verdicts (too few test pairs); None when there are.
    withheld: Message | None = None

    def as_dict(self) -> dict:
        """What ``workbench compare`` prints: per version bleu, chrf, their 95 % intervals
        and p_value against the first version; `verdict_withheld` says why p-values and
        verdicts are missing (too few test pairs), null when they are given."""
        versions = []
        for row in self.metrics.to_dict(orient="records"):
            versions.append(
                {
                    "version": int(row["version"]),
                    "name": row["name"],
                    "bleu": row["bleu"],
                    "bleu_ci95": [row["bleu_low"], row["bleu_high"]],
                    "chrf": row["chrf"],
                    "chrf_ci95": [row["chrf_low"], row["chrf_high"]],
                    "p_value": _none_if_nan(row["p_value"]),
                    "chrf_p_value": _none_if_nan(row["chrf_p_value"]),
                    "n": int(row["n"]),
                }
                | {k: row[k] for k in ("term_hits", "terms", "term_hit_rate") if k in row}
            )
        return {
            "baseline": versions[0]["version"],
            "versions": versions,
            "verdicts": self.verdicts,
            "verdict_withheld": self.withheld,
            "min_verdict_pairs": significance.MIN_VERDICT_PAIRS,
            "interval": significance.INTERVAL_KIND,
            "resamples": significance.RESAMPLES,
            "seed": self.seed,
        }


def _none_if_nan(value: float | None) -> float | None:
    return None if value is None or value != value else float(value)


def delta_column(version_id: int) -> str:
    """The per-sentence column of a version's chrF minus the baseline's."""
    return f"Δ chrF #{version_id}"


def compare(
    version_ids: Sequence[int],
    pairs: Sequence[tuple[str, str]],
    beam: int = 1,
    glossary: Glossary | None = None,
    enforce: bool = False,
) -> Comparison:
    """Translate the same pairs with every version: corpus BLEU/chrF with 95 % intervals,
    p-values and verdicts against the first version (paired bootstrap; none below
    ``significance.MIN_VERDICT_PAIRS`` pairs), per-sentence chrF and its
    difference from the first version; with a `glossary`, each version's term-hit rate
    (and with `enforce`, translations that obey it)."""
    if len(version_ids) < 2 or len(set(version_ids)) < len(version_ids):
        raise WorkbenchError(N_("Pick at least two different versions to compare."))
    sources, references = _check(pairs)
    tokenize = bleu_tokenizer_for(references)
    sentences = pd.DataFrame({"source": sources, "reference": references})
    outputs: list[list[str]] = []
    output_columns = []
    for version_id in version_ids:
        label = f"#{version_id}"
        out = _outputs(version_id, sources, beam, glossary if enforce else None)
        outputs.append(out)
        sentences[label] = out
        sentences[f"chrF {label}"] = [
            round(sacrebleu.sentence_chrf(o, [r]).score, 1)
            for o, r in zip(out, references, strict=True)
        ]
        output_columns.append(label)
    base = f"chrF #{version_ids[0]}"
    for version_id in version_ids[1:]:
        sentences[delta_column(version_id)] = (
            sentences[f"chrF #{version_id}"] - sentences[base]
        ).round(1)
    sentences["differs"] = sentences[output_columns].nunique(axis=1) > 1

    paired = significance.paired_bootstrap(outputs, references, tokenize)
    metric_rows = []
    for version_id, estimate, out in zip(version_ids, paired.estimates, outputs, strict=True):
        bleu, chrf = estimate["bleu"], estimate["chrf"]
        metric_rows.append(
            {
                "version": version_id,
                "name": get_version(version_id).name,
                "bleu": bleu.score,
                "bleu_low": bleu.interval[0],
                "bleu_high": bleu.interval[1],
                "chrf": chrf.score,
                "chrf_low": chrf.interval[0],
                "chrf_high": chrf.interval[1],
                "p_value": bleu.p_value,
                "chrf_p_value": chrf.p_value,
                "n": len(sources),
            }
            | _term_scores(sources, out, glossary)
        )
    baseline = f"#{version_ids[0]}"
    verdicts = [
        significance.verdict(f"#{version_id}", baseline, estimate, paired.estimates[0])
        for version_id, estimate in zip(version_ids[1:], paired.estimates[1:], strict=True)
        if not paired.withheld
    ]
    return Comparison(pd.DataFrame(metric_rows), sentences, verdicts, paired.seed, paired.withheld)


# --------------------------------------------------------------- what a score measures


@dataclass(frozen=True)
class ScoreBasis:
    """The data and decoding behind a BLEU/chrF: scores on different bases do not compare."""

    split: str  # "validation" or "test"
    pairs: int
    beam: int | None  # None: not recorded

    def __str__(self) -> str:
        return self.label()

    def label(self) -> Message:
        """ "validation · 3 pairs · greedy" (a page shows it through ``ui.i18n.localized``)."""
        split = SPLIT_LABELS.get(self.split, self.split)
        if self.beam is None:
            msgid = (
                N_("{split} · {pairs:,} pair")
                if self.pairs == 1
                else N_("{split} · {pairs:,} pairs")
            )
            return Message(msgid, split=split, pairs=self.pairs)
        msgid = (
            N_("{split} · {pairs:,} pair · {decoding}")
            if self.pairs == 1
            else N_("{split} · {pairs:,} pairs · {decoding}")
        )
        return Message(msgid, split=split, pairs=self.pairs, decoding=decoding_label(self.beam))


# the splits a score is measured on, as a score's basis names them
SPLIT_LABELS = {"validation": Message(N_("validation")), "test": Message(N_("test"))}


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


def training_scores_note(version_id: int) -> Message:
    """What a version's recorded scores were measured on, or why it has none: a table that
    shows "—" for a score says why in the same row (a page shows it through
    ``ui.i18n.localized``)."""
    basis = training_scores_basis(version_id)
    if basis is not None:
        return basis.label()
    info = get_version(version_id)
    if info.metrics.get("valid_loss") is not None:
        return Message(N_("validation loss only: no BLEU/chrF measured"))
    if info.run_id is None:
        return Message(N_("not recorded: the version was imported"))
    if not info.metrics.get("valid_pairs"):
        return Message(N_("not measured: its run had no validation pairs"))
    return Message(N_("not measured at the end of its run (trained before scores were kept)"))
