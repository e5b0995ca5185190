"""Data-parallel training (DistributedDataParallel) on one machine: the shapes its cores can
take (`Layout`: processes × threads), a group of rank processes started by this one
(`RankGroup`), this process's rank, and the few collectives the training loop needs besides
DDP's gradient all-reduce. Without an initialised process group every collective is a cheap
no-op, so the loop has one code path.

A `RankGroup` is how one click uses every core: this process becomes rank 0 and starts ranks
1..N-1 as child processes (`python -m core_model.distributed --child <spec> <rank>`, which
does the spec's task: a speed measurement or a run) that meet it through a file
store in a private folder (no port to pick, nothing reachable from outside the machine). A
child dies with its parent (Linux's parent-death signal), so killing the parent leaves no
orphan; a child that dies makes rank 0's next collective fail at once (Gloo sees the closed
socket), and the group says which rank ended and how. Multi-node training stays with torchrun
(`core_model.distributed`).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch import distributed as dist
from torch import nn

from core_model.training import shared_memory
from core_model.training.config import TrainingError

# Ranks wait for each other at every step; rank 0 alone validates and checkpoints meanwhile,
# which on a large validation set takes minutes, never this long.
COLLECTIVE_TIMEOUT = timedelta(minutes=30)
START_TIMEOUT_S = 120.0  # a child imports torch and reads its spec: seconds, even when busy
STOP_GRACE_S = 5.0  # after SIGTERM, before SIGKILL
CHILD_MODULE = "core_model.distributed"  # a child rank's entry point (not imported by the package)
SHARED_MEMORY = Path("/dev/shm")  # a group's folder lives here where it exists: memory, not disk
GROUP_PREFIX = "ranks-"  # a group's folder: ranks-<PID of rank 0>-<random>
_group_folder: Path | None = None  # the folder of the RankGroup this process is in


@dataclass(frozen=True)
class Layout:
    """How a run spreads over the machine: `processes` data-parallel ranks with `threads` CPU
    threads each (0 on GPUs, one process per GPU)."""

    processes: int
    threads: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_cores() -> int:
    """The physical cores this process may run on: hyper-threads share a core's arithmetic
    units, so two threads of one core add little to matrix products (torch counts the same)."""
    allowed = (
        os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    )
    cores = set()
    for cpu in allowed:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            return len(allowed)  # no topology (not Linux, a container without /sys): assume no SMT
        cores.add((package, core))
    return max(1, len(cores))


def cpu_layouts(cores: int) -> list[Layout]:
    """The ways to spread a run over `cores` worth timing: one process with every thread, one
    single-threaded process per core, and the doublings between; and one process with one
    thread, which wins when other work keeps the machine busy (threads then wait for each
    other, and ranks for the slowest)."""
    counts = {p for p in (2**k for k in range(cores.bit_length())) if cores % p == 0} | {cores}
    split = [Layout(p, cores // p) for p in sorted(counts)]
    return split if cores == 1 else [*split, Layout(1, 1)]


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


def backend_for(device: torch.device) -> str:
    """NCCL between GPUs, Gloo between CPU processes."""
    return "nccl" if device.type == "cuda" else "gloo"


def _join_group(folder: Path, rank: int, world: int, backend: str) -> None:
    global _group_folder
    _group_folder = folder
    store = dist.FileStore(str(folder / "store"), world)
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT
    )


def join_as_child(spec_path: Path, rank: int) -> dict[str, Any]:
    """What a child rank does first: tie its life to its parent's, read the spec, say it is
    ready (its imports are done) and join the group. Returns the spec."""
    die_with_parent()
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    (spec_path.parent / f"ready.{rank}").touch()
    group = spec["group"]
    _join_group(spec_path.parent, rank, group["world"], group["backend"])
    return spec


def rank_device(kind: str, rank: int) -> torch.device:
    """One GPU per rank; CPU ranks share the CPU."""
    return torch.device("cuda", rank) if kind == "cuda" else torch.device("cpu")


class RankGroup:
    """Ranks 1..N-1 as child processes of this one, which joins as rank 0 (a context manager).

    Each child runs `python -m core_model.distributed --child spec.json rank`; `spec`
    (JSON-able, its "task" says what to do) is what the children need. On exit the group is
    closed and every child still running is stopped and reaped, whatever happened.
    """

    def __init__(self, layout: Layout, spec: dict[str, Any], device: torch.device) -> None:
        self.layout, self.spec, self.device = layout, spec, device
        self.children: list[subprocess.Popen] = []
        self.folder: Path | None = None

    def __enter__(self) -> RankGroup:
        world = self.layout.processes
        # named after this process (rank 0): a group whose process is gone is swept
        self.folder = Path(tempfile.mkdtemp(prefix=f"{GROUP_PREFIX}{os.getpid()}-", dir=_groups()))
        spec_path = self.folder / "spec.json"
        backend = backend_for(self.device)
        group = {"world": world, "backend": backend}
        spec_path.write_text(json.dumps({**self.spec, "group": group}), encoding="utf-8")
        threads = str(max(1, self.layout.threads))
        # the children import core_model from where this process did, whatever their cwd
        source = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH")) if p)
        env = {
            **os.environ,
            "PYTHONPATH": path,
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
        }
        try:
            for rank in range(1, world):
                cmd = [sys.executable, "-m", CHILD_MODULE, "--child", str(spec_path), str(rank)]
                # the child's output, for the reason it gives if it fails (it keeps its own copy
                # of the descriptor)
                with open(self.folder / f"rank{rank}.log", "wb") as log:
                    self.children.append(
                        subprocess.Popen(
                            cmd, env={**env, "LOCAL_RANK": str(rank)}, stdout=log, stderr=log
                        )
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
            if self.failure() is not None:
                raise TrainingError(self.failure())
            if time.monotonic() > deadline:
                raise TrainingError(
                    f"The training processes did not start within {START_TIMEOUT_S:.0f} s."
                )
            time.sleep(0.05)

    def failure(self) -> str | None:
        """Which rank ended before the group closed, and how, in words; None while all run."""
        world = self.layout.processes
        for rank, child in enumerate(self.children, start=1):
            code = child.poll()
            if code is None or code == 0:
                continue
            if code < 0:
                name = signal.Signals(-code).name
                why = f"was killed by signal {-code} ({name})"
                if -code == signal.SIGKILL:
                    why += ", perhaps by the system for lack of memory"
            else:
                why = f"stopped with exit code {code}"
            said = self._last_line(rank)
            return f"Training process {rank + 1} of {world} {why}" + (f": {said}" if said else ".")
        return None

    def _last_line(self, rank: int) -> str:
        """The last line a child wrote (its error, when it raised one)."""
        assert self.folder is not None
        try:
            text = (self.folder / f"rank{rank}.log").read_text(errors="replace")
        except OSError:
            return ""
        return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")

    def __exit__(self, *exc: object) -> None:
        global _group_folder
        _group_folder = None
        if dist.is_initialized():
            dist.destroy_process_group()
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


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


def data_parallel(model: nn.Module, device: torch.device) -> nn.Module:
    """`model` wrapped by DistributedDataParallel for the group this process is in; between
    the CPU processes of a RankGroup with room in its folder, gradients are summed through
    shared memory (`shared_memory`), else by the backend's all-reduce. Every rank must
    decide alike, so they vote."""
    net = nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    if device.type != "cpu" or _group_folder is None:
        return net
    parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    rank, world = dist.get_rank(), dist.get_world_size()
    here = float(shared_memory.fits(_group_folder, world, parameters))
    votes = torch.tensor([here])
    dist.all_reduce(votes)
    if votes.item() == world:
        state = shared_memory.SharedMemoryAllReduce(_group_folder, rank, world, parameters)
        net.register_comm_hook(state, shared_memory.shared_memory_hook)
    return net


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
