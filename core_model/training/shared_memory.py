"""Gradients summed through shared memory between the ranks of one machine: a communication hook
of DistributedDataParallel (its documented extension point), used instead of Gloo's all-reduce.

Why: Gloo sends the gradients through TCP on the loopback, a few GB/s at best, and spends CPU
on it that the ranks need for their own steps; on a laptop, every step of every rank waits for
it. Here each rank copies its gradient bucket into its slot of one buffer that every rank maps
(a file in the group's folder, in /dev/shm: memory, not disk); after a barrier each rank sums
one slice of all the slots; after a second barrier each rank copies the summed buffer back.
Every rank reads the same sums, so the weights stay identical on every rank, as with Gloo.
The barriers are Gloo's, so a rank that dies still fails the others' next step at once.
"""

# (no `from __future__ import annotations`: DDP checks the hook's annotations as objects)
import shutil
from pathlib import Path

import torch
from torch import distributed as dist

BYTES = 4  # fp32 gradients


def fits(folder: Path, world: int, parameters: int) -> bool:
    """Whether the folder's file system holds the buffer twice over (slots, sums, margin)."""
    need = (world + 1) * parameters * BYTES
    return shutil.disk_usage(folder).free > 2 * need


class SharedMemoryAllReduce:
    """The hook's state: one mapped buffer of `world` slots and the sums, each `parameters`
    long. DDP reduces its buckets in index order within a step, so each takes the next
    stretch of the buffer."""

    def __init__(self, folder: Path, rank: int, world: int, parameters: int) -> None:
        self.rank, self.world, self.parameters = rank, world, parameters
        path = folder / "gradients"
        buffer = torch.from_file(
            str(path), shared=True, size=(world + 1) * parameters, dtype=torch.float32
        )
        dist.barrier()  # every rank has mapped it: the name can go, the memory stays mapped
        if rank == 0:  # until the last rank ends, however it ends (a kill -9 leaks nothing)
            path.unlink()
        self.slots = buffer[: world * parameters].view(world, parameters)  # [world, P]
        self.sums = buffer[world * parameters :]  # [P]
        self.offset = 0

    def reduce(self, grads: torch.Tensor, first: bool) -> torch.Tensor:
        """The mean over the ranks of one bucket's flat gradients, in place."""
        if first:
            self.offset = 0
        n = grads.numel()
        start, self.offset = self.offset, self.offset + n
        here = slice(start, start + n)
        self.slots[self.rank, here].copy_(grads)
        dist.barrier()
        share = -(-n // self.world)  # this rank sums one slice of the bucket
        mine = slice(start + self.rank * share, min(start + n, start + (self.rank + 1) * share))
        total = self.sums[mine]
        total.copy_(self.slots[0, mine])
        for other in range(1, self.world):
            total.add_(self.slots[other, mine])
        dist.barrier()
        return grads.copy_(self.sums[here]).div_(self.world)


def shared_memory_hook(
    state: SharedMemoryAllReduce, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's communication hook: the bucket reduced at once, handed back as a done future."""
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(state.reduce(bucket.buffer(), bucket.index() == 0))
    return done
