"""Review page: what to correct next. Upload source sentences to a corpus' pool, have a version
translate and rank them in the background, then review the most uncertain ones first: accept
the translation, correct it, or skip it. Accepted and corrected ones become pairs.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from ui import feedback, formatting, pickers
from ui.i18n import N_, _, n_
from ui.signin import can
from workbench.corpus import corpora
from workbench.corpus.corpora import CorpusInfo
from workbench.curation import pool, pool_jobs
from workbench.models import registry
from workbench.team.access import Permission
from workbench.training import worker_process
from workbench.training.runs import RunStatus

QUEUE_SIZES = (5, 10, 20, 50)
JOB_REFRESH_S = 2.0


def render() -> None:
    all_corpora = corpora.list_corpora()
    if not all_corpora:
        feedback.empty_state(_("No corpus yet: create one on the Corpus page first."))
        return
    current = pickers.corpus_picker(all_corpora, key="review_corpus")
    stats = pool.pool_stats(current.id)
    cols = st.columns(4)
    cols[0].metric(_("In the pool"), formatting.fmt_int(stats.total))
    cols[1].metric(_("Waiting for review"), formatting.fmt_int(stats.waiting))
    cols[2].metric(_("Translated and ranked"), formatting.fmt_int(stats.translated))
    reviewed = stats.total - stats.waiting
    cols[3].metric(_("Reviewed"), formatting.fmt_int(reviewed))
    if not can(Permission.REVIEW):
        st.info(
            _("Only an editor or admin can add to the pool and review it."),
            icon=":material/lock:",
        )
        return
    upload_panel(current, expanded=stats.total == 0)
    if stats.total == 0:
        return
    rank_panel(current)
    job_panel(current.id)
    review_queue(current, stats)


def upload_panel(current: CorpusInfo, expanded: bool) -> None:
    with st.expander(_("Add source sentences"), expanded=expanded, icon=":material/upload_file:"):
        nonce = st.session_state.get("pool_upload_nonce", 0)
        upload = st.file_uploader(
            _("Sentences in {lang}, one per line", lang=current.src_lang),
            type=["txt", "gz"],
            key=f"pool_upload_{nonce}",
            help=_(
                "UTF-8 text, optionally gzip-compressed; blank lines and sentences already in "
                "the pool are skipped."
            ),
        )
        if st.button(_("Add to the pool"), key="pool_add", disabled=upload is None):
            with (
                feedback.error_boundary(N_("adding the sentences")),
                st.spinner(_("Adding…"), show_time=True),
            ):
                result = pool.add_to_pool(current.id, upload)
                st.session_state["pool_upload_nonce"] = nonce + 1
                feedback.flash(
                    n_(
                        "Added {n} sentence to the pool of “{corpus}” ({duplicates} already "
                        "there or repeated, {skipped} empty or too long skipped).",
                        "Added {n} sentences to the pool of “{corpus}” ({duplicates} already "
                        "there or repeated, {skipped} empty or too long skipped).",
                        result.added,
                        corpus=current.name,
                        duplicates=formatting.fmt_int(result.duplicates),
                        skipped=formatting.fmt_int(result.skipped),
                    )
                )
                st.rerun()


def rank_panel(current: CorpusInfo) -> None:
    versions = [
        v
        for v in registry.list_versions()
        if (v.src_lang, v.tgt_lang) == (current.src_lang, current.tgt_lang)
    ]
    if not versions:
        st.info(
            _(
                "No version translates {pair} yet: train one on the Train page to rank the pool.",
                pair=f"{current.src_lang}→{current.tgt_lang}",
            ),
            icon=":material/info:",
        )
        return
    labels = {v.id: pickers.version_label(v) for v in versions}
    row = st.columns([3, 3, 2], vertical_alignment="bottom")
    first = row[0].selectbox(
        _("Rank with"), list(labels), format_func=labels.__getitem__, key="pool_version"
    )
    others = [None, *(i for i in labels if i != first)]
    second = row[1].selectbox(
        _("Disagreement with (optional)"),
        others,
        format_func={None: _("— (rank by the model's own uncertainty)"), **labels}.__getitem__,
        key="pool_second_version",
        help=_(
            "With a second version, sentences are ranked by how differently the two translate "
            "them; without, by how unsure the first is of its translation (length-normalised "
            "log-probability)."
        ),
    )
    if row[2].button(
        _("Translate & rank"),
        type="primary",
        icon=":material/sort:",
        key="pool_rank",
        width="stretch",
    ):
        with feedback.error_boundary(N_("queueing the translation")):
            job_id = pool_jobs.enqueue_translation(current.id, first, second)
            worker_process.ensure_worker()
            feedback.flash(
                _("Pool job {id} queued: the worker translates in the background.", id=job_id)
            )
            st.rerun()


def job_panel(corpus_id: int) -> None:
    job = pool_jobs.latest_job(corpus_id)
    if job is None:
        return
    if job.active:  # refreshed only while it runs: an idle page arms no timer
        st.fragment(_live_job, run_every=JOB_REFRESH_S)(corpus_id)
    elif job.status == RunStatus.FAILED:
        st.error(
            _("Pool job {id} failed: {error}", id=job.id, error=job.error), icon=":material/error:"
        )


def _live_job(corpus_id: int) -> None:
    job = pool_jobs.latest_job(corpus_id)
    if job is None or not job.active:
        st.rerun()  # finished: the whole page shows the ranked queue
        return
    with st.container(border=True):
        row = st.columns([4, 1], vertical_alignment="center")
        if job.status == RunStatus.QUEUED:
            text = _(
                "Pool job {id} · waiting for the worker · {done} of {total} sentences",
                id=job.id,
                done=formatting.fmt_int(job.done),
                total=formatting.fmt_int(job.total),
            )
        else:
            text = _(
                "Pool job {id} · translating · {done} of {total} sentences",
                id=job.id,
                done=formatting.fmt_int(job.done),
                total=formatting.fmt_int(job.total),
            )
        row[0].progress(job.fraction, text=text)
        if job.cancel_requested:
            row[1].button(_("Cancelling…"), disabled=True, key="pool_cancel", width="stretch")
        elif row[1].button(_("Cancel"), icon=":material/stop:", key="pool_cancel", width="stretch"):
            with feedback.error_boundary(N_("cancelling the job")):
                pool_jobs.cancel_job(job.id)
                st.rerun()
        if job.worker_lost:
            st.warning(_("Its worker stopped; the next worker goes on where it left off."))


def review_queue(current: CorpusInfo, stats: pool.PoolStats) -> None:
    if not stats.translated:
        if stats.waiting:
            st.caption(_("Translate and rank the pool to see what to correct first."))
        return
    head = st.columns([4, 1], vertical_alignment="bottom")
    head[0].markdown(
        n_(
            "**Most uncertain first** · {n} ranked sentence waiting",
            "**Most uncertain first** · {n} ranked sentences waiting",
            stats.translated,
        )
    )
    size = head[1].selectbox(_("Show"), QUEUE_SIZES, index=1, key="pool_queue_size")
    for item in pool.review_queue(current.id, limit=size):
        _review_card(current, item)


def _review_card(current: CorpusInfo, item: Any) -> None:
    with st.container(border=True):
        st.markdown(f"**{item.source}**")
        uncertainty = f"{item.uncertainty:.3f}"
        if item.second_output is None:
            st.caption(_("uncertainty {value}", value=uncertainty))
        else:
            st.caption(
                _(
                    "uncertainty {value} · the other version: “{output}”",
                    value=uncertainty,
                    output=item.second_output,
                )
            )
        text = st.text_input(
            _("Translation ({lang})", lang=current.tgt_lang),
            value=item.output or "",
            key=f"pool_text_{item.id}",
            label_visibility="collapsed",
        )
        buttons = st.columns(3)
        changed = text.strip() != (item.output or "").strip()
        action = None
        if buttons[0].button(
            _("Save correction") if changed else _("Accept"),
            type="primary",
            icon=":material/edit:" if changed else ":material/check:",
            key=f"pool_accept_{item.id}",
            width="stretch",
        ):
            action = ("edit", text) if changed else ("accept", None)
        if buttons[1].button(
            _("Skip"), icon=":material/skip_next:", key=f"pool_skip_{item.id}", width="stretch"
        ):
            action = ("skip", None)
        if action is not None:
            with feedback.error_boundary(N_("saving the review")):
                pair_id = pool.review(item.id, *action)
                feedback.flash(
                    _("Skipped.")
                    if pair_id is None
                    else _("Added pair {id} to “{corpus}”.", id=pair_id, corpus=current.name)
                )
                st.rerun()
