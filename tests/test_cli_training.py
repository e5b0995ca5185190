"""The CLI contract end to end, in real processes: import → train --wait → translate → evaluate."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from pathlib import Path

from jobs_helpers import TOY, cli, toy_pairs

from workbench import corpus


def test_import_train_translate_evaluate(wb_home: Path, tmp_path: Path) -> None:
    imported = cli("import", "--corpus", "toy", "--src-lang", "zh", "--tgt-lang", "en", str(TOY))
    assert imported.returncode == 0, imported.stderr
    assert "imported 12 pairs" in imported.stdout

    worker_pid = None
    try:
        trained = cli("train", "--corpus", "toy", "--preset", "tiny", "--wait", timeout=600)
        started = re.search(r"started a worker \(pid (\d+)\)", trained.stderr)
        worker_pid = int(started.group(1)) if started else None
        assert trained.returncode == 0, trained.stderr[-2000:]
        result = json.loads(trained.stdout.strip().splitlines()[-1])
        assert result["status"] == "succeeded" and result["version_id"] is not None
        assert result["run_id"] >= 1
    finally:
        if worker_pid is not None:  # the detached worker this test caused to start
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker_pid, signal.SIGTERM)
    version = str(result["version_id"])

    listed = cli("versions", "--json")
    assert listed.returncode == 0
    assert [v["id"] for v in json.loads(listed.stdout)] == [result["version_id"]]

    pairs = toy_pairs()
    by_args = cli("translate", "--version", version, pairs[0][0], pairs[1][0])
    assert by_args.returncode == 0, by_args.stderr
    assert by_args.stdout.splitlines() == [pairs[0][1], pairs[1][1]]
    stdin = "\n".join(s for s, _ in pairs) + "\n"
    by_stdin = cli("translate", "--version", version, "--beam", "3", stdin=stdin)
    assert by_stdin.stdout.splitlines() == [t for _, t in pairs]

    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text(stdin, encoding="utf-8")
    ref.write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")
    evaluated = cli("evaluate", "--version", version, "--src", str(src), "--ref", str(ref))
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout.strip().splitlines()[-1]) == {
        "bleu": 100.0,
        "chrf": 100.0,
        "n": len(pairs),
    }


def test_bad_input_gives_one_line_and_a_nonzero_exit(wb_home: Path, tmp_path: Path) -> None:
    ref = tmp_path / "one.txt"
    ref.write_text("a\n", encoding="utf-8")
    cases = [
        ("train", "--corpus", "missing", "--wait"),
        ("translate", "--version", "42", "hello"),
        ("evaluate", "--version", "1", "--src", str(tmp_path / "nope.txt"), "--ref", str(ref)),
        ("train", "--corpus", "x", "--preset", "giant"),
        ("versions", "--bogus"),
    ]
    for args in cases:
        done = cli(*args)
        assert done.returncode != 0, args
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, done.stderr)
        assert "Traceback" not in done.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"source": "你好", "target": "hello"}\n{not json\n', encoding="utf-8")
    failed = cli("import", "--corpus", "new", "--src-lang", "zh", "--tgt-lang", "en", str(bad))
    assert failed.returncode != 0 and "line 2" in failed.stderr
    assert corpus.list_corpora() == []  # not even the new, empty corpus is left behind
    empty = cli("versions")
    assert empty.returncode == 0 and "no model versions yet" in empty.stdout
