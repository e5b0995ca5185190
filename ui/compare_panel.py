"""Comparing versions on the Models page: the versions' loss curves overlaid, their BLEU and
chrF on one corpus' held-out test pairs (95 % intervals, paired-bootstrap p-values, the
verdicts in words, or why none is given), the sentences side by side, and the comparison as
CSV or an HTML report.

The scores come from ``workbench.evaluation`` (``evaluation.compare``, ``significance``,
``comparison_report``); this panel picks the versions and the test pairs and shows the result,
which stays in Session State until the choice of versions changes.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from ui import charts, feedback, formatting, glossary_panel, pickers
from ui.i18n import N_, _, choice_labels, localized, n_, translate
from workbench.corpus import corpora, snapshots
from workbench.evaluation import comparison_report, evaluation, significance
from workbench.messages import Message
from workbench.training import metric_rows

COMPARISON = "models_comparison"  # the last comparison shown (Session State)
COMPARE_VERSIONS = "compare_versions"  # the multiselect's key
MAX_COMPARE_PAIRS = 500
LEVEL = "95 %"  # the confidence of the intervals (a placeholder: a "%" in a message id reads as
# printf formatting to gettext tools)


def compare_tab(versions: list[Any]) -> None:
    """The Compare tab: pick two or more versions and a corpus, score them on its test pairs."""
    if len(versions) < 2:
        st.info(
            _(
                "Comparing needs at least two versions: train another one (another preset, more "
                "pairs, or fine-tune this one) on the Train page."
            ),
            icon=":material/info:",
        )
        return
    labels = {v.id: pickers.version_label(v) for v in versions}
    # The widget's value is only ever given through Session State (the first two versions at
    # first, fewer after a deletion, re-sent after a rename): a `default` beside it makes
    # Streamlit log a warning.
    before = st.session_state.get(COMPARE_VERSIONS)
    if before is None:
        st.session_state[COMPARE_VERSIONS] = list(labels)[:2]
    elif any(i not in labels for i in before):  # a version was deleted
        st.session_state[COMPARE_VERSIONS] = [i for i in before if i in labels]
    pickers.keep_label_fresh(
        COMPARE_VERSIONS, [labels[i] for i in st.session_state[COMPARE_VERSIONS]]
    )
    chosen = st.multiselect(
        _("Versions to compare"),
        list(labels),
        format_func=labels.__getitem__,
        key=COMPARE_VERSIONS,
    )
    if len(chosen) < 2:
        st.caption(_("Pick two or more versions."))
        return
    by_id = {v.id: v for v in versions}
    picked = [by_id[i] for i in chosen]

    loss_curves(picked, by_id)

    all_corpora = corpora.list_corpora()
    if not all_corpora:
        st.info(_("Comparing needs a corpus with test pairs; none exists."))
        return
    first = picked[0]
    if first.corpus_id in {c.id for c in all_corpora}:
        st.session_state.setdefault(pickers.CURRENT_CORPUS, first.corpus_id)
    row = st.columns([3, 2, 1], vertical_alignment="bottom")
    with row[0]:
        test_corpus = pickers.corpus_picker(
            all_corpora,
            key="compare_corpus",
            label=_("Test pairs from"),
            help=_(
                "The versions translate this corpus' test split; BLEU and chrF are computed "
                "against its references."
            ),
            in_address=False,
        )
    with row[1]:
        beam = pickers.decoding_picker("compare")
    terms, enforce = glossary_panel.glossary_toggle(
        test_corpus.id,
        test_corpus.name,
        key="compare_glossary",
        help=_(
            "Off: the term-hit rate says how often each version uses the required terms on its "
            "own. On: sentences with a term are decoded to use it (constrained search)."
        ),
    )
    if row[2].button(_("Compare"), type="primary", icon=":material/compare_arrows:", key="compare"):
        with feedback.error_boundary(N_("comparing the versions")):
            test_pairs = snapshots.split_pairs(test_corpus.id, "test", limit=MAX_COMPARE_PAIRS)
            if not test_pairs:
                st.warning(
                    _(
                        "“{corpus}” has no test pairs. Mark some pairs as test on the Corpus page "
                        "(split column), then compare again.",
                        corpus=test_corpus.name,
                    ),
                    icon=":material/warning:",
                )
                st.session_state.pop(COMPARISON, None)
            else:
                with st.spinner(
                    n_(
                        "Translating {n} test pair with {versions} versions…",
                        "Translating {n} test pairs with {versions} versions…",
                        len(test_pairs),
                        versions=len(chosen),
                    ),
                    show_time=True,
                ):
                    result = evaluation.compare(
                        chosen, test_pairs, beam=beam, glossary=terms, enforce=enforce
                    )
                st.session_state[COMPARISON] = {
                    "glossary": enforce,
                    "versions": list(chosen),
                    "corpus": test_corpus.name,
                    "basis": evaluation.ScoreBasis("test", len(test_pairs), beam),
                    "result": result,
                }
    shown = st.session_state.get(COMPARISON)
    if shown and shown["versions"] == list(chosen):
        comparison_view(shown)


def steps_before(version: Any, by_id: dict[int, Any]) -> int:
    """The optimizer steps of the versions ``version`` continues (its parent's, the parent's
    parent's, …): a continued run counts its steps from 0, and drawn from 0 it would read as a
    fresh run beside its parent. A deleted ancestor ends the count."""
    steps, parent = 0, by_id.get(version.parent_version_id)
    while parent is not None:
        steps += int(parent.metrics.get("steps") or 0)
        parent = by_id.get(parent.parent_version_id)
    return steps


def loss_curves(picked: list[Any], by_id: dict[int, Any]) -> None:
    """The picked versions' training loss curves on one chart (the runs that made them); a
    version that continues another is drawn from where its ancestors' steps ended."""
    shown = {v.run_id: v for v in picked if v.run_id is not None}
    if not shown:
        return
    metrics = metric_rows.run_metrics(list(shown))
    if metrics.empty:
        return
    label = {
        run: f"#{v.id} {v.name}"
        + (_(" (continues #{id})", id=v.parent_version_id) if v.parent_version_id else "")
        for run, v in shown.items()
    }
    offset = {run: steps_before(v, by_id) for run, v in shown.items()}
    version = _("version")  # the legend's title: the column's name
    metrics = metrics.assign(
        **{version: metrics["run_id"].map(label)},
        step=metrics["step"] + metrics["run_id"].map(offset),
    )
    st.markdown("**" + _("Loss curves") + "**")
    st.altair_chart(charts.loss_chart(metrics, by=version, height=280), width="stretch")


# How the per-sentence table is ordered: by the chosen version's chrF minus the baseline's.
SORTS = (N_("test order"), N_("largest chrF loss first"), N_("largest chrF gain first"))


def comparison_view(shown: dict[str, Any]) -> None:
    result: evaluation.Comparison = shown["result"]
    sentences = result.sentences
    basis: evaluation.ScoreBasis = shown["basis"]
    heading = _("**Scores on “{corpus}”** · {basis}", corpus=shown["corpus"], basis=basis.label())
    if shown.get("glossary"):
        heading += " · " + _("glossary enforced")
    st.markdown(heading)
    if result.withheld:  # too few test pairs: the scores, no p-values, no verdicts
        st.warning(
            n_(
                "Only {n} test pair: on so few sentences a BLEU difference between versions "
                "is mostly chance, so no p-value or verdict is given. Mark at least {minimum} "
                "pairs as test on the Corpus page for a comparison you can rely on.",
                "Only {n} test pairs: on so few sentences a BLEU difference between versions "
                "is mostly chance, so no p-value or verdict is given. Mark at least {minimum} "
                "pairs as test on the Corpus page for a comparison you can rely on.",
                basis.pairs,
                minimum=significance.MIN_VERDICT_PAIRS,
            ),
            icon=":material/warning:",
        )
    interval_help = _(
        "{level} {kind}: the middle {level} of the score over {resamples} resampled test sets "
        "(always within 0–100).",
        level=LEVEL,
        kind=translate(significance.INTERVAL_KIND),
        resamples=formatting.fmt_int(significance.RESAMPLES),
    )
    reference_p = _("“—” on the first row: it is the reference the others are tested against.")
    st.dataframe(
        _scores_table(result.metrics),
        hide_index=True,
        width="stretch",
        column_config={
            "version": st.column_config.NumberColumn(_("version"), format="#%d", width="small"),
            "name": st.column_config.TextColumn(_("name")),
            "BLEU": st.column_config.NumberColumn("BLEU", format="%.1f"),
            "chrF": st.column_config.NumberColumn("chrF", format="%.1f"),
            "p (BLEU)": st.column_config.TextColumn(
                "p (BLEU)",
                alignment="right",
                help=_(
                    "Paired bootstrap against the first version (sacreBLEU, {resamples} "
                    "resamples, seed {seed}): roughly the chance of a difference this large "
                    "between two equally good versions.",
                    resamples=formatting.fmt_int(significance.RESAMPLES),
                    seed=result.seed,
                )
                + " "
                + reference_p,
            ),
            "p (chrF)": st.column_config.TextColumn(
                "p (chrF)", help=reference_p, alignment="right"
            ),
            "pairs": st.column_config.NumberColumn(_("pairs"), width="small"),
            "BLEU 95 % interval": st.column_config.TextColumn(
                _("BLEU {level} interval", level=LEVEL), help=interval_help
            ),
            "chrF 95 % interval": st.column_config.TextColumn(
                _("chrF {level} interval", level=LEVEL), help=interval_help
            ),
            "glossary terms used": st.column_config.TextColumn(_("glossary terms used")),
        }
        | ({"p (BLEU)": None, "p (chrF)": None} if result.withheld else {}),
    )
    for line in result.verdicts:
        st.markdown(f"- {localized(line)}")
    if not result.withheld:
        st.caption(
            _(
                "Against the first version chosen (#{id}); a difference is called significant "
                "below p = {level}.",
                id=result.metrics["version"].iloc[0],
                level=significance.SIGNIFICANCE_LEVEL,
            )
        )
    _downloads(result, shown)

    differs = int(sentences["differs"].sum())
    st.markdown(
        n_(
            "**Side by side** · {differs} of {n} sentence differs (highlighted)",
            "**Side by side** · {differs} of {n} sentences differ (highlighted)",
            len(sentences),
            differs=formatting.fmt_int(differs),
        )
    )
    row = st.columns([2, 2, 3], vertical_alignment="bottom")
    only_diff = row[0].toggle(_("Show only sentences that differ"), key="compare_only_diff")
    deltas = [c for c in sentences.columns if c.startswith("Δ chrF")]
    order = row[1].selectbox(
        _("Order"), SORTS, format_func=choice_labels(SORTS), key="compare_sort"
    )
    by = (
        row[2].selectbox(_("chrF difference of"), deltas, key="compare_sort_by")
        if order != SORTS[0] and len(deltas) > 1
        else deltas[0]
    )
    view = sentences[sentences["differs"]] if only_diff else sentences
    if order != SORTS[0]:
        view = view.sort_values(by, ascending=order == SORTS[1], kind="stable")

    def highlight(row: pd.Series) -> list[str]:
        style = "background-color: rgba(255, 196, 0, 0.18)" if row["differs"] else ""
        return [style] * len(row)

    st.dataframe(
        view.style.apply(highlight, axis=1).format(precision=1),
        hide_index=True,
        width="stretch",
        column_config={
            "differs": None,
            "source": st.column_config.TextColumn(_("source")),
            "reference": st.column_config.TextColumn(_("reference")),
        },
        key="compare_sentences",
    )


def _p_values(values: pd.Series) -> list[str]:
    """p-values as read ("—" for the reference row, which is not tested against itself)."""
    return [formatting.fmt_number(p, 3) for p in values]


def _scores_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """The scores as people read them: each score with its 95 % interval and p-value."""
    return pd.DataFrame(
        {
            "version": metrics["version"],
            "name": metrics["name"],
            "BLEU": metrics["bleu"],
            "BLEU 95 % interval": [
                f"{lo:.1f} – {hi:.1f}"
                for lo, hi in zip(metrics["bleu_low"], metrics["bleu_high"], strict=True)
            ],
            "p (BLEU)": _p_values(metrics["p_value"]),
            "chrF": metrics["chrf"],
            "chrF 95 % interval": [
                f"{lo:.1f} – {hi:.1f}"
                for lo, hi in zip(metrics["chrf_low"], metrics["chrf_high"], strict=True)
            ],
            "p (chrF)": _p_values(metrics["chrf_p_value"]),
            "pairs": metrics["n"],
        }
        | (
            {
                "glossary terms used": [
                    _("{hits} of {terms}", hits=formatting.fmt_int(h), terms=formatting.fmt_int(n))
                    + (f" ({h / n:.0%})" if n else "")
                    for h, n in zip(metrics["term_hits"], metrics["terms"], strict=True)
                ]
            }
            if "term_hits" in metrics
            else {}
        )
    )


def _downloads(result: evaluation.Comparison, shown: dict[str, Any]) -> None:
    versions = "-".join(str(v) for v in shown["versions"])
    # The HTML report is English (``comparison_report``: a file to pass on, made when the
    # button is clicked, outside the page's run), its title too: the message's English.
    title = Message(
        N_("Versions {versions} on “{corpus}”"),
        versions=", ".join(f"#{v}" for v in shown["versions"]),
        corpus=shown["corpus"],
    )
    downloads = (  # label, contents (made when clicked), file type, MIME type, icon
        (
            _("Download CSV"),
            lambda: comparison_report.comparison_csv(result),
            "csv",
            "text/csv",
            ":material/download:",
        ),
        (
            _("Download HTML report"),
            lambda: comparison_report.comparison_html(result, title, str(shown["basis"])),
            "html",
            "text/html",
            ":material/description:",
        ),
    )
    for col, (label, data, kind, mime, icon) in zip(st.columns(2), downloads, strict=True):
        col.download_button(
            label,
            data=data,
            file_name=f"comparison-{versions}.{kind}",
            mime=mime,
            icon=icon,
            key=f"compare_{kind}",
            on_click="ignore",
            width="stretch",
        )
