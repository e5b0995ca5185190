"""Where a new run of a corpus starts: "Continue from #N" or "Start a new model".

The one rule every front end (Train page, ``train`` CLI) follows: a run continues the newest
version trained on the corpus whose tokenizer still covers it — it knows at least
``COVERAGE_MIN`` of the characters of each side of the corpus' training pairs (what a
tokenizer is trained on; ``core_model.tokenizer.character_coverage``, over the version's
SentencePiece vocabulary). Continuing warm-starts from that version's weights and
tokenizer on the current pairs, new ones included (the recipe gives it a short re-warm-up),
so successive runs add up.
When the newest version's tokenizer no longer fits (new pairs bring characters it cannot
write), a new model is the default, and the reason says so.
A run that memorises (a small corpus on the automatic budget: it stops once it reproduces
every training pair) needs more than ``COVERAGE_MIN``: a target character its tokenizer cannot
write is a pair it can never reproduce, so such a version is continued only when its target
tokenizer writes every character of the training targets. A larger corpus is judged on its
validation pairs, where a rare unknown character costs a ⁇ now and then, not the run.

A version that is a large pretrained model (a public checkpoint, or fine-tuned from one) is
continued as gently as core_model's recipe says; ``fine_tune_note`` tells the Train page what
such a run will cost and buy, before it is queued, from ``continued_plan``: the run's plan made
as the run makes it, timed on the version's own model (never a preset's first guess).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from sqlalchemy import func, select

from core_model.artifact import TOKENIZER_DIR, ArtifactError, read_config
from core_model.tokenizer import (
    TokenizerError,
    TokenizerPair,
    character_coverage,
    unknown_characters,
)
from core_model.training import TrainConfig, TrainingError, recipe
from core_model.transformer import ModelConfig
from db.tables import Pair
from workbench import settings
from workbench.corpus.corpora import CorpusRef, find
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message
from workbench.models import registry
from workbench.storage import session_scope

COVERAGE_MIN = 0.99  # of each side's characters, for a version's tokenizer to be continued
SHOWN_CHARACTERS = 5  # unknown characters a reason names


class DefaultStart(NamedTuple):
    """The default of a new run: the version to continue (None: a new model) and why."""

    version_id: int | None
    reason: str


def default_start(corpus: CorpusRef, automatic_budget: bool = True) -> DefaultStart:
    """The start a new run of ``corpus`` gets unless the user picks another (see the module
    docstring). ``automatic_budget``: the run's budget is the automatic one (no epochs,
    minutes or tokens given), which may memorise a small corpus."""
    with session_scope() as s:
        corpus_id = find(s, corpus).id
    marker = _content_marker(corpus_id)
    counts = _corpus_characters(corpus_id, marker)
    memorising = automatic_budget and _memorises(corpus_id)
    newest_misfit: tuple[int, float, list[str]] | None = None
    for version in registry.list_versions():  # newest first
        if version.corpus_id != corpus_id:
            continue
        share = _coverage(version.id, version.sha256, counts)
        if share is None:  # its files are gone or damaged: it cannot be continued
            continue
        unwritable = (
            _unwritable_targets(version.id, version.sha256, counts[1])
            if memorising and _pretrained_model(version.id, version.sha256) is None
            else []
        )
        if share >= COVERAGE_MIN and not unwritable:
            return DefaultStart(
                version.id,
                Message(
                    N_(
                        "Version #{id} was trained on this corpus and its tokenizer knows "
                        "{share} of the corpus' characters: the run builds on what it learned."
                    ),
                    id=version.id,
                    share=_percent(share),
                ),
            )
        newest_misfit = newest_misfit or (version.id, share, unwritable)
    if newest_misfit is None:
        return DefaultStart(
            None, Message(N_("No version of this corpus yet: the run trains a new model."))
        )
    vid, share, unwritable = newest_misfit
    if share >= COVERAGE_MIN:  # it covers the corpus, but not every target of a memorising run
        return DefaultStart(
            None,
            Message(
                N_(
                    "The tokenizer of version #{id} cannot write {characters} of this corpus' "
                    "targets: a run of so few pairs stops once it reproduces every one, which "
                    "it never could, so a new model with a new tokenizer is trained."
                ),
                id=vid,
                characters=_quoted(unwritable),
            ),
        )
    return DefaultStart(
        None,
        Message(
            N_(
                "The tokenizer of version #{id} knows only {share} of the characters of this "
                "corpus now (continuing needs {needed}): new pairs bring characters it cannot "
                "read, so a new model with a new tokenizer is trained."
            ),
            id=vid,
            share=_percent(share),
            needed=_percent(COVERAGE_MIN),
        ),
    )


def _quoted(characters: list[str]) -> str:
    """A few characters as a reason names them: “G” “Z” … (more are left out)."""
    shown = " ".join(f"“{ch}”" for ch in characters[:SHOWN_CHARACTERS])
    return shown + (" …" if len(characters) > SHOWN_CHARACTERS else "")


def _percent(share: float) -> str:
    return f"{100 * share:.1f} %" if share < 0.9995 else f"{100 * share:.2f} %"


def _content_marker(corpus_id: int) -> tuple:
    """Changes whenever the corpus' training pairs do (a cache key: counted once)."""
    with session_scope() as s:
        return tuple(
            s.execute(
                select(func.count(), func.max(Pair.id), func.max(Pair.updated_at)).where(
                    Pair.corpus_id == corpus_id, Pair.split == "train"
                )
            ).one()
        )


def _training_pairs(corpus_id: int) -> Iterator[tuple[str, str]]:
    """The corpus' training pairs, streamed (a large corpus is never held twice)."""
    with session_scope() as s:
        rows = s.execute(
            select(Pair.source, Pair.target).where(
                Pair.corpus_id == corpus_id, Pair.split == "train"
            )
        )
        yield from rows


@lru_cache(maxsize=8)
def _corpus_characters(corpus_id: int, marker: tuple) -> tuple[Counter[str], Counter[str]]:
    """(source, target) character counts of the corpus' training pairs."""
    src: Counter[str] = Counter()
    tgt: Counter[str] = Counter()
    for source, target in _training_pairs(corpus_id):
        src.update(source)
        tgt.update(target)
    return src, tgt


def _memorises(corpus_id: int) -> bool:
    """Whether a run of the corpus on the automatic budget memorises it (the recipe's rule,
    counted on the corpus' splits now: one grouped count, not cached — it depends on the
    validation pairs too)."""
    with session_scope() as s:
        splits = dict(
            s.execute(
                select(Pair.split, func.count())
                .where(Pair.corpus_id == corpus_id)
                .group_by(Pair.split)
            ).all()
        )
    facts = recipe.CorpusFacts(splits.get("train", 0), splits.get("valid", 0), 0, False)
    return recipe.memorises(TrainConfig(), facts)


@lru_cache(maxsize=8)
def _corpus_facts(corpus_id: int, marker: tuple) -> recipe.CorpusFacts:
    """What core_model's recipe knows of the corpus' training pairs (counted once)."""
    return recipe.CorpusFacts.of(list(_training_pairs(corpus_id)), None)


def _coverage(
    version_id: int, sha256: str, counts: tuple[Counter[str], Counter[str]]
) -> float | None:
    tokenizers = _tokenizers(version_id, sha256)
    if tokenizers is None:
        return None
    return min(
        character_coverage(tokenizers.src, counts[0]),
        character_coverage(tokenizers.tgt, counts[1]),
    )


def _unwritable_targets(version_id: int, sha256: str, targets: Counter[str]) -> list[str]:
    """The characters of the training targets that the version's target tokenizer lacks."""
    tokenizers = _tokenizers(version_id, sha256)
    return [] if tokenizers is None else unknown_characters(tokenizers.tgt, targets)


@lru_cache(maxsize=16)
def _tokenizers(version_id: int, sha256: str) -> TokenizerPair | None:
    """The version's tokenizers (cached per version and digest), None if unreadable."""
    try:
        folder = settings.resolve(registry.get_version(version_id).artifact_path)
        return TokenizerPair.load(folder / TOKENIZER_DIR)
    except (ArtifactError, TokenizerError, OSError):
        return None


@dataclass(frozen=True)
class Continuation:
    """A run that would continue ``version_id`` on ``corpus``, as the Train page asks for it
    before it is queued: its budget (``minutes``, ``epochs``, or neither: the automatic one)
    and its device."""

    version_id: int
    corpus: CorpusRef
    minutes: float | None = None
    epochs: int | None = None
    device: str = "cpu"

    @property
    def gpu(self) -> bool:
        """On a GPU the plan is the model's first guess, not timed (``continued_plan``)."""
        return self.device.startswith("cuda")


def fine_tune_note(run: Continuation) -> Message | None:
    """What ``run`` costs and buys when its version is a large pretrained model: a token's
    arithmetic against the model a new run of the corpus would train, and the speed, tokens
    and passes over the corpus that ``continued_plan`` measures for its budget. None for any
    other version."""
    version = registry.get_version(run.version_id)
    model = _pretrained_model(version.id, version.sha256)
    if model is None:
        return None
    plan = continued_plan(run)
    if plan is None:
        return None
    with session_scope() as s:
        corpus_id = find(s, run.corpus).id
    # the basis of the cost: the model a new run of this corpus and budget would train
    fresh = recipe.resolve(
        _asked(run.minutes, run.epochs),
        _corpus_facts(corpus_id, _content_marker(corpus_id)),
        run.gpu,
    )
    if plan.calibration is not None:
        speed = Message(
            N_("{speed} tokens/s, measured here on this model"),
            speed=f"{plan.calibration.tokens_per_s:,.0f}",
        )
    else:
        speed = Message(
            N_("about {speed} tokens/s, a first guess that the run measures before it starts"),
            speed=f"{recipe.estimated_tokens_per_s(model, run.gpu):,.0f}",
        )
    return Message(
        N_(
            "Version #{id} is a pretrained model of {parameters} parameters: a token costs it "
            "about {times}× the arithmetic of the “{preset}” model a new run of this corpus "
            "would train, and it trains at {speed}. This run trains about {tokens} tokens, "
            "{passes} passes over the corpus' training pairs, at a low learning rate ({rate}) "
            "that adapts the model without erasing what it knows; version #{id} stays as it is."
        ),
        id=version.id,
        parameters=f"{version.param_count / 1e6:.1f}M",
        times=f"{recipe.relative_cost(model, fresh.cfg.candidate_model()):.2g}",
        preset=fresh.cfg.preset,
        speed=speed,
        tokens=f"{plan.budget_tokens or 0.0:,.0f}",
        passes=f"{plan.passes or 0.0:.1f}",
        rate=f"{plan.cfg.lr:g}",
    )


def continued_plan(run: Continuation) -> recipe.Plan | None:
    """The plan of ``run``, made as the run makes it: the version's own model (not a preset)
    timed on a CPU for a few training steps at the corpus' sentence length and the run's
    batch, one process with the idle cores (the run times its layouts again before it
    starts); on a GPU at the model's first guess, as the run plans there. None for a corpus
    without training pairs. Cached per version, corpus content and budget: a page asks on
    every rerun."""
    version = registry.get_version(run.version_id)
    with session_scope() as s:
        corpus_id = find(s, run.corpus).id
    return _continued_plan(
        version.id,
        version.sha256,
        corpus_id,
        _content_marker(corpus_id),
        run.minutes,
        run.epochs,
        run.gpu,
    )


@lru_cache(maxsize=8)
def _continued_plan(
    version_id: int,
    sha256: str,
    corpus_id: int,
    marker: tuple,
    minutes: float | None,
    epochs: int | None,
    gpu: bool,
) -> recipe.Plan | None:
    # torch only here: the `train` command that only queues a run never loads a model
    import torch

    from core_model.training import setup
    from core_model.training.calibration import Calibration, fastest, measure_candidate
    from core_model.training.layout import ONE_PROCESS

    facts = _corpus_facts(corpus_id, marker)
    if not facts.train_pairs:
        return None
    folder = settings.resolve(registry.get_version(version_id).artifact_path)
    try:
        start = setup.continued(folder)
    except TrainingError as exc:
        raise WorkbenchError(
            N_("Version {id} cannot be continued: {error}"), id=version_id, error=str(exc)
        ) from exc
    pretrained = start.model if start.pretrained else None
    speed = None
    if not gpu:

        def speed(candidate: TrainConfig) -> Calibration:
            cpu = torch.device("cpu")
            return fastest(
                measure_candidate(
                    candidate, facts.length_mix(), cpu, ONE_PROCESS, start.model, facts.train_pairs
                ),
                candidate.time_budget_s,
            )

    return recipe.resolve(_asked(minutes, epochs), facts, gpu, True, speed, pretrained)


def _asked(minutes: float | None, epochs: int | None) -> TrainConfig:
    """The budget a page asks for, as a run's config has it (neither: the automatic one)."""
    return TrainConfig(epochs=epochs, time_budget_s=60.0 * minutes if minutes else None)


@lru_cache(maxsize=16)
def _pretrained_model(version_id: int, sha256: str) -> ModelConfig | None:
    """The version's model config when it is a large pretrained model (its config.json has a
    ``pretrained`` section), else None (cached per version and digest)."""
    try:
        folder = settings.resolve(registry.get_version(version_id).artifact_path)
        data = read_config(folder)
        if not isinstance(data.get("pretrained"), dict):
            return None
        return ModelConfig.from_dict(data["model"])
    except (ArtifactError, OSError, TypeError, ValueError):
        return None
