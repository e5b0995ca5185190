"""Is one version really better than another? sacreBLEU's paired bootstrap resampling.

Every version's outputs are resampled together with the baseline's (the same 1,000 random
test sets, drawn with replacement from the sentences), which gives each score a 95 %
confidence interval and each version a p-value against the baseline: roughly the chance of a
difference at least this large if both versions were the same system. The implementation is
sacreBLEU's own (``sacrebleu.significance.PairedTest``, the code behind its CLI's
``--paired-bs``), seeded as its CLI is (``SACREBLEU_SEED``, default 12345), so the numbers
here are the numbers ``sacrebleu REF -i A B --paired-bs`` prints for the same files.

The 95 % interval is the bootstrap's **percentile interval**: the 2.5th and 97.5th percentiles
of the score over the same resamples (the bounds sacreBLEU itself sorts out, at the same
indices). sacreBLEU prints it as mean ± half its width, which on a skewed distribution can
name impossible scores (a BLEU interval of [−0.57, 4.95]); the percentile bounds are scores of
actual resamples, so they always lie within [0, 100] and contain every likely score.

Below ``MIN_VERDICT_PAIRS`` test pairs no p-value and no verdict is given (only the scores
and their intervals): a bootstrap of a handful of sentences calls chance differences
"significant". Every front end (page, CLI, HTTP) reads that one constant.

Pure: text in, numbers and sentences out; ``workbench.evaluation.evaluation`` decodes the outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workbench.messages import N_, Message

if TYPE_CHECKING:  # sacreBLEU and numpy load with the first test: the CLI's --help reads
    from sacrebleu.metrics.base import Metric  # the constants below without them

RESAMPLES = 1_000
SIGNIFICANCE_LEVEL = 0.05  # below this p-value a difference is called significant
METRICS = ("bleu", "chrf")
# Fewer test pairs than this: scores and intervals only, no p-value and no verdict.
MIN_VERDICT_PAIRS = 50
# what the 95 % interval is, for help texts (a message id: a page translates it)
INTERVAL_KIND = N_("bootstrap percentile interval")


@dataclass(frozen=True)
class Estimate:
    """One metric of one version: its score on the test set and what resampling says."""

    score: float  # on the whole test set (the number sacreBLEU reports)
    mean: float  # mean over the bootstrap resamples
    low: float  # 95 % percentile interval: the 2.5th percentile of the resampled scores …
    high: float  # … and the 97.5th
    p_value: float | None  # against the baseline; None for the baseline and on too few pairs

    @property
    def interval(self) -> tuple[float, float]:
        return (self.low, self.high)


@dataclass(frozen=True)
class PairedResult:
    """Per system (in the order given; the first is the baseline): metric name → estimate."""

    estimates: list[dict[str, Estimate]]
    seed: str  # the resampling seed sacreBLEU used ("none": not seeded)
    withheld: Message | None = None  # why there are no p-values (too few pairs); None: there are


def too_few_pairs(pairs: int) -> Message | None:
    """Why a test of `pairs` sentence pairs gets no p-value or verdict; None when it does."""
    if pairs >= MIN_VERDICT_PAIRS:
        return None
    msgid = (
        N_(
            "only {n} test pair: below {minimum} a difference between versions is mostly "
            "chance, so no p-value or verdict is given"
        )
        if pairs == 1
        else N_(
            "only {n} test pairs: below {minimum} a difference between versions is mostly "
            "chance, so no p-value or verdict is given"
        )
    )
    return Message(msgid, n=pairs, minimum=MIN_VERDICT_PAIRS)


def paired_bootstrap(
    systems: Sequence[Sequence[str]],
    references: Sequence[str],
    tokenize: str,
    resamples: int = RESAMPLES,
) -> PairedResult:
    """BLEU and chrF of every system with 95 % percentile intervals, and p-values of
    systems[1:] against systems[0] (paired bootstrap, ``resamples`` resamples); no p-values
    below ``MIN_VERDICT_PAIRS`` references (``PairedResult.withheld`` says why)."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    if len(systems) < 2:
        raise ValueError("a paired test needs a baseline and at least one other system")
    refs = [list(references)]
    metrics = {"bleu": BLEU(tokenize=tokenize, references=refs), "chrf": CHRF(references=refs)}
    named = [(str(i), list(hyps)) for i, hyps in enumerate(systems)]
    test = PairedTest(named, metrics, references=None, test_type="bs", n_samples=resamples)
    signatures, scores = test()
    withheld = too_few_pairs(len(references))
    # sacreBLEU names its result columns after the metrics' score names ("BLEU", "chrF2"),
    # in the order of `metrics`.
    columns = [name for name in scores if name != "System"]
    estimates = []
    for i, hyps in enumerate(systems):
        estimate = {}
        for key, column in zip(METRICS, columns, strict=True):
            r = scores[column][i]
            low, high = _percentile_interval(metrics[key], hyps, resamples)
            p = None if r.p_value is None or withheld else round(float(r.p_value), 4)
            estimate[key] = Estimate(
                round(float(r.score), 2), round(float(r.mean), 2), low, high, p
            )
        estimates.append(estimate)
    seed = next(iter(signatures.values())).info.get("seed", "12345")
    return PairedResult(estimates, str(seed), withheld)


def _percentile_interval(
    metric: Metric, hyps: Sequence[str], resamples: int
) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the score over the bootstrap resamples: the same
    resamples (seed and indices) and the same bounds as sacreBLEU's ``estimate_ci``, which
    reports only half their distance."""
    import numpy as np
    from sacrebleu.significance import _bootstrap_resample

    stats = metric._extract_corpus_statistics(list(hyps), None)  # references: the metric's
    _, resampled = _bootstrap_resample(stats, metric, resamples)
    ordered = np.sort([s.score for s in resampled])  # (resamples,)
    cut = resamples // 40  # sacreBLEU's index of the 2.5th percentile
    return round(float(ordered[cut]), 2), round(float(ordered[resamples - cut - 1]), 2)


# The verdicts (``verdict``), one message id each; ``tone`` tells them apart.
SAME = N_("no significant difference between {name} and {baseline} ({delta} {metric}, p = {p})")
BETTER = N_("{name} is better than {baseline}: {delta} {metric}, p = {p}")
WORSE = N_("{name} is worse than {baseline}: {delta} {metric}, p = {p}")
# What a verdict adds: its BLEU difference is too small to matter, chrF says the opposite.
NEGLIGIBLE = N_(
    "{verdict}, but a difference below {threshold} BLEU point is negligible in practice"
)
DISAGREE = N_("{verdict}; chrF points the other way: {delta} chrF, p = {p}")
# A significant BLEU difference below this many points is called negligible: people rarely
# notice one (Mathur et al., 2020, "Tangled up in BLEU": BLEU differences of 1–2 points are
# often not confirmed by human judgement), and a large test set makes 0.1 BLEU significant.
NEGLIGIBLE_BLEU = 1.0
_SHOWN_DELTA = 0.05  # a difference that rounds to ±0.0 points has no direction


def verdict(
    name: str,
    baseline: str,
    estimates: Mapping[str, Estimate],
    baseline_estimates: Mapping[str, Estimate],
) -> Message:
    """The comparison in words (a page shows it through ``ui.i18n.localized``): BLEU's
    verdict, "#3 is better than #1: +2.1 BLEU, p = 0.01" or "no significant difference
    between #3 and #1 (+0.4 BLEU, p = 0.41)", then what qualifies it: a significant
    difference below NEGLIGIBLE_BLEU is negligible in practice; chrF pointing the other way
    is named with its own difference and p-value."""
    bleu = estimates["bleu"].score - baseline_estimates["bleu"].score
    p = estimates["bleu"].p_value
    if p is None or p >= SIGNIFICANCE_LEVEL or abs(bleu) < _SHOWN_DELTA:
        msgid = SAME
    else:
        msgid = BETTER if bleu > 0 else WORSE
    said = Message(
        msgid, name=name, baseline=baseline, delta=f"{bleu:+.1f}", metric="BLEU", p=_p_text(p)
    )
    if msgid != SAME and abs(bleu) < NEGLIGIBLE_BLEU:
        said = Message(NEGLIGIBLE, verdict=said, threshold=f"{NEGLIGIBLE_BLEU:g}")
    chrf = estimates["chrf"].score - baseline_estimates["chrf"].score
    if min(abs(bleu), abs(chrf)) >= _SHOWN_DELTA and (bleu > 0) != (chrf > 0):
        said = Message(
            DISAGREE, verdict=said, delta=f"{chrf:+.1f}", p=_p_text(estimates["chrf"].p_value)
        )
    return said


def tone(said: str) -> str:
    """'better', 'worse' or 'same': which way a ``verdict`` goes ('same' too when it is
    negligible or chrF disagrees: no clear win)."""
    msgid = getattr(said, "msgid", None)
    return "better" if msgid == BETTER else "worse" if msgid == WORSE else "same"


def _p_text(p: float | None) -> str:
    if p is None:
        return "—"
    return "< 0.001" if p < 0.001 else f"{p:.3f}".rstrip("0").rstrip(".")
