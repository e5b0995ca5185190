"""§5 Training, split by concern (cf. nanoGPT's train.py and JoeyNMT's training module):

- `config`          `TrainConfig`, every knob of a run, and `TrainingError`
- `recipe`          the automatic choices (model, budget, rate, batches, vocabulary, dropout)
- `recipe_table`    the recipe's numbers as docs/TRAINING.md's table, generated from them
- `precision`       device, number precision (bf16 autocast) and CPU-thread policy
- `schedule`        the budget (steps, epochs, the clock) and the §5.3 learning-rate schedule
- `label_smoothing` §5.4 label-smoothed cross-entropy
- `state`           `TrainerState`: what changes during a run (checkpointed, resumable)
- `selection`       early-stopping bookkeeping and the choice/averaging of the final weights
- `validation`      loss, BLEU/chrF and exact-match checks on held-out pairs
- `checkpoint`      resumable checkpoints on disk (safetensors + JSON)
- `parallel`        the ranks of a data-parallel run: layouts, their task spec, backend, launch
- `setup`           what a run starts from: clean pairs, device, tokenizers, model, optimizer
- `progress`        what a run reports (`ProgressEvent`) and why it ended (`StopReason`)
- `trainer`         the loop itself: `train()` and `Trainer`
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core_model.first_use import on_first_use
from core_model.training.config import TrainConfig, TrainingError
from core_model.training.progress import ProgressEvent, StopReason

if TYPE_CHECKING:
    from core_model.training.precision import resolve_device
    from core_model.training.schedule import plan_budget
    from core_model.training.trainer import Trainer, TrainResult, train


__all__ = [
    "ProgressEvent",
    "StopReason",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "TrainingError",
    "plan_budget",
    "resolve_device",
    "train",
]
# the parts that need torch (`core_model.first_use`)
__getattr__ = on_first_use(
    __name__,
    {
        "resolve_device": "core_model.training.precision",
        "plan_budget": "core_model.training.schedule",
        "Trainer": "core_model.training.trainer",
        "TrainResult": "core_model.training.trainer",
        "train": "core_model.training.trainer",
    },
)
