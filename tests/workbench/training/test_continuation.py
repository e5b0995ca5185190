"""Retraining that builds on the last version: "Continue from #N", with real worker runs.

A tiny model learns the toy corpus (v1); pairs made of the same characters are added, and
the default start continues v1 (v2), then v2 (v3); a fresh model on the same pairs is the
yardstick of the warm start. The lineage adds up, the tokenizer is v1's byte for byte, and the
train CLI and the rule (``continuation.default_start``) agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from core_model.artifact import TOKENIZER_DIR
from tests.helpers import make_toy_corpus, module_home, toy_pairs, train_version
from workbench import cli as workbench_cli
from workbench.corpus import corpora, pairs
from workbench.models import model_import, registry
from workbench.training import (
    continuation,
    metric_rows,
    run_info,
    runs,
    stop_words,
    worker,
    worker_process,
)

QUICK = {"preset": "tiny"}


def _first_step_loss(run_id: int) -> float:
    rows = metric_rows.run_metrics(run_id)
    return float(rows[(rows["kind"] == "loss") & (rows["step"] == 1)]["train_loss"].iloc[0])


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    with module_home(tmp_path_factory.mktemp("continuation_home")) as home:
        corpus_id = make_toy_corpus()
        start_empty = continuation.default_start(corpus_id)
        r1, v1 = train_version(corpus_id, max_steps=150, **QUICK)
        # new pairs, written with characters the corpus already has
        toy = toy_pairs()
        new = [
            {"source": a[:3] + b[3:], "target": f"{a_t.split()[0]} {' '.join(b_t.split()[1:])}"}
            for (a, a_t), (b, b_t) in zip(toy, toy[1:] + toy[:1], strict=True)
        ]
        pairs.apply_edits(corpus_id, added=new)
        start_v1 = continuation.default_start(corpus_id)
        r2, v2 = train_version(
            corpus_id, init_version_id=start_v1.version_id, max_steps=30, **QUICK
        )
        r3, v3 = train_version(corpus_id, init_version_id=v2, max_steps=10, **QUICK)
        fresh_run, fresh = train_version(corpus_id, max_steps=5, **QUICK)
        yield {
            "home": home,
            "corpus_id": corpus_id,
            "start_empty": start_empty,
            "start_v1": start_v1,
            "runs": (r1, r2, r3, fresh_run),
            "versions": (v1, v2, v3, fresh),
        }


def test_the_default_continues_the_newest_version_that_covers_the_corpus(chain: dict) -> None:
    v1 = chain["versions"][0]
    assert chain["start_empty"] == (
        None,
        "No version of this corpus yet: the run trains a new model.",
    )
    assert chain["start_v1"].version_id == v1
    assert f"Version #{v1} was trained on this corpus" in chain["start_v1"].reason
    assert "knows 100.00 % of the corpus' characters" in chain["start_v1"].reason
    # the fresh model (5 steps, its own tokenizer) is now the newest that covers the corpus
    assert continuation.default_start(chain["corpus_id"]).version_id == chain["versions"][3]


def test_continuing_keeps_the_tokenizer_files_identical(chain: dict) -> None:
    v1, v2, v3, _ = chain["versions"]
    folders = [registry.artifact_dir(v) / TOKENIZER_DIR for v in (v1, v2, v3)]
    files = [
        {p.relative_to(f): p.read_bytes() for p in sorted(f.rglob("*")) if p.is_file()}
        for f in folders
    ]
    assert files[0] and files[0] == files[1] == files[2]


def test_a_warm_start_begins_with_a_lower_loss_than_a_fresh_model(chain: dict) -> None:
    r1, r2, _, fresh_run = chain["runs"]
    warm, fresh = _first_step_loss(r2), _first_step_loss(fresh_run)
    assert warm < fresh - 1.0, (warm, fresh)
    assert _first_step_loss(r1) > warm  # v1 itself started from nothing
    v2 = registry.get_version(chain["versions"][1])
    assert v2.metrics["warmup_steps"] <= 50 < 200  # the short re-warm-up of a continuation


def test_every_front_end_shows_the_same_trained_time(
    chain: dict, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37: History said "trained for 2 min" (the budget asked for) where Models said
    12 s. One figure, the trainer's clock at the end (`train_time_s`), is what the version
    records, what the run's last report carries, and what `train --wait`, `runs --json` and
    `versions --json` print."""
    from workbench.cli import training_commands

    monkeypatch.setattr(worker_process, "ensure_worker", lambda *a, **k: None)
    for run_id, version_id in zip(chain["runs"], chain["versions"], strict=True):
        run, version = run_info.get_run(run_id), registry.get_version(version_id)
        seconds = version.train_seconds
        assert seconds > 0 and seconds == version.metrics["train_time_s"] == run.trained_s
        assert training_commands._follow(run_id, True) == 0
        assert json.loads(capsys.readouterr().out.splitlines()[-1])["train_time_s"] == seconds
        assert workbench_cli.main(["runs", "--json"]) == 0
        listed = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
        assert listed[run_id]["train_time_s"] == seconds
        assert listed[run_id]["budget"] == "automatic"  # what was asked, named as such
        assert workbench_cli.main(["versions", "--json"]) == 0
        versions = {v["id"]: v for v in json.loads(capsys.readouterr().out)}
        assert versions[version_id]["train time (s)"] == round(seconds, 1)


def test_lineage_adds_up(chain: dict, capsys: pytest.CaptureFixture[str]) -> None:
    v1, v2, v3, fresh = (registry.get_version(v) for v in chain["versions"])
    assert (v1.parent_version_id, v2.parent_version_id, v3.parent_version_id) == (
        None,
        v1.id,
        v2.id,
    )
    for v in (v1, v2, v3, fresh):
        assert v.train_tokens == v.metrics["tokens_trained"] > 0
    assert v1.cumulative_tokens == v1.train_tokens
    assert v2.cumulative_tokens == v1.train_tokens + v2.train_tokens
    assert v3.cumulative_tokens == v1.train_tokens + v2.train_tokens + v3.train_tokens
    assert v3.cumulative_seconds == pytest.approx(
        v1.train_seconds + v2.train_seconds + v3.train_seconds
    )
    assert (fresh.parent_version_id, fresh.cumulative_tokens) == (None, fresh.train_tokens)

    assert workbench_cli.main(["versions", "--json"]) == 0
    listed = {v["id"]: v for v in json.loads(capsys.readouterr().out)}
    assert listed[v3.id]["parent"] == v2.id
    assert listed[v3.id]["cumulative tokens"] == v3.cumulative_tokens
    assert listed[v3.id]["cumulative minutes"] == round(v3.cumulative_seconds / 60, 1)

    # deleting a parent keeps the child's totals; it only forgets the parent's id
    registry.delete_version(v1.id)
    child = registry.get_version(v2.id)
    assert (child.parent_version_id, child.cumulative_tokens) == (None, v2.cumulative_tokens)


def test_the_train_cli_default_mirrors_the_rule(
    chain: dict, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(worker_process, "ensure_worker", lambda *a, **k: None)
    corpus_id = chain["corpus_id"]
    newest_fit = continuation.default_start(corpus_id).version_id
    v2 = chain["versions"][1]

    def queued(*flags: str) -> tuple[int | None, str]:
        assert workbench_cli.main(["train", "--corpus", "toy", *flags]) == 0
        out = capsys.readouterr()
        run = run_info.get_run(json.loads(out.out.splitlines()[-1])["run_id"])
        from workbench.training import runs

        runs.cancel_run(run.id)
        return run.init_version_id, out.err

    init, err = queued()
    assert init == newest_fit and f"continuing: Version #{newest_fit}" in err
    assert queued("--continue-from", str(v2))[0] == v2
    assert queued("--new")[0] is None
    with pytest.raises(SystemExit):
        workbench_cli.main(["train", "--corpus", "toy", "--new", "--continue-from", str(v2)])


def test_a_tokenizer_that_no_longer_fits_starts_a_new_model(
    chain: dict, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """New pairs in another script: the newest version's tokenizer cannot write them, so a new
    model is the default of the rule and of the CLI, with the reason."""
    monkeypatch.setattr(worker_process, "ensure_worker", lambda *a, **k: None)
    other = corpora.create_corpus("toy and greek", "zh", "en")
    added = [{"source": s, "target": t} for s, t in toy_pairs()]
    added += [{"source": f"αβγδεζηθικλμ {i}", "target": f"greek {i}"} for i in range(12)]
    pairs.apply_edits(other.id, added=added)
    copy = model_import.import_version(
        registry.artifact_dir(chain["versions"][1]), corpus="toy and greek"
    )
    start = continuation.default_start(other.id)
    assert start.version_id is None
    assert f"The tokenizer of version #{copy} knows only" in start.reason
    assert workbench_cli.main(["train", "--corpus", "toy and greek"]) == 0
    out = capsys.readouterr()
    run = run_info.get_run(json.loads(out.out.splitlines()[-1])["run_id"])
    assert run.init_version_id is None and "new model: The tokenizer of version" in out.err
    assert Path(registry.artifact_dir(copy)).is_dir()


def test_a_memorising_run_never_continues_a_tokenizer_that_cannot_write_a_target(
    chain: dict,
) -> None:
    """One new pair whose target has a capital "G" that no toy target has: the tokenizer still
    knows 99.7 % of the characters, but a run of so few pairs must reproduce every pair, so a
    new model is the default and the reason names the character. Continued anyway, the run
    waits only for the pairs it can reproduce: it stops early (memorised), and says so."""
    other = corpora.create_corpus("toy and good morning", "zh", "en")
    added = [{"source": s, "target": t} for s, t in toy_pairs()]
    added.append({"source": "我每天早上喝咖啡。", "target": "Good morning."})
    pairs.apply_edits(other.id, added=added)
    copy = model_import.import_version(
        registry.artifact_dir(chain["versions"][1]), corpus="toy and good morning"
    )
    start = continuation.default_start(other.id)
    assert start.version_id is None, start.reason
    assert start.reason == (
        f"The tokenizer of version #{copy} cannot write “G” of this corpus' targets: a run of "
        "so few pairs stops once it reproduces every one, which it never could, so a new model "
        "with a new tokenizer is trained."
    )
    # a budget the user gives (epochs, minutes, tokens) memorises nothing: the version that
    # covers 99 % of the characters is continued
    assert continuation.default_start(other.id, automatic_budget=False).version_id == copy
    run_id = runs.enqueue_training(other.id, init_version_id=copy, **QUICK)
    while run_info.get_run(run_id).status == "queued":  # after any run queued before it
        assert worker.run_worker(once=True) == 1
    run = run_info.get_run(run_id)
    assert run.stop_reason == "memorised", run.stop_reason
    watch = run.progress_detail["watch"]
    assert (watch["pairs"], watch["unreproducible"], watch["reproduced"]) == (12, 1, 1.0)
    assert "Pairs not waited for (their target has a character the tokenizer cannot " in (
        stop_words.describe_watch(watch)
    )
