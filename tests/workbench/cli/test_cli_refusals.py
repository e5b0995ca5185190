"""What a tester's walk through the command line found: output files written over the
database or a device, empty imports that created corpora, contradicting languages, ids and
budgets too big for their columns, undecodable standard input, and commands that said nothing.
Each is refused in one ``error:`` line with nothing changed, or now says what it did."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.workbench.cli.test_cli_corpus import TSV, _db, assert_one_line_error, run

IMPORT = ["--src-lang", "zh", "--tgt-lang", "en"]


def _home_with_corpus(tmp_path: Path) -> Path:
    home = tmp_path / "h"
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(TSV, encoding="utf-8")
    assert run(home, "import", "--corpus", "c", *IMPORT, str(pairs)).returncode == 0
    return home


def _dump(home: Path) -> list[str]:
    with sqlite3.connect(home / "workbench.db") as conn:
        return list(conn.iterdump())


# ------------------------------------------------------------------------- output files


@pytest.mark.parametrize("command", ["export", "backup", "xliff"])
def test_output_files_never_replace_the_workbench_files_or_special_files(
    tmp_path: Path, command: str
) -> None:
    home = _home_with_corpus(tmp_path)
    (home / "models" / "1").mkdir(parents=True)
    xliff = tmp_path / "in.xlf"
    xliff.write_text("<xliff/>", encoding="utf-8")
    argv = {
        "export": ["export", "--corpus", "c", "--format", "tsv"],
        "backup": ["backup"],
        "xliff": ["translate", "--version", "1", "--xliff", str(xliff), "--out"],
    }[command]
    db = home / "workbench.db"
    before, size = _dump(home), db.stat().st_size
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused = {
        db: "one of the workbench's own files",
        home / "workbench.db-wal": "one of the workbench's own files",
        home / "workbench.db-journal": "one of the workbench's own files",
        home / "models" / "1" / "x.tsv": "one of the workbench's own files",
        home / "runs" / "x.tsv": "one of the workbench's own files",
        home / "memory" / "v1-c1.npz": "one of the workbench's own files",
        home / "workbench.db.migrate.lock": "one of the workbench's own files",
        Path("/dev/null"): "not a regular file",
        fifo: "not a regular file",
        tmp_path: "is a directory",
        tmp_path / "no" / "x.tsv": "folder does not exist",
    }
    link = tmp_path / "link.tsv"
    link.symlink_to(db)  # a link is followed: the file it names is what counts
    refused[link] = "one of the workbench's own files"
    loop = tmp_path / "loop.tsv"
    loop.symlink_to(loop)
    refused[loop] = "cannot be resolved"
    (home / "memory").mkdir()
    for target, message in refused.items():
        line = assert_one_line_error(run(home, *argv, str(target)))
        assert message in line, (target, line)
    assert db.stat().st_size == size and _dump(home) == before
    assert Path("/dev/null").is_char_device() and stat.S_ISFIFO(fifo.stat().st_mode)
    assert not (home / "workbench.db-journal").exists() and not (home / "runs").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # a name that only starts like the database's is a user's file (a dated backup beside it)
    mine = run(home, *argv, str(home / "workbench.db.2026-11-28.out"))
    assert "own files" not in mine.stderr


def test_output_files_keep_modes_and_write_through_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workbench.output_files import write_file

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "h"))
    old = os.umask(0o022)
    try:
        new = tmp_path / "new.txt"
        write_file(new, b"a")
        assert stat.S_IMODE(new.stat().st_mode) == 0o644  # 0666 less the umask, not 0600
        kept = tmp_path / "kept.txt"
        kept.write_bytes(b"old")
        kept.chmod(0o640)
        write_file(kept, b"b")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_bytes() == b"b"
        link = tmp_path / "link.txt"
        link.symlink_to(kept)
        write_file(link, b"through")
        assert link.is_symlink() and kept.read_bytes() == b"through"
    finally:
        os.umask(old)


def test_export_refuses_an_ending_it_cannot_write(tmp_path: Path) -> None:
    home = _home_with_corpus(tmp_path)
    for name in ("o.xlf", "o.xyz", "o"):
        line = assert_one_line_error(run(home, "export", "--corpus", "c", str(tmp_path / name)))
        assert "cannot tell the export format" in line and "--format" in line
        assert not (tmp_path / name).exists()
    proc = run(home, "export", "--corpus", "c", "--format", "jsonl", str(tmp_path / "o"))
    assert proc.returncode == 0 and (tmp_path / "o").read_text("utf-8").startswith("{")


# ---------------------------------------------------------------------------- imports


def test_an_import_that_adds_nothing_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """A file with no valid row is refused; a file imported again (every row already in the
    corpus) is an import of 0 pairs, no error — and neither writes anything (no empty corpus,
    no change record)."""
    home = _home_with_corpus(tmp_path)
    empty, invalid, again = tmp_path / "e.tsv", tmp_path / "bad.jsonl", tmp_path / "a.tsv"
    empty.write_text("", encoding="utf-8")
    invalid.write_text('{"source": ""}\n{"x": 1}\n', encoding="utf-8")
    again.write_text(TSV, encoding="utf-8")
    before = _dump(home)
    for corpus, data, counts in (
        ("new", empty, "0 rows read"),
        ("new", invalid, "(2 invalid, 0 duplicates"),
        ("c", invalid, "(2 invalid, 0 duplicates"),
    ):
        line = assert_one_line_error(run(home, "import", "--corpus", corpus, *IMPORT, str(data)))
        assert "nothing to import" in line and counts in line, line
    done = run(home, "import", "--corpus", "c", *IMPORT, str(again))
    assert done.returncode == 0, done.stderr
    assert "imported 0 pairs into 'c' (3 duplicates, 0 invalid rows skipped)" in done.stdout
    assert _dump(home) == before
    assert "no corpus 'new'" in assert_one_line_error(run(home, "history", "--corpus", "new"))


def test_one_language_on_both_sides_is_refused(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(TSV, encoding="utf-8")
    argv = ["import", "--corpus", "c", "--src-lang", "zh", "--tgt-lang", "ZH", str(pairs)]
    assert "both 'zh'" in assert_one_line_error(run(tmp_path / "h", *argv))
    assert "no corpus 'c'" in assert_one_line_error(run(tmp_path / "h", "history", "--corpus", "c"))


def test_register_refuses_languages_that_contradict_its_corpus(tmp_path: Path) -> None:
    home = _home_with_corpus(tmp_path)
    argv = ["register", str(tmp_path), "--corpus", "c", "--src-lang", "de", "--tgt-lang", "en"]
    line = assert_one_line_error(run(home, *argv))
    assert "corpus 'c' is zh→en, not de→en" in line
    assert not (home / "models").exists()


# ------------------------------------------------------------------- versions and runs


def test_versions_shows_a_missing_value_as_a_dash(tmp_path: Path) -> None:
    """A registered public model has no corpus, pairs or trainer: its cells read "–" (the
    listing crashed on pandas' NaN in a text column, and showed None or <NA> elsewhere)."""
    home = _home_with_corpus(tmp_path)
    for corpus in ("1", "NULL"):
        _db(
            home,
            "INSERT INTO model_versions (name, notes, artifact_path, sha256, param_count, "
            "metrics, device, src_lang, tgt_lang, train_pair_count, train_seconds, created_at, "
            f"corpus_id) VALUES ('v', '', 'models/1', '', 0, '{{}}', 'cpu', 'zh', 'en', 3, 1, "
            f"'2026-01-01 00:00:00', {corpus})",
        )
    proc = run(home, "versions")
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    at = header.split().index("corpus") + 1  # (a created cell is two words)
    corpus = {row.split()[0]: row.split()[at] for row in rows}
    assert corpus == {"1": "c", "2": "–"}, proc.stdout
    for missing in ("None", "<NA>", "NaN", "nan"):
        assert missing not in proc.stdout


@pytest.mark.parametrize("command", ["resume", "delete-run", "cancel"])
def test_run_ids_too_big_for_the_database_are_refused(tmp_path: Path, command: str) -> None:
    line = assert_one_line_error(run(tmp_path / "h", command, "99999999999999999999999"))
    assert "ids are 1 to" in line


@pytest.mark.parametrize(
    ("option", "message"),
    [("--epochs", "Epochs must be at most 10,000"), ("--max-steps", "step limit")],
)
def test_train_budgets_are_capped(tmp_path: Path, option: str, message: str) -> None:
    home = _home_with_corpus(tmp_path)
    before = _dump(home)
    argv = ["train", "--corpus", "c", "--new", option, "99999999999999999999999"]
    assert message in assert_one_line_error(run(home, *argv))
    assert _dump(home) == before


def test_cancel_a_queued_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from db import dispose_engines
    from workbench.training import run_info, runs

    home = _home_with_corpus(tmp_path)
    monkeypatch.setenv("WORKBENCH_HOME", str(home))
    monkeypatch.delenv("WORKBENCH_DB_URL", raising=False)
    dispose_engines()
    run_id = runs.enqueue_training("c", preset="tiny", epochs=1)  # queued: no worker started
    dispose_engines()
    proc = run(home, "cancel", str(run_id))
    assert proc.returncode == 0 and proc.stdout == f"run {run_id} is cancelled\n", proc.stderr
    assert run_info.get_run(run_id).status == "cancelled"
    line = assert_one_line_error(run(home, "cancel", str(run_id + 1)))
    assert f"Training run {run_id + 1} does not exist" in line


# --------------------------------------------------------------- input and confirmations


def test_translate_refuses_standard_input_that_is_not_utf8(tmp_path: Path) -> None:
    """Undecodable bytes arrive as lone surrogates (the C locale's, UTF-8 mode's stdin), as
    they do in arguments: refused the same way, before any version is looked up."""
    from tests.helpers import cli_in_process

    home = tmp_path / "h"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WORKBENCH_HOME", str(home))
        mp.delenv("WORKBENCH_DB_URL", raising=False)
        proc = cli_in_process("translate", "--version", "1", stdin="caf\udce9\n")
    assert assert_one_line_error(proc) == "error: standard input is not UTF-8 text"


def test_evaluate_names_empty_test_files(tmp_path: Path) -> None:
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("", encoding="utf-8")
    ref.write_text("", encoding="utf-8")
    argv = ["evaluate", "--version", "1", "--src", str(src), "--ref", str(ref)]
    line = assert_one_line_error(run(tmp_path / "h", *argv))
    assert "are empty: no test pairs to score" in line and "test split" not in line


def test_trash_and_user_remove_say_what_they_did(tmp_path: Path) -> None:
    home = tmp_path / "h"
    proc = run(home, "trash")
    assert proc.returncode == 0 and proc.stdout.startswith("the trash is empty"), proc.stderr
    assert run(home, "trash", "--json").stdout == ""
    assert run(home, "user-role", "ana@example.org", "editor").returncode == 0
    proc = run(home, "user-remove", "ana@example.org")
    assert proc.returncode == 0 and proc.stdout == "removed ana@example.org from the team\n"
