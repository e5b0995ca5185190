"""Data-parallel training (DistributedDataParallel): this process's rank, and the few
collectives the training loop needs besides DDP's gradient all-reduce. Without an initialised
process group every call is a cheap no-op, so the loop has one code path."""

from __future__ import annotations

import torch
from torch import distributed as dist


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
        """Every rank ends with rank 0's weights (rank 0 chose the final ones)."""
        if self.on:
            for t in model.state_dict().values():
                dist.broadcast(t, 0)
