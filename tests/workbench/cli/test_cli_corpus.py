"""``python -m workbench import/export``: in this process where what a command says and
changes is tested, in real processes where the process is (a kill, a file size limit, bytes
in argv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from db import dispose_engines
from tests.helpers import ROOT, cli_in_process, killed_import

TSV = (
    "我今天很忙。\tI am busy today.\n"
    "外面在下雨。\tIt is raining outside.\n"
    "请把门关上。\tPlease close the door.\n"
)
IMPORT_C = ["import", "--corpus", "c", "--src-lang", "zh", "--tgt-lang", "en"]


def run(home: Path, *args: str | bytes, db_url: str | None = None) -> subprocess.CompletedProcess:
    """``python -m workbench ARGS`` with WORKBENCH_HOME=home (and WORKBENCH_DB_URL=db_url).

    In this process (``cli_in_process``: the same ``main``, its output and exit status)
    unless an argument is bytes: then in a real process, whose interpreter is what decodes
    bytes that are not UTF-8 into the text ``main`` is given."""
    if any(isinstance(arg, bytes) for arg in args):
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
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WORKBENCH_HOME", str(home))
        if db_url:
            mp.setenv("WORKBENCH_DB_URL", db_url)
        else:
            mp.delenv("WORKBENCH_DB_URL", raising=False)
        dispose_engines()
        try:
            return cli_in_process(*(str(arg) for arg in args))
        finally:
            dispose_engines()


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

    # Re-importing the export: everything is a duplicate; nothing is written, and that is no
    # error (a script that imports the same file daily); --json gives one JSON line.
    changes = run(home, "history", "--corpus", "daily", "--json", db_url=db_url).stdout
    proc = run(home, "import", *common, "--json", str(out), db_url=db_url)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (result["added"], result["duplicates"], result["corpus"]) == (0, 3, "daily")
    assert run(home, "history", "--corpus", "daily", "--json", db_url=db_url).stdout == changes


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
        ([*IMPORT_C, "--format", "docx", "{good}"], "argument --format: invalid choice: 'docx'"),
        (
            [*IMPORT_C, "--format", "tsv", "--tgt-file", "{good}", "{good}"],
            "a target file only makes sense with --format aligned, not tsv",
        ),
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
    files["bad"].write_bytes(b"a\tb\n\xff\tnot UTF-8\n")
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


def test_import_skips_and_reports_a_malformed_line(tmp_path: Path) -> None:
    """A line without a tab is one skipped row, listed with its line number and why; the
    rest of the file is imported (before, the whole file was refused). --strict refuses it."""
    home = tmp_path / "h"
    data = tmp_path / "pairs.tsv"
    lines = TSV.splitlines()
    data.write_text("\n".join([*lines[:2], "a line without a tab", lines[2]]) + "\n", "utf-8")
    common = ["import", "--corpus", "c", "--src-lang", "zh", "--tgt-lang", "en"]
    strict = run(home, *common, "--strict", str(data))
    assert "line 3: expected 2 to 4 tab-separated columns" in assert_one_line_error(strict)
    proc = run(home, *common, str(data))
    assert proc.returncode == 0, proc.stderr
    assert "line 3: error: expected 2 to 4 tab-separated columns" in proc.stderr
    assert "imported 3 pairs into 'c' (0 duplicates, 1 invalid row skipped)" in proc.stdout
    again = run(home, *common[:2], "d", *common[3:], "--json", str(data))
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert (result["skipped"], result["issues"]["malformed"]) == (1, 1)


def test_import_names_sources_the_corpus_translates_differently(tmp_path: Path) -> None:
    """The walk's day2.csv: the report says how many rows give a source the corpus already
    translates otherwise, with an example; --skip-conflicts leaves them out."""
    home, day2 = tmp_path / "h", tmp_path / "day2.tsv"
    first = tmp_path / "day1.tsv"
    first.write_text(f"{TSV}请戴好口罩。\tMasks must be worn (carol).\n", "utf-8")
    assert run(home, *IMPORT_C, str(first)).returncode == 0
    day2.write_text("请戴好口罩。\tPlease wear a mask.\n请预约体检。\tPlease book a check.\n")
    skipped = run(home, *IMPORT_C, "--skip-conflicts", str(day2))
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout.splitlines()[1:] == [
        "1 row gives a source the corpus or the file already translates differently (skipped):",
        "  line 1: 请戴好口罩。 → Please wear a mask. (the corpus, pair 4: Masks must be "
        "worn (carol).)",
    ]
    assert "imported 1 pair into" in skipped.stdout
    added = json.loads(run(home, *IMPORT_C, "--json", str(day2)).stdout)
    assert (added["added"], added["conflicts"], added["conflicts_skipped"]) == (1, 1, False)
    assert added["conflict_examples"][0]["corpus_target"] == "Masks must be worn (carol)."
    # A file whose every new row is a conflict the user chose to skip: 0 pairs, exit 0, named.
    day3 = tmp_path / "day3.tsv"
    day3.write_text("请戴好口罩。\tMasks on, please.\n我今天很忙。\tI am busy today.\n")
    none = run(home, *IMPORT_C, "--skip-conflicts", str(day3))
    assert none.returncode == 0, none.stderr
    assert none.stdout.splitlines() == [
        "imported 0 pairs into 'c' (1 duplicate, 0 invalid rows skipped)",
        "1 row gives a source the corpus or the file already translates differently (skipped):",
        "  line 1: 请戴好口罩。 → Masks on, please. (the corpus, pair 4: Masks must be "
        "worn (carol).)",
    ]
    # Two rows of one file, into a new corpus: the second is named, with the first's line.
    twice = tmp_path / "twice.tsv"
    twice.write_text("早上好。\tGood morning.\n你好。\tHello.\n早上好。\tMorning!\n")
    fresh = run(
        home,
        "import",
        "--corpus",
        "new",
        "--src-lang",
        "zh",
        "--tgt-lang",
        "en",
        "--skip-conflicts",
        str(twice),
    )
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.splitlines()[1:] == [
        "1 row gives a source the corpus or the file already translates differently (skipped):",
        "  line 3: 早上好。 → Morning! (line 1 of the file translates it differently)",
    ]
    assert "imported 2 pairs into 'new'" in fresh.stdout


def test_import_cleans_as_the_import_page_does(tmp_path: Path) -> None:
    """The page's clean-up options as flags: copies and misaligned rows left out (counted as
    filtered), Traditional Chinese converted; a bad ratio is one line and writes nothing."""
    home, data, out = tmp_path / "h", tmp_path / "mixed.tsv", tmp_path / "out.tsv"
    data.write_text(
        f"{TSV}請把燈關掉。\tPlease turn off the light.\nOK\tOK\n"
        "好。\tYes, and then we walked all the way home along the river in the rain.\n",
        "utf-8",
    )
    bad = run(home, *IMPORT_C, "--max-ratio", "0.5", str(data))
    assert "at least 1" in assert_one_line_error(bad)
    assert "no corpus" in run(home, "export", "--corpus", "c", str(out)).stderr
    flags = ["--drop-copies", "--max-ratio", "4", "--chinese", "t2s"]
    done = run(home, *IMPORT_C, *flags, str(data))
    assert done.returncode == 0, done.stderr
    assert "imported 4 pairs into 'c' (0 duplicates, 0 invalid rows skipped, 2 filtered out " in (
        done.stdout
    )
    assert run(home, "export", "--corpus", "c", str(out)).returncode == 0
    sources = [line.split("\t")[0] for line in out.read_text("utf-8").splitlines()]
    assert "请把灯关掉。" in sources
    assert not {"OK", "好。", "請把燈關掉。"} & set(sources)


# ------------------------------------------------------------ hostile input, failing disks


KILLED_CLI_IMPORT = (
    "from workbench.cli import main\n"
    'main(["import", "--corpus", "fresh", "--src-lang", "zh", "--tgt-lang", "en", sys.argv[1]])'
)


def test_a_killed_import_leaves_no_empty_corpus_behind(tmp_path: Path) -> None:
    home = tmp_path / "h"
    data = tmp_path / "pairs.tsv"
    data.write_text("\n".join(f"句子{i}\tsentence {i}" for i in range(500)), encoding="utf-8")
    killed_import(home, KILLED_CLI_IMPORT, str(data))
    line = assert_one_line_error(run(home, "export", "--corpus", "fresh", str(tmp_path / "o.tsv")))
    assert "no corpus 'fresh'" in line
    common = ["--corpus", "fresh", "--src-lang", "zh", "--tgt-lang", "en"]
    proc = run(home, "import", *common, str(data))
    assert proc.returncode == 0 and "imported 500 pairs" in proc.stdout, proc.stderr


def _db(home: Path, sql: str, *params) -> None:
    import sqlite3

    with sqlite3.connect(home / "workbench.db") as conn:
        conn.execute(sql, params)


def test_output_escapes_control_characters(tmp_path: Path) -> None:
    """Names stored before the name rule (or hostile file names) cannot act on the terminal."""
    home = tmp_path / "h"
    src = tmp_path / "pairs.tsv"
    src.write_text(TSV, encoding="utf-8")
    common = ["--corpus", "c", "--src-lang", "zh", "--tgt-lang", "en"]
    assert run(home, "import", *common, str(src)).returncode == 0
    evil = "evil\x1b]0;pwned\x07\x1b[2J\u202e"
    _db(home, "UPDATE corpora SET name = ?", evil)
    _db(
        home,
        "INSERT INTO model_versions (name, notes, artifact_path, sha256, param_count, metrics,"
        " device, src_lang, tgt_lang, train_pair_count, train_seconds, created_at) VALUES"
        " (?, '', 'models/1', '', 0, '{}', 'cpu', 'zh', 'en', 0, 0, '2026-01-01 00:00:00')",
        evil,
    )
    for args in (["versions"], ["versions", "--json"]):
        proc = run(home, *args)
        assert proc.returncode == 0, proc.stderr
        assert not any(ch in proc.stdout for ch in "\x1b\x07\u202e"), repr(proc.stdout)
    proc = run(home, "versions")
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\u202e" in proc.stdout
    assert json.loads(run(home, "versions", "--json").stdout)[0]["name"] == evil
    out = tmp_path / "out\x1b[2J.tsv"
    proc = run(home, "export", "--corpus", "#1", str(out))
    assert proc.returncode == 0 and "\x1b" not in proc.stdout and "out\\x1b[2J" in proc.stdout
    line = assert_one_line_error(run(home, "export", "--corpus", "x\x1b[2J", str(out)))
    assert "\x1b" not in line


@pytest.mark.parametrize(
    ("args", "db_url", "message"),
    [
        (["versions"], "not a url", "WORKBENCH_DB_URL is not a database URL"),
        (["versions"], "sqlite:///{missing}/x.db", "does not exist"),
        (["versions"], "nosuchdb://x", "unknown database backend"),
        (["translate", "--version", "99999999999999999999", "hi"], None, "ids are 1 to"),
        (["evaluate", "--version", "0", "--src", "a", "--ref", "b"], None, "ids are 1 to"),
        (["export", "--corpus", "#99999999999999999999", "{out}"], None, "no corpus"),
        (["export", "--corpus", b"bad\xffname", "{out}"], None, "--corpus is not valid UTF-8"),
        (["translate", "--version", "1", b"caf\xe9"], None, "an argument is not valid UTF-8"),
        (["versions", "\x1b[2J", b"\xff"], None, "unrecognized arguments: \\x1b[2J \\udcff"),
        (
            ["import", "--corpus", b"\xff", "--src-lang", "zh", "--tgt-lang", "en", "{good}"],
            None,
            "--corpus is not valid UTF-8",
        ),
    ],
)
def test_bad_environment_and_arguments_are_one_error_line(
    tmp_path: Path, args: list, db_url: str | None, message: str
) -> None:
    missing = tmp_path / "no" / "such" / "folder"
    good = tmp_path / "good.tsv"
    good.write_text(TSV, encoding="utf-8")
    fill = {"out": str(tmp_path / "out.tsv"), "good": str(good), "missing": str(missing)}
    argv = [a.format(**fill) if isinstance(a, str) else a for a in args]
    url = db_url.format(**fill) if db_url else None
    line = assert_one_line_error(run(tmp_path / "h", *argv, db_url=url))
    assert message in line and "internal error" not in line
    assert not missing.parent.exists()  # no folder is created for a given database URL


DISK_FULL = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from workbench.__main__ import main
from db import dispose_engines
from tests.helpers import ROOT, cli_in_process, killed_import
"""


def test_a_full_disk_is_one_error_line(tmp_path: Path) -> None:
    home = tmp_path / "h"
    small, big = tmp_path / "small.tsv", tmp_path / "big.tsv"
    small.write_text(TSV, encoding="utf-8")
    big.write_text(
        "\n".join(f"第{i}句很长很长的句子。\tSentence {i} is rather long." for i in range(20_000)),
        encoding="utf-8",
    )
    common = ["--corpus", "c", "--src-lang", "zh", "--tgt-lang", "en"]
    assert run(home, "import", *common, str(small)).returncode == 0
    limit = (home / "workbench.db").stat().st_size + 200_000
    env = {**os.environ, "WORKBENCH_HOME": str(home)}
    env.pop("WORKBENCH_DB_URL", None)
    for argv in (
        ["import", *common, str(big)],
        ["export", "--corpus", "c", str(tmp_path / "o.tsv")],
    ):
        code = DISK_FULL + f"sys.argv[1:] = {argv!r}\nraise SystemExit(main())\n"
        if argv[0] == "export":  # the export itself must be what hits the limit
            limit = 10
        proc = subprocess.run(
            [sys.executable, "-c", code, str(limit)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        line = assert_one_line_error(proc, code=1)
        assert "internal error" not in line, line
        assert "disk full" in line or "disk I/O error" in line, line
    out = tmp_path / "out.tsv"
    assert run(home, "export", "--corpus", "c", str(out)).returncode == 0
    assert len(out.read_text("utf-8").splitlines()) == 1 + 3  # the failed import wrote nothing
