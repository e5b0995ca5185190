"""The paired bootstrap: the same numbers as sacreBLEU's own CLI on the same files, seeded,
and said in words."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.evaluation import significance

WORDS = ["the", "a", "man", "woman", "dog", "cat", "runs", "sits", "on", "in", "park"]
WORDS += ["street", "red", "blue", "big", "small", "with"]


def _systems(n: int = 80) -> tuple[list[str], list[str], list[str], list[str]]:
    """References and three systems: a weak one, a slightly better one, a much better one."""
    rng = random.Random(7)
    refs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) for _ in range(n)]

    def noisy(keep: float) -> list[str]:
        return [
            " ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split())
            for r in refs
        ]

    return refs, noisy(0.55), noisy(0.6), noisy(0.9)


def _cli_table(refs: Path, systems: list[Path]) -> list[list[float]]:
    """sacreBLEU's CLI, paired bootstrap: per system [bleu, mean, ci, chrf, mean, ci] plus the
    p-values (bleu, chrf) for every system after the baseline."""
    exe = shutil.which("sacrebleu", path=str(Path(sys.executable).parent)) or "sacrebleu"
    out = subprocess.run(
        [exe, str(refs), "-i", *map(str, systems), "--paired-bs", "-m", "bleu", "chrf",
         "-f", "text"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    ).stdout  # fmt: skip
    rows: list[list[float]] = []
    for line in out.splitlines():
        scores = re.findall(r"([\d.]+) \(([\d.]+) ± ([\d.]+)\)", line)
        if scores:
            rows.append([float(x) for triple in scores for x in triple])
        p_values = re.findall(r"p = ([\d.]+)", line)
        if p_values:
            rows[-1] += [float(p) for p in p_values]
    return rows


def test_numbers_match_sacrebleus_cli_on_the_same_files(tmp_path: Path) -> None:
    refs, weak, better, best = _systems()
    files = []
    for name, lines in (("ref", refs), ("weak", weak), ("better", better), ("best", best)):
        path = tmp_path / f"{name}.txt"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(path)
    expected = _cli_table(files[0], files[1:])
    result = significance.paired_bootstrap([weak, better, best], refs, tokenize="13a")
    assert result.seed == "12345"
    assert len(expected) == 3
    for row, estimates in zip(expected, result.estimates, strict=True):
        bleu, chrf = estimates["bleu"], estimates["chrf"]
        # sacreBLEU prints mean ± half the width of the percentile interval we report
        for est, (score, mean, ci) in ((bleu, row[0:3]), (chrf, row[3:6])):
            assert [est.score, est.mean] == pytest.approx([score, mean], abs=0.051)
            assert (est.high - est.low) / 2 == pytest.approx(ci, abs=0.051)
            assert 0 <= est.low <= est.score <= est.high <= 100
        if len(row) > 6:
            assert [bleu.p_value, chrf.p_value] == pytest.approx(row[6:8], abs=1e-4)
        else:
            assert bleu.p_value is None and chrf.p_value is None  # the baseline
    # The much better system is significantly better; the ranking is what the data say.
    assert result.estimates[2]["bleu"].p_value < significance.SIGNIFICANCE_LEVEL
    low, high = result.estimates[2]["bleu"].interval
    assert low < result.estimates[2]["bleu"].mean < high


def test_resampling_is_seeded() -> None:
    refs, weak, better, _ = _systems(40)
    first = significance.paired_bootstrap([weak, better], refs, "13a")
    again = significance.paired_bootstrap([weak, better], refs, "13a")
    assert first == again


def test_intervals_are_possible_scores_on_a_skewed_test_set() -> None:
    """Four sentences, most translated badly: sacreBLEU's mean ± CI reaches below 0 BLEU;
    the percentile interval we report is made of resampled scores, within [0, 100]."""
    refs = ["the cat sits on the mat", "a dog runs in the park", "it is raining today"]
    refs += ["please close the door now"]
    poor = ["the cat sits on the mat", "dog park", "rain", "door"]
    other = ["the cat", "a dog runs in the park", "it rains", "close the door"]
    result = significance.paired_bootstrap([poor, other], refs, "13a")
    for estimates in result.estimates:
        for est in estimates.values():
            low, high = est.interval
            assert 0 <= low <= high <= 100
            assert low <= est.mean <= high
    bleu = result.estimates[0]["bleu"]
    assert bleu.mean - (bleu.high - bleu.low) / 2 < 0  # what mean ± CI would have printed
    assert bleu.low == 0.0


def test_too_few_pairs_give_no_p_value_and_say_why() -> None:
    refs, weak, _, best = _systems(significance.MIN_VERDICT_PAIRS - 1)
    result = significance.paired_bootstrap([weak, best], refs, "13a")
    assert result.withheld == significance.too_few_pairs(len(refs))
    assert f"only {len(refs)} test pairs" in result.withheld
    assert "no p-value or verdict" in result.withheld
    assert all(e.p_value is None for est in result.estimates for e in est.values())
    assert result.estimates[1]["bleu"].score > result.estimates[0]["bleu"].score  # scores stay
    refs, weak, _, best = _systems(significance.MIN_VERDICT_PAIRS)
    enough = significance.paired_bootstrap([weak, best], refs, "13a")
    assert enough.withheld is None and enough.estimates[1]["bleu"].p_value is not None


def _scores(bleu: float, chrf: float, p_bleu: float | None, p_chrf: float | None = None):
    """A version's two estimates (the intervals play no part in a verdict)."""
    return {
        "bleu": significance.Estimate(bleu, bleu, bleu - 2, bleu + 2, p_bleu),
        "chrf": significance.Estimate(chrf, chrf, chrf - 2, chrf + 2, p_chrf),
    }


def test_verdicts_in_words() -> None:
    base = _scores(30.0, 50.0, None)
    better, worse = _scores(32.1, 52.0, 0.01, 0.02), _scores(27.0, 48.0, 0.002, 0.01)
    same = _scores(30.4, 50.3, 0.41, 0.5)
    assert significance.verdict("#3", "#1", better, base) == (
        "#3 is better than #1: +2.1 BLEU, p = 0.01"
    )
    assert significance.verdict("#3", "#1", worse, base) == (
        "#3 is worse than #1: -3.0 BLEU, p = 0.002"
    )
    assert significance.verdict("#3", "#1", same, base) == (
        "no significant difference between #3 and #1 (+0.4 BLEU, p = 0.41)"
    )
    assert [
        significance.tone(significance.verdict("#3", "#1", v, base)) for v in (better, worse, same)
    ] == ["better", "worse", "same"]


def test_a_verdict_says_when_a_difference_is_negligible_or_the_metrics_disagree() -> None:
    """Issue 30 item 15: "#1 is better than #2: +0.1 BLEU, p = 0.002" while chrF pointed the
    other way. A significant BLEU difference under NEGLIGIBLE_BLEU is said to be negligible,
    a chrF difference the other way is named, and neither is shown as a clear win."""
    base = _scores(30.0, 50.0, None)
    said = significance.verdict("#1", "#2", _scores(30.1, 49.2, 0.002, 0.04), base)
    assert said == (
        "#1 is better than #2: +0.1 BLEU, p = 0.002, but a difference below 1 BLEU point is "
        "negligible in practice; chrF points the other way: -0.8 chrF, p = 0.04"
    )
    assert significance.tone(said) == "same"
    said = significance.verdict("#1", "#2", _scores(33.0, 49.0, 0.01, 0.3), base)
    assert said == (
        "#1 is better than #2: +3.0 BLEU, p = 0.01; chrF points the other way: -1.0 chrF, p = 0.3"
    )
    assert significance.tone(said) == "same"
    said = significance.verdict("#1", "#2", _scores(29.5, 50.9, 0.2, 0.01), base)
    assert said == (
        "no significant difference between #1 and #2 (-0.5 BLEU, p = 0.2); chrF points the "
        "other way: +0.9 chrF, p = 0.01"
    )
    assert significance.verdict("#1", "#2", _scores(30.6, 50.0, 0.04, 0.9), base) == (
        "#1 is better than #2: +0.6 BLEU, p = 0.04, but a difference below 1 BLEU point is "
        "negligible in practice"
    )
    with pytest.raises(ValueError):
        significance.paired_bootstrap([["a"]], ["a"], "13a")
