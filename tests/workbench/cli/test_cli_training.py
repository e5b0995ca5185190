"""The CLI contract end to end: import → train --wait → translate → evaluate; `train --wait`
(which starts a worker) and an exit status of 2 in real processes, the rest (and the
refusals) through the same ``main`` in the test's process (``cli_in_process``: a fresh
Python costs 2-4 s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import (
    TOY,
    add_preset,
    cli,
    cli_in_process,
    cli_that_starts_a_worker,
    make_toy_corpus,
    toy_pairs,
)
from workbench.corpus import corpora
from workbench.training import run_info, worker_process


def test_import_train_translate_evaluate(wb_home: Path, tmp_path: Path) -> None:
    imported = cli_in_process(
        "import", "--corpus", "toy", "--src-lang", "zh", "--tgt-lang", "en", str(TOY)
    )
    assert imported.returncode == 0, imported.stderr
    assert "imported 12 pairs" in imported.stdout

    trained = cli_that_starts_a_worker("train", "--corpus", "toy", "--preset", "tiny", "--wait")
    assert trained.returncode == 0, trained.stderr[-2000:]
    result = json.loads(trained.stdout.strip().splitlines()[-1])
    assert result["status"] == "succeeded" and result["version_id"] is not None
    assert result["run_id"] >= 1
    # the automatic budget of 12 pairs ends when they are learned, and says so
    assert result["stop_reason"] == "memorised" and result["steps"] > 0
    assert "learned every training pair" in trained.stderr
    version_id = result["version_id"]
    version = str(version_id)

    listed = cli_in_process("versions", "--json")
    assert listed.returncode == 0
    assert [v["id"] for v in json.loads(listed.stdout)] == [result["version_id"]]

    pairs = toy_pairs()
    by_args = cli_in_process("translate", "--version", version, pairs[0][0], pairs[1][0])
    assert by_args.returncode == 0, by_args.stderr
    assert by_args.stdout.splitlines() == [pairs[0][1], pairs[1][1]]
    stdin = "\n".join(s for s, _ in pairs) + "\n"
    by_stdin = cli_in_process("translate", "--version", version, "--beam", "3", stdin=stdin)
    assert by_stdin.stdout.splitlines() == [t for _, t in pairs]

    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text(stdin, encoding="utf-8")
    ref.write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")
    evaluated = cli_in_process(
        "evaluate", "--version", version, "--src", str(src), "--ref", str(ref)
    )
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout.strip().splitlines()[-1]) == {
        "bleu": 100.0,
        "chrf": 100.0,
        "n": len(pairs),
    }

    runs = cli_in_process("runs", "--json")
    assert runs.returncode == 0, runs.stderr
    [run] = json.loads(runs.stdout)
    assert (run["id"], run["status"], run["version_id"]) == (
        result["run_id"],
        "succeeded",
        result["version_id"],
    )
    assert (run["steps"], run["stopped_because"]) == (
        result["steps"],
        "learned every training pair",
    )
    assert "learned every training pair" in cli_in_process("runs").stdout
    resumed = cli("resume", str(result["run_id"]))
    assert resumed.returncode == 2 and "only a failed or cancelled run" in resumed.stderr
    deleted = cli_in_process("delete-run", str(result["run_id"]))
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(cli_in_process("runs", "--json").stdout) == []
    assert [v["id"] for v in json.loads(cli_in_process("versions", "--json").stdout)] == [
        version_id
    ]


def test_bad_input_gives_one_line_and_a_nonzero_exit(wb_home: Path, tmp_path: Path) -> None:
    ref = tmp_path / "one.txt"
    ref.write_text("a\n", encoding="utf-8")
    cases = [
        ("train", "--corpus", "missing", "--wait"),
        ("translate", "--version", "42", "hello"),
        ("evaluate", "--version", "1", "--src", str(tmp_path / "nope.txt"), "--ref", str(ref)),
        ("train", "--corpus", "x", "--preset", "giant"),
        ("train", "--corpus", "x", "--epochs", "3", "--minutes", "2"),
        ("train", "--corpus", "x", "--minutes", "0"),
        ("resume", "7"),
        ("delete-run", "7"),
        ("runs", "--bogus"),
        ("versions", "--bogus"),
    ]
    for args in cases:
        done = cli_in_process(*args)
        assert done.returncode != 0, args
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, done.stderr)
        assert "Traceback" not in done.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"source": "你好", "target": "hello"}\n{not json\n', encoding="utf-8")
    args = ("import", "--corpus", "new", "--src-lang", "zh", "--tgt-lang", "en")
    failed = cli_in_process(
        *args, "--strict", str(bad)
    )  # strict: any bad row refuses the whole file
    assert failed.returncode != 0 and "line 2" in failed.stderr
    assert corpora.list_corpora() == []  # not even the new, empty corpus is left behind
    skipped = cli_in_process(
        *args, str(bad)
    )  # by default a malformed line is a skipped, reported row
    assert skipped.returncode == 0 and "line 2" in skipped.stderr
    assert [c.pair_count for c in corpora.list_corpora()] == [1]
    corpora.delete_corpus("new")
    empty = cli_in_process("versions")
    assert empty.returncode == 0 and "no model versions yet" in empty.stdout


def test_train_takes_any_preset_of_core_model_and_a_time_budget(
    wb_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI lists no presets of its own: one added to core_model is accepted as it is."""
    from workbench import cli as workbench_cli

    add_preset(monkeypatch, "micro")
    # No worker: only queue.
    monkeypatch.setattr(worker_process, "ensure_worker", lambda *a, **k: None)
    make_toy_corpus()
    assert workbench_cli.main(["train", "--corpus", "toy", "--preset", "micro"]) == 0
    queued = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert run_info.get_run(queued["run_id"]).config["preset"] == "micro"

    assert workbench_cli.main(["train", "--corpus", "toy", "--minutes", "2"]) == 0
    run = run_info.get_run(json.loads(capsys.readouterr().out.splitlines()[-1])["run_id"])
    assert (run.config["time_budget_s"], run.config["epochs"], run.budget) == (120, None, "2 min")

    assert workbench_cli.main(["train", "--corpus", "toy", "--preset", "giant"]) == 2
    assert "choose one of auto, tiny, small, base, micro" in capsys.readouterr().err


def test_train_for_tokens_in_a_precision(
    wb_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`train --tokens N --precision P` freezes both into the run; bad values are one line
    and a non-zero exit, and queue nothing."""
    from workbench import cli as workbench_cli

    monkeypatch.setattr(worker_process, "ensure_worker", lambda *a, **k: None)
    make_toy_corpus()
    args = ["train", "--corpus", "toy", "--tokens", "1100000", "--precision", "fp32"]
    assert workbench_cli.main(args) == 0
    run = run_info.get_run(json.loads(capsys.readouterr().out.splitlines()[-1])["run_id"])
    assert (run.config["token_budget"], run.config["precision"], run.budget) == (
        1_100_000,
        "fp32",
        "1.1M tokens",
    )
    for bad, said in (
        (["--tokens", "0"], "must be at least 1"),
        (["--tokens", "1.5"], "invalid positive_int value"),
        (["--tokens", "lots"], "invalid positive_int value"),
        (["--tokens", "5000", "--minutes", "2"], "not allowed with argument"),
        (["--precision", "fp16"], "Unknown precision 'fp16'; choose one of auto, fp32, bf16"),
    ):
        done = cli_in_process("train", "--corpus", "toy", *bad)
        assert done.returncode != 0, bad
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], (bad, lines)
    assert len(run_info.list_runs()) == 1


def test_train_wait_reports_what_a_token_budget_bought(wb_home: Path) -> None:
    """Every figure compares across machines only with its tokens, speed, steps, precision and
    threads: `train --tokens N --wait` ends at its budget and prints them all."""
    make_toy_corpus()
    trained = cli_that_starts_a_worker(
        "train", "--corpus", "toy", "--preset", "tiny", "--tokens", "3000",
        "--precision", "fp32", "--wait",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    result = json.loads(trained.stdout.strip().splitlines()[-1])
    assert (result["status"], result["stop_reason"], result["precision"]) == (
        "succeeded",
        "token_budget",
        "fp32",
    )
    per_step = result["tokens_trained"] / result["steps"]
    assert 3_000 <= result["tokens_trained"] < 3_000 + 2 * per_step
    assert result["tokens_per_s"] > 0 and result["train_time_s"] > 0
    assert isinstance(result["threads"], int) and result["threads"] >= 1
    assert "token budget reached" in trained.stderr
