"""Why a run stops, in words: a stored ``StopReason`` and the early-stopping rule a run watches,
as ``workbench.messages.Message``s (English for the CLI, translated on a page)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from core_model.training import StopReason
from db.tables import TrainingRun
from workbench.messages import N_, Message
from workbench.storage import session_scope

# Why a run ended (``StopReason``, stored as its value), in words for people, as message ids.
STOP_WORDS = {
    StopReason.EPOCHS: N_("finished the epochs it was asked for"),
    StopReason.STEP_LIMIT: N_("reached its step limit"),
    StopReason.AUTO_STEPS: N_("finished the automatic budget's passes over the corpus"),
    StopReason.TIME_BUDGET: N_("time budget reached"),
    StopReason.TOKEN_BUDGET: N_("token budget reached"),
    StopReason.EARLY_STOPPING: N_("validation stopped improving"),
    StopReason.MEMORISED: N_("learned every training pair"),
    StopReason.CANCELLED: N_("cancelled"),
}
PATIENCE_STOP = N_("validation stopped improving for {patience} epochs")


def describe_stop(reason: str | None, config: dict[str, Any] | None = None) -> str | None:
    """A stored stop reason in words (``STOP_WORDS``, as a ``Message``); None when
    there is none (an unknown stored reason: as it is).

    With the run's `config`, rows written before the automatic budget had a reason of its own
    are told truthfully: they said 'epochs' (or 'max_steps') when the automatic budget's
    planned passes ran out, though no epochs (no step cap) had been asked for."""
    if not reason:
        return None
    try:
        stop = StopReason(reason)
    except ValueError:
        return reason
    if config is not None and (
        (stop is StopReason.EPOCHS and config.get("epochs") is None)
        or (stop is StopReason.STEP_LIMIT and config.get("max_steps") is None)
    ):
        stop = StopReason.AUTO_STEPS
    patience = (config or {}).get("patience")
    if stop is StopReason.EARLY_STOPPING and patience:
        return Message(PATIENCE_STOP, patience=patience)
    return Message(STOP_WORDS[stop])


def version_stopped_because(version: Any) -> str | None:
    """Why the run that trained a model version (``registry.VersionInfo``) stopped, in words:
    the reason recorded with its metrics, told with its run's config while the run exists."""
    config = None
    if version.run_id is not None:
        with session_scope() as s:
            config = s.scalar(select(TrainingRun.config).where(TrainingRun.id == version.run_id))
    return describe_stop(version.metrics.get("stop_reason"), config)


# what the patience rule watches, as a sentence names it (BLEU is a name: not translated)
# What early stopping watches, as a whole phrase: Chinese puts a space before "BLEU" but
# none in 验证损失, which one sentence around "validation {metric}" cannot do.
WATCHED = {"bleu": N_("validation BLEU"), "loss": N_("validation loss")}


def describe_watch(watch: dict[str, Any]) -> Message | None:
    """A progress event's `watch` (what may stop the run early) as one sentence."""
    if watch.get("rule") == "memorise":
        share, pairs = watch.get("reproduced"), watch.get("pairs")
        skipped = watch.get("unreproducible") or 0
        if share is not None and skipped:
            return Message(
                N_(
                    "Stops early once it reproduces every training pair it can: {share:.0%} "
                    "of {pairs:,} now. Pairs not waited for (their target has a character "
                    "the tokenizer cannot write): {skipped:,}."
                ),
                share=share,
                pairs=pairs,
                skipped=skipped,
            )
        if share is not None and pairs:
            return Message(
                N_(
                    "Stops early once it reproduces every training pair: {share:.0%} of "
                    "{pairs:,} now."
                ),
                share=share,
                pairs=pairs,
            )
        return Message(N_("Stops early once it reproduces every training pair."))
    if watch.get("rule") == "patience":
        return Message(
            N_(
                "Stops early if {metric} does not improve for {patience} epochs: {bad} "
                "without improvement so far."
            ),
            metric=Message(WATCHED.get(watch.get("metric"), N_("validation score"))),
            patience=watch.get("patience"),
            bad=watch.get("bad_epochs", 0),
        )
    return None
