"""What beam search records when asked (``beam_search(history=True)``): each step's 2K best
candidates of every sentence and what became of each, for the Inspect page's search tree.
It costs nothing when not asked.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# What became of a beam search candidate at its step (BeamCandidate.status):
#   finished  among the K best and ends (EOS, or the length bound): set aside, ranked at the end
#   kept      among the K best that do not end in EOS: a hypothesis of the next step
#   pruned    neither: dropped
#   stopped   kept, but the search of its sentence ended at this step
BEAM_STATUSES = ("finished", "kept", "pruned", "stopped")


@dataclass
class BeamCandidate:
    """One of a sentence's 2K best continuations at a step."""

    prefix: list[int]  # the hypothesis it extends: its output ids so far (without BOS)
    token: int
    log_prob: float  # log P(prefix + token): the sum over its steps
    status: str  # one of BEAM_STATUSES


@dataclass
class BeamStep:
    step: int
    candidates: list[BeamCandidate]  # best first


def record_step(
    steps_of: list[list[BeamStep]],
    step: int,
    sentence: torch.Tensor,
    ys: torch.Tensor,
    cand_rows: torch.Tensor,
    cand_tokens: torch.Tensor,
    cand_scores: torch.Tensor,
    ends: torch.Tensor,
    carry: torch.Tensor,
    done: torch.Tensor,
) -> None:
    """Append this step's candidates [n, 2K] (best first) to the history of each running
    sentence: which hypothesis (row of ys [N, t+1]) each extends, and what became of it."""
    prefixes = ys[:, 1:].tolist()
    kept = torch.zeros_like(ends).scatter_(1, carry, True).tolist()
    rows, tokens, scores = cand_rows.tolist(), cand_tokens.tolist(), cand_scores.tolist()
    for s, (i, ended, stopped) in enumerate(
        zip(sentence.tolist(), ends.tolist(), done.tolist(), strict=True)
    ):
        candidates = []
        for c, row in enumerate(rows[s]):
            status = "pruned"
            if ended[c]:
                status = "finished"
            elif kept[s][c]:
                status = "stopped" if stopped else "kept"
            candidates.append(BeamCandidate(prefixes[row], tokens[s][c], scores[s][c], status))
        steps_of[i].append(BeamStep(step, candidates))
