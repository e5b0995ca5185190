"""The Train page's live panel: the runs in progress, re-drawn from the database every few
seconds, and how the last one ended.

It is a fragment that re-reads only what changed (less often while nothing changes, and not
at all while no run is in progress: an open tab costs nothing then), so closing the tab,
reloading or restarting Streamlit never stops training: the next page load picks the run up
where it is.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import streamlit as st

from ui import charts, feedback, formatting, navigation
from ui.i18n import N_, _, localized, n_, translate
from ui.signin import can
from workbench import settings, worker_lock
from workbench.team.access import Permission
from workbench.training import metric_rows, run_folders, run_info, runs, worker_process
from workbench.training.run_info import RunInfo
from workbench.training.runs import RunStatus

STATUS_ICONS = {
    RunStatus.QUEUED: ":material/hourglass_top:",
    RunStatus.RUNNING: ":material/autorenew:",
    RunStatus.SUCCEEDED: ":material/check_circle:",
    RunStatus.FAILED: ":material/error:",
    RunStatus.CANCELLED: ":material/stop_circle:",
}
STATUS_LABELS = {
    RunStatus.QUEUED: N_("queued"),
    RunStatus.RUNNING: N_("running"),
    RunStatus.SUCCEEDED: N_("succeeded"),
    RunStatus.FAILED: N_("failed"),
    RunStatus.CANCELLED: N_("cancelled"),
}
LIVE_REFRESH_S = 2  # while the runs move
IDLE_REFRESH_S = 10  # once nothing has changed for IDLE_AFTER_S
# While no run is queued or running the panel is not refreshed (None: no timer): a tab left
# open on Train does no work. A run queued here (Train, Resume) reruns the page, which arms the
# timer again (``refresh_interval``); one queued elsewhere (the CLI, another tab) shows at the
# page's next run.
NO_REFRESH = None
IDLE_AFTER_S = 10
PREPARING = N_("tokenizers and model")  # before the worker names what it prepares
WORKER_GRACE_S = 20  # a worker just started needs a few seconds (torch import) to show up
# A worker writes every couple of seconds: this long without a write, the card says so (a
# killed worker is taken for dead only after the heartbeat timeout, 90 s by default).
SILENT_AFTER_S = 10
_LIVE = "train_live_state"


def status_label(status: RunStatus) -> str:
    """A run's status in the session's language."""
    return translate(STATUS_LABELS.get(status, str(status)))


def auto_label(value: str) -> str:
    """A run's preset or device as the page shows it: "auto" (a stored value) in the
    session's language, others (a preset's or device's name) as they are."""
    return _("automatic") if value == "auto" else value


def live_state() -> dict[str, Any]:
    """What the live panel remembers between refreshes (this browser tab only)."""
    return st.session_state.setdefault(
        _LIVE,
        {
            "interval": NO_REFRESH,  # the first run arms the timer if a run is in progress
            "seen": None,  # what the runs looked like at the last refresh
            "changed_at": time.monotonic(),
            "active": set(),  # runs in progress at the last refresh
            "queued": set(),  # those of them that waited for a worker
            "metrics": {},  # run id -> its metric rows read so far
        },
    )


def refresh_interval() -> float | None:
    """The panel's timer for this page run: its pace while runs move; after it stopped, the
    quick pace again when a run is in progress now (queued here, or elsewhere), armed in this
    very run (arming it by a rerun would drop the messages the page shows once)."""
    state = live_state()
    if state["interval"] is NO_REFRESH and any(r.active for r in run_info.list_runs(limit=20)):
        state["interval"] = LIVE_REFRESH_S
    return state["interval"]


def live_panel() -> None:
    """Re-drawn from the database every few seconds; a run that starts or ends refreshes the
    page.

    Each refresh reads the run rows and only the metric rows written since the last one.
    While nothing changes (a run waits for a worker, or validates for minutes) the refreshes
    slow down to IDLE_REFRESH_S, and speed up again on a change; with no run in progress
    they stop.
    Reading changes nothing: a run whose worker was lost is taken back explicitly, so it
    waits for a worker (and says so) instead of looking as if it still ran.
    """
    with feedback.error_boundary(N_("reading the run's progress")):
        state = live_state()
        recent = run_info.list_runs(limit=20)
        if any(r.worker_lost for r in recent) and runs.reap_stale_runs():
            recent = run_info.list_runs(limit=20)
        active = [r for r in recent if r.active]
        now_active = {r.id for r in active}
        now_queued = {r.id for r in active if r.status == RunStatus.QUEUED}
        finished = state["active"] - now_active
        started = state["queued"] & (now_active - now_queued)
        state["active"], state["queued"] = now_active, now_queued
        state["metrics"] = {
            run_id: rows for run_id, rows in state["metrics"].items() if run_id in now_active
        }
        # A run we were watching ended (refresh history and pickers) or started (the page's
        # "Run #N queued: a worker is picking it up." would say so beside the running card)
        if finished or started:
            if not now_active:
                state["interval"] = NO_REFRESH  # that rerun arms no timer
            st.rerun()
        _pace(state, recent, active)
        if not active:
            _last_outcome(recent)
            return
        waiting = [r for r in active if r.status == RunStatus.QUEUED]
        late = waiting and _seconds_since(waiting[-1].created_at) > WORKER_GRACE_S
        if late and not worker_lock.worker_alive():
            left, right = st.columns([4, 1], vertical_alignment="center")
            left.warning(
                _("No worker is running on this machine, so the queued run is waiting."),
                icon=":material/warning:",
            )
            if right.button(_("Start worker"), key="start_worker"):
                worker_process.ensure_worker()
                st.rerun()
        for run in active:
            metrics = metric_rows.follow_metrics(run.id, state["metrics"].get(run.id))
            state["metrics"][run.id] = metrics
            _run_card(run, metrics)


def _pace(state: dict[str, Any], recent: list[RunInfo], active: list[RunInfo]) -> None:
    """Back off while nothing changes; go back to the quick pace on the first change; stop
    while no run is in progress. A new pace takes a page rerun: only then does Streamlit
    re-arm the fragment's timer."""
    seen = (
        recent[0].id if recent else None,
        [_moves(r) for r in active],
    )
    now = time.monotonic()
    if seen != state["seen"]:
        state["seen"], state["changed_at"] = seen, now
    if not active:
        pace = NO_REFRESH
    elif now - state["changed_at"] < IDLE_AFTER_S:
        pace = LIVE_REFRESH_S
    else:
        pace = IDLE_REFRESH_S
    if pace != state["interval"]:
        state["interval"] = pace
        st.rerun()


def _moves(run: RunInfo) -> tuple[Any, ...]:
    """What changes while a run moves (a change brings the quick pace back)."""
    detail = run.progress_detail.get("preparing")
    return (run.id, run.status, run.progress_step, detail, run.cancel_requested, run.attempts)


def _seconds_since(moment: datetime) -> float:
    if moment.tzinfo is None:  # SQLite hands back naive UTC datetimes
        moment = moment.replace(tzinfo=UTC)
    return (datetime.now(UTC) - moment).total_seconds()


def _run_card(run: RunInfo, metrics: pd.DataFrame) -> None:
    with st.container(border=True):
        title = st.columns([4, 1], vertical_alignment="center")
        head = _(
            "**{icon} Run #{id}** · {corpus} · {preset} · {device} · budget: {budget} · _{status}_",
            icon=STATUS_ICONS.get(run.status, ""),
            id=run.id,
            corpus=run.corpus_name,
            preset=auto_label(run.model_size),
            device=auto_label(run.device),
            budget=localized(run.budget),
            status=status_label(run.status),
        )
        if run.attempts > 1:
            head = _("{head} · attempt {n}", head=head, n=run.attempts)
        title[0].markdown(head)
        if run.cancel_requested:
            title[1].button(
                _("Cancelling…"), disabled=True, key=f"cancel_{run.id}", width="stretch"
            )
        elif can(Permission.TRAIN) and title[1].button(
            _("Cancel"), icon=":material/stop:", key=f"cancel_{run.id}", width="stretch"
        ):
            with feedback.error_boundary(N_("cancelling the run")):
                runs.cancel_run(run.id)
                st.rerun()
        st.caption(
            n_(
                "{n} pair in the snapshot (training + validation) · started by {who}",
                "{n} pairs in the snapshot (training + validation) · started by {who}",
                run.snapshot_size,
                who=run.started_by,
            )
            if run.started_by
            else n_(
                "{n} pair in the snapshot (training + validation)",
                "{n} pairs in the snapshot (training + validation)",
                run.snapshot_size,
            )
        )
        if run.note:  # e.g. a re-queued run: its worker died, the next one resumes it
            st.caption(localized(run.note))
        if run.resumes_from:
            st.caption(localized(run.resumes_from))
        if run.layout:
            st.caption(localized(run.layout))
        if run.precision:
            st.caption(localized(run.precision))
        for words in run.pace:
            st.caption(localized(words))
        if run.status == RunStatus.QUEUED:
            st.caption(_("Waiting for the worker…"))
            return
        _silence(run, metrics)
        if not run.progress_total:  # no step yet: what it prepares, not empty tiles
            _preparing(run)
            return
        st.progress(run.fraction_done, text=_progress_text(run))
        rule = run.early_stop_rule
        if rule:
            st.caption(localized(rule))
        cells = st.columns(4)
        eta = formatting.fmt_duration(run.eta_s)
        cells[0].metric(
            _("ETA"),
            f"≤ {eta}" if rule else eta,
            help=_("At most this long: the run may stop sooner (see above).") if rule else None,
        )
        losses = charts.training_losses(metrics)["train_loss"]
        speed = _speed(run, metrics)
        cells[1].metric(
            _("Tokens / s"),
            formatting.fmt_number(speed, 0) if speed else "—",
            help=_("The average since this attempt started, validations included."),
        )
        cells[2].metric(
            _("Training loss"), formatting.fmt_number(losses.iloc[-1]) if len(losses) else "—"
        )
        valid = metrics.loc[metrics["kind"].eq("epoch"), "valid_loss"].dropna()
        cells[3].metric(
            _("Validation loss"), formatting.fmt_number(valid.iloc[-1]) if len(valid) else "—"
        )
        if not metrics.empty:
            charts.curves(metrics)


def _silence(run: RunInfo, metrics: pd.DataFrame) -> None:
    """Say so as soon as a running run's worker stops writing, and where the run would go
    on: a killed worker's card looked alive (ETA, tokens/s) until the heartbeat timeout. The
    step is the reaper's (``runs.reap_stale_runs``: its last epoch row, where a checkpoint is
    saved), read from the database: a worker on another machine keeps its checkpoints on its
    own disk."""
    silent = run.silent_s()
    if silent is None or silent < SILENT_AFTER_S:
        return
    words = _("No update from the worker for {seconds} s.", seconds=formatting.fmt_int(silent))
    epochs = metrics.loc[metrics["kind"].eq("epoch"), "step"].dropna()
    step = int(epochs.max()) if len(epochs) else 0
    timeout = formatting.fmt_int(settings.heartbeat_timeout_s())
    then = (
        _(
            "If it has stopped, the run goes back to the queue {timeout} s after its last "
            "update and starts again from step 0: no checkpoint was saved yet.",
            timeout=timeout,
        )
        if not step
        else _(
            "If it has stopped, the run goes back to the queue {timeout} s after its last "
            "update and resumes from step {step}, its last checkpoint.",
            timeout=timeout,
            step=formatting.fmt_int(step),
        )
    )
    st.warning(f"{words} {then}", icon=":material/warning:")


def _speed(run: RunInfo, metrics: pd.DataFrame) -> float | None:
    """The run's average speed (`RunInfo.tokens_per_s`); for rows written before the trainer
    reported it, the latest speed a metric row carries (a run of epochs shorter than the
    clock's progress interval has no 'step' row: its epoch ends measure it)."""
    if run.tokens_per_s:
        return run.tokens_per_s
    speed = metrics["tokens_per_s"].where(metrics["tokens_per_s"] > 0).dropna()
    return float(speed.iloc[-1]) if len(speed) else None


def _preparing(run: RunInfo) -> None:
    """A run claimed by its worker, before its first step (reading its corpus, timing the
    layouts, training the tokenizers: seconds to a minute): what it does now, and for how
    long it has been preparing, with a spinner while the panel follows it."""
    phase = run.progress_detail.get("preparing") or PREPARING
    since = run.started_at or run.created_at
    st.status(
        _(
            "Preparing: {phase}… ({elapsed} so far)",
            phase=translate(phase),
            elapsed=formatting.fmt_duration(_seconds_since(since)),
        ),
        state="running",
    )


def _progress_text(run: RunInfo) -> str:
    """Progress against what will end the run: the clock under a time budget, the tokens
    under a token budget, else the step budget ('at most' when an early-stopping rule may
    end it sooner)."""
    steps = {
        "step": formatting.fmt_int(run.progress_step),
        "total": formatting.fmt_int(run.progress_total),
        "percent": f"{formatting.fmt_number(100 * run.fraction_done, 0)} %",
    }
    about = _("step {step} of about {total} · {percent}", **steps)
    budget, tokens = run.time_budget_s, run.tokens_done
    if run.limit == "time" and budget:
        return _(
            "{done} of {budget} · {about}",
            done=formatting.fmt_duration(run.fraction_done * budget),
            budget=formatting.fmt_duration(budget),
            about=about,
        )
    if run.limit == "tokens" and tokens is not None and run.token_budget:
        return _(
            "{done} of {budget} tokens · {about}",
            done=run_info.format_tokens(tokens),
            budget=run_info.format_tokens(run.token_budget),
            about=about,
        )
    if run.early_stop_rule:
        return _("step {step} of at most {total} · {percent}", **steps)
    return _("step {step} of {total} · {percent}", **steps)


def _outcome(run: RunInfo) -> str:
    """How a finished run ended, in one sentence."""
    step = formatting.fmt_int(run.progress_step)
    if run.status == RunStatus.SUCCEEDED:
        ready = (
            _("Run #{id} finished: version #{version} is ready.", id=run.id, version=run.version_id)
            if run.version_id
            else _("Run #{id} finished: no version.", id=run.id)
        )
        stopped = (
            _(
                "It stopped at step {step}: {reason}.",
                step=step,
                reason=localized(run.stopped_because),
            )
            if run.stopped_because
            else _("It stopped at step {step}.", step=step)
        )
        return f"{ready} {stopped}"
    if run.status == RunStatus.FAILED:
        return _("Run #{id} failed: {error}", id=run.id, error=run.error)
    if run.status == RunStatus.CANCELLED:
        if run.progress_step:
            return _("Run #{id} was cancelled at step {step}.", id=run.id, step=step)
        return _("Run #{id} was cancelled.", id=run.id)
    return _("Run #{id} is {status}.", id=run.id, status=status_label(run.status))


def _last_outcome(recent: list[RunInfo]) -> None:
    if not recent:
        st.info(_("No run yet. Pick a corpus above and click **Train**."), icon=":material/info:")
        return
    last = recent[0]
    left, right = st.columns([4, 1], vertical_alignment="center")
    if last.status == RunStatus.SUCCEEDED and last.version_id is not None:
        left.success(_outcome(last), icon=":material/check_circle:")
        with right:
            navigation.link(navigation.TRANSLATE, navigation.TRANSLATE.label)
    elif last.status == RunStatus.FAILED:
        left.error(_outcome(last), icon=":material/error:")
        with right:
            resume_button(last, key="resume_last")
    elif last.status == RunStatus.CANCELLED:
        left.info(
            _("{outcome} No run in progress.", outcome=_outcome(last)), icon=":material/info:"
        )
        with right:
            resume_button(last, key="resume_last")
    else:
        left.info(_("No run in progress."), icon=":material/info:")


def resume_button(run: RunInfo, key: str) -> None:
    """'Resume from step N' for a failed or cancelled run that left a checkpoint."""
    if run.status not in runs.RESUMABLE_STATUSES or not can(Permission.TRAIN):
        return
    step = run_folders.checkpoint_step(run.id)
    if step is None:
        return
    if st.button(
        _("Resume from step {step}", step=formatting.fmt_int(step)),
        icon=":material/play_arrow:",
        key=key,
        width="stretch",
        help=_("Train on from the run's last checkpoint (saved at the end of each epoch)."),
    ):
        with feedback.error_boundary(N_("resuming the run")):
            runs.resume_run(run.id)
            worker_process.ensure_worker()
            feedback.flash(
                _(
                    "Run #{id} resumes from step {step}: a worker is picking it up.",
                    id=run.id,
                    step=formatting.fmt_int(step),
                )
            )
            st.rerun()
