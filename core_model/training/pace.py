"""Keeping a run to its plan when the machine's speed changes under it (issue 38).

A plan is made on the machine as it was at the start; a laptop's browser or build can take a
core at minute 2. Three watches, fed after every step:

- `ThreadWatch`, within seconds: a process training with several OpenMP threads stalls when
  one of its cores is taken (the threads wait for each other at every parallel region, and
  one of them shares its core: 1 x 2 fell from 8,538 to ~190 tokens/s with `yes` on one of
  two cores). When `SLOW_WINDOWS` windows of steps in a row train under `SLOW_SHARE` of the
  speed the same threads had, the process drops to one thread; every `RECHECK_S` it looks
  whether the cores are idle again and, if so, tries its threads back for a window, keeping
  them only if they train faster than one did.
- `RankShares`, every `SHARE_STEPS` steps of a data-parallel CPU run: the ranks of a step
  split one batch (`batching.rank_share`), and wait for each other at its all-reduce. When a
  core is taken under one of two single-threaded ranks, that rank runs at about half speed and
  the other waited for it at every step (2 x 1 timed 8,832 tokens/s, trained ~5,100 with `yes`
  on one core); so each rank takes a part of every update in proportion to the speed of its own
  forward passes, and the parts go back to equal when the core is free.
- The re-plan (`Trainer._replan`, `recipe.replan`), after `REPLAN_AFTER_S`, at every epoch's end
  and `REPLAN_AFTER_S` after either watch above changed what the run does (over that time alone:
  a slow laptop's first epoch can be most of a click): a minutes budget was projected to tokens
  from the calibration; when the run trained more than `REPLAN_TOLERANCE` off that speed since
  the last comparison (a window of at least `REPLAN_AFTER_S`: a GPU's start-up would keep a
  running average rising and re-planning at every epoch), what depends on the tokens is chosen
  again for the tokens it will really see, and the new speed is the plan's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

WINDOW_S = 3.0  # the speed of steps is judged over windows this long
SLOW_SHARE = 0.5  # a window under this share of the threads' best speed: a core was taken
# ... when this many windows in a row are: one slow window also happens on an idle machine
# (two 10-minute clicks dropped to one thread for ~19 s, at 380 s and 513 s, on one window)
SLOW_WINDOWS = 2
RECHECK_S = 15.0  # with fewer threads, how often to look whether the cores are idle again
FREE_MARGIN = 0.5  # idle cores this close to the threads' count: free again
GAIN = 1.1  # the threads come back only when their window trains this much faster
REPLAN_AFTER_S = 60.0  # the first comparison of real and planned speed, and the shortest window
# (also the wait after a change of threads or parts before the next one)
REPLAN_TOLERANCE = 0.15  # real speed this far off the plan's: re-plan
SHARE_STEPS = 16  # data-parallel ranks compare their speeds every this many steps (seconds apart)
# ... and take new parts of each update when one's part is this far off its share of the speed
# (an idle machine's ranks differ by a few per cent: their parts stay equal)
SHARE_CHANGE = 0.1


class ThreadWatch:
    """The thread count a CPU process trains with, watched step by step (module docstring).

    `idle_cores()` says how many cores other processes leave idle (None: unknown);
    `clock()` is the time in seconds. Both are parameters so a test can drive them."""

    def __init__(
        self,
        full: int,
        threads: int,
        idle_cores: Callable[[], float | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.full, self.threads = full, threads  # the most it may use, what it uses now
        self.idle_cores = idle_cores
        self.clock = clock
        self.best: float | None = None  # the best window at full threads
        self.fewer: float | None = None  # the latest window at one thread
        self.probing = False  # the threads are back on trial for one window
        self.slow_windows = 0  # slow windows in a row at full threads
        self.next_check = 0.0
        self.window_start = clock()
        self.window_tokens = 0
        self.changes: list[dict[str, Any]] = []  # what the metrics show, in order

    def restart(self) -> None:
        """Start a new window (after a pause that is not training: validation)."""
        self.window_start, self.window_tokens = self.clock(), 0

    def observe(self, tokens: int, elapsed_s: float) -> int | None:
        """After a step of `tokens` tokens: the thread count to train with from now on, if it
        changes (else None). `elapsed_s`: the run's clock, for the record."""
        now = self.clock()
        self.window_tokens += tokens
        span = now - self.window_start
        if self.full <= 1 or span < WINDOW_S:
            return None
        speed = self.window_tokens / span
        self.restart()
        if self.threads == self.full:
            if self.probing:
                self.probing = False
                if speed < GAIN * (self.fewer or 0.0):
                    return self._change(1, speed, elapsed_s, "no gain", now)
                self.best = speed
                self.changes.append(self._record(self.full, speed, elapsed_s, "cores free"))
                return None
            if self.best is not None and speed < SLOW_SHARE * self.best:
                self.slow_windows += 1
                if self.slow_windows < SLOW_WINDOWS:
                    return None
                self.slow_windows = 0
                return self._change(1, speed, elapsed_s, "slowed down", now)
            self.slow_windows = 0
            self.best = max(self.best or 0.0, speed)
            return None
        self.fewer = speed
        if now >= self.next_check:
            self.next_check = now + RECHECK_S
            idle = self.idle_cores()
            if idle is not None and idle >= self.full - FREE_MARGIN:
                self.threads, self.probing = self.full, True
                return self.full
        return None

    def _change(self, threads: int, speed: float, elapsed_s: float, why: str, now: float) -> int:
        self.threads, self.next_check = threads, now + RECHECK_S
        self.changes.append(self._record(threads, speed, elapsed_s, why))
        return threads

    @staticmethod
    def _record(threads: int, speed: float, elapsed_s: float, why: str) -> dict[str, Any]:
        return {
            "elapsed_s": round(elapsed_s, 1),
            "threads": threads,
            "window_tokens_per_s": round(speed, 1),
            "why": why,
        }


class RankShares:
    """The part of every update each data-parallel rank takes, by the speed of its forward
    passes (module docstring). Each rank times its own; the step's exchange carries every
    rank's (`published`: zeros in the others' places, so the sum is exact), and every rank
    computes the same parts from the same numbers (`update`). GPUs keep equal parts: each rank
    has a device of its own (`adaptive` False)."""

    def __init__(self, world: int, adaptive: bool) -> None:
        self.adaptive = adaptive and world > 1
        self.shares = [1.0 / world] * world
        self.tokens, self.seconds = 0, 0.0  # this rank's forward passes since its last speed
        self.speed = 0.0  # this rank's tokens per second of forward pass over its last window
        self.changes: list[dict[str, Any]] = []  # what the metrics show, in order

    def published(self, rank: int) -> list[float]:
        """This rank's part of the exchange: its speed in its own place."""
        return [self.speed if r == rank else 0.0 for r in range(len(self.shares))]

    def update(
        self, step: int, tokens: int, forward_s: float, speeds: Sequence[float], elapsed_s: float
    ) -> bool:
        """After step `step` (this rank's `tokens` took `forward_s` of forward pass; `speeds`:
        every rank's published speed): every `SHARE_STEPS` steps, this rank's speed anew and
        the parts by the speeds when one is `SHARE_CHANGE` off. True when the parts changed."""
        self.tokens += tokens
        self.seconds += forward_s
        if not self.adaptive or step % SHARE_STEPS:
            return False
        if self.seconds > 0:
            self.speed = self.tokens / self.seconds
        self.tokens, self.seconds = 0, 0.0
        if min(speeds) <= 0:  # a rank has not timed a window yet
            return False
        target = [v / sum(speeds) for v in speeds]
        if max(abs(t - s) for t, s in zip(target, self.shares, strict=True)) < SHARE_CHANGE:
            return False
        self.shares = target
        self.changes.append(
            {
                "elapsed_s": round(elapsed_s, 1),
                "shares": [round(x, 3) for x in target],
                "forward_tokens_per_s": [round(v, 1) for v in speeds],
            }
        )
        return True
