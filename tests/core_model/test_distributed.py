"""DDP: the training entry point under torchrun with 2 CPU processes (Gloo) ends with identical
weights on both ranks, rank 0 writes the model folder, and `workbench register` adds that
folder as a version; a run spread by the calling process (`train_data_parallel`) shares every
update between its ranks, resumes in another layout, and its layout is timed or kept; what a
rank is asked to do reads back as it was written, and a bad spec is refused in one line."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core_model.artifact import WEIGHTS_FILE, load_model
from core_model.distributed import train_data_parallel
from core_model.training import TrainConfig, TrainingError, parallel
from core_model.training.checkpoint import find_checkpoint, read_state
from core_model.training.layout import ONE_PROCESS, choose_layout
from core_model.training.parallel import (
    Calibration,
    Layout,
    MeasureTask,
    RankSpec,
    TrainTask,
)
from core_model.transformer import ModelConfig
from tests.helpers import ROOT, TOY, cli_in_process, free_port, toy_pairs
from workbench.models import registry


def test_two_gloo_ranks_end_with_identical_weights_and_register_as_a_version(
    tmp_path: Path, wb_home: Path, db_fingerprint
) -> None:
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc_per_node", "2", "--nnodes", "1",
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        "--log-dir", str(tmp_path / "torchrun-logs"),  # else a torchelastic_* folder in /tmp
        "-m", "core_model.distributed",
        "--train", str(TOY), "--valid", str(TOY),
        "--preset", "tiny", "--max-steps", "8", "--device", "cpu", "--precision", "fp32",
        "--max-tokens", "150",  # several batches, so the ranks see different data
        "--out", str(tmp_path / "model"), "--hash-dir", str(tmp_path / "hashes"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digests = [(tmp_path / "hashes" / f"rank{r}.sha256").read_text().strip() for r in (0, 1)]
    assert len(digests[0]) == 64 and digests[0] == digests[1]
    loaded = load_model(tmp_path / "model")
    assert loaded.config["metrics"]["world_size"] == 2
    assert loaded.config["metrics"]["steps"] == 8

    # A damaged copy is refused with one line, and nothing is written.
    broken = tmp_path / "broken"
    shutil.copytree(tmp_path / "model", broken)
    (broken / WEIGHTS_FILE).write_bytes(b"not a safetensors file")
    before = db_fingerprint()
    refused = cli_in_process("register", str(broken), "--src-lang", "zh", "--tgt-lang", "en")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("error: cannot import")
    # torchrun's folder records no languages: they must be given.
    unnamed = cli_in_process("register", str(tmp_path / "model"))
    assert unnamed.returncode != 0 and "records no languages" in unnamed.stderr
    assert db_fingerprint() == before
    assert not list(wb_home.glob("runs/import-*"))  # no half-copied folder left behind

    done = cli_in_process("register", str(tmp_path / "model"), "--src-lang", "zh",
                          "--tgt-lang", "en", "--name", "ddp run")  # fmt: skip
    assert done.returncode == 0, done.stderr
    version_id = json.loads(done.stdout.strip().splitlines()[-1])["version_id"]
    info = registry.get_version(version_id)
    assert (info.name, info.src_lang, info.tgt_lang, info.run_id) == ("ddp run", "zh", "en", None)
    assert info.metrics["world_size"] == 2 and info.param_count > 0
    assert (tmp_path / "model" / WEIGHTS_FILE).is_file()  # copied, the user's folder is kept
    sources = [s for s, _ in toy_pairs()[:3]]
    translated = cli_in_process("translate", "--version", str(version_id), *sources)
    assert translated.returncode == 0, translated.stderr
    assert len(translated.stdout.splitlines()) == len(sources)


# -- runs spread by the calling process itself (core_model.distributed.train_data_parallel) ----


def _numbers_corpus(n: int) -> list[tuple[str, str]]:
    """`n` distinct pairs of varied lengths (more length buckets than the toy corpus)."""
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    return [
        (" ".join(words[(i + k) % 9] for k in range(2 + i % 7)), f"number {i} " * (1 + i % 3))
        for i in range(n)
    ]


def test_ranks_share_every_update_so_a_budget_buys_the_same_steps(tmp_path: Path) -> None:
    pairs = _numbers_corpus(300)
    cfg = TrainConfig(preset="tiny", epochs=2, min_epoch_steps=1, device="cpu",
                      precision="fp32", max_tokens_per_batch=200)  # fmt: skip
    one = train_data_parallel(Layout(1, 1), pairs, None, cfg)
    two = train_data_parallel(Layout(2, 1), pairs, None, cfg, out_dir=tmp_path / "two")
    # each rank takes its part of every update: the ranks together train the batches one
    # process does, and every token of both is counted, whatever the parts (by speed) — a
    # batch of a single pair (a length bucket's remainder) is trained by both
    assert two.metrics["steps"] == one.metrics["steps"]
    extra = two.metrics["tokens_trained"] - one.metrics["tokens_trained"]
    assert 0 <= extra <= 0.01 * one.metrics["tokens_trained"]
    assert (two.metrics["world_size"], two.metrics["threads"]) == (2, 1)
    assert isinstance(two.metrics["pace"]["share_changes"], list)
    assert load_model(tmp_path / "two").config["metrics"]["world_size"] == 2


def test_ranks_end_by_themselves_as_soon_as_a_run_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tester's walk: five ranks of a run were stopped by SIGTERM at its normal end (the
    launcher warned of each). A rank's work was done, but the interpreter's teardown took
    over a second of CPU per rank, longer than the group's grace on shared cores. Now each
    leaves at once: the group closes within a grace of half a second."""
    monkeypatch.setattr(parallel, "STOP_GRACE_S", 0.5)  # past it: SIGTERM (the walk's warnings)
    closing: list[float] = []
    close = parallel.RankGroup.__exit__

    def timed_close(group: parallel.RankGroup, *exc: object) -> None:
        started = time.monotonic()
        close(group, *exc)
        closing.append(time.monotonic() - started)

    monkeypatch.setattr(parallel.RankGroup, "__exit__", timed_close)
    cfg = TrainConfig(preset="tiny", max_steps=4, device="cpu", precision="fp32")
    result = train_data_parallel(Layout(2, 1), toy_pairs()[:20], None, cfg)
    assert result.metrics["world_size"] == 2
    assert len(closing) == 1 and closing[0] < parallel.STOP_GRACE_S, closing


def test_a_checkpoint_of_two_ranks_resumes_in_one_process(tmp_path: Path) -> None:
    pairs = _numbers_corpus(120)
    cfg = TrainConfig(preset="tiny", epochs=4, min_epoch_steps=5, device="cpu",
                      precision="fp32", max_tokens_per_batch=120)  # fmt: skip
    out = tmp_path / "run"
    after_checkpoint = {"n": 0}

    def cancel_after_the_first_checkpoint() -> bool:  # rank 0 asks; every rank stops with it
        if find_checkpoint(out) is not None:
            after_checkpoint["n"] += 1
        return after_checkpoint["n"] > 2

    first = train_data_parallel(
        Layout(2, 1), pairs, None, cfg, out_dir=out, should_cancel=cancel_after_the_first_checkpoint
    )
    assert first.cancelled
    saved = read_state(find_checkpoint(out))["step"]
    assert saved > 0
    resumed = train_data_parallel(Layout(1, 1), pairs, None, cfg, out_dir=out, resume_from=out)
    assert not resumed.cancelled and resumed.metrics["world_size"] == 1
    assert resumed.metrics["steps"] > saved and resumed.metrics["epochs"] == 4


def test_a_short_run_keeps_one_process_and_an_asked_layout_is_kept() -> None:
    pairs = _numbers_corpus(50)
    short = choose_layout(TrainConfig(epochs=1, device="cpu"), pairs, None, cores=2)
    assert (short.layout, short.timings, short.speed) == (ONE_PROCESS, (), None)
    asked = choose_layout(TrainConfig(epochs=1, device="cpu", processes=2), pairs, None, cores=4)
    assert asked.layout == Layout(2, 2) and asked.timings == ()  # epochs: nothing to time


def test_a_long_run_times_every_layout_for_real() -> None:
    """Every layout is really measured (two ranks included), in the precision asked for, and
    the run's metrics show those measurements. (Which one wins depends on this CPU: taking
    the fastest is checked on set timings, in the test below.)"""
    pairs = _numbers_corpus(200)
    cfg = TrainConfig(token_budget=5_000_000, device="cpu", precision="fp32")
    choice = choose_layout(cfg, pairs, None, cores=2)
    timed = {(t.processes, t.threads): t for t in choice.timings}
    assert set(timed) == {(1, 2), (2, 1), (1, 1)}
    for t in choice.timings:
        assert math.isfinite(t.tokens_per_s) and t.tokens_per_s > 0, t
        assert t.steps > 0 and t.precision == "fp32", t
    assert (choice.layout.processes, choice.layout.threads) in timed
    shown = choice.metrics()["layout_timings"]
    assert [(m["processes"], m["threads"], m["tokens_per_s"]) for m in shown] == [
        (t.processes, t.threads, t.tokens_per_s) for t in choice.timings
    ]


def test_layouts_are_compared_on_the_batch_the_run_will_train(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The recipe plans twice when the measured speed buys another batch (a slow machine's
    budget, smaller ones): every layout is timed again on that batch, and the fastest there is
    chosen (two ranks lose on a 250-token batch, split in two, and can win on a 625-token
    one)."""
    from core_model.training import layout as layout_module
    from core_model.training.calibration import Calibration

    asked: list[tuple[int, Layout]] = []

    def timed(candidate: TrainConfig, _lengths, _device, layout: Layout, _model, _run_pairs):
        batch = int(candidate.max_tokens_per_batch)
        asked.append((batch, layout))
        fast = (layout.processes == 2) == (batch > 250)  # two ranks win only on large batches
        tokens_per_s = 2_000.0 if fast else 1_500.0  # 1.1M tokens in 10 minutes: 250
        return [Calibration(tokens_per_s, 5, 2.0, layout.threads, "fp32", 1, layout.processes)]

    monkeypatch.setattr(layout_module, "measure_candidate", timed)
    cfg = TrainConfig(time_budget_s=600, device="cpu", precision="fp32")
    choice = choose_layout(cfg, _numbers_corpus(2_000), None, cores=2)  # `small`
    every_layout = {Layout(1, 2), Layout(2, 1), Layout(1, 1)}
    first, last = asked[0][0], asked[-1][0]
    assert first == 625 and last == 250, asked
    assert {layout for batch, layout in asked if batch == last} == every_layout
    assert choice.layout == Layout(1, 2) and len(choice.timings) == len(every_layout)
    assert choice.speed is not None and choice.speed.processes == 1


def test_a_layout_on_every_core_is_timed_again_when_fewer_cores_measured_faster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A core busy for a moment while 1 x 2 was timed (its threads then wait for each other)
    must not leave a 10-minute run on one thread: the layouts on more cores than the fastest
    are timed once more, and the better of their two timings counts."""
    from core_model.training import layout as layout_module
    from core_model.training.calibration import Calibration

    asked: list[tuple[int, Layout]] = []

    def timed(candidate: TrainConfig, _lengths, _device, layout: Layout, _model, _run_pairs):
        asked.append((int(candidate.max_tokens_per_batch), layout))
        busy = layout == Layout(1, 2) and len(asked) == 1  # its first timing only
        speed = {Layout(1, 2): 350.0 if busy else 7_000.0, Layout(2, 1): 3_000.0}.get(
            layout, 4_000.0
        )
        return [Calibration(speed, 5, 2.0, layout.threads, "fp32", 1, layout.processes)]

    monkeypatch.setattr(layout_module, "measure_candidate", timed)
    cfg = TrainConfig(time_budget_s=600, device="cpu", precision="fp32")
    choice = choose_layout(cfg, _numbers_corpus(2_000), None, cores=2)
    # the first round: 1 x 1 fastest; then the two layouts on both cores again, not 1 x 1
    first = asked[0][0]  # the same candidate (its batch) timed again
    layouts = [Layout(1, 2), Layout(2, 1), Layout(1, 1), Layout(1, 2), Layout(2, 1)]
    assert asked[:5] == [(first, layout) for layout in layouts]
    assert choice.layout == Layout(1, 2)
    assert choice.speed is not None and choice.speed.tokens_per_s == 7_000.0


def test_a_layout_slower_at_one_precision_than_fewer_cores_is_timed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A click once trained fp32 after bf16 1 x 2 read 1,204 tokens/s against bf16 1 x 1's
    3,884 (its fp32 1 x 2 was the fastest of the round): the layout slower at a precision than
    one on fewer cores is timed again, alone, and bf16 1 x 2's second timing wins."""
    from core_model.training import layout as layout_module
    from core_model.training.calibration import Calibration

    asked: list[Layout] = []
    speeds = {
        Layout(1, 2): {"bf16": 1_204.0, "fp32": 5_400.0},
        Layout(2, 1): {"bf16": 4_700.0, "fp32": 4_300.0},
        Layout(1, 1): {"bf16": 3_900.0, "fp32": 2_900.0},
    }

    def timed(_candidate: TrainConfig, _lengths, _device, layout: Layout, _model, _run_pairs):
        asked.append(layout)
        again = asked.count(layout) > 1
        return [
            Calibration(
                7_000.0 if again and p == "bf16" else v,
                5,
                2.0,
                layout.threads,
                p,
                1,
                layout.processes,
            )
            for p, v in speeds[layout].items()
        ]

    monkeypatch.setattr(layout_module, "measure_candidate", timed)
    cfg = TrainConfig(time_budget_s=600, device="cpu", precision="auto", max_tokens_per_batch=625)
    choice = choose_layout(cfg, _numbers_corpus(2_000), None, cores=2)
    # the first round, then 1 x 2 alone (the recipe may then time another model: 7,000 tokens/s
    # buy more than `recipe.SHALLOW_MAX_TOKENS`)
    assert asked[:4] == [Layout(1, 2), Layout(2, 1), Layout(1, 1), Layout(1, 2)]
    assert choice.layout == Layout(1, 2)
    assert choice.speed is not None and (choice.speed.precision, choice.speed.tokens_per_s) == (
        "bf16",
        7_000.0,
    )


@pytest.mark.parametrize(
    ("ranks_speed", "chosen"), [(6_600.0, Layout(1, 2)), (7_000.0, Layout(2, 1))]
)
def test_ranks_are_chosen_only_when_they_time_clearly_faster_than_one_process(
    monkeypatch: pytest.MonkeyPatch, ranks_speed: float, chosen: Layout
) -> None:
    """Two ranks timed 1.10x one process's two threads: one process trains (ranks train slower
    than their short timing, and lose more to a busy core), by its own timing; at 1.17x the
    ranks train."""
    from core_model.training import layout as layout_module
    from core_model.training.calibration import Calibration

    def timed(_candidate: TrainConfig, _lengths, _device, layout: Layout, _model, _run_pairs):
        speed = {Layout(1, 2): 6_000.0, Layout(2, 1): ranks_speed}.get(layout, 4_000.0)
        return [Calibration(speed, 5, 2.0, layout.threads, "bf16", 1, layout.processes)]

    monkeypatch.setattr(layout_module, "measure_candidate", timed)
    cfg = TrainConfig(time_budget_s=600, device="cpu", precision="bf16", max_tokens_per_batch=625)
    choice = choose_layout(cfg, _numbers_corpus(2_000), None, cores=2)
    assert choice.layout == chosen
    assert choice.speed is not None and (choice.speed.processes, choice.speed.threads) == (
        chosen.processes,
        chosen.threads,
    )
    assert ("ranks must time" in choice.reason) == (chosen.processes == 1)


def test_a_plan_that_only_turns_dropout_off_times_the_fastest_layout_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guess (3M tokens, >25 passes over this small corpus) plans dropout; the measured
    speed buys 7 passes, so the next candidate differs only in dropout: the layout that won is
    timed again alone, at its precision, and that timing plans the run."""
    from core_model.training import layout as layout_module
    from core_model.training.calibration import Calibration

    asked: list[tuple[float, Layout, str]] = []

    def timed(candidate: TrainConfig, _lengths, _device, layout: Layout, _model, _run_pairs):
        asked.append((float(candidate.dropout or 0.0), layout, candidate.precision))
        speed = {Layout(1, 2): 300.0, Layout(2, 1): 200.0}.get(layout, 250.0)
        speed += 10.0 * (len(asked) > 3)  # the second timing of 1 x 2 reads a little faster
        return [Calibration(speed, 5, 2.0, layout.threads, "fp32", 1, layout.processes)]

    monkeypatch.setattr(layout_module, "measure_candidate", timed)
    cfg = TrainConfig(
        time_budget_s=600, device="cpu", precision="auto", vocab_size=64, max_tokens_per_batch=625
    )
    choice = choose_layout(cfg, _numbers_corpus(2_000), None, cores=2)  # 22,866 tokens
    every_layout = [Layout(1, 2), Layout(2, 1), Layout(1, 1)]
    assert asked == [(0.1, layout, "auto") for layout in every_layout] + [
        (0.0, Layout(1, 2), "fp32")
    ]
    assert choice.layout == Layout(1, 2)
    assert choice.speed is not None and choice.speed.tokens_per_s == 310.0
    assert sorted(t.tokens_per_s for t in choice.timings) == [200.0, 250.0, 310.0]


def test_a_plan_that_only_halves_the_vocabulary_times_the_fastest_layout_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guess (3.0M tokens) plans 4k pieces a side; the measured speed buys fewer than
    `recipe.SHORT_BUDGET_TOKENS`, so the next candidate has 2k a side, the same layers and
    batch (the user's): the layout that won is timed again alone, at its precision (an AMX
    Xeon spent 62 s before its first step timing every layout for both vocabularies)."""
    from core_model.training import layout as layout_module
    from core_model.training.calibration import Calibration

    asked: list[tuple[int, int, Layout, str]] = []

    def timed(candidate: TrainConfig, _lengths, _device, layout: Layout, _model, _run_pairs):
        asked.append(
            (candidate.vocab_size, candidate.max_tokens_per_batch, layout, candidate.precision)
        )
        speed = {Layout(1, 2): 4_000.0, Layout(2, 1): 3_500.0}.get(layout, 3_000.0)
        speed += 300.0 * (len(asked) > 3)  # the smaller output layer trains a little faster
        return [Calibration(speed, 5, 2.0, layout.threads, "bf16", 1, layout.processes)]

    monkeypatch.setattr(layout_module, "measure_candidate", timed)
    cfg = TrainConfig(time_budget_s=600, device="cpu", precision="auto", max_tokens_per_batch=625)
    choice = choose_layout(cfg, _numbers_corpus(20_000), None, cores=2)  # 232k tokens
    every_layout = [Layout(1, 2), Layout(2, 1), Layout(1, 1)]
    assert asked == [(4_000, 625, layout, "auto") for layout in every_layout] + [
        (2_000, 625, Layout(1, 2), "bf16")
    ]
    assert choice.layout == Layout(1, 2)
    assert choice.speed is not None and choice.speed.tokens_per_s == 4_300.0


# -- what a child rank is asked to do (parallel.RankSpec) -------------------------------------


def test_a_rank_spec_reads_back_as_it_was_written() -> None:
    speed = Calibration(5_000.0, 12, 2.0, 1, "fp32", 1_000, processes=2, shapes=3)
    train = TrainTask(
        train=(("ein Haus", "a house"), ("zwei", "two")),
        valid=(("drei", "three"),),
        config=TrainConfig(preset="tiny", epochs=3, device="cpu", adam_betas=(0.8, 0.9)),
        speed=speed,
        threads=1,
        init_from="/models/7",
        resume_from=None,
    )
    measure = MeasureTask(
        model=ModelConfig(src_vocab_size=300, tgt_vocab_size=300, d_model=32),
        batch_tokens=625,
        lengths=((3, 4), (10, 12)),
        run_pairs=29_000,
        device="cpu",
        precisions=("fp32", "bf16"),
        threads=1,
        seconds=0.5,
    )
    for spec in (RankSpec(2, "gloo", train), RankSpec(4, "nccl", measure)):
        text = spec.to_json()
        assert json.loads(text)["kind"] in ("train", "measure")
        assert RankSpec.from_json(text) == spec


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json", "Expecting value"),
        ('{"world": 2, "backend": "gloo", "kind": "sing", "task": {}}', "KeyError: 'sing'"),
        ('{"world": 2, "backend": "gloo", "kind": "measure", "task": {}}', "KeyError: 'model'"),
        (
            '{"world": 2, "backend": "gloo", "kind": "train", "task": {"train": [], "valid": [],'
            ' "config": {"epochz": 1}, "speed": null, "threads": null, "init_from": null,'
            ' "resume_from": null}}',
            "unknown training config keys: epochz",
        ),
    ],
)
def test_a_bad_rank_spec_is_refused_in_one_line(text: str, says: str) -> None:
    with pytest.raises(TrainingError, match=r"^A training process got an invalid task") as info:
        RankSpec.from_json(text)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_child_rank_given_a_bad_spec_file_exits_saying_why(tmp_path: Path) -> None:
    """The child's own entry (what a RankGroup starts): one line on stderr, exit status 1 —
    the line its group quotes when it names the rank that stopped."""
    bad = tmp_path / "spec.json"
    bad.write_text('{"world": 2}', encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for spec, says in (
        (bad, "invalid task (KeyError: 'kind')"),
        (tmp_path / "gone.json", "cannot read"),
    ):
        cmd = [sys.executable, "-m", "core_model.distributed", "--child", str(spec), "1"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("rank 1: A training process") and says in line, line
    assert not (tmp_path / "ready.1").exists()  # refused before saying it is ready
