"""Train page: queue a training run, watch it learn live, cancel, resume or delete it, browse
the history.

The Train button only inserts a run row and makes sure a worker process is alive; the worker
trains and streams its progress into the database. The live panel is a fragment that re-reads
what changed every couple of seconds (less often while nothing changes), so closing the tab,
reloading or restarting Streamlit never stops training: the next page load picks the run up
where it is.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import streamlit as st

from ui import common
from workbench import corpus, jobs, registry
from workbench.jobs import RunInfo

STATUS_ICONS = {
    "queued": ":material/hourglass_top:",
    "running": ":material/autorenew:",
    "succeeded": ":material/check_circle:",
    "failed": ":material/error:",
    "cancelled": ":material/stop_circle:",
}
TRAIN_FOR = {"auto": "automatic", "epochs": "N epochs", "minutes": "N minutes"}
LIVE_REFRESH_S = 2  # while the runs move
IDLE_REFRESH_S = 10  # once nothing has changed for IDLE_AFTER_S
IDLE_AFTER_S = 10
WORKER_GRACE_S = 20  # a worker just started needs a few seconds (torch import) to show up
_LIVE = "train_live_state"


def render() -> None:
    common.page_header(
        "Train",
        "Train a Transformer on a corpus. Training runs in a background worker: you can leave "
        "this page, reload it or restart the app.",
    )
    corpora = corpus.list_corpora()
    if not corpora:
        st.info("No corpus yet: create one and add pairs on the Corpus page first.")
        st.page_link(common.CORPUS_PAGE, label="Go to Corpus", icon=":material/dataset:")
        return

    with st.container(border=True):
        new_run_form(corpora)
    # Streamlit arms a fragment's timer when the whole page runs: the panel's interval is
    # chosen here, and the panel reruns the page when it should change (see _live_state).
    st.fragment(live_panel, run_every=_live_state()["interval"])()
    history()


# ----------------------------------------------------------------------------- new run


def new_run_form(corpora: list[Any]) -> None:
    st.subheader("New training run", anchor=False)
    top = st.columns([3, 2], gap="medium")
    with top[0]:
        current = common.corpus_picker(corpora, key="train_corpus")
    with top[1]:
        presets = jobs.presets()
        preset = st.segmented_control(
            "Model size",
            list(presets),
            default=jobs.DEFAULT_PRESET,
            key="train_preset",
            help="\n".join(f"- **{k}**: {v}" for k, v in presets.items()),
        )
        preset = preset or jobs.DEFAULT_PRESET
        st.caption(presets.get(preset, ""))

    cols = st.columns([2, 1, 1, 2], gap="medium", vertical_alignment="bottom")
    train_for = cols[0].segmented_control(
        "Train for",
        list(TRAIN_FOR),
        default="auto",
        format_func=TRAIN_FOR.get,
        key="train_for",
        help="**automatic**: small corpora are repeated until learned, large ones get a few "
        "passes, and training stops early once validation stops improving. **N epochs**: "
        "that many passes over the corpus. **N minutes**: as much as fits in that time; "
        "progress and ETA follow the clock.",
    )
    epochs = minutes = None
    if train_for == "epochs":
        epochs = cols[1].number_input(
            "Epochs", min_value=1, max_value=1000, value=10, step=1, key="train_epochs"
        )
    elif train_for == "minutes":
        minutes = cols[1].number_input(
            "Minutes",
            min_value=0.5,
            max_value=float(jobs.MAX_TRAIN_MINUTES),
            value=10.0,
            step=1.0,
            key="train_minutes",
        )
    devices = jobs.available_devices()
    device = cols[2].selectbox(
        "Device",
        devices,
        key="train_device",
        format_func=lambda d: {"cuda": "GPU (cuda)", "cpu": "CPU"}.get(d, d),
        help="Only the devices this machine has are listed.",
    )
    versions = [
        v
        for v in registry.list_versions()
        if (v.src_lang, v.tgt_lang) == (current.src_lang, current.tgt_lang)
    ]
    by_id = {v.id: v for v in versions}
    init_version = cols[3].selectbox(
        "Start from version",
        [None, *by_id],
        format_func=lambda i: "— new model —" if i is None else common.version_label(by_id[i]),
        key="train_init_version",
        help="Fine-tune an existing version (same languages) instead of starting from scratch.",
    )
    with st.expander("Advanced", icon=":material/tune:"):
        max_steps = st.number_input(
            "Stop after at most N steps",
            min_value=1,
            value=None,
            step=50,
            placeholder="no limit",
            key="train_max_steps",
        )

    label = "Fine-tune" if init_version else "Train"
    if st.button(label, type="primary", icon=":material/play_arrow:", key="train_button"):
        overrides: dict[str, Any] = {"max_steps": int(max_steps)} if max_steps else {}
        with common.error_boundary("starting the run"):
            run_id = jobs.enqueue_training(
                current.id,
                preset=preset,
                epochs=int(epochs) if epochs else None,
                minutes=float(minutes) if minutes else None,
                device=device,
                init_version_id=init_version,
                **overrides,
            )
            jobs.ensure_worker()
            common.flash(f"Run #{run_id} queued on {current.name}: a worker is picking it up.")
            st.rerun()


# ------------------------------------------------------------------------------ live view


def _live_state() -> dict[str, Any]:
    """What the live panel remembers between refreshes (this browser tab only)."""
    return st.session_state.setdefault(
        _LIVE,
        {
            "interval": LIVE_REFRESH_S,
            "seen": None,  # what the runs looked like at the last refresh
            "changed_at": time.monotonic(),
            "active": set(),  # runs in progress at the last refresh
            "metrics": {},  # run id -> its metric rows read so far
        },
    )


def live_panel() -> None:
    """Re-drawn from the database every few seconds; a run that ends refreshes the page.

    Each refresh reads the run rows and only the metric rows written since the last one.
    While nothing changes (a run waits for a worker, validates for minutes, or none is in
    progress) the refreshes slow down to IDLE_REFRESH_S, and speed up again on a change.
    """
    with common.error_boundary("reading the run's progress"):
        state = _live_state()
        runs = jobs.list_runs(limit=20)
        active = [r for r in runs if r.active]
        now_active = {r.id for r in active}
        finished = state["active"] - now_active
        state["active"] = now_active
        state["metrics"] = {
            run_id: rows for run_id, rows in state["metrics"].items() if run_id in now_active
        }
        if finished:  # a run we were watching ended: refresh history and pickers
            st.rerun()
        _pace(state, runs, active)
        if not active:
            _last_outcome(runs)
            return
        waiting = [r for r in active if r.status == "queued"]
        if waiting and _age_s(waiting[-1]) > WORKER_GRACE_S and not jobs.worker_alive():
            left, right = st.columns([4, 1], vertical_alignment="center")
            left.warning(
                "No worker is running on this machine, so the queued run is waiting.",
                icon=":material/warning:",
            )
            if right.button("Start worker", key="start_worker"):
                jobs.ensure_worker()
                st.rerun()
        for run in active:
            metrics = jobs.follow_metrics(run.id, state["metrics"].get(run.id))
            state["metrics"][run.id] = metrics
            _run_card(run, metrics)


def _pace(state: dict[str, Any], runs: list[RunInfo], active: list[RunInfo]) -> None:
    """Back off while nothing changes; go back to the quick pace on the first change. A new
    pace takes a page rerun: only then does Streamlit re-arm the fragment's timer."""
    seen = (
        runs[0].id if runs else None,
        [(r.id, r.status, r.progress_step, r.cancel_requested, r.attempts) for r in active],
    )
    now = time.monotonic()
    if seen != state["seen"]:
        state["seen"], state["changed_at"] = seen, now
    pace = LIVE_REFRESH_S if now - state["changed_at"] < IDLE_AFTER_S else IDLE_REFRESH_S
    if pace != state["interval"]:
        state["interval"] = pace
        st.rerun()


def _age_s(run: RunInfo) -> float:
    created = run.created_at
    if created.tzinfo is None:  # SQLite hands back naive UTC datetimes
        created = created.replace(tzinfo=UTC)
    return (datetime.now(UTC) - created).total_seconds()


def _run_card(run: RunInfo, metrics: pd.DataFrame) -> None:
    with st.container(border=True):
        title = st.columns([4, 1], vertical_alignment="center")
        preset = run.config.get("preset", "?")
        resumed = f" · attempt {run.attempts}" if run.attempts > 1 else ""
        title[0].markdown(
            f"**{STATUS_ICONS.get(run.status, '')} Run #{run.id}** · {run.corpus_name} · "
            f"{preset} · {run.device} · budget: {run.budget} · _{run.status}_{resumed}"
        )
        if run.cancel_requested:
            title[1].button("Cancelling…", disabled=True, key=f"cancel_{run.id}", width="stretch")
        elif title[1].button(
            "Cancel", icon=":material/stop:", key=f"cancel_{run.id}", width="stretch"
        ):
            with common.error_boundary("cancelling the run"):
                jobs.cancel_run(run.id)
                st.rerun()
        st.caption(
            f"{common.plural(run.snapshot_size, 'pair')} in the snapshot (training + validation)"
        )
        if run.note:  # e.g. a re-queued run: its worker died, the next one resumes it
            st.caption(run.note)
        if run.status == "queued":
            st.caption("Waiting for the worker…")
            return
        total = run.progress_total
        st.progress(run.fraction_done, text=_progress_text(run) if total else None)
        if not total:
            st.caption("Preparing: tokenizers and model…")
        rule = run.early_stop_rule
        if rule:
            st.caption(rule)
        cells = st.columns(4)
        eta = common.fmt_duration(run.eta_s) if total else "—"
        cells[0].metric(
            "ETA",
            f"≤ {eta}" if rule and total else eta,
            help="At most this long: the run may stop sooner (see above)." if rule else None,
        )
        steps = metrics[metrics["kind"].eq("step")]
        last = steps.iloc[-1] if not steps.empty else None
        cells[1].metric("Tokens / s", f"{last['tokens_per_s']:,.0f}" if last is not None else "—")
        cells[2].metric(
            "Training loss", common.fmt_number(last["train_loss"]) if last is not None else "—"
        )
        valid = metrics.loc[metrics["kind"].eq("epoch"), "valid_loss"].dropna()
        cells[3].metric("Validation loss", common.fmt_number(valid.iloc[-1]) if len(valid) else "—")
        if not metrics.empty:
            common.curves(metrics)


def _progress_text(run: RunInfo) -> str:
    """Progress against what will end the run: the clock under a time budget, else the step
    budget ('at most' when an early-stopping rule may end it sooner)."""
    percent = f"{100 * run.fraction_done:.0f} %"
    budget = run.time_budget_s
    if run.time_limited and budget:
        return (
            f"{common.fmt_duration(run.fraction_done * budget)} of "
            f"{common.fmt_duration(budget)} · step {run.progress_step:,} of about "
            f"{run.progress_total:,} · {percent}"
        )
    bound = "at most " if run.early_stop_rule else ""
    return f"step {run.progress_step:,} of {bound}{run.progress_total:,} · {percent}"


def _outcome(run: RunInfo) -> str:
    """How a finished run ended, in one sentence."""
    if run.status == "succeeded":
        ready = f"version #{run.version_id} is ready" if run.version_id else "no version"
        why = f": {run.stopped_because}" if run.stopped_because else ""
        return f"Run #{run.id} finished: {ready}. It stopped at step {run.progress_step:,}{why}."
    if run.status == "failed":
        return f"Run #{run.id} failed: {run.error}"
    if run.status == "cancelled":
        at = f" at step {run.progress_step:,}" if run.progress_step else ""
        return f"Run #{run.id} was cancelled{at}."
    return f"Run #{run.id} is {run.status}."


def _last_outcome(runs: list[RunInfo]) -> None:
    if not runs:
        st.info("No run yet. Pick a corpus above and click **Train**.", icon=":material/info:")
        return
    last = runs[0]
    left, right = st.columns([4, 1], vertical_alignment="center")
    if last.status == "succeeded" and last.version_id is not None:
        left.success(_outcome(last), icon=":material/check_circle:")
        right.page_link(common.TRANSLATE_PAGE, label="Translate", icon=":material/translate:")
    elif last.status == "failed":
        left.error(_outcome(last), icon=":material/error:")
        with right:
            _resume_button(last, key="resume_last")
    elif last.status == "cancelled":
        left.info(_outcome(last) + " No run in progress.", icon=":material/info:")
        with right:
            _resume_button(last, key="resume_last")
    else:
        left.info("No run in progress.", icon=":material/info:")


def _resume_button(run: RunInfo, key: str) -> None:
    """'Resume from step N' for a failed or cancelled run that left a checkpoint."""
    if run.status not in jobs.RESUMABLE_STATUSES:
        return
    step = jobs.checkpoint_step(run.id)
    if step is None:
        return
    if st.button(
        f"Resume from step {step:,}",
        icon=":material/play_arrow:",
        key=key,
        width="stretch",
        help="Train on from the run's last checkpoint (saved at the end of each epoch).",
    ):
        with common.error_boundary("resuming the run"):
            jobs.resume_run(run.id)
            jobs.ensure_worker()
            common.flash(f"Run #{run.id} resumes from step {step:,}: a worker is picking it up.")
            st.rerun()


# -------------------------------------------------------------------------------- history


def history() -> None:
    st.subheader("History", anchor=False)
    runs = {r.id: r for r in jobs.list_runs() if not r.active}  # active: in the panel above
    if not runs:
        st.caption("Finished runs will be listed here.")
        return
    st.dataframe(
        jobs.runs_table(runs=list(runs.values())),
        hide_index=True,
        width="stretch",
        column_config={
            "run": st.column_config.NumberColumn("run", format="#%d", width="small"),
            "pairs": st.column_config.NumberColumn(
                "pairs", format="localized", help="Training + validation pairs in the snapshot"
            ),
            "steps": st.column_config.NumberColumn("steps", format="localized"),
            "version": st.column_config.TextColumn("version", width="small"),
            "created": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm"),
            "error": st.column_config.TextColumn("error", width="large"),
        },
    )
    with st.container(border=True):
        cols = st.columns([3, 1, 1], vertical_alignment="bottom")
        run_id = cols[0].selectbox(
            "Run",
            list(runs),
            format_func=lambda i: f"#{i} · {runs[i].status} · {runs[i].corpus_name or '—'}",
            key="history_run",
        )
        run = runs[run_id]
        with cols[1]:
            _resume_button(run, key="resume_run")
        if cols[2].button("Delete…", icon=":material/delete:", key="delete_run", width="stretch"):
            common.ask_confirmation("delete_run")
        kept = f" Version #{run.version_id} it trained is kept." if run.version_id else ""
        common.confirmation_dialog(
            "delete_run",
            "Delete run",
            f"Delete run **#{run.id}**, its progress rows and its checkpoint? This cannot be "
            f"undone.{kept}",
            "Delete run",
            lambda: _delete(run.id),
        )
        if run.stopped_because:
            st.caption(f"Stopped at step {run.progress_step:,}: {run.stopped_because}.")
        elif run.error:
            st.caption(f"Failed: {run.error}")
        metrics = jobs.run_metrics(run.id)
        if metrics.empty:
            st.caption("This run recorded no progress.")
        else:
            common.curves(metrics)


def _delete(run_id: int) -> str:
    jobs.delete_run(run_id)
    return f"Deleted run #{run_id}."


if __name__ == "__main__":
    common.run_page(render)
