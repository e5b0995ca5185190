"""Train page: queue a training run, watch it learn live, cancel, resume or delete it, browse
the history.

The Train button only inserts a run row and makes sure a worker process is alive; the worker
trains and streams its progress into the database, which the live panel (``ui.live_runs``)
shows. Every choice of the form comes from ``workbench.training.train_options``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import streamlit as st

from ui import charts, dialogs, feedback, formatting, live_runs, navigation, pickers
from ui.i18n import N_, _, localized, translate
from ui.signin import can
from workbench.corpus import corpora
from workbench.models import registry
from workbench.team.access import Permission
from workbench.training import (
    continuation,
    metric_rows,
    run_info,
    runs,
    train_options,
    worker_process,
)


def render() -> None:
    all_corpora = corpora.list_corpora()
    if not all_corpora:
        feedback.empty_state(
            _("No corpus yet: create one and add pairs on the Corpus page first."),
            go_to=navigation.CORPUS,
        )
        return

    if can(Permission.TRAIN):
        with st.container(border=True):
            new_run_form(all_corpora)
    # Streamlit arms a fragment's timer when the whole page runs: the panel's interval is
    # chosen here, and the panel reruns the page when it should change (see live_state).
    st.fragment(live_runs.live_panel, run_every=live_runs.refresh_interval())()
    history()


# ----------------------------------------------------------------------------- new run

NEW_MODEL = "new"  # the start choice that is no version
# The number a "Train for" budget asks for: (label, first value, step; whole numbers for
# epochs); its widget key is ``train_<budget>``. The automatic budget asks for none.
BUDGET_INPUTS: dict[str, tuple[str, int | float, int | float]] = {
    "epochs": (N_("Epochs"), 10, 1),
    "minutes": (N_("Minutes"), 10.0, 1.0),
}


def new_run_form(all_corpora: list[Any]) -> None:
    st.subheader(_("New training run"), anchor=False)
    top = st.columns([3, 2], gap="medium")
    with top[0]:
        current = pickers.corpus_picker(all_corpora, key="train_corpus")
    with top[1]:
        presets = train_options.presets()
        preset = st.segmented_control(
            _("Model size"),
            list(presets),
            default=train_options.DEFAULT_PRESET,
            format_func={p: live_runs.auto_label(p) for p in presets}.__getitem__,
            key="train_preset",
            help="\n".join(f"- **{k}**: {localized(v)}" for k, v in presets.items()),
        )
        preset = preset or train_options.DEFAULT_PRESET
        st.caption(localized(presets.get(preset, "")))

    cols = st.columns([2, 1, 1], gap="medium", vertical_alignment="bottom")
    train_for = cols[0].segmented_control(
        _("Train for"),
        [b for b in train_options.BUDGETS if b not in train_options.ADVANCED_BUDGETS],
        default="auto",
        format_func={b: localized(t) for b, t in train_options.BUDGETS.items()}.__getitem__,
        key="train_for",
        help=_(
            "**automatic**: small corpora are repeated until learned, large ones get a few "
            "passes, and training stops early once validation stops improving. **N epochs**: "
            "that many passes over the corpus. **N minutes**: as much as fits in that time; "
            "progress and ETA follow the clock."
        ),
    )
    # The number inputs have no bounds of Streamlit's: it refuses an out-of-range number in
    # the browser, and the script goes on with the field's previous value, which Train would
    # queue. What was typed comes through, and `training_config` refuses it in one line.
    amounts: dict[str, Any] = {}
    if train_for in BUDGET_INPUTS:
        label, first, step = BUDGET_INPUTS[train_for]
        amounts[train_for] = cols[1].number_input(
            translate(label), value=first, step=step, key=f"train_{train_for}"
        )
    epochs, minutes = amounts.get("epochs"), amounts.get("minutes")
    devices = train_options.available_devices()
    device = cols[2].selectbox(
        _("Device"),
        devices,
        key="train_device",
        format_func=lambda d: {"cuda": "GPU (cuda)", "cpu": "CPU"}.get(d, d),
        help=_("Only the devices this machine has are listed."),
    )
    init_version = start_choice(current, automatic_budget=train_for == "auto")
    if init_version is not None:
        fine_tune_note(init_version, current, minutes, epochs, device)
    advanced = _advanced_options()

    label = _("Continue from #{id}", id=init_version) if init_version else _("Train")
    if st.button(label, type="primary", icon=":material/play_arrow:", key="train_button"):
        max_steps, million_tokens, precision, processes = advanced
        # Every number as typed (0 and negatives too): `training_config` is the one check
        overrides: dict[str, Any] = {} if max_steps is None else {"max_steps": max_steps}
        with feedback.error_boundary(N_("starting the run")):
            run_id = runs.enqueue_training(
                current.id,
                preset=preset,
                epochs=epochs,
                minutes=minutes,
                tokens=None if million_tokens is None else round(million_tokens * 1e6),
                precision=precision or train_options.DEFAULT_PRECISION,
                device=device,
                init_version_id=init_version,
                processes=processes,
                **overrides,
            )
            worker_process.ensure_worker()
            feedback.flash(
                _(
                    "Run #{id} queued on {corpus}: a worker is picking it up.",
                    id=run_id,
                    corpus=current.name,
                )
            )
            st.rerun()


class _Advanced(NamedTuple):
    """The Advanced expander's choices (None: not set)."""

    max_steps: int | None
    million_tokens: float | None
    precision: str | None
    processes: int | None


def _optional_number(
    where: Any, label: str, key: str, step: float, placeholder: str, **more: Any
) -> Any:
    """An Advanced number that starts empty: None means the run's own choice."""
    return where.number_input(
        label, value=None, step=step, placeholder=placeholder, key=key, **more
    )


def _advanced_options() -> _Advanced:
    with st.expander(_("Advanced"), icon=":material/tune:"):
        max_steps = _optional_number(
            st, _("Stop after at most N steps"), "train_max_steps", 50, _("no limit")
        )
        budget_cols = st.columns(2)
        million_tokens = _optional_number(
            budget_cols[0],
            _("Train for: {budget}", budget=localized(train_options.BUDGETS["tokens"])),
            "train_million_tokens",
            0.5,
            _("as chosen above"),
            format="%.3g",
            help=_(
                "Source + target training tokens (词元): the run ends there on any machine, so "
                "results compare across machines (a CPU without bf16 trains about half as "
                "many tokens per minute). Leave 'Train for' above on automatic."
            ),
        )
        precisions = train_options.precisions()
        precision = budget_cols[1].selectbox(
            _("Precision"),
            list(precisions),
            key="train_precision",
            help="\n".join(f"- **{k}**: {localized(v)}" for k, v in precisions.items()),
        )
        processes = _optional_number(
            st,
            _("Training processes"),
            "train_processes",
            1,
            _("the fastest, timed when the run starts"),
            help=_(
                "Data-parallel processes, each with its share of every update. Empty: the "
                "worker times one process with every core's thread against one process per "
                "core (and the splits between) and trains with the fastest; on GPUs, one "
                "process per GPU. On a CPU, at most one process per core."
            ),
        )
    return _Advanced(max_steps, million_tokens, precision, processes)


def start_choice(current: Any, automatic_budget: bool) -> int | None:
    """'Continue from #N' or 'Start a new model': the default and its reason come from
    ``continuation.default_start``; other versions of the same languages can be continued
    too. Returns the version to continue, or None for a new model."""
    default, reason = continuation.default_start(current.id, automatic_budget)
    others = [
        v
        for v in registry.list_versions()
        if (v.src_lang, v.tgt_lang) == (current.src_lang, current.tgt_lang) and v.id != default
    ]
    by_id = {v.id: v for v in others}
    options: list[int | str] = [default] if default is not None else []
    options += [NEW_MODEL, *by_id]

    def label(i: int | str) -> str:
        if i == NEW_MODEL:
            return _("Start a new model")
        if i in by_id:
            return _("Continue from #{id} · {name}", id=i, name=by_id[i].name)
        return _("Continue from #{id}", id=i)

    key = f"train_start_{current.id}"  # per corpus: its own default
    labels = {i: label(i) for i in options}
    # The default comes first: a version that appears while the page is open (a run just
    # ended) becomes the choice, unless the user picked another start.
    pickers.follow_newest(key, labels)
    choice = st.radio(
        _("Start"),
        options,
        format_func=labels.__getitem__,
        horizontal=True,
        key=key,
        help=_(
            "**Continue**: warm-start from the version's weights and tokenizer on the corpus' "
            "current pairs, new ones included, so what it learned is kept and the new budget "
            "adds to it. **Start a new model**: a new tokenizer and fresh weights."
        ),
    )
    if choice == options[0]:  # the reason is the default's: not the user's other choice
        st.caption(localized(reason))
    if choice != NEW_MODEL:
        st.caption(_("Continuing keeps the version's model size and tokenizer (not the preset)."))
    return None if choice == NEW_MODEL else int(choice)


def fine_tune_note(
    version_id: int, current: Any, minutes: float | None, epochs: int | None, device: str
) -> None:
    """What continuing a large pretrained version costs and buys (nothing for others): timed
    on the model itself, a couple of seconds the first time (then cached)."""
    with (
        feedback.error_boundary(N_("estimating the run")),
        st.spinner(_("Timing a few training steps of the model on this machine…")),
    ):
        note = continuation.fine_tune_note(
            continuation.Continuation(
                version_id, current.id, minutes=minutes, epochs=epochs, device=device
            )
        )
        if note is not None:
            st.info(localized(note), icon=":material/hourglass_top:")


# -------------------------------------------------------------------------------- history

# How each run ended first, in view on a 1400 px window; the rest scrolls.
HISTORY_COLUMNS = (
    "run", "status", "version", "stopped because", "steps", "trained for", "budget", "corpus",
    "created", "preset", "device", "pairs", "error",
)  # fmt: skip


def history() -> None:
    st.subheader(_("History"), anchor=False)
    done = {r.id: r for r in run_info.list_runs() if not r.active}  # active: in the panel above
    if not done:
        st.caption(_("Finished runs will be listed here."))
        return
    table = run_info.runs_table(runs=list(done.values()))
    # The service's words in the session's language, from the runs themselves (a table
    # column holds plain text: a message's parameters are gone there).
    shown = list(done.values())
    table["status"] = [live_runs.status_label(r.status) for r in shown]
    table["budget"] = [localized(r.budget) for r in shown]
    table["trained for"] = [formatting.fmt_duration(r.trained_s) for r in shown]
    table["stopped because"] = [localized(r.stopped_because or "") for r in shown]
    table["preset"] = [live_runs.auto_label(p) for p in table["preset"]]
    # every succeeded run registered a version: without one now, it was deleted since
    table["version"] = [
        version or (_("deleted") if r.status == runs.RunStatus.SUCCEEDED else "")
        for version, r in zip(table["version"], shown, strict=True)
    ]
    formatting.records_table(
        table,
        HISTORY_COLUMNS,
        {
            "run": st.column_config.NumberColumn(_("run"), format="#%d", width="small"),
            "corpus": _("corpus"),
            "status": _("status"),
            "preset": _("preset"),
            "trained for": _("trained for"),
            "budget": _("budget"),
            "device": _("device"),
            "pairs": st.column_config.NumberColumn(
                _("pairs"),
                format="localized",
                help=_("Training + validation pairs in the snapshot"),
            ),
            "steps": st.column_config.NumberColumn(_("steps"), format="localized"),
            "stopped because": _("stopped because"),
            "version": st.column_config.TextColumn(_("version"), width="small"),
            "created": st.column_config.DatetimeColumn(_("created"), format="YYYY-MM-DD HH:mm"),
            "error": st.column_config.TextColumn(_("error"), width="large"),
        },
    )
    with st.container(border=True):
        cols = st.columns([3, 1, 1], vertical_alignment="bottom")
        labels = {
            i: f"#{i} · {live_runs.status_label(r.status)} · {r.corpus_name or '—'}"
            for i, r in done.items()
        }
        pickers.follow_newest("history_run", labels)
        run_id = cols[0].selectbox(
            _("Run"), list(labels), format_func=labels.__getitem__, key="history_run"
        )
        run = done[run_id]
        if can(Permission.TRAIN):
            with cols[1]:
                live_runs.resume_button(run, key="resume_run")
            if cols[2].button(
                _("Delete…"), icon=":material/delete:", key="delete_run", width="stretch"
            ):
                dialogs.ask_confirmation("delete_run")
        dialogs.confirmation_dialog(
            "delete_run",
            _("Delete run"),
            _(
                "Delete run **#{id}**, its progress rows and its checkpoint? This cannot be "
                "undone. Version #{version} it trained is kept.",
                id=run.id,
                version=run.version_id,
            )
            if run.version_id
            else _(
                "Delete run **#{id}**, its progress rows and its checkpoint? This cannot be "
                "undone.",
                id=run.id,
            ),
            _("Delete run"),
            lambda: _delete(run.id),
        )
        if run.stopped_because:
            st.caption(
                _(
                    "Stopped at step {step}: {reason}.",
                    step=formatting.fmt_int(run.progress_step),
                    reason=localized(run.stopped_because),
                )
            )
        elif run.error:
            st.caption(_("Failed: {error}", error=run.error))
        metrics = metric_rows.run_metrics(run.id)
        if metrics.empty:
            st.caption(_("This run recorded no progress."))
        else:
            charts.curves(metrics)


def _delete(run_id: int) -> str:
    runs.delete_run(run_id)
    return _("Deleted run #{id}.", id=run_id)
