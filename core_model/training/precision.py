"""Where and how fast a run computes: the device, the number precision and the CPU threads.

One policy for the whole engine, so training, validation and the benchmarks agree:
- device 'auto' is the GPU when there is one;
- precision 'auto' is bf16 autocast where the hardware multiplies bf16 natively (CUDA GPUs
  with bf16; CPUs with AMX or AVX512-BF16) and the model is big enough for the matrix
  products to outweigh the casts, else fp32; on such a CPU a run that calibrates times both
  (`candidate_precisions`) and trains the faster on its own batches: CPU bf16 (oneDNN)
  prepares its kernels per batch shape, and on an AMX Xeon that made real batches 2.7x
  slower than one shape timed again and again;
- CPU threads follow the cores other processes leave idle (OpenMP threads spin-wait on each
  other, so one thread on a busy core stalls all of them).
"""

from __future__ import annotations

import os
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch

from core_model.training.config import TrainingError

# Training batches' lengths are rounded up to a multiple of this, by device and precision
# (`shape_multiple`): fewer distinct shapes, at the cost of some padding. Real tokens/s decide
# (docs/TRAINING.md, "Batch shapes"; `bench/batch_shapes.py`): CPU bf16 prepares its kernels
# per shape (a new shape every step: -23 % on an AVX512-BF16 EPYC, -63 % on an AMX Xeon).
# Unpadded CPU bf16 timed 1.1-1.2x the padded in a calibration's few shapes, yet the 10-minute
# clicks that trained it unpadded (~150 shapes) ran at 0.65-0.77x their calibration against
# 0.87x padded, and slower in tokens/s than the padded click: CPU bf16 pads to 8. fp32 loses
# 21 % to padding and does not pad. GPU: tensor-core tiles, not measured yet.
SHAPE_MULTIPLE = {("cpu", "bf16"): 8, ("cpu", "fp32"): 1, ("cuda", "bf16"): 8, ("cuda", "fp32"): 8}
BF16_MIN_PARAMETERS = 2_000_000  # below this, CPU autocast's casts cost more than they save
SINGLE_THREAD_PARAMETERS = 2_000_000  # below this, a second thread gains nothing


# oneDNN's ISA caps (ONEDNN_MAX_CPU_ISA) that still have bf16 instructions; any lower cap (an
# AVX2 laptop emulated on a server: AVX2, AVX512_CORE, ...) leaves bf16 to slow emulation.
ONEDNN_BF16_ISAS = (
    "ALL",
    "AVX512_CORE_BF16",
    "AVX512_CORE_FP16",
    "AVX512_CORE_AMX",
    "AVX512_CORE_AMX_FP16",
    "AVX10_1_512",
    "AVX10_1_512_AMX",
    "AVX10_1_512_AMX_FP16",
)


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 matrix math (AMX or AVX512-BF16) and the kernels may
    use it: autocast then pays. Kernels capped below AVX512 (`ATEN_CPU_CAPABILITY=avx2`, a
    lower `ONEDNN_MAX_CPU_ISA`: how a server emulates an AVX2 laptop) count as without."""
    capped_isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper() not in ONEDNN_BF16_ISAS
    if capped_isa or torch.backends.cpu.get_cpu_capability() != "AVX512":
        return False
    try:
        if torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported():
            return True
    except AttributeError:  # older torch: fall back to the kernel's flags
        pass
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def idle_cores(sample_s: float = 0.2) -> float | None:
    """Cores left idle by other processes right now (Linux /proc/stat over `sample_s`).

    Measured while this process sleeps, so its own work does not count; None where unknown.
    """

    def snapshot() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                values = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        return values[3] + values[4], sum(values[:8])  # idle + iowait, total

    a = snapshot()
    time.sleep(sample_s)
    b = snapshot()
    if a is None or b is None or b[1] <= a[1]:
        return None
    return (b[0] - a[0]) / (b[1] - a[1]) * (os.cpu_count() or 1)


def cpu_threads(requested: int | None, n_params: int, default: int) -> int:
    """Threads for CPU training when not set explicitly.

    On a busy 2-core machine two threads measured 4-10x slower than one, so: 1 thread for
    small models (too small to gain anyway), otherwise as many threads as there are idle cores
    (at least 1, at most `default`, torch's setting); then `pace.ThreadWatch` follows the steps.
    """
    if requested:
        return max(1, int(requested))
    if n_params < SINGLE_THREAD_PARAMETERS:
        return 1
    idle = idle_cores()
    if idle is None:
        return default
    return max(1, min(default, int(idle + 0.3)))


def candidate_precisions(name: str, device: torch.device, n_params: int) -> list[str]:
    """The precisions a calibration times for a run asked `name`: the one asked for; on a
    CPU with native bf16, for 'auto', both (the faster on the run's batches trains); else
    what 'auto' resolves to."""
    if name != "auto":
        return [name]
    if device.type == "cpu" and cpu_supports_bf16() and n_params >= BF16_MIN_PARAMETERS:
        return ["bf16", "fp32"]
    return [precision_name(resolve_precision(name, device, n_params))]


def resolve_device(name: str) -> torch.device:
    """'auto' | 'cpu' | 'cuda' | 'cuda:N' -> a device this machine has (or a TrainingError)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise TrainingError("A CUDA GPU was requested but none is available; use device 'cpu'.")
        return torch.device(name)
    if name == "cpu":
        return torch.device("cpu")
    raise TrainingError(f"Unknown device {name!r}; use 'auto', 'cpu' or 'cuda'.")


def resolve_precision(name: str, device: torch.device, n_params: int = 0) -> torch.dtype | None:
    """Autocast dtype (bf16) or None for plain fp32 (see the module docstring for 'auto')."""
    if name == "fp32":
        return None
    if name == "bf16":
        return torch.bfloat16  # asked for explicitly: emulated if need be
    if name != "auto":
        raise TrainingError(f"Unknown precision {name!r}; use 'auto', 'fp32' or 'bf16'.")
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    return torch.bfloat16 if cpu_supports_bf16() and n_params >= BF16_MIN_PARAMETERS else None


def precision_name(amp: torch.dtype | None) -> str:
    """'bf16' or 'fp32': how metrics, calibrations and users name an autocast dtype."""
    return "fp32" if amp is None else "bf16"


def shape_multiple(device: torch.device, amp: torch.dtype | None) -> int:
    """What a training batch's lengths are rounded up to on `device` at this precision
    (SHAPE_MULTIPLE)."""
    return SHAPE_MULTIPLE[(device.type, precision_name(amp))]


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """Mixed precision for the forward pass, or nothing for fp32."""
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or the CPU allocator's 'can't allocate memory'."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return (
        "out of memory" in text or "can't allocate memory" in text or "defaultcpuallocator" in text
    )
