"""Train page: queue a training run, watch it learn live, cancel it, browse the history.

The Train button only inserts a run row and makes sure a worker process is alive; the worker
trains and streams its progress into the database. The live panel is a fragment that re-reads
those rows every two seconds, so closing the tab, reloading or restarting Streamlit never
stops training: the next page load picks the run up where it is.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import streamlit as st

from ui import common
from workbench import corpus, jobs, registry
from workbench.jobs import RunInfo

PRESETS = {
    "tiny": "2+2 layers, d=64: learns a few dozen pairs on a laptop CPU in about a minute",
    "small": "3+3 layers, d=256: a small domain on a CPU, or anything on a GPU",
    "base": "6+6 layers, d=512: the paper's base model; wants a GPU and many pairs",
}
STATUS_ICONS = {
    "queued": ":material/hourglass_top:",
    "running": ":material/autorenew:",
    "succeeded": ":material/check_circle:",
    "failed": ":material/error:",
    "cancelled": ":material/stop_circle:",
}
LIVE_REFRESH_S = 2
WORKER_GRACE_S = 20  # a worker just started needs a few seconds (torch import) to show up
_SEEN_ACTIVE = "train_seen_active_runs"


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
    live_panel()
    history()


# ----------------------------------------------------------------------------- new run


def new_run_form(corpora: list[Any]) -> None:
    st.subheader("New training run", anchor=False)
    top = st.columns([3, 2], gap="medium")
    with top[0]:
        current = common.corpus_picker(corpora, key="train_corpus")
    with top[1]:
        preset = st.segmented_control(
            "Model size",
            list(PRESETS),
            default="tiny",
            key="train_preset",
            help="\n".join(f"- **{k}**: {v}" for k, v in PRESETS.items()),
        )
        preset = preset or "tiny"
        st.caption(PRESETS[preset])

    cols = st.columns(3, gap="medium")
    epochs = cols[0].number_input(
        "Epochs",
        min_value=1,
        max_value=1000,
        value=None,
        step=1,
        placeholder="automatic",
        key="train_epochs",
        help="Leave empty for the automatic budget: small corpora are repeated until learned, "
        "large ones get a few passes, and training stops early once validation stops improving.",
    )
    devices = jobs.available_devices()
    device = cols[1].selectbox(
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
    init_version = cols[2].selectbox(
        "Start from version",
        [None, *by_id],
        format_func=lambda i: "— new model —" if i is None else common.version_label(by_id[i]),
        key="train_init_version",
        help="Fine-tune an existing version (same languages) instead of starting from scratch.",
    )
    with st.expander("Advanced", icon=":material/tune:"):
        adv = st.columns(2)
        max_steps = adv[0].number_input(
            "Stop after at most N steps",
            min_value=1,
            value=None,
            step=50,
            placeholder="no limit",
            key="train_max_steps",
        )
        minutes = adv[1].number_input(
            "Time budget (minutes)",
            min_value=0.5,
            value=None,
            step=1.0,
            placeholder="no limit",
            key="train_time_budget",
        )

    label = "Fine-tune" if init_version else "Train"
    if st.button(label, type="primary", icon=":material/play_arrow:", key="train_button"):
        overrides: dict[str, Any] = {}
        if max_steps:
            overrides["max_steps"] = int(max_steps)
        if minutes:
            overrides["time_budget_s"] = float(minutes) * 60
        with common.error_boundary("starting the run"):
            run_id = jobs.enqueue_training(
                current.id,
                preset=preset,
                epochs=int(epochs) if epochs else None,
                device=device,
                init_version_id=init_version,
                **overrides,
            )
            jobs.ensure_worker()
            common.flash(f"Run #{run_id} queued on {current.name}: a worker is picking it up.")
            st.rerun()


# ------------------------------------------------------------------------------ live view


@st.fragment(run_every=LIVE_REFRESH_S)
def live_panel() -> None:
    """Re-drawn every few seconds from the database; a run that ends refreshes the page."""
    with common.error_boundary("reading the run's progress"):
        runs = jobs.list_runs(limit=20)
        active = [r for r in runs if r.active]
        seen = st.session_state.get(_SEEN_ACTIVE, set())
        now_active = {r.id for r in active}
        st.session_state[_SEEN_ACTIVE] = now_active
        if seen - now_active:  # a run we were watching finished: refresh history and pickers
            st.rerun()
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
            _run_card(run)


def _age_s(run: RunInfo) -> float:
    created = run.created_at
    if created.tzinfo is None:  # SQLite hands back naive UTC datetimes
        created = created.replace(tzinfo=UTC)
    return (datetime.now(UTC) - created).total_seconds()


def _run_card(run: RunInfo) -> None:
    with st.container(border=True):
        title = st.columns([4, 1], vertical_alignment="center")
        preset = run.config.get("preset", "?")
        resumed = f" · attempt {run.attempts} of {jobs.MAX_ATTEMPTS}" if run.attempts > 1 else ""
        title[0].markdown(
            f"**{STATUS_ICONS.get(run.status, '')} Run #{run.id}** · {run.corpus_name} · "
            f"{preset} · {run.device} · {run.snapshot_size:,} pairs · _{run.status}_{resumed}"
        )
        if run.cancel_requested:
            title[1].button("Cancelling…", disabled=True, key=f"cancel_{run.id}", width="stretch")
        elif title[1].button(
            "Cancel", icon=":material/stop:", key=f"cancel_{run.id}", width="stretch"
        ):
            with common.error_boundary("cancelling the run"):
                jobs.cancel_run(run.id)
                st.rerun()
        if run.note:  # e.g. a re-queued run: its worker died, the next one resumes it
            st.caption(run.note)
        if run.status == "queued":
            st.caption("Waiting for the worker…")
            return
        total = run.progress_total
        text = (
            f"step {run.progress_step:,} of {total:,} · {100 * run.fraction_done:.0f} %"
            if total
            else "preparing: tokenizers and model…"
        )
        st.progress(run.fraction_done, text=text)
        metrics = jobs.run_metrics(run.id)
        last = metrics.iloc[-1] if not metrics.empty else None
        cells = st.columns(4)
        cells[0].metric("ETA", common.fmt_duration(run.eta_s) if total else "—")
        cells[1].metric("Tokens / s", f"{last['tokens_per_s']:,.0f}" if last is not None else "—")
        cells[2].metric(
            "Training loss", common.fmt_number(last["train_loss"]) if last is not None else "—"
        )
        valid = metrics["valid_loss"].dropna() if last is not None else None
        cells[3].metric(
            "Validation loss",
            common.fmt_number(valid.iloc[-1]) if valid is not None and len(valid) else "—",
        )
        if metrics.empty:
            return
        common.curves(metrics)


def _last_outcome(runs: list[RunInfo]) -> None:
    if not runs:
        st.info("No run yet. Pick a corpus above and click **Train**.", icon=":material/info:")
        return
    last = runs[0]
    if last.status == "succeeded" and last.version_id is not None:
        left, right = st.columns([4, 1], vertical_alignment="center")
        left.success(
            f"Run #{last.id} finished: version #{last.version_id} is ready.",
            icon=":material/check_circle:",
        )
        right.page_link(common.TRANSLATE_PAGE, label="Translate", icon=":material/translate:")
    elif last.status == "failed":
        st.error(f"Run #{last.id} failed: {last.error}", icon=":material/error:")
    elif last.status == "cancelled":
        st.info(f"Run #{last.id} was cancelled. No run in progress.", icon=":material/info:")
    else:
        st.info("No run in progress.", icon=":material/info:")


# -------------------------------------------------------------------------------- history


def history() -> None:
    st.subheader("History", anchor=False)
    table = jobs.runs_table()
    if not table.empty:  # runs in progress are in the live panel above
        table = table[~table["status"].isin(jobs.ACTIVE_STATUSES)]
    if table.empty:
        st.caption("Finished runs will be listed here.")
        return
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config={
            "run": st.column_config.NumberColumn("run", format="#%d", width="small"),
            "version": st.column_config.NumberColumn("version", format="#%d", width="small"),
            "pairs": st.column_config.NumberColumn("pairs", format="localized"),
            "created": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm"),
            "error": st.column_config.TextColumn("error", width="large"),
        },
    )
    with st.expander("Curves of a past run", icon=":material/show_chart:"):
        run_id = st.selectbox(
            "Run", table["run"].tolist(), format_func=lambda i: f"#{i}", key="history_run"
        )
        metrics = jobs.run_metrics(int(run_id))
        if metrics.empty:
            st.caption("This run recorded no progress.")
        else:
            common.curves(metrics)


if __name__ == "__main__":
    common.run_page(render)
