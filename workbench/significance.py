"""Is one version really better than another? sacreBLEU's paired bootstrap resampling.

Every version's outputs are resampled together with the baseline's (the same 1,000 random
test sets, drawn with replacement from the sentences), which gives each score a 95 %
confidence interval and each version a p-value against the baseline: roughly the chance of a
difference at least this large if both versions were the same system. The implementation is
sacreBLEU's own (``sacrebleu.significance.PairedTest``, the code behind its CLI's
``--paired-bs``), seeded as its CLI is (``SACREBLEU_SEED``, default 12345), so the numbers
here are the numbers ``sacrebleu REF -i A B --paired-bs`` prints for the same files.

Pure: text in, numbers and sentences out; ``workbench.evaluation`` decodes the outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

RESAMPLES = 1_000
SIGNIFICANCE_LEVEL = 0.05  # below this p-value a difference is called significant
METRICS = ("bleu", "chrf")
METRIC_LABELS = {"bleu": "BLEU", "chrf": "chrF"}


@dataclass(frozen=True)
class Estimate:
    """One metric of one version: its score on the test set and what resampling says."""

    score: float  # on the whole test set (the number sacreBLEU reports)
    mean: float  # mean over the bootstrap resamples
    ci: float  # half-width of the 95 % confidence interval: mean ± ci (sacreBLEU's "μ ± CI")
    p_value: float | None  # against the baseline; None for the baseline itself

    @property
    def interval(self) -> tuple[float, float]:
        return (round(self.mean - self.ci, 2), round(self.mean + self.ci, 2))


@dataclass(frozen=True)
class PairedResult:
    """Per system (in the order given; the first is the baseline): metric name → estimate."""

    estimates: list[dict[str, Estimate]]
    seed: str  # the resampling seed sacreBLEU used ("none": not seeded)


def paired_bootstrap(
    systems: Sequence[Sequence[str]],
    references: Sequence[str],
    tokenize: str,
    resamples: int = RESAMPLES,
) -> PairedResult:
    """BLEU and chrF of every system with 95 % intervals, and p-values of systems[1:]
    against systems[0] (paired bootstrap, ``resamples`` resamples)."""
    if len(systems) < 2:
        raise ValueError("a paired test needs a baseline and at least one other system")
    refs = [list(references)]
    metrics = {"bleu": BLEU(tokenize=tokenize, references=refs), "chrf": CHRF(references=refs)}
    named = [(str(i), list(hyps)) for i, hyps in enumerate(systems)]
    test = PairedTest(named, metrics, references=None, test_type="bs", n_samples=resamples)
    signatures, scores = test()
    # sacreBLEU names its result columns after the metrics' score names ("BLEU", "chrF2"),
    # in the order of `metrics`.
    columns = [name for name in scores if name != "System"]
    estimates = [
        {
            key: Estimate(
                round(float(r.score), 2),
                round(float(r.mean), 2),
                round(float(r.ci), 2),
                None if r.p_value is None else round(float(r.p_value), 4),
            )
            for key, r in zip(METRICS, (scores[c][i] for c in columns), strict=True)
        }
        for i in range(len(systems))
    ]
    seed = next(iter(signatures.values())).info.get("seed", "12345")
    return PairedResult(estimates, str(seed))


def verdict(
    name: str, baseline: str, estimate: Estimate, baseline_estimate: Estimate, metric: str
) -> str:
    """The comparison in words: "#3 is better than #1: +2.1 BLEU, p = 0.01" or
    "no significant difference between #3 and #1 (+0.4 BLEU, p = 0.41)"."""
    label = METRIC_LABELS[metric]
    delta = estimate.score - baseline_estimate.score
    p = estimate.p_value
    numbers = f"{delta:+.1f} {label}, p = {_p_text(p)}"
    if p is None or p >= SIGNIFICANCE_LEVEL or abs(delta) < 0.05:
        return f"no significant difference between {name} and {baseline} ({numbers})"
    better = "better" if delta > 0 else "worse"
    return f"{name} is {better} than {baseline}: {numbers}"


def _p_text(p: float | None) -> str:
    if p is None:
        return "—"
    return "< 0.001" if p < 0.001 else f"{p:.3f}".rstrip("0").rstrip(".")
