"""Look inside a version at work on one sentence (the Inspect page): core_model's inspection
of the sentence, beside the run that trained the version — its loss curve, and the step the
version's weights come from.

The limits of ``core_model.inspection`` (MAX_PIECES, MAX_OUTPUT) keep every map drawable: a
longer input is cut (and says so, as Translate warns), a longer output stops.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from core_model.inspection import Inspection, TokenChoice, inspect_sentence, nearest_neighbours
from workbench.corpus.pairs import search_pairs
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message
from workbench.models.engines import MAX_BEAM
from workbench.models.registry import VersionInfo, get_version, load_model_of
from workbench.models.translation import BEAM_RANGE, UNKNOWN_SHARE_WARNING
from workbench.training import metric_rows

MAX_PADDING = 16  # PAD positions a padded batch may add
SIDES = ("src", "tgt")  # whose embedding space `neighbours` searches


@dataclass
class VersionInspection:
    """One sentence through one version, and where that version came from."""

    version: VersionInfo
    inspection: Inspection
    # why to read the result with care (a cut input, unknown pieces); the page shows them
    # (as ``step_note``) through ``ui.i18n.localized``
    notices: list[Message]
    metrics: pd.DataFrame  # the training run's metric rows (empty: the version has no run)
    step: int | None  # the training step the version's weights come from
    step_note: str = ""  # how the run chose those weights (a ``Message``)
    reference: str | None = None  # the corpus pair's target, when one was picked
    beam: int = 1


def inspect(
    version_id: int,
    text: str,
    *,
    reference: str | None = None,
    beam: int = 4,
    padding: int = 0,
) -> VersionInspection:
    """Translate `text` with the version and return everything the Inspect page draws.

    beam 1 looks at greedy decoding only; beam > 1 adds beam search's history. `padding`
    appends PAD positions as a batch with a longer sentence would.
    """
    if not (text or "").strip():
        raise WorkbenchError(N_("Type a sentence to inspect (the text is empty)."))
    if not 1 <= beam <= MAX_BEAM:
        raise WorkbenchError(BEAM_RANGE, max_beam=MAX_BEAM)
    if not 0 <= padding <= MAX_PADDING:
        raise WorkbenchError(
            N_("Padding must be between 0 and {max_padding} positions."), max_padding=MAX_PADDING
        )
    info = get_version(version_id)
    loaded = load_model_of(info)
    try:
        seen = inspect_sentence(loaded, text, beam_size=beam, padding=padding)
    except ValueError:  # a text of only characters the cleaning removes
        raise WorkbenchError(N_("Nothing to inspect: the text is empty once cleaned.")) from None
    metrics = metric_rows.run_metrics(info.run_id) if info.run_id is not None else _no_metrics()
    step, note = version_step(info, metrics)
    return VersionInspection(
        info, seen, _notices(seen, loaded.model.cfg.unk_id), metrics, step, note, reference, beam
    )


def _no_metrics() -> pd.DataFrame:
    return pd.DataFrame(columns=metric_rows.METRIC_COLUMNS)


def _notices(seen: Inspection, unk_id: int) -> list[Message]:
    out = []
    if seen.src_tokens > len(seen.src_ids):
        out.append(
            Message(
                N_(
                    "Only the first {shown} of its {pieces} pieces are inspected: the maps of a "
                    "longer sentence are unreadable."
                ),
                shown=len(seen.src_ids) - 1,
                pieces=seen.src_tokens - 1,
            )
        )
    unknown = sum(1 for i in seen.src_ids if i == unk_id) / max(1, len(seen.src_ids) - 1)
    if unknown > UNKNOWN_SHARE_WARNING:
        out.append(
            Message(
                N_(
                    "{share:.0%} of its pieces are unknown to this model (shown as <unk>): "
                    "expect a wrong translation."
                ),
                share=unknown,
            )
        )
    return out


def version_step(info: VersionInfo, metrics: pd.DataFrame) -> tuple[int | None, Message]:
    """The training step the version's weights come from, and how they were chosen
    (core_model.training.selection: the last weights, the best epoch's, or an average)."""
    selected = str(info.metrics.get("selected") or "last")
    last = info.metrics.get("steps")
    last = int(last) if last is not None else None
    if selected == "best":
        epoch = info.metrics.get("best_epoch")
        rows = metrics[metrics["kind"].eq("epoch") & metrics["epoch"].eq(epoch)]
        note = Message(N_("the weights of the best epoch ({epoch})"), epoch=epoch)
        if not rows.empty:
            return int(rows["step"].iloc[-1]), note
        return last, note
    if selected.startswith("average_last_"):
        n = selected.removeprefix("average_last_")
        return last, Message(
            N_("the average of {n} snapshots over the last fifth of the run, up to here"), n=n
        )
    return last, Message(N_("the run's last weights"))


def neighbours(version_id: int, token_id: int, side: str = "tgt", n: int = 8) -> list[TokenChoice]:
    """The `n` tokens nearest to `token_id` in the version's embedding space (cosine)."""
    if side not in SIDES:
        raise WorkbenchError(
            N_("Unknown side {side!r}; choose one of {choices}."),
            side=side,
            choices=", ".join(SIDES),
        )
    loaded = load_model_of(get_version(version_id))
    vocab = loaded.model.cfg.src_vocab_size if side == "src" else loaded.model.cfg.tgt_vocab_size
    if not 0 <= token_id < vocab:
        raise WorkbenchError(N_("Token id {id} is not in this version's vocabulary."), id=token_id)
    return nearest_neighbours(loaded, token_id, side, n)


def example_pairs(version_id: int, n: int = 30) -> list[tuple[str, str]]:
    """(source, reference) pairs of the corpus the version was trained on, held-out pairs
    first (test, then validation, then training); none when the corpus is gone."""
    info = get_version(version_id)
    if info.corpus_id is None:
        return []
    out: list[tuple[str, str]] = []
    try:
        for split in ("test", "valid", "train"):
            rows = search_pairs(info.corpus_id, split=split, page_size=n - len(out)).rows
            out += list(zip(rows["source"], rows["target"], strict=True))
            if len(out) >= n:
                break
    except WorkbenchError:  # the corpus was deleted since
        return []
    return out
