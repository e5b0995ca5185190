"""Reading training runs for display: ``RunInfo``, the run list and table (their metric rows:
``metric_rows``; why a run stops, in words: ``stop_words``).

Reads only: nothing here changes a run (every change is in ``workbench.training.runs``), so a page
may call these as often as it refreshes. The texts in words (budget, stop reason, early-stopping
rule) are ``workbench.messages.Message``s: English for the CLI, translated on a page
(``ui.i18n.localized``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from core_model.artifact import ArtifactError, read_config
from core_model.transformer import ModelConfig
from db.tables import Corpus, ModelVersion, RunStatus, TrainingRun, utcnow
from workbench import settings
from workbench.errors import WorkbenchError
from workbench.messages import N_, Message
from workbench.storage import record_of, session_scope
from workbench.training.runs import ACTIVE_STATUSES, NO_SUCH_RUN, RESUME_NOTE
from workbench.training.stop_words import describe_stop, describe_watch


@dataclass
class RunInfo:
    id: int
    corpus_id: int | None
    corpus_name: str | None
    status: RunStatus
    device: str
    config: dict[str, Any]
    snapshot_size: int
    snapshot_hash: str
    progress_step: int
    progress_total: int
    eta_s: float | None
    error: str | None
    note: str | None
    stop_reason: str | None
    progress_detail: dict[str, Any]
    cancel_requested: bool
    # A running run whose worker sent no heartbeat for the timeout: it died. A front end
    # that sees one calls `runs.reap_stale_runs` (reading never changes a run).
    worker_lost: bool
    attempts: int
    init_version_id: int | None
    version_id: int | None
    # The model size it trains: its preset ('auto': the recipe's pick), or, continuing a
    # version, that version's size (continuing keeps it, whatever the preset given)
    model_size: str
    started_by: str | None  # who queued it (None: before team mode)
    heartbeat_at: datetime | None  # the worker's latest write (None: no worker holds it)
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def fraction_done(self) -> float:
        """Share of the binding budget used (steps, or the clock or the tokens when that binds)."""
        if self.status == RunStatus.SUCCEEDED:
            return 1.0
        fraction = self.progress_detail.get("fraction")
        if fraction is not None:
            return min(1.0, max(0.0, float(fraction)))
        return min(1.0, self.progress_step / self.progress_total) if self.progress_total else 0.0

    @property
    def limit(self) -> str:
        """The budget expected to end the run: 'steps', 'time' or 'tokens' (core_model's
        ProgressEvent.limit; 'steps' before the first progress report)."""
        limit = self.progress_detail.get("limit")
        return limit if limit in LIMITS else "steps"

    @property
    def time_budget_s(self) -> float | None:
        """The wall-clock budget: the one asked for, else (the automatic budget has a ceiling
        that core_model sets from the corpus) the one the progress shows binding."""
        asked = self.config.get("time_budget_s")
        if asked:
            return float(asked)
        detail = self.progress_detail
        elapsed, fraction = detail.get("elapsed_s"), detail.get("fraction")
        if self.limit == "time" and elapsed and fraction:  # the clock binds: fraction = t / budget
            return float(elapsed) / float(fraction)
        return None

    @property
    def token_budget(self) -> int | None:
        """The training tokens (source + target) the run was asked to train for."""
        tokens = self.config.get("token_budget")
        return int(tokens) if tokens else None

    @property
    def tokens_done(self) -> int | None:
        """Training tokens so far, while the token budget binds (its share of the budget)."""
        budget = self.token_budget
        if budget is None or self.limit != "tokens":
            return None
        return round(self.fraction_done * budget)

    @property
    def trained_s(self) -> float | None:
        """The seconds the run has trained, by its trainer's clock (earlier attempts of a
        resumed run included; None before its first report). The one definition every page
        shows: the trainer's last report of a finished run carries exactly what its version
        records as `train_time_s` (`registry`'s `train_seconds`), not the budget asked for."""
        elapsed = self.progress_detail.get("elapsed_s")
        return float(elapsed) if elapsed is not None else None

    @property
    def tokens_per_s(self) -> float | None:
        """The run's speed as a page shows it: this attempt's average since it began,
        validations included (the trainer's `pace`), None before its first step. One steady
        figure: the speed of the latest reporting window jumped tenfold within a minute
        (370 → 15,501 tokens/s) beside a re-plan that named another."""
        real = (self.progress_detail.get("pace") or {}).get("real_tokens_per_s")
        return float(real) if real else None

    def silent_s(self) -> float | None:
        """Seconds since the worker of a running run last wrote (a heartbeat comes every
        couple of seconds), None when no worker holds the run. A killed worker is known dead
        only after the heartbeat timeout; until then this is what a page can say."""
        if self.status != RunStatus.RUNNING or self.heartbeat_at is None:
            return None
        return max(0.0, (utcnow() - self.heartbeat_at).total_seconds())

    @property
    def resumes_from(self) -> Message | None:
        """Where a run taken back from a dead worker goes on (its last checkpoint, the
        reaper's `checkpoint_step`); None for any other run."""
        step = self.progress_detail.get("checkpoint_step")
        if self.status != RunStatus.QUEUED or self.note != RESUME_NOTE or step is None:
            return None  # (a run resumed by hand says its step in its note)
        if step <= 0:
            return Message(N_("No checkpoint was saved yet: it starts again from step 0."))
        return Message(N_("It resumes from step {step:,}, its last checkpoint."), step=step)

    @property
    def budget(self) -> Message:
        """What the run was asked to train for: 'automatic', '3 epochs', '5 min' or
        '1.1M tokens'."""
        minutes = (self.config.get("time_budget_s") or 0) / 60
        if minutes:
            return Message(N_("{minutes:g} min"), minutes=minutes)
        if self.token_budget:
            return Message(N_("{tokens} tokens"), tokens=format_tokens(self.token_budget))
        epochs = self.config.get("epochs")
        if not epochs:
            return Message(N_("automatic"))
        return Message(N_("{n} epoch") if epochs == 1 else N_("{n} epochs"), n=epochs)

    @property
    def stopped_because(self) -> Message | None:
        """Why the run ended, in words ('learned every training pair'); None while it runs or
        when it failed (see `error`)."""
        return describe_stop(self.stop_reason, self.config)

    @property
    def layout(self) -> Message | None:
        """How the run spreads over its machine, and the layouts timed to choose it."""
        layout = self.progress_detail.get("layout")
        if not layout:
            return None
        rounds: dict[str, list[str]] = {}  # a layout timed in several rounds: one entry
        for t in layout.get("layout_timings") or []:
            name = f"{t['processes']}×{t['threads']}" + (
                f" {t['precision']}" if t.get("precision") else ""
            )
            rounds.setdefault(name, []).append(f"{t['tokens_per_s']:,.0f}")
        timings = " · ".join(f"{name} {' / '.join(speeds)}" for name, speeds in rounds.items())
        # a one-process run takes the idle cores at its start: known from its pace (a GPU run,
        # or one before its first report, has no thread count to show)
        threads = layout["threads_per_process"] or (self.progress_detail.get("pace") or {}).get(
            "threads"
        )
        text = {  # (timed at the start, threads known)
            (True, True): N_(
                "{processes} × {threads} (training processes × threads each) · timed at "
                "the start: {timings} tokens/s"
            ),
            (True, False): N_(
                "{processes} (training processes) · timed at the start: {timings} tokens/s"
            ),
            (False, True): N_("{processes} × {threads} (training processes × threads each)"),
            (False, False): N_("{processes} (training processes)"),
        }[bool(timings), bool(threads)]
        return Message(text, processes=layout["processes"], threads=threads, timings=timings)

    @property
    def precision(self) -> Message | None:
        """The precision the run trains at, and whether an earlier attempt chose it: a
        resumed run keeps the plan it started with, while its layout line shows the timings
        of this attempt (None before the trainer's first report)."""
        pace = self.progress_detail.get("pace") or {}
        precision = pace.get("precision")
        if not precision:
            return None
        if pace.get("calibration_kept"):
            return Message(
                N_(
                    "Trains in {precision}, as the first attempt chose it: a resumed run "
                    "keeps its plan (the timings above are this attempt's)."
                ),
                precision=precision,
            )
        return Message(N_("Trains in {precision}."), precision=precision)

    @property
    def pace(self) -> list[Message]:
        """What the run changed because the machine trains at another speed than measured at
        the start (`core_model.training.pace`), in words: the last re-plan, and fewer threads
        or a smaller part of each update while another program holds a core."""
        pace = self.progress_detail.get("pace") or {}
        out = []
        replans, planned = pace.get("replans") or [], pace.get("planned_tokens_per_s")
        if replans and planned:
            last = replans[-1]
            real = last["real_tokens_per_s"]
            # the sign goes with the number: a bare '%' in a message reads to gettext's
            # tools as a printf conversion ("% s") that translations would have to keep
            off = round(abs(1 - real / planned) * 100)
            # when: the speed of the re-plan's window, which the average shown beside it
            # (`tokens_per_s`) may have left since
            words = (
                N_(
                    "At {elapsed} s this machine had trained {percent} slower than measured "
                    "at the start ({real} instead of {planned} tokens/s): the plan was adjusted."
                )
                if real < planned
                else N_(
                    "At {elapsed} s this machine had trained {percent} faster than measured "
                    "at the start ({real} instead of {planned} tokens/s): the plan was adjusted."
                )
            )
            out.append(
                Message(
                    words,
                    elapsed=f"{last.get('elapsed_s') or 0:,.0f}",
                    percent=f"{off} %",
                    real=f"{real:,.0f}",
                    planned=f"{planned:,.0f}",
                )
            )
            batch, first = last.get("batch_tokens"), pace.get("batch_tokens_at_start")
            if batch and first and batch != first:
                # since the re-plan that chose this size (later ones may have kept it)
                since = len(replans) - 1
                while since and replans[since - 1].get("batch_tokens") == batch:
                    since -= 1
                out.append(
                    Message(
                        N_(
                            "From {elapsed} s it trains batches of {batch} tokens (planned: "
                            "{planned}): the size that suits the tokens it will now see."
                        ),
                        elapsed=f"{replans[since].get('elapsed_s') or 0:,.0f}",
                        batch=f"{batch:,}",
                        planned=f"{first:,}",
                    )
                )
        changes = pace.get("thread_changes") or []
        if changes and changes[-1]["threads"] == 1 and self.status == RunStatus.RUNNING:
            out.append(
                Message(
                    N_(
                        "Steps slowed down (another program is using a core): training "
                        "goes on with one thread until the core is free again."
                    )
                )
            )
        parts = (pace.get("share_changes") or [{}])[-1].get("shares") or []
        # parts a tenth or more off equal (`pace.SHARE_CHANGE`): a rank's core is shared
        if parts and min(parts) * len(parts) < 0.9 and self.status == RunStatus.RUNNING:
            out.append(
                Message(
                    N_(
                        "A training process is slower than the others (another program is "
                        "using its core): it takes {percent} of each update, the others more, "
                        "until the core is free again."
                    ),
                    percent=f"{round(min(parts) * 100)} %",
                )
            )
        return out

    @property
    def early_stop_rule(self) -> Message | None:
        """What may end the run before its budget, in words, with how close it is now."""
        return describe_watch(self.progress_detail.get("watch") or {})


LIMITS = ("steps", "time", "tokens")


def format_tokens(tokens: int) -> str:
    """A token count for people: '1.1M', '500k', '800'."""
    if tokens >= 1_000_000:
        return f"{tokens / 1_000_000:.4g}M"
    if tokens >= 1_000:
        return f"{tokens / 1_000:.4g}k"
    return str(tokens)


def _version_ids(s: Session, run_ids: list[int]) -> dict[int, int]:
    rows = s.execute(
        select(ModelVersion.run_id, ModelVersion.id).where(ModelVersion.run_id.in_(run_ids))
    ).all()
    return {run_id: version_id for run_id, version_id in rows}


def _version_sizes(s: Session, version_ids: set[int]) -> dict[int, str]:
    """The model size of each of these versions that still has its folder."""
    rows = s.execute(
        select(ModelVersion.id, ModelVersion.artifact_path, ModelVersion.sha256).where(
            ModelVersion.id.in_(version_ids)
        )
    ).all()
    sizes = {
        version_id: _folder_size(str(settings.resolve(path)), sha256)
        for version_id, path, sha256 in rows
    }
    return {version_id: size for version_id, size in sizes.items() if size is not None}


_SIZES: dict[tuple[str, str], str] = {}  # (folder, digest) -> size: a version's files never change


def _folder_size(folder: str, sha256: str) -> str | None:
    """The size of the model in `folder` (its config.json, read once per folder and digest),
    None when it cannot be read — not remembered: a page may look while the version's folder
    is still being moved into place."""
    if (folder, sha256) not in _SIZES:
        try:
            _SIZES[folder, sha256] = ModelConfig.from_dict(read_config(folder)["model"]).size_name()
        except (ArtifactError, ValueError, TypeError):
            return None
    return _SIZES[folder, sha256]


def _info(
    run: TrainingRun,
    corpus_name: str | None,
    version_id: int | None,
    lost_before: datetime,
    sizes: dict[int, str],
) -> RunInfo:
    """`sizes`: the model size of the versions runs continue and made (`_version_sizes`)."""
    size = str(run.config.get("preset", ""))
    if run.init_version_id is not None:  # its version's size, or (that one deleted) its own's
        size = sizes.get(run.init_version_id) or sizes.get(version_id or 0) or size
    return record_of(
        RunInfo,
        run,
        corpus_name=corpus_name,
        status=RunStatus(run.status),
        config=dict(run.config),
        progress_detail=dict(run.progress_detail or {}),
        worker_lost=run.status == RunStatus.RUNNING
        and run.heartbeat_at is not None
        and run.heartbeat_at < lost_before,
        version_id=version_id,
        model_size=size,
    )


def _sizes_of(s: Session, runs: list[TrainingRun], versions: dict[int, int]) -> dict[int, str]:
    """The sizes `_info` needs for `runs` (`versions`: run id -> the version it made)."""
    continued = [run for run in runs if run.init_version_id is not None]
    wanted = {run.init_version_id for run in continued} | {
        versions[run.id] for run in continued if run.id in versions
    }
    return _version_sizes(s, wanted) if wanted else {}


def _lost_before() -> datetime:
    """Heartbeats older than this mean a dead worker."""
    return utcnow() - timedelta(seconds=settings.heartbeat_timeout_s())


def get_run(run_id: int) -> RunInfo:
    with session_scope() as s:
        row = s.execute(
            select(TrainingRun, Corpus.name)
            .options(defer(TrainingRun.snapshot_pair_ids))
            .outerjoin(Corpus, Corpus.id == TrainingRun.corpus_id)
            .where(TrainingRun.id == run_id)
        ).first()
        if row is None:
            raise WorkbenchError(NO_SUCH_RUN, id=run_id)
        versions = _version_ids(s, [run_id])
        sizes = _sizes_of(s, [row[0]], versions)
        return _info(row[0], row[1], versions.get(run_id), _lost_before(), sizes)


def list_runs(corpus_id: int | None = None, limit: int = 200) -> list[RunInfo]:
    """Newest first."""
    query = (
        select(TrainingRun, Corpus.name)
        .options(defer(TrainingRun.snapshot_pair_ids))  # up to 1M ids: never for a listing
        .outerjoin(Corpus, Corpus.id == TrainingRun.corpus_id)
        .order_by(TrainingRun.id.desc())
        .limit(limit)
    )
    if corpus_id is not None:
        query = query.where(TrainingRun.corpus_id == corpus_id)
    with session_scope() as s:
        rows = s.execute(query).all()
        versions = _version_ids(s, [run.id for run, _ in rows])
        sizes = _sizes_of(s, [run for run, _ in rows], versions)
        lost_before = _lost_before()
        return [_info(run, name, versions.get(run.id), lost_before, sizes) for run, name in rows]


def active_runs(corpus_id: int) -> list[tuple[int, RunStatus]]:
    """The corpus' queued and running runs (id, status), oldest first: deleting the corpus
    does not stop them (they train on its snapshot and register their versions), which the
    delete dialog says."""
    query = (
        select(TrainingRun.id, TrainingRun.status)
        .where(TrainingRun.corpus_id == corpus_id, TrainingRun.status.in_(ACTIVE_STATUSES))
        .order_by(TrainingRun.id)
    )
    with session_scope() as s:
        return [(run_id, RunStatus(status)) for run_id, status in s.execute(query)]


def runs_table(corpus_id: int | None = None, runs: list[RunInfo] | None = None) -> pd.DataFrame:
    """The run history (or the given `runs`) as a table for display: one type per column
    (text where a value may be missing), so it converts to Arrow as it is."""
    rows = [
        {
            "run": r.id,
            "corpus": r.corpus_name or "",
            "status": r.status.value,
            "preset": r.model_size,
            "budget": r.budget,
            "train time (s)": round(r.trained_s, 1) if r.trained_s is not None else math.nan,
            "device": r.device,
            "pairs": r.snapshot_size,
            "steps": r.progress_step,
            "stopped because": r.stopped_because or "",
            "version": f"#{r.version_id}" if r.version_id is not None else "",
            "created": r.created_at,
            "error": r.error or "",
        }
        for r in (list_runs(corpus_id) if runs is None else runs)
    ]
    return pd.DataFrame(rows)
