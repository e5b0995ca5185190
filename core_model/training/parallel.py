"""The ranks of a data-parallel (DistributedDataParallel) run on one machine — the one home of
everything about them: the shapes a machine's cores can take (`Layout`: processes × threads),
what a rank is asked to do (`RankSpec`: the group it joins and its task, a `TrainTask` or a
`MeasureTask`, written as JSON and read back in one place each), the backend (`backend_for`),
a group of ranks this process starts and joins as rank 0 (`RankGroup`), and this process's
rank with the few collectives the training loop needs besides DDP's gradient all-reduce
(`Ranks`). Without an initialised process group every collective is a cheap no-op, so the loop
has one code path.

A `RankGroup` is how one click uses every core: this process becomes rank 0 and starts ranks
1..N-1 with torch's own launcher (`torch.distributed.elastic.multiprocessing.start_processes`,
the one torchrun uses: `python -m core_model.distributed --child <spec> <rank>`, which does
the spec's task) that meet it through a file store in a private folder (no port to pick,
nothing reachable from outside the machine). What torchrun's agent does besides is not used:
rank 0 is the caller, not a child, so there is no agent to restart ranks, and the launcher's
signal handlers, meant for an agent process, are put back as they were. A child dies with its
parent (Linux's parent-death signal: the launcher puts each child in a session of its own, so
nothing else would reach it when the parent is killed -9); a child that dies makes rank 0's next
collective fail at once (Gloo sees the closed socket), and the group says which rank ended and
how, with the last line it wrote. Multi-node training stays with torchrun
(`core_model.distributed`), which reads the same `TrainTask` and joins through `join_torchrun`.

(Over 450 lines on purpose: issue 40 asked for one home of the ranks' protocol, so a newcomer
reads what a rank is told, how it is started and how it fails in one file.)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch import distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing import (
    LogsDest,
    LogsSpecs,
    PContext,
    start_processes,
)

from core_model.training.config import TrainConfig, TrainingError
from core_model.transformer import ModelConfig

# Ranks wait for each other at every step; rank 0 alone validates and checkpoints meanwhile,
# which on a large validation set takes minutes, never this long.
COLLECTIVE_TIMEOUT = timedelta(minutes=30)
START_TIMEOUT_S = 120.0  # a child imports torch and reads its spec: seconds, even when busy
STOP_GRACE_S = 5  # after SIGTERM, before SIGKILL
CHILD_MODULE = "core_model.distributed"  # a child rank's entry point (not imported by the package)
SHARED_MEMORY = Path("/dev/shm")  # a group's folder lives here where it exists: memory, not disk
GROUP_PREFIX = "ranks-"  # a group's folder: ranks-<PID of rank 0>-<random>
# the signals torch's launcher takes over in the process that starts ranks (its agent's)
LAUNCHER_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


@dataclass(frozen=True)
class Layout:
    """How a run spreads over the machine: `processes` data-parallel ranks with `threads` CPU
    threads each (0 on GPUs, one process per GPU)."""

    processes: int
    threads: int

    @property
    def cores(self) -> int:
        """The CPU cores it keeps busy."""
        return self.processes * self.threads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Calibration:
    """How fast a layout trained a model when timed (`calibration.measure`; saved in the run's
    metrics so a user can check the plan). Here, not in `calibration`, because a rank's
    `TrainTask` carries it and `calibration` starts rank groups."""

    tokens_per_s: float  # source + target tokens per second of full training steps
    steps: int
    seconds: float
    threads: int  # per process
    precision: str  # 'fp32' | 'bf16'
    parameters: int
    processes: int = 1  # data-parallel ranks, each with its part of every batch
    shapes: int = 1  # distinct batch shapes among the timed steps (rank 0's)
    new_shape_s: float = 0.0  # the extra seconds of a step on a shape not seen before
    run_shapes: int = 0  # distinct shapes of an epoch's batches (its length mix at its size)
    token_work: int = 0  # the timed model's `ModelConfig.token_work` (0: not known)

    @property
    def layout(self) -> Layout:
        """The layout timed."""
        return Layout(self.processes, self.threads)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def tokens_in(self, seconds: float) -> float:
        """The tokens `seconds` of training buy: the steady speed, less each of the run's
        shapes' first step (at most half the time: a measurement of a few steps is noisy)."""
        return max(seconds / 2, seconds - self.run_shapes * self.new_shape_s) * self.tokens_per_s


Pairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TrainTask:
    """Every rank of a run trains this (`train()` with these arguments; rank 0 alone adds its
    reports and files). `speed` is the measurement the layout was chosen by: every rank plans
    its budget with it, so all choose alike."""

    train: Pairs
    valid: Pairs
    config: TrainConfig
    speed: Calibration | None = None
    threads: int | None = None  # per process; None: as `train()` chooses
    init_from: str | None = None
    resume_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "train": self.train,  # JSON writes the tuples as lists: not copied first
            "valid": self.valid,
            "config": self.config.to_dict(),
            "speed": None if self.speed is None else self.speed.to_dict(),
            "threads": self.threads,
            "init_from": self.init_from,
            "resume_from": self.resume_from,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainTask:
        speed = data["speed"]
        return cls(
            train=_pairs(data["train"]),
            valid=_pairs(data["valid"]),
            config=TrainConfig.from_dict(data["config"]),
            speed=None if speed is None else Calibration(**speed),
            threads=data["threads"],
            init_from=data["init_from"],
            resume_from=data["resume_from"],
        )


@dataclass(frozen=True)
class MeasureTask:
    """Every rank of a speed measurement takes its share of these timed steps
    (`calibration.measure_share`)."""

    model: ModelConfig
    batch_tokens: int
    lengths: tuple[tuple[int, int], ...]  # (source, target) lengths of the batches' pairs
    run_pairs: int  # the run's pairs, whose batches' shapes are counted (`run_shapes`)
    device: str  # 'cpu' | 'cuda': each rank takes its own GPU (`rank_device`)
    precisions: tuple[str, ...]  # one measurement each, in turn
    threads: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "model": self.model.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MeasureTask:
        return cls(
            model=ModelConfig.from_dict(data["model"]),
            batch_tokens=int(data["batch_tokens"]),
            lengths=tuple((int(s), int(t)) for s, t in data["lengths"]),
            run_pairs=int(data["run_pairs"]),
            device=str(data["device"]),
            precisions=tuple(str(p) for p in data["precisions"]),
            threads=int(data["threads"]),
            seconds=float(data["seconds"]),
        )


RankTask = TrainTask | MeasureTask
_TASKS: dict[str, type[TrainTask] | type[MeasureTask]] = {
    "train": TrainTask,
    "measure": MeasureTask,
}


def _pairs(rows: list[list[str]]) -> Pairs:
    return tuple((str(s), str(t)) for s, t in rows)


@dataclass(frozen=True)
class RankSpec:
    """What a child rank of a `RankGroup` reads first: the group it joins and its task."""

    world: int
    backend: str  # `backend_for`'s
    task: RankTask

    def to_json(self) -> str:
        kind = next(name for name, cls in _TASKS.items() if isinstance(self.task, cls))
        group = {"world": self.world, "backend": self.backend}
        return json.dumps({**group, "kind": kind, "task": self.task.to_dict()})

    @classmethod
    def from_json(cls, text: str) -> RankSpec:
        """The spec `to_json` wrote; a TrainingError in one line for anything else."""
        try:
            data = json.loads(text)
            task = _TASKS[data["kind"]].from_dict(data["task"])
            return cls(int(data["world"]), str(data["backend"]), task)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            why = f"{type(exc).__name__}: {exc}" if isinstance(exc, KeyError) else str(exc)
            raise TrainingError(f"A training process got an invalid task ({why}).") from None


def cpu_cores() -> int:
    """The physical cores this process may run on: hyper-threads share a core's arithmetic
    units, so two threads of one core add little to matrix products (torch counts the same)."""
    return len(core_groups())


def core_groups() -> list[frozenset[int]]:
    """The logical CPUs this process may run on, one set per physical core (its hyper-threads),
    in the order of their numbers."""
    allowed = (
        os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    )
    cores: dict[tuple[str, str], set[int]] = {}
    for cpu in sorted(allowed):
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:  # no topology (not Linux, a container without /sys): assume no SMT
            return [frozenset({cpu}) for cpu in sorted(allowed)]
        cores.setdefault((package, core), set()).add(cpu)
    return sorted((frozenset(cpus) for cpus in cores.values()), key=min) or [frozenset({0})]


def cpu_layouts(cores: int) -> list[Layout]:
    """The ways to spread a run over `cores` worth timing: one process with every thread, one
    single-threaded process per core, and the doublings between; and one process with one
    thread, which wins when other work keeps the machine busy (threads then wait for each
    other, and ranks for the slowest)."""
    counts = {p for p in (2**k for k in range(cores.bit_length())) if cores % p == 0} | {cores}
    split = [Layout(p, cores // p) for p in sorted(counts)]
    return split if cores == 1 else [*split, Layout(1, 1)]


def backend_for(device: torch.device) -> str:
    """NCCL between GPUs, Gloo between CPU processes (the one place that chooses)."""
    return "nccl" if device.type == "cuda" else "gloo"


def rank_device(kind: str, rank: int) -> torch.device:
    """One GPU per rank; CPU ranks share the CPU."""
    return torch.device("cuda", rank) if kind == "cuda" else torch.device("cpu")


def join_torchrun(device: torch.device) -> None:
    """Join the group torchrun started this process in (its RANK, WORLD_SIZE and MASTER_*
    variables say which); outside torchrun, nothing."""
    if "RANK" in os.environ:
        dist.init_process_group(backend=backend_for(device), timeout=COLLECTIVE_TIMEOUT)


def _join_group(folder: Path, rank: int, world: int, backend: str) -> None:
    store = dist.FileStore(str(folder / "store"), world)
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT
    )


def join_as_child(spec_path: Path, rank: int) -> RankTask:
    """What a child rank does first: tie its life to its parent's, read its spec, say it is
    ready (its imports are done) and join the group. Returns its task."""
    die_with_parent()
    try:
        text = spec_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TrainingError(f"A training process cannot read its task: {exc}") from None
    spec = RankSpec.from_json(text)
    (spec_path.parent / f"ready.{rank}").touch()
    _join_group(spec_path.parent, rank, spec.world, spec.backend)
    return spec.task


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (a rank outliving a killed
    worker would hold cores and memory forever); exit now if the parent is already gone."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's own cleanup has to do
        pass
    if os.getppid() != parent or parent == 1:
        os._exit(1)


class RankGroup:
    """Ranks 1..N-1 as child processes of this one, which joins as rank 0 (a context manager).

    Each child runs `python -m core_model.distributed --child spec.json rank` and does `task`.
    On exit the group is closed, the children are given `STOP_GRACE_S` to end with it, and
    every one still running is then stopped and reaped (SIGTERM, then SIGKILL after
    `STOP_GRACE_S` more), whatever happened.
    """

    def __init__(self, layout: Layout, task: RankTask, device: torch.device) -> None:
        self.layout, self.task, self.device = layout, task, device
        self.folder: Path | None = None
        self.children: PContext | None = None

    def __enter__(self) -> RankGroup:
        world = self.layout.processes
        # named after this process (rank 0): a group whose process is gone is swept
        self.folder = Path(tempfile.mkdtemp(prefix=f"{GROUP_PREFIX}{os.getpid()}-", dir=_groups()))
        spec_path = self.folder / "spec.json"
        backend = backend_for(self.device)
        spec_path.write_text(RankSpec(world, backend, self.task).to_json(), encoding="utf-8")
        threads = str(max(1, self.layout.threads))
        # the children import core_model from where this process did, whatever their cwd
        source = str(Path(__file__).resolve().parents[2])
        env = {
            "PYTHONPATH": os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH")) if p),
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
        }
        ranks = range(1, world)  # the launcher's local rank i is the group's rank i + 1
        try:
            with _signals_kept():
                self.children = start_processes(
                    name="ranks",
                    entrypoint=sys.executable,
                    args={
                        i: ("-m", CHILD_MODULE, "--child", str(spec_path), str(r))
                        for i, r in enumerate(ranks)
                    },
                    envs={i: {**env, "LOCAL_RANK": str(r)} for i, r in enumerate(ranks)},
                    logs_specs=_ChildLogs(self.folder),
                )
            self._wait_until_ready()
            # every child has read it: a worker killed now leaves no copy of the corpus in memory
            spec_path.unlink()
            _join_group(self.folder, 0, world, backend)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_until_ready(self) -> None:
        assert self.folder is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(
            (self.folder / f"ready.{r}").exists() for r in range(1, self.layout.processes)
        ):
            if (why := self.failure()) is not None:
                raise TrainingError(why)
            if time.monotonic() > deadline:
                raise TrainingError(
                    f"The training processes did not start within {START_TIMEOUT_S:.0f} s."
                )
            time.sleep(0.05)

    def failure(self) -> str | None:
        """Which rank ended before the group closed, and how, in words; None while all run.
        (Once one has failed, the launcher stops the others.)"""
        done = None if self.children is None else self.children.wait(0)
        if done is None or not done.failures:
            return None
        # the first failure the launcher saw: the others' are its SIGTERMs
        index, first = next(iter(done.failures.items()))
        code = first.exitcode
        if code < 0:
            why = f"was killed by signal {-code} ({first.signal_name()})"
            if -code == signal.SIGKILL:
                why += ", perhaps by the system for lack of memory"
        else:
            why = f"stopped with exit code {code}"
        said = _last_line(Path(self.children.stderrs[index]))  # type: ignore[union-attr]
        where = f"Training process {index + 2} of {self.layout.processes}"
        return f"{where} {why}" + (f": {said}" if said else ".")

    def __exit__(self, *exc: object) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        if self.children is not None:
            # they leave the group with rank 0 and end on their own; any still running then
            # is stopped (the launcher warns of each one it has to stop)
            self.children.wait(timeout=STOP_GRACE_S, period=0.05)
            self.children.close(signal.SIGTERM, timeout=STOP_GRACE_S)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


class _ChildLogs(LogsSpecs):
    """Where the launcher sends a child's output: its stderr to rank<R>.log in the group's
    folder (the reason it gives if it fails), its stdout nowhere (a child rank reports
    nothing)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(log_dir=str(folder))
        self.folder = folder

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        return LogsDest(
            stdouts=dict.fromkeys(envs, os.devnull),
            stderrs={i: str(self.folder / f"rank{i + 1}.log") for i in envs},
            error_files={i: str(self.folder / f"rank{i + 1}.error.json") for i in envs},
        )

    @property
    def root_log_dir(self) -> str:
        return str(self.folder)


@contextlib.contextmanager
def _signals_kept() -> Iterator[None]:
    """Put back this process's handlers of the signals torch's launcher takes over on start:
    they are an agent's (a SIGTERM raised as an exception), and this process is a worker whose
    own handling stays as it was."""
    if threading.current_thread() is not threading.main_thread():
        yield  # the launcher installs none off the main thread
        return
    kept = {sig: signal.getsignal(sig) for sig in LAUNCHER_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def _last_line(log: Path) -> str:
    """The last line a child wrote (its error, when it raised one)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def _groups() -> Path | None:
    """Where a group's folder goes: /dev/shm where it is writable, else the temp folder."""
    memory = SHARED_MEMORY.is_dir() and os.access(SHARED_MEMORY, os.W_OK)
    return SHARED_MEMORY if memory else None


def sweep_dead_groups() -> list[Path]:
    """Remove the folders of groups whose rank 0 is gone (one killed -9 never ran
    `RankGroup.__exit__`, and a /dev/shm folder takes memory until the machine restarts);
    returns them. A live process' group is never touched, nor a folder whose owner its name
    does not say."""
    removed = []
    for parent in {SHARED_MEMORY, Path(tempfile.gettempdir())}:
        for folder in parent.glob(f"{GROUP_PREFIX}*-*"):
            pid = folder.name.removeprefix(GROUP_PREFIX).split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)) and folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


class CorePin:
    """Every thread of this process kept to `cores` (a context manager; None: nothing done),
    then put back on the CPUs it had. Data-parallel CPU ranks train pinned, each on cores of
    its own: left to the system, the ranks of a 2 x 1 run moved between the two cores, and
    when another program held one, parts of each update by speed (`pace.RankShares`) could
    not follow them. With `yes` on core 1, 90-s runs trained 3,599 tokens/s with equal parts
    unpinned, 3,700 pinned alone, 3,828 with parts by speed alone, 4,393 with both; the
    10-minute click's model 6,899 against 5,012, as fast as one process on the free core
    (`bench.busy_ranks`; docs/TRAINING.md, "Ranks that take parts of each update by speed")."""

    def __init__(self, cores: frozenset[int] | None) -> None:
        self.cores = cores
        self.before: frozenset[int] | None = None

    def __enter__(self) -> CorePin:
        if self.cores is not None:
            self.before = frozenset(os.sched_getaffinity(0))
            _pin_threads(self.cores)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.before is not None:
            _pin_threads(self.before)
            self.before = None

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """The CPUs it had before, for a while: rank 0 validates alone, on the cores the other
        ranks leave idle meanwhile (`Trainer._validation_threads`)."""
        if self.before is None or self.cores is None:
            yield
            return
        _pin_threads(self.before)
        try:
            yield
        finally:
            _pin_threads(self.cores)


def _pin_threads(cpus: frozenset[int]) -> None:
    """Every thread this process has onto `cpus` (Linux sets a thread's CPUs, not a process';
    threads started later inherit their starter's). Gloo's threads too: left free they
    trained no faster (60-s busy runs, three each: 4,738 tokens/s against 4,676 median)."""
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that has just ended
            os.sched_setaffinity(int(task.name), cpus)


def data_parallel(model: nn.Module, device: torch.device) -> nn.Module:
    """`model` wrapped by DistributedDataParallel for the group this process is in: gradients
    are averaged over the ranks by the backend's all-reduce. Buffers are synced once, not
    before every forward pass: the model's one buffer is the constant table of §3.5's
    encodings, and the sync would make each forward pass wait for every rank (a rank times
    its own, `pace.RankShares`)."""
    return nn.parallel.DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        forward_sync_buffers=False,
    )


class Ranks:
    """Rank/world-size view of torch.distributed (a no-op when not initialised)."""

    def __init__(self) -> None:
        self.on = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.on else 0
        self.world = dist.get_world_size() if self.on else 1

    @property
    def main(self) -> bool:
        """Rank 0 validates, checkpoints, reports and writes the model folder."""
        return self.rank == 0

    def own_cores(self, threads: int) -> frozenset[int] | None:
        """The logical CPUs this CPU rank keeps to while it trains (`CorePin`): the physical
        cores this process may use, cut into one run of cores per rank on this machine. None
        outside a group, where they would not give each rank its `threads`, and off Linux."""
        if not self.on or not hasattr(os, "sched_setaffinity"):
            return None
        local = int(os.environ.get("LOCAL_RANK", self.rank))
        here = int(os.environ.get("LOCAL_WORLD_SIZE", self.world))
        groups = core_groups()
        per = len(groups) // max(1, here)
        own = frozenset().union(*groups[local * per : (local + 1) * per])
        return own if per >= 1 and len(own) >= threads else None

    def comm_device(self, device: torch.device) -> torch.device:
        """NCCL talks through GPU tensors, Gloo through CPU ones."""
        return device if (self.on and dist.get_backend() == "nccl") else torch.device("cpu")

    def all_sum(self, values: list[float], device: torch.device) -> list[float]:
        if not self.on:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.tolist()

    def broadcast_flags(self, values: list[float], device: torch.device) -> list[float]:
        if not self.on:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.broadcast(t, 0)
        return t.tolist()

    def broadcast_bytes(self, blob: bytes | None, device: torch.device) -> bytes:
        """Send bytes from rank 0 to every rank (length first, then a uint8 tensor)."""
        if not self.on:
            assert blob is not None
            return blob
        n = torch.tensor([len(blob) if blob is not None else 0], dtype=torch.long, device=device)
        dist.broadcast(n, 0)
        if self.main:
            buf = torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(device)
        else:
            buf = torch.empty(int(n.item()), dtype=torch.uint8, device=device)
        dist.broadcast(buf, 0)
        return buf.cpu().numpy().tobytes() if not self.main else blob  # type: ignore[return-value]

    def broadcast_weights(self, model: torch.nn.Module) -> None:
        """Every rank ends with rank 0's weights (rank 0 chose the final weights)."""
        if self.on:
            for t in model.state_dict().values():
                dist.broadcast(t, 0)
