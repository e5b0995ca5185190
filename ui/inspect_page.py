"""Inspect page: a version at work on one sentence, part by part of "Attention Is All You
Need" — tokens and positions, every layer's and head's attention, the decoder's choices step by
step, beam search's tree, the embedding space, and the run that trained the version.

All numbers come from `evaluation.inspection`; the last inspection is kept in session_state
(what the user is looking at, as the Translate page keeps its results).

(Over 450 lines on purpose: each panel explains one part of the paper in words beside what it
shows; the explanations, not the code, are most of the lines.)
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import streamlit as st

from ui import charts, feedback, formatting, memory_panel, pickers
from ui.i18n import N_, _, localized, translate
from workbench.evaluation import inspection
from workbench.memory import explanation
from workbench.models import engines, translation

RESULT = "inspect_result"
KNN_RESULT = "inspect_knn_result"  # (the output with the memory, its MemoryStep list) or None
# attention kind (a message id: the control's value) -> (field, query side, key side)
KINDS = {
    N_("Encoder self-attention"): ("encoder_self", "source", "source"),
    N_("Decoder masked self-attention"): ("decoder_self", "decoder input", "decoder input"),
    N_("Cross-attention"): ("cross", "decoder input", "source"),
}
FIRST_KIND = next(iter(KINDS))
MAX_GRID_CELLS = 60_000  # above this the layer × head grid is too heavy for the browser
SOURCES = (N_("Type one"), N_("From the corpus"))  # where the sentence comes from
BEAM_ROWS = (N_("finished"), N_("all"))  # which beam candidates the table lists
# The stages of core_model.inspection's tensor shapes (core_model knows no catalog): their
# names are the message ids the shapes block shows in the session's language.
SHAPE_STAGES = (
    N_("source ids"),
    N_("source embeddings + positions (§3.4, §3.5)"),
    N_("Q, K, V split into heads (§3.2.2)"),
    N_("encoder self-attention weights softmax(QKᵀ/√d_k)"),
    N_("heads concatenated, then W^O"),
    N_("feed-forward inner layer (§3.3)"),
    N_("encoder output (memory)"),
    N_("decoder input ids (BOS + output so far)"),
    N_("decoder masked self-attention weights"),
    N_("cross-attention weights (queries: decoder, keys: memory)"),
    N_("decoder output"),
    N_("logits (pre-softmax linear, §3.4)"),
)


def _kind_caption(kind: str) -> str:
    """What the paper says about each kind of attention, under its maps."""
    return {
        "Encoder self-attention": _(
            "§3.2.1 and §3.2.2: every source position attends to every source position. Each "
            "head computes softmax(QKᵀ/√d_k)V with its own projections Q = XW^Q_i, K = XW^K_i, "
            "V = XW^V_i; a row is one query position and sums to 1 over the keys. The padding "
            "mask (§3.2.3) hides PAD keys: their cells are grey, their weight exactly 0."
        ),
        "Decoder masked self-attention": _(
            "§3.2.3: the decoder's self-attention is masked so position t sees only positions "
            "≤ t (scores of later keys are set to −∞ before the softmax): the empty upper "
            "triangle. Without it the model could read the word it is asked to predict."
        ),
        "Cross-attention": _(
            "§3.2.3 encoder-decoder attention: queries come from the decoder, keys and values "
            "from the encoder output (the memory), so each output step looks at the source. "
            "softmax(QKᵀ/√d_k) per head; PAD source keys are masked."
        ),
    }[kind]


def _side_label(side: str) -> str:
    """The two sides an attention map reads, as shown."""
    return {"source": _("source"), "decoder input": _("decoder input")}[side]


def render() -> None:
    form = pickers.version_form("inspect")
    if form is None:
        return
    version = form.version
    with form.box:
        with form.left:
            if version.imported:  # where a model nobody here trained came from
                st.caption(formatting.lineage_line(version))
            text, reference = _sentence_input(version)
        with form.right:
            padding = int(
                st.number_input(
                    _("Padding positions"),
                    0,
                    inspection.MAX_PADDING,
                    0,
                    key="inspect_padding",
                    help=_(
                        "Inspect the sentence as part of a batch with a longer one: PAD "
                        "positions are appended, and the masks give them zero attention."
                    ),
                )
            )
        knn = memory_panel.knn_toggle(version, engines.ENGINES[0], key="inspect_knn")
        if st.button(_("Inspect"), type="primary", icon=":material/search:", key="inspect"):
            with (
                feedback.error_boundary(N_("inspecting")),
                st.spinner(_("Translating and looking inside…"), show_time=True),
            ):
                st.session_state[RESULT] = inspection.inspect(
                    version.id, text, beam=form.beam, padding=padding, reference=reference
                )
                st.session_state[KNN_RESULT] = (
                    explanation.explain_translation(version.id, text) if knn else None
                )
    shown = st.session_state.get(RESULT)
    if shown is None:
        return
    show_shapes = st.toggle(_("Show tensor shapes"), key="inspect_shapes")
    for notice in shown.notices:
        st.warning(localized(notice), icon=":material/warning:")
    tokens_panel(shown, show_shapes)
    attention_panel(shown, show_shapes)
    steps_panel(shown, show_shapes)
    knn_panel(st.session_state.get(KNN_RESULT))
    beam_panel(shown)
    neighbours_panel(shown)
    loss_panel(shown)


def _sentence_input(version: Any) -> tuple[str, str | None]:
    """A typed sentence, or a pair of the version's corpus (with its reference)."""
    source = pickers.message_choice(_("Sentence"), SOURCES, key="inspect_source")
    if source == SOURCES[1]:
        examples = inspection.example_pairs(version.id)
        if not examples:
            st.caption(_("The version's corpus is gone or empty: type a sentence instead."))
            return "", None
        choice = st.selectbox(
            _("Pair (held-out pairs first)"),
            range(len(examples)),
            format_func=lambda i: f"{examples[i][0]}  →  {examples[i][1]}",
            key="inspect_pair",
        )
        return examples[choice]
    text = st.text_input(
        _("Source sentence ({lang})", lang=version.src_lang),
        key="inspect_text",
        max_chars=2000,
        placeholder=_("One sentence"),
    )
    return text, None


def _shapes(shown: Any, *names: str) -> None:
    """Named stages' tensor shapes (B = 1 sentence, H heads, S/T source/decoder positions)."""
    shapes = dict(shown.inspection.shapes)
    named = [(translate(name), shapes[name]) for name in names if name in shapes]
    width = max((len(label) for label, _shape in named), default=0)
    st.code("\n".join(f"{label:<{width}}  {shape}" for label, shape in named), language=None)


# ---------------------------------------------------------------------------- panels


def tokens_panel(shown: Any, show_shapes: bool) -> None:
    seen = shown.inspection
    with st.container(border=True):
        st.subheader(_("Tokens and positions"), anchor=False)
        st.markdown(
            f"**{pickers.version_label(shown.version)}** · "
            f"{localized(translation.decoding_label(1))}: **{seen.text or '∅'}**"
            + ("  \n" + _("reference: {text}", text=shown.reference) if shown.reference else "")
        )
        left, right = st.columns(2)
        for column, pieces, ids in (
            (left, seen.src_pieces, seen.src_ids),
            (right, seen.out_pieces, seen.out_ids),
        ):
            column.dataframe(
                pd.DataFrame([pieces, [str(i) for i in ids]], index=[_("piece"), _("id")]),
                width="stretch",
            )
        st.caption(
            _(
                "Source (left) and output (right) pieces with their vocabulary ids, as the "
                "subword tokenizer cuts them; `</s>` ends each. §3.4: each id selects a row of "
                "the learned embedding matrix, multiplied by √d_model."
            )
        )
        table = _positional_frame(seen.positional)
        st.altair_chart(charts.positional_chart(table, len(seen.src_ids)), width="stretch")
        norms = pd.DataFrame(
            [
                {"position": i, "piece": p, "signal": signal, "norm": norm}
                for i, p in enumerate(seen.src_pieces)
                for signal, norm in (
                    (_("embedding ×√d_model"), seen.embedding_norms[i]),
                    (_("positional encoding"), seen.positional_norms[i]),
                )
            ]
        )
        st.altair_chart(charts.norms_chart(norms), width="stretch")
        st.caption(
            _(
                "§3.5 Positional encoding: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)) and "
                "PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)) — each pair of dimensions is a "
                "sinusoid whose wavelength grows from 2π to 10000·2π, so PE(pos+k) is a linear "
                "function of PE(pos). The solid rows are this sentence's source positions. It "
                "is added to the embeddings: the bars compare the two signals' norms per "
                "position (‖PE‖ = √(d_model/2) everywhere)."
            )
        )
        if show_shapes:
            _shapes(shown, *(name for name, _ in seen.shapes))


def _positional_frame(table: list[list[float]], columns: int = 64) -> pd.DataFrame:
    """Long form of PE [positions, d_model]; wide models show `columns` dimensions, in
    sin/cos pairs spread evenly over the frequencies."""
    d = len(table[0]) if table else 0
    pairs = d // 2
    keep = sorted(
        {2 * round(j * (pairs - 1) / max(1, columns // 2 - 1)) for j in range(columns // 2)}
    )
    dims = [i for p in keep for i in (p, p + 1) if i < d] if d > columns else list(range(d))
    return pd.DataFrame(
        [
            {"position": pos, "dimension": i, "value": row[i]}
            for pos, row in enumerate(table)
            for i in dims
        ]
    )


def attention_panel(shown: Any, show_shapes: bool) -> None:
    seen = shown.inspection
    with st.container(border=True):
        st.subheader(_("Attention, every layer and head"), anchor=False)
        kind_label = pickers.message_choice(_("Attention"), KINDS, key="inspect_kind") or FIRST_KIND
        field, q_side, k_side = KINDS[kind_label]
        maps = getattr(seen, field)  # [layer][head][query][key]
        pad = ["<pad>"] * seen.padding
        labels = {
            "source": seen.src_pieces + pad,
            "decoder input": seen.tgt_in_pieces + pad,
        }
        q_labels, k_labels = labels[q_side], labels[k_side]
        masked = getattr(seen, f"{field}_masked")  # [query][key]: hidden by the mask
        n_layers, n_heads = len(maps), len(maps[0])
        cells = n_layers * n_heads * len(q_labels) * len(k_labels)
        if cells <= MAX_GRID_CELLS:
            grid = pd.DataFrame(
                [
                    {
                        "layer": layer + 1,
                        "head": head + 1,
                        "query": q,
                        "key": k,
                        "weight": maps[layer][head][q][k],
                        "masked": masked[q][k],
                    }
                    for layer in range(n_layers)
                    for head in range(n_heads)
                    for q in range(len(q_labels))
                    for k in range(len(k_labels))
                ]
            )
            st.altair_chart(charts.attention_grid(grid), width="content")
        else:
            st.caption(
                _(
                    "No grid: {cells} cells are too many to draw; pick one map below.",
                    cells=formatting.fmt_int(cells),
                )
            )
        left, right = st.columns([1, 3], gap="medium")
        layer = left.selectbox(
            _("Enlarge layer"), range(1, n_layers + 1), key=f"inspect_layer_{field}"
        )
        head = left.selectbox(_("head"), range(1, n_heads + 1), key=f"inspect_head_{field}")
        item = {
            "src_pieces": k_labels,
            "out_pieces": q_labels,
            "attention": maps[layer - 1][head - 1],
        }
        right.altair_chart(
            charts.attention_chart(
                item,
                _("keys ({side})", side=_side_label(k_side)),
                _("queries ({side})", side=_side_label(q_side)),
                masked,
            ),
            width="stretch",
        )
        st.caption(_kind_caption(kind_label))
        if show_shapes:
            h = n_heads
            st.code(
                _(
                    "Q [B, H, T_q, d_k] = [1, {h}, {q}, d_k]   K, V [B, H, T_k, d_k] = [1, {h}, "
                    "{k}, d_k]\nweights softmax(QKᵀ/√d_k) [B, H, T_q, T_k] = [1, {h}, {q}, {k}] "
                    "per layer, × {layers} layers",
                    h=h,
                    q=len(q_labels),
                    k=len(k_labels),
                    layers=n_layers,
                ),
                language=None,
            )


def steps_panel(shown: Any, show_shapes: bool) -> None:
    seen = shown.inspection
    with st.container(border=True):
        st.subheader(_("Decoding, step by step (greedy)"), anchor=False)
        steps = seen.greedy
        at = st.slider(_("Step"), 0, len(steps) - 1, 0, key="inspect_step") if len(steps) > 1 else 0
        step = steps[at]
        prefix = " ".join(seen.tgt_in_pieces[: at + 1])
        st.markdown(
            _(
                "Read so far: `{prefix}` → chose **`{piece}`** (p = {p})",
                prefix=prefix,
                piece=step.chosen.piece,
                p=f"{step.chosen.value:.3f}",
            )
        )
        data = pd.DataFrame(
            [
                {
                    "rank": r,
                    "piece": c.piece,
                    "id": c.id,
                    "prob": c.value,
                    "label": f"{r + 1}. {c.piece}",
                    "chosen": c.id == step.chosen.id,
                }
                for r, c in enumerate(step.top)
            ]
        )
        st.altair_chart(charts.top_k_chart(data), width="stretch")
        st.caption(
            _(
                "§3.4 and §6.1: at step t the decoder's last layer gives h_t; the pre-softmax "
                "linear layer and a softmax turn it into P(y_t | y_<t, x) = softmax(W h_t + b). "
                "Greedy decoding takes the most probable piece and feeds it back in; the "
                "sentence's log-probability is the sum of the chosen steps' (here {log_prob}). "
                "PAD and BOS are never outputs.",
                log_prob=f"{seen.greedy_log_prob:.3f}",
            )
        )
        if show_shapes:
            _shapes(
                shown,
                "decoder input ids (BOS + output so far)",
                "decoder output",
                "logits (pre-softmax linear, §3.4)",
            )


def knn_panel(explained: tuple[str, list[Any]] | None) -> None:
    """The corpus memory (kNN-MT) at each step, when it was switched on."""
    if not explained or not explained[1]:
        return
    text, steps = explained
    with st.container(border=True):
        st.subheader(_("The corpus memory at each step (kNN-MT)"), anchor=False)
        st.markdown(_("With the memory, greedy decoding writes: **{text}**", text=text))
        memory_panel.knn_steps_view(steps)


def beam_panel(shown: Any) -> None:
    beam = shown.inspection.beam
    with st.container(border=True):
        st.subheader(_("Beam search"), anchor=False)
        if beam is None:
            st.caption(_("Choose beam search above (and Inspect again) to see its tree."))
            return
        st.markdown(
            _(
                "beam {size} → **{text}** (score {score})",
                size=beam.beam_size,
                text=beam.best_text or "∅",
                score=f"{beam.score:.3f}",
            )
        )
        data = pd.DataFrame(
            [
                {
                    "step": r.step,
                    "hypothesis": " ".join([*r.prefix, r.piece]),
                    "log_prob": r.log_prob,
                    "status": r.status,
                    "length": r.length,
                    "lp": r.penalty,
                    "score": r.score,
                    "finalist": r.finalist,
                    "best": r.best,
                }
                for r in beam.rows
            ]
        )
        st.altair_chart(charts.beam_chart(data), width="stretch")
        shown_rows = pickers.message_choice(_("Candidates"), BEAM_ROWS, key="inspect_beam_rows")
        table = data if shown_rows == BEAM_ROWS[1] else data[data["status"].eq("finished")]
        st.dataframe(
            table.assign(status=table["status"].map(charts.beam_status_label)),
            hide_index=True,
            width="stretch",
            column_config={
                "step": st.column_config.NumberColumn(_("step")),
                "hypothesis": st.column_config.TextColumn(_("hypothesis")),
                "status": st.column_config.TextColumn(_("status")),
                "length": st.column_config.NumberColumn(_("length")),
                "finalist": st.column_config.CheckboxColumn(_("finalist")),
                "best": st.column_config.CheckboxColumn(_("best")),
                "log_prob": st.column_config.NumberColumn("log P", format="%.3f"),
                "lp": st.column_config.NumberColumn("lp(|Y|)", format="%.3f"),
                "score": st.column_config.NumberColumn("log P / lp", format="%.3f"),
            },
        )
        formula = "lp(Y) = ((5 + |Y|) / 6)^α" if beam.penalty_kind == "gnmt" else "lp(Y) = |Y|^α"
        st.caption(
            _(
                "§6.1: beam search keeps the {size} most probable prefixes. Each step ranks the "
                "{candidates} best continuations by log P; those among the first {size} that "
                "end (EOS) are set aside as finished, the best others are kept, the rest pruned. "
                "When the best continuation has ended and enough have finished, the most "
                "probable finished hypotheses (finalists) are ranked by log P / lp(Y) with the "
                "length penalty {formula}, α = {alpha} (without it short outputs win). The "
                "ringed point is the translation returned.",
                size=beam.beam_size,
                candidates=2 * beam.beam_size,
                formula=formula,
                alpha=beam.alpha,
            )
        )


def neighbours_panel(shown: Any) -> None:
    seen = shown.inspection
    with st.container(border=True):
        st.subheader(_("What the model has learned: nearest neighbours"), anchor=False)
        options = [("src", i, p) for i, p in zip(seen.src_ids, seen.src_pieces, strict=True)]
        options += [("tgt", i, p) for i, p in zip(seen.out_ids, seen.out_pieces, strict=True)]
        options = [o for o in dict.fromkeys(options) if o[2] not in ("</s>", "<unk>")]
        if not options:
            st.caption(_("No piece to look up."))
            return
        labels = {
            o: _("source: {piece} (id {id})", piece=o[2], id=o[1])
            if o[0] == "src"
            else _("output: {piece} (id {id})", piece=o[2], id=o[1])
            for o in options
        }
        side, token_id, piece = st.selectbox(
            _("Piece"),
            options,
            format_func=labels.__getitem__,
            key="inspect_piece",
        )
        near = inspection.neighbours(shown.version.id, token_id, side)
        st.dataframe(
            pd.DataFrame([{"piece": c.piece, "id": c.id, "cosine": c.value} for c in near]),
            hide_index=True,
            column_config={
                "piece": st.column_config.TextColumn(_("piece")),
                "id": st.column_config.NumberColumn(_("id")),
                "cosine": st.column_config.ProgressColumn(
                    _("cosine"), format="%.2f", min_value=-1, max_value=1
                ),
            },
        )
        st.caption(
            _(
                "§3.4: the pieces whose embedding vectors point the same way as “{piece}”'s, by "
                "cosine similarity cos(a, b) = a·b / (‖a‖‖b‖). With a shared vocabulary one "
                "matrix serves both embeddings and the pre-softmax layer, so neighbours are also "
                "pieces the model predicts in similar contexts.",
                piece=piece,
            )
        )


def loss_panel(shown: Any) -> None:
    with st.container(border=True):
        st.subheader(_("The run that trained it"), anchor=False)
        if shown.metrics.empty:
            if shown.version.imported:
                st.caption(
                    _("Nobody trained this version here: it was added from elsewhere.")
                    + "  \n"
                    + formatting.lineage_line(shown.version)
                )
            else:
                st.caption(_("This version has no training run here (it was imported)."))
            return
        st.altair_chart(charts.loss_with_step(shown.metrics, shown.step), width="stretch")
        where = (
            _("step {step}", step=formatting.fmt_int(shown.step))
            if shown.step is not None
            else _("an unknown step")
        )
        st.caption(
            _(
                "§5: the training and validation loss (label-smoothed cross-entropy, §5.4) of "
                "the run. The dashed line marks {where}: {note}. Loss is in nats per piece: "
                "e^loss is the perplexity ({perplexity}).",
                where=where,
                note=localized(shown.step_note),
                perplexity=_perplexity(shown.metrics),
            )
        )


def _perplexity(metrics: pd.DataFrame) -> str:
    losses = metrics["train_loss"].dropna()
    if losses.empty:
        return _("no loss recorded")
    last = float(losses.iloc[-1])
    return _(
        "the last training loss {loss} is a perplexity of {perplexity}",
        loss=f"{last:.2f}",
        perplexity=f"{math.exp(last):.1f}",
    )
