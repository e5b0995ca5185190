"""A run held to its plan when the machine's speed changes under it (issue 38): fewer threads
within seconds when a core is taken, back when it frees, and a re-plan of what depends on
the tokens when the run trains far off its calibrated speed; data-parallel ranks that take
parts of each update by their speed, each on cores of its own. Slow-downs are injected (a fake
clock, a sleep in the step callback, given forward times), so nothing here depends on this
CPU's speed."""

from __future__ import annotations

import functools
import os
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from core_model.artifact import read_config
from core_model.batching import example_cost
from core_model.training import TrainConfig, checkpoint, pace, parallel, recipe, schedule, train
from core_model.training import trainer as trainer_module
from core_model.training.calibration import Calibration
from core_model.training.pace import RankShares, ThreadWatch
from core_model.training.parallel import CorePin, Ranks
from core_model.training.schedule import Budget, BudgetClock


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_steps(watch: ThreadWatch, clock: FakeClock, seconds_per_step: float, n: int) -> list:
    """`n` steps of 1,000 tokens taking `seconds_per_step` each; the changes asked for."""
    asked = []
    for _ in range(n):
        clock.now += seconds_per_step
        threads = watch.observe(1_000, clock.now)
        if threads is not None:
            asked.append(threads)
    return asked


def test_a_taken_core_drops_to_one_thread_within_seconds_and_back_when_free() -> None:
    clock, idle = FakeClock(), [0.0]
    watch = ThreadWatch(2, 2, lambda: idle[0], clock)
    assert run_steps(watch, clock, 0.1, 60) == []  # 6 s at 10,000 tokens/s
    # one slow window alone (a blip an idle machine has too) changes nothing
    assert run_steps(watch, clock, 3.5, 1) == []
    assert run_steps(watch, clock, 0.1, 40) == []
    # a core is taken: 35x slower; the second slow window in a row (6 s) decides
    assert run_steps(watch, clock, 3.5, 2) == [1]
    assert watch.changes[-1] | {"window_tokens_per_s": 0} == {
        "elapsed_s": pytest.approx(clock.now, abs=0.1),
        "threads": 1,
        "window_tokens_per_s": 0,
        "why": "slowed down",
    }
    # while the core stays busy, one thread goes on (5,000 tokens/s) and nothing is tried
    assert run_steps(watch, clock, 0.2, 150) == []
    # the core frees: at the next look the threads are tried again, and kept: they are faster
    idle[0] = 2.0
    asked = run_steps(watch, clock, 0.1, 250)
    assert asked == [2] and watch.threads == 2 and watch.changes[-1]["why"] == "cores free"


def test_threads_that_do_not_train_faster_are_given_up_again() -> None:
    clock = FakeClock()
    watch = ThreadWatch(2, 2, lambda: 2.0, clock)  # the machine says its cores are idle
    run_steps(watch, clock, 0.1, 40)
    assert run_steps(watch, clock, 4.0, 2) == [1]
    run_steps(watch, clock, 0.2, 20)  # one thread: 5,000 tokens/s
    asked = run_steps(watch, clock, 0.2, 200)  # two threads no faster: back to one
    assert asked[:2] == [2, 1] and watch.changes[2]["why"] == "no gain"


def test_one_thread_has_nothing_to_give_up() -> None:
    clock = FakeClock()
    watch = ThreadWatch(1, 1, lambda: 0.0, clock)
    run_steps(watch, clock, 0.1, 40)
    assert run_steps(watch, clock, 5.0, 3) == [] and watch.changes == []


def numbered_pairs(n: int) -> list[tuple[str, str]]:
    words = ["ein", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn"]
    return [(f"{' '.join(words)} {i}", f"one two three four five six seven {i}") for i in range(n)]


def time_steps_by_their_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[FakeClock, list[tuple[list[int], int]]]:
    """A fake clock the run's steps advance by their padded tokens (20,000 a second), and the
    (pairs, padded tokens) of every batch the trainer makes, in order."""
    clock = FakeClock()
    monkeypatch.setattr(schedule, "time", SimpleNamespace(monotonic=clock))
    batches: list[tuple[list[int], int]] = []
    collate = trainer_module.collate

    def timed_collate(examples, idx, *args):
        padded = len(idx) * max(example_cost(examples[i]) for i in idx)
        batches.append((list(idx), padded))
        clock.now += padded / 20_000
        return collate(examples, idx, *args)

    monkeypatch.setattr(trainer_module, "collate", timed_collate)
    return clock, batches


def test_a_run_far_slower_than_calibrated_is_replanned_and_says_so(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calibrated at a speed that buys hundreds of passes (dropout on), the run trains at a
    fraction of it (a sleep caps every step): after its first check it re-plans for the
    passes it will really make (dropout off), records planned and real speed, and the saved
    model is the re-planned one."""
    monkeypatch.setattr(pace, "REPLAN_AFTER_S", 1.0)
    pairs = numbered_pairs(3_000)
    cfg = TrainConfig(
        time_budget_s=4,
        preset="tiny",
        tokenizer="whitespace",
        precision="fp32",
        num_threads=1,
        max_tokens_per_batch=250,
    )
    fast = Calibration(1_000_000.0, 20, 2.0, 1, "fp32", 300_000)

    def slow_steps(event) -> None:
        if event.kind == "loss":
            time.sleep(0.02)

    result = train(pairs, pairs[:20], cfg, out_dir=tmp_path, speed=fast, callback=slow_steps)
    m = result.metrics
    first = m["pace"]["replans"][0]
    assert m["pace"]["planned_tokens_per_s"] == pytest.approx(1_000_000 * 0.9)
    assert first["real_tokens_per_s"] < 0.1 * first["planned_tokens_per_s"]
    assert first["elapsed_s"] >= 1.0 and first["dropout"] == 0.0
    assert m["budget_tokens"] < m["pace"]["budget_tokens_at_start"]
    saved = read_config(tmp_path)
    assert saved["model"]["dropout"] == 0.0 and saved["training"]["dropout"] == 0.0


def test_a_run_replanned_for_few_tokens_trains_the_rest_of_its_epoch_in_smaller_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calibrated at a speed that buys 625-token batches, the run trains at a fiftieth of it
    (a fake clock advanced by each batch's padded tokens): its first check re-plans for the
    few tokens it will train, with the batch and the peak rate those want (more, smaller
    updates: a laptop whose core was taken), and the next update is already of the new size —
    the rest of the epoch batched again, every pair of it trained once."""
    monkeypatch.setattr(pace, "REPLAN_AFTER_S", 1.0)
    _, batches = time_steps_by_their_tokens(monkeypatch)
    seen: dict = {}
    cfg = TrainConfig(time_budget_s=30, preset="tiny", tokenizer="whitespace", precision="fp32")
    fast = Calibration(1_000_000.0, 20, 2.0, 1, "fp32", 300_000)
    n = 3_000
    result = train(
        numbered_pairs(n),
        numbered_pairs(20),
        cfg,
        speed=fast,
        callback=lambda event: seen.update(ended=seen.get("ended") or event.kind == "epoch"),
        should_cancel=lambda: bool(seen.get("ended")),
        threads=1,
    )
    first = result.metrics["pace"]["replans"][0]
    assert result.train_config.max_tokens_per_batch == 250 < recipe.CPU_BATCH_TOKENS[0]
    assert (first["batch_tokens"], first["lr"]) == (250, recipe.SMALL_BATCH_LRS[0][1])
    before, after = batches[: first["step"] + 1], batches[first["step"] + 1 :]
    assert max(padded for _, padded in before) > 250 >= max(padded for _, padded in after)
    epoch, trained, epoch_steps = [], 0, 0
    for idx, _ in batches:
        if trained == n:
            break
        epoch.extend(idx)
        trained += len(idx)
        epoch_steps += 1
    assert sorted(epoch) == list(range(n))
    assert first["step"] + 1 < epoch_steps  # the re-plan fell inside the epoch


def test_a_replan_at_an_epochs_end_is_in_its_checkpoint_and_a_resumed_run_trains_by_it(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first comparison with the plan falls at the first epoch's end (a slow validation
    on a fake clock): it re-plans for few tokens (250-token batches), the epoch's checkpoint
    holds that re-plan, and a run resumed from it trains 250-token batches from its first
    step, not the plan of the start until its own first check."""
    monkeypatch.setattr(pace, "REPLAN_AFTER_S", 5.0)
    clock, batches = time_steps_by_their_tokens(monkeypatch)
    validate = trainer_module.Trainer._validate

    def slow_validate(self):
        clock.now += 10.0
        return validate(self)

    monkeypatch.setattr(trainer_module.Trainer, "_validate", slow_validate)
    cfg = TrainConfig(time_budget_s=60, preset="tiny", tokenizer="whitespace", precision="fp32")
    fast = Calibration(1_000_000.0, 20, 2.0, 1, "fp32", 300_000)
    run = functools.partial(
        train, numbered_pairs(3_000), numbered_pairs(20), cfg, tmp_path, speed=fast, threads=1
    )
    seen: dict = {}
    run(
        callback=lambda event: seen.update(ended=seen.get("ended") or event.kind == "epoch"),
        should_cancel=lambda: bool(seen.get("ended")),
    )
    assert max(padded for _, padded in batches) > 250  # the first epoch: the start's plan
    saved = checkpoint.read_state(tmp_path / "checkpoint")["replans"]
    assert len(saved) == 1 and saved[0]["elapsed_s"] >= 10.0
    assert saved[0]["batch_tokens"] == 250 < recipe.CPU_BATCH_TOKENS[0]

    batches.clear()
    resumed_steps = iter(range(5))
    run(resume_from=tmp_path, should_cancel=lambda: next(resumed_steps, None) is None)
    assert batches and max(padded for _, padded in batches) <= 250


def test_the_trainer_drops_its_threads_when_steps_slow_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model worth two threads, trained with two; on the watch's clock (a fake one the step
    callback advances) a step takes 0.5 s with two threads and 1 s with one, and steps 2 and 3
    take 3 s, as a taken core would slow them (each step is a window of its own): the trainer
    goes to one thread after two slow windows and says why; when the steps are fast and the cores
    idle again it tries its threads back and keeps them. The run is cancelled once both
    changes are reported. The fake clock keeps the busy shared machine's own slow steps out
    of the verdicts, no step waits for real time, and few steps run with two threads (each
    can take seconds while another process holds a core)."""
    monkeypatch.setattr(pace, "WINDOW_S", 0.3)
    monkeypatch.setattr(pace, "RECHECK_S", 0.3)
    clock = FakeClock()
    monkeypatch.setattr(pace, "ThreadWatch", functools.partial(ThreadWatch, clock=clock))
    busy = [False]
    monkeypatch.setattr(trainer_module, "idle_cores", lambda: 0.0 if busy[0] else 2.0)
    reported: list[dict] = []

    def callback(event) -> None:
        reported[:] = event.pace.get("thread_changes", [])
        if event.kind == "loss":
            busy[0] = 2 <= event.step < 4
            clock.now += 3.0 if busy[0] else 1.0 / torch.get_num_threads()

    cfg = TrainConfig(
        epochs=1, max_steps=60, preset="small", tokenizer="whitespace", precision="fp32"
    )
    result = train(
        numbered_pairs(400),
        None,
        cfg,
        callback=callback,
        should_cancel=lambda: len(reported) >= 2,
        threads=2,
    )
    changes = result.metrics["pace"]["thread_changes"]
    assert changes[0]["threads"] == 1 and changes[0]["why"] == "slowed down"
    assert changes[1]["threads"] == 2 and changes[1]["why"] == "cores free"
    assert result.cancelled and result.metrics["steps"] < 8


def test_a_run_compares_with_its_plan_a_minute_after_its_threads_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A minutes run calibrated far too fast re-plans at its first check; then a core is taken
    and the threads drop to one. A "minute" (here 1 s) after the drop it compares again, over
    that minute alone, and re-plans for the slower speed — inside its first epoch, where the
    only comparisons used to be the first minute's and each epoch's end. The run's clock and
    the watch's are one fake clock the step callback advances (0.1 s a step with two threads,
    3 s while the core is taken, 1 s with one thread): a loaded machine's own slow steps
    cannot change the verdicts."""
    monkeypatch.setattr(pace, "REPLAN_AFTER_S", 1.0)
    monkeypatch.setattr(pace, "WINDOW_S", 0.3)
    clock = FakeClock()
    monkeypatch.setattr(pace, "ThreadWatch", functools.partial(ThreadWatch, clock=clock))
    monkeypatch.setattr(schedule, "time", SimpleNamespace(monotonic=clock))
    busy = [False]
    monkeypatch.setattr(trainer_module, "idle_cores", lambda: 0.0 if busy[0] else 2.0)
    seen: dict = {}

    def callback(event) -> None:
        seen.update(event.pace, epoch_ended=event.kind == "epoch" or seen.get("epoch_ended"))
        if event.kind != "loss":
            return
        busy[0] = bool(seen.get("replans"))  # the core is taken after the first re-plan
        clock.now += 1.0 if seen.get("thread_changes") else 3.0 if busy[0] else 0.1

    cfg = TrainConfig(
        time_budget_s=600,
        preset="small",
        tokenizer="whitespace",
        precision="fp32",
        max_tokens_per_batch=250,
    )
    fast = Calibration(1_000_000.0, 20, 2.0, 2, "fp32", 3_000_000)
    result = train(
        numbered_pairs(20_000),
        numbered_pairs(20),
        cfg,
        speed=fast,
        callback=callback,
        should_cancel=lambda: len(seen.get("replans", [])) >= 2 or bool(seen.get("epoch_ended")),
        threads=2,
    )
    replans = result.metrics["pace"]["replans"]
    assert len(replans) >= 2, replans
    first, second = replans[:2]
    [drop] = result.metrics["pace"]["thread_changes"]
    assert drop["threads"] == 1
    assert second["elapsed_s"] >= drop["elapsed_s"] + 1.0 > first["elapsed_s"]
    assert second["real_tokens_per_s"] < 0.2 * first["real_tokens_per_s"]
    assert result.cancelled and not seen["epoch_ended"]


def test_the_replan_compares_the_speed_since_its_last_check_not_since_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GPU's first minute is start-up: 60 s at 1,000 tokens/s, then 90 s at 10,000. The
    average since the start is still 6,400 at 150 s, 36 % under the settled speed, and would
    re-plan again at every epoch; the window since the last check reads 10,000. A window
    shorter than asked is not judged (None) and keeps counting."""
    now = [0.0]
    monkeypatch.setattr(schedule.time, "monotonic", lambda: now[0])
    clock = BudgetClock(Budget(1, 100, 10, 1_000), time_budget_s=600.0, step=0)
    now[0], clock.tokens = 60.0, 60_000
    assert clock.recent_tokens_per_s(60.0) == pytest.approx(1_000.0)
    now[0], clock.tokens = 90.0, 360_000
    assert clock.recent_tokens_per_s(60.0) is None  # 30 s: too short a window
    now[0], clock.tokens = 150.0, 960_000
    assert clock.recent_tokens_per_s(60.0) == pytest.approx(10_000.0)
    assert clock.tokens_per_s() == pytest.approx(6_400.0)


def test_the_speed_of_the_steps_alone_leaves_the_validations_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each epoch's validation made 0.3 s slower (3 epochs): the run's real speed counts that
    time, the speed of its steps alone (what a calibration times and predicts) does not — the
    two figures' seconds differ by at least the 0.9 s of waiting."""
    validate = trainer_module.Trainer._validate

    def slow_validate(self):
        time.sleep(0.3)
        return validate(self)

    monkeypatch.setattr(trainer_module.Trainer, "_validate", slow_validate)
    cfg = TrainConfig(epochs=3, preset="tiny", tokenizer="whitespace", precision="fp32")
    pairs = numbered_pairs(60)
    result = train(pairs, pairs[:20], cfg, threads=1)
    pace_metrics, tokens = result.metrics["pace"], result.metrics["tokens_trained"]
    all_s = tokens / pace_metrics["real_tokens_per_s"]
    steps_s = tokens / pace_metrics["step_tokens_per_s"]
    assert result.metrics["epochs"] == 3
    assert all_s - steps_s >= 0.9
    assert steps_s > 0


@pytest.mark.parametrize(
    ("ranks", "idle", "fixed", "expected"),
    [
        (2, 2.0, None, 2),  # the other rank waits: its core is lent to the validation
        (2, 1.1, None, 1),  # another program took that core: the rank's own thread
        (2, 2.0, 1, 1),  # threads the user fixed stay fixed
        (1, 2.0, None, 1),  # one process already validates on its own threads
    ],
)
def test_rank_0_validates_on_the_cores_the_waiting_ranks_leave_idle(
    monkeypatch: pytest.MonkeyPatch, ranks: int, idle: float, fixed: int | None, expected: int
) -> None:
    """A 2 x 1 run validated on one core of two while its other rank waited; the threads of
    the validation are borrowed only for it (the run's own are back after)."""
    monkeypatch.setattr(trainer_module, "idle_cores", lambda _sample_s: idle)
    seen = []
    allowed = frozenset(os.sched_getaffinity(0))
    pin = CorePin(frozenset({min(allowed)}) if ranks > 1 else None)  # the rank's own core
    run = SimpleNamespace(
        device=torch.device("cpu"),
        ranks=SimpleNamespace(on=ranks > 1, world=ranks),
        cfg=TrainConfig(num_threads=fixed),
        core_pin=pin,
        _scores=lambda: seen.append((torch.get_num_threads(), os.sched_getaffinity(0))) or {},
    )
    run._validation_threads = functools.partial(trainer_module.Trainer._validation_threads, run)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pin:
            trainer_module.Trainer._validate(run)
            # it validated on every core the process may use, and trains on its own again
            assert seen == [(expected, allowed)]
            assert torch.get_num_threads() == 1
            assert os.sched_getaffinity(0) == (pin.cores or allowed)
    finally:
        torch.set_num_threads(before)


def lockstep(ranks: list[RankShares], speeds: list[float], steps: int, start: int) -> int:
    """`steps` steps of 2,000-token updates from step `start`: the ranks exchange what they
    publish, each takes its part at its own forward speed (`speeds`); returns the next step."""
    for step in range(start, start + steps):
        published = [r.published(i) for i, r in enumerate(ranks)]
        exchanged = [sum(col) for col in zip(*published, strict=True)]
        for i, rank in enumerate(ranks):
            tokens = round(2_000 * rank.shares[i])
            rank.update(step, tokens, tokens / speeds[i], exchanged, step / 10)
    return start + steps


def test_a_rank_whose_core_is_taken_takes_a_smaller_part_until_the_core_is_free() -> None:
    ranks = [RankShares(2, adaptive=True) for _ in range(2)]
    assert ranks[0].published(0) == [0.0, 0.0]  # nothing timed yet
    # an idle machine's ranks differ by a few per cent: the parts stay equal
    step = lockstep(ranks, [10_000, 9_000], 3 * pace.SHARE_STEPS, start=1)
    assert all(r.shares == [0.5, 0.5] and not r.changes for r in ranks)
    # another program takes rank 1's core: it runs at half speed, and takes a third within
    # two windows (its own, then the exchange of it)
    step = lockstep(ranks, [10_000, 5_000], 2 * pace.SHARE_STEPS, start=step)
    assert ranks[0].shares == ranks[1].shares  # every rank computes the same parts
    assert ranks[0].shares == pytest.approx([2 / 3, 1 / 3])
    assert ranks[0].changes[-1]["forward_tokens_per_s"] == [10_000, 5_000]
    # the core is free again: equal parts
    lockstep(ranks, [10_000, 10_000], 2 * pace.SHARE_STEPS, start=step)
    assert ranks[0].shares == pytest.approx([0.5, 0.5]) and len(ranks[0].changes) == 2
    # GPUs, each rank on a device of its own, keep equal parts
    gpu = [RankShares(2, adaptive=False) for _ in range(2)]
    lockstep(gpu, [10_000, 2_000], 4 * pace.SHARE_STEPS, start=1)
    assert gpu[0].shares == [0.5, 0.5] and not gpu[0].changes


def test_each_rank_of_a_machine_keeps_to_a_run_of_cores_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cores = [frozenset({c, c + 4}) for c in range(4)]  # 4 cores, 2 hyper-threads each
    monkeypatch.setattr(parallel, "core_groups", lambda: cores)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    ranks = Ranks()
    assert ranks.own_cores(1) is None  # one process: the system places its threads
    ranks.on, ranks.rank, ranks.world = True, 1, 2
    assert ranks.own_cores(2) == {2, 6, 3, 7}
    assert ranks.own_cores(5) is None  # fewer CPUs than its threads: not pinned
    # torchrun on several machines: this machine's ranks split this machine's cores
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    ranks.rank, ranks.world = 7, 8
    assert ranks.own_cores(1) == {3, 7}
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # more ranks than cores: not pinned
    assert ranks.own_cores(1) is None


def test_a_pinned_rank_pins_every_thread_and_puts_each_back() -> None:
    allowed = frozenset(os.sched_getaffinity(0))
    own = frozenset({min(allowed)})
    started, done = threading.Event(), threading.Event()
    ids: list[int] = []

    def torch_like() -> None:  # a thread the process had before (a torch or Gloo thread)
        ids.append(threading.get_native_id())
        started.set()
        done.wait(30)

    thread = threading.Thread(target=torch_like)
    thread.start()
    started.wait(10)
    try:
        with CorePin(own) as pin:
            assert (os.sched_getaffinity(0), os.sched_getaffinity(ids[0])) == (own, own)
            with pin.released():  # rank 0's validation
                assert os.sched_getaffinity(ids[0]) == allowed
            assert os.sched_getaffinity(ids[0]) == own
        assert (os.sched_getaffinity(0), os.sched_getaffinity(ids[0])) == (allowed, allowed)
        with CorePin(None):  # not a rank, or a machine too small to pin: nothing changes
            assert os.sched_getaffinity(0) == allowed
    finally:
        done.set()
        thread.join()
