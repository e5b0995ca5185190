"""Everything about a run that changes while it trains, apart from the network's weights and
the optimizer: one dataclass, so a checkpoint is `state_dict()` and a resume is
`load_state_dict()` — a resumed run continues exactly as an uninterrupted one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

Weights = dict[str, "torch.Tensor"]


@dataclass
class TrainerState:
    step: int = 0  # optimizer steps taken
    epoch: int = 0  # epochs completed (validated and checkpointed)
    history: list[dict[str, Any]] = field(default_factory=list)  # one record per epoch
    best_score: float | None = None  # best validation score so far (higher is better)
    best_epoch: int = 0
    bad_epochs: int = 0  # epochs since the best one (early stopping)
    memorised_epochs: int = 0  # consecutive epochs reproducing every training pair
    elapsed_s: float = 0.0  # training time so far (a time budget counts it across resumes)
    tokens_trained: int = 0  # source + target tokens of every step so far (all ranks)
    calibration: dict[str, Any] | None = None  # the measured speed the recipe planned with
    replans: list[dict[str, Any]] = field(default_factory=list)  # `Trainer._replan`'s, in order
    best_weights: Weights | None = None
    recent_weights: list[Weights] = field(default_factory=list)  # for checkpoint averaging

    def state_dict(self) -> dict[str, Any]:
        """Plain values (JSON-able) plus the weight snapshots under 'best_weights' and
        'recent_weights' (the checkpoint writes those as safetensors)."""
        return {
            "step": self.step,
            "epoch": self.epoch,
            "history": self.history,
            "best_score": self.best_score,
            "best_epoch": self.best_epoch,
            "bad_epochs": self.bad_epochs,
            "memorised_epochs": self.memorised_epochs,
            "elapsed_s": self.elapsed_s,
            "tokens_trained": self.tokens_trained,
            "calibration": self.calibration,
            "replans": self.replans,
            "best_weights": self.best_weights,
            "recent_weights": list(self.recent_weights),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.epoch = int(state["epoch"])
        self.history = list(state.get("history", []))
        self.best_score = state.get("best_score")
        self.best_epoch = int(state.get("best_epoch", 0))
        self.bad_epochs = int(state.get("bad_epochs", 0))
        self.memorised_epochs = int(state.get("memorised_epochs", 0))
        self.elapsed_s = float(state.get("elapsed_s", 0.0))
        self.tokens_trained = int(state.get("tokens_trained", 0))
        self.calibration = state.get("calibration")
        self.replans = list(state.get("replans") or [])
        self.best_weights = state.get("best_weights")
        self.recent_weights = list(state.get("recent_weights") or [])

    @property
    def last_record(self) -> dict[str, Any]:
        return self.history[-1] if self.history else {}
