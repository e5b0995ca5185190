"""What the corpus memory (kNN-MT) did in one translation, step by step, for the Inspect page:
the piece the model alone would choose beside the one chosen with the memory, λ, and the
retrieved neighbours with their pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from core_model.retrieval import explain
from core_model.translator import translate as translate_loaded
from db.tables import Pair
from workbench.corpus.corpora import CorpusRef
from workbench.memory.datastore import pair_of, retrieval
from workbench.models.registry import get_version, load_model_of
from workbench.storage import session_scope


@dataclass(frozen=True)
class MemoryStep:
    """One decoding step as the memory saw it (Inspect): the piece the model alone would
    choose and the one chosen with the memory, their probabilities, λ, and the neighbours
    with their pairs."""

    step: int
    model_piece: str
    model_p: float
    chosen_piece: str
    chosen_p: float
    lam: float
    neighbours: list[dict[str, Any]]  # pair_id, source, target, piece, distance


def explain_translation(
    version_id: int, text: str, corpus: CorpusRef | None = None
) -> tuple[str, list[MemoryStep]]:
    """Translate `text` greedily with the memory and say, step by step, which stored decoder
    states were retrieved (their pair, next piece, distance) and how they moved the choice."""
    retrieval_memory = retrieval(version_id, corpus)
    loaded = load_model_of(get_version(version_id))
    [result] = translate_loaded(loaded, [text], retrieval=retrieval_memory)
    if not result.src_ids:
        return "", []
    ended = bool(result.out_pieces) and result.out_pieces[-1] == "</s>"
    out = [*result.out_ids, loaded.model.cfg.eos_id] if ended else list(result.out_ids)
    steps = explain(loaded.model, result.src_ids, out, retrieval_memory)
    pieces = loaded.tokenizers.tgt.ids_to_pieces
    entries = {n.entry for step in steps for n in step.neighbours}
    texts = _pair_texts({pair_of(e) for e in entries})
    return result.text, [
        MemoryStep(
            t,
            pieces([s.model_top])[0],
            s.model_p,
            pieces([s.final_top])[0],
            s.final_p,
            s.lam,
            [
                {
                    "pair_id": pair_of(n.entry),
                    "source": texts.get(pair_of(n.entry), ("", ""))[0],
                    "target": texts.get(pair_of(n.entry), ("", ""))[1],
                    "piece": pieces([n.token])[0],
                    "distance": n.distance,
                }
                for n in s.neighbours
            ],
        )
        for t, s in enumerate(steps)
    ]


def _pair_texts(pair_ids: set[int]) -> dict[int, tuple[str, str]]:
    if not pair_ids:
        return {}
    with session_scope() as s:
        rows = s.execute(
            select(Pair.id, Pair.source, Pair.target).where(Pair.id.in_(pair_ids))
        ).all()
    return {r.id: (r.source, r.target) for r in rows}
