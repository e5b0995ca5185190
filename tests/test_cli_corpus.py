"""``python -m workbench import/export`` as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TSV = (
    "我今天很忙。\tI am busy today.\n"
    "外面在下雨。\tIt is raining outside.\n"
    "请把门关上。\tPlease close the door.\n"
)


def run(home: Path, *args: str, db_url: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "WORKBENCH_HOME": str(home)}
    env.pop("WORKBENCH_DB_URL", None)
    if db_url:
        env["WORKBENCH_DB_URL"] = db_url
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_import_export_round_trip(db_url: str, tmp_path: Path) -> None:
    home = tmp_path / "cli_home"
    src = tmp_path / "pairs.tsv"
    src.write_text(TSV, encoding="utf-8")
    common = ["--corpus", "daily", "--src-lang", "zh", "--tgt-lang", "en"]
    proc = run(home, "import", *common, str(src), db_url=db_url)
    assert proc.returncode == 0, proc.stderr
    assert "imported 3 pairs into 'daily'" in proc.stdout

    out = tmp_path / "out.jsonl"
    proc = run(home, "export", "--corpus", "daily", str(out), db_url=db_url)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["target"] for r in rows] == [
        "I am busy today.",
        "It is raining outside.",
        "Please close the door.",
    ]

    # Re-importing the export: everything is a duplicate; --json gives one JSON line.
    proc = run(home, "import", *common, "--json", str(out), db_url=db_url)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (result["added"], result["duplicates"], result["corpus"]) == (0, 3, "daily")


def test_aligned_and_tatoeba(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (tmp_path / "a.zh").write_text("你好\n再见\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("Hello\nBye\n", encoding="utf-8")
    proc = run(
        home,
        *("import", "--corpus", "al", "--src-lang", "zh", "--tgt-lang", "en"),
        *("--format", "aligned", "--tgt-file", str(tmp_path / "a.en"), str(tmp_path / "a.zh")),
    )
    assert proc.returncode == 0 and "imported 2 pairs" in proc.stdout, proc.stderr
    tat = tmp_path / "cmn.tsv"
    tat.write_text("The tea is hot.\t茶很烫。\tCC-BY 2.0 (France) Attribution: x\n", "utf-8")
    proc = run(home, "import", "--corpus", "t", "--src-lang", "zh", "--tgt-lang", "en", str(tat))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "t.tsv"
    assert run(home, "export", "--corpus", "t", str(out)).returncode == 0
    assert out.read_text("utf-8").splitlines()[1].startswith("茶很烫。\tThe tea is hot.\ttrain")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["import", "--corpus", "c", "--src-lang", "zh", "--tgt-lang", "en", "{bad}"], "line 2"),
        (
            ["import", "--corpus", "c", "--src-lang", "zh", "--tgt-lang", "en", "{missing}"],
            "not found",
        ),
        (
            ["import", "--corpus", "c", "--src-lang", "zh!", "--tgt-lang", "en", "{good}"],
            "language",
        ),
        (["import", "--corpus", "c", "--src-lang", "zh", "{good}"], "--tgt-lang"),
        (["import", "--corpus", "c", "--src-lang", "zh", "--tgt-lang", "en", "{docx}"], "--format"),
        (["export", "--corpus", "nope", "{out}"], "no corpus"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_input_is_one_error_line(tmp_path: Path, args: list[str], message: str) -> None:
    files = {
        "bad": tmp_path / "bad.tsv",
        "good": tmp_path / "good.tsv",
        "missing": tmp_path / "missing.tsv",
        "docx": tmp_path / "x.docx",
        "out": tmp_path / "out.tsv",
    }
    files["bad"].write_text("a\tb\nno tab here\n", encoding="utf-8")
    files["good"].write_text(TSV, encoding="utf-8")
    files["docx"].write_bytes(b"PK")
    argv = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    line = assert_one_line_error(run(tmp_path / "h", *argv))
    assert message in line


def test_failed_import_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "h"
    good, bad = tmp_path / "good.tsv", tmp_path / "bad.tsv"
    good.write_text(TSV, encoding="utf-8")
    bad.write_bytes(TSV.encode() + b"\xff\xfe\tbroken\n")
    common = ["import", "--corpus", "c", "--src-lang", "zh", "--tgt-lang", "en"]
    assert run(home, *common, str(good)).returncode == 0
    assert "line 4: not valid UTF-8" in assert_one_line_error(run(home, *common, str(bad)))
    out = tmp_path / "out.tsv"
    assert run(home, "export", "--corpus", "c", str(out)).returncode == 0
    assert len(out.read_text("utf-8").splitlines()) == 1 + 3
