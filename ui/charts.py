"""The Altair charts of the pages: loss and learning-rate curves, length histograms, the
attention heat-maps (one, or a layer × head grid), and the Inspect page's views of positions,
decoding steps and beam search."""

from __future__ import annotations

import json
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from ui.i18n import N_, _, translate


def training_losses(metrics: pd.DataFrame) -> pd.DataFrame:
    """The metric rows of the training-loss curve: the training loop's 'loss' rows (each the
    mean of the steps since the one before; runs recorded before them carried the loss on
    their periodic 'step' rows)."""
    return metrics[metrics["kind"].isin(("loss", "step")) & metrics["train_loss"].notna()]


def _long_losses(metrics: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """Training and validation losses in long form (step, loss, curve[, by]).

    `training_losses` make the training curve and the epoch ends (kind 'epoch', after
    validation) the validation curve. An epoch row's training loss is the whole epoch's
    mean, not the recent steps' (the training curve would zigzag), and the 'done' row
    repeats the final model's scores at the last step: neither belongs on the training curve.
    """
    keys = [by] if by else []
    train = training_losses(metrics)
    if train.empty:  # a run recorded before the loop reported its loss curve, too short for it
        train = metrics.dropna(subset=["train_loss"])
    valid = metrics[metrics["kind"].eq("epoch") & metrics["valid_loss"].notna()]
    frames = [train.assign(curve=_("training"), loss=train["train_loss"])]
    if not valid.empty:
        frames.append(valid.assign(curve=_("validation"), loss=valid["valid_loss"]))
    out = pd.concat(frames, ignore_index=True)
    return out[["step", "loss", "curve", *keys]]


def loss_chart(metrics: pd.DataFrame, by: str | None = None, height: int = 260) -> alt.Chart:
    """Loss against step; `by` (e.g. a version label) colours several runs on one chart."""
    data = _long_losses(metrics, by)
    color = alt.Color(
        f"{by or 'curve'}:N",
        title=by or None,
        scale=alt.Scale(scheme="tableau10"),
        legend=alt.Legend(orient="top", labelLimit=360),
    )
    base = alt.Chart(data).encode(
        x=alt.X("step:Q", title=_("step")),
        y=alt.Y("loss:Q", title=_("loss"), scale=alt.Scale(zero=False)),
        color=color,
        tooltip=[
            alt.Tooltip("step:Q"),
            alt.Tooltip("curve:N"),
            alt.Tooltip("loss:Q", format=".3f"),
            *([alt.Tooltip(f"{by}:N")] if by else []),
        ],
    )
    dash = alt.StrokeDash("curve:N", title=None, legend=alt.Legend(orient="top"))
    lines = base.mark_line().encode(strokeDash=dash)
    points = base.transform_filter(alt.datum.curve == _("validation")).mark_point(filled=True)
    return (lines + points).properties(height=height)


def lr_chart(metrics: pd.DataFrame, height: int = 260) -> alt.Chart:
    data = metrics.dropna(subset=["lr"])[["step", "lr"]]
    return (
        alt.Chart(data)
        .mark_line(color="#7c5cff")
        .encode(
            x=alt.X("step:Q", title=_("step")),
            y=alt.Y("lr:Q", title=_("learning rate"), axis=alt.Axis(format=".1e")),
            tooltip=[alt.Tooltip("step:Q"), alt.Tooltip("lr:Q", format=".2e")],
        )
        .properties(height=height)
    )


def curves(metrics: pd.DataFrame) -> None:
    """A run's loss curves beside its learning-rate curve."""
    columns = st.columns([3, 2])
    columns[0].altair_chart(loss_chart(metrics), width="stretch")
    columns[1].altair_chart(lr_chart(metrics), width="stretch")


def length_histogram(tokens: pd.Series, color: str) -> alt.Chart:
    """Pairs per sentence length; whole-token bins (lengths are integers)."""
    data = pd.DataFrame({"tokens": tokens})
    return (
        alt.Chart(data)
        .mark_bar(color=color, opacity=0.9)
        .encode(
            x=alt.X(
                "tokens:Q",
                bin=alt.Bin(maxbins=40, minstep=1),
                title=_("length (tokens)"),
                axis=alt.Axis(format="d"),
            ),
            y=alt.Y("count():Q", title=_("pairs")),
            tooltip=[
                alt.Tooltip("tokens:Q", bin=alt.Bin(maxbins=40, minstep=1), title=_("length")),
                alt.Tooltip("count():Q", title=_("pairs")),
            ],
        )
        .properties(height=240)
    )


MASKED_COLOR = "#e8e8e8"  # a cell the attention mask hides (weight 0 by construction)


def attention_chart(
    item: dict[str, Any],
    x_title: str | None = None,
    y_title: str | None = None,
    masked: list[list[bool]] | None = None,
) -> alt.Chart:
    """Heat-map of [len(out), len(src)] weights; positions keep repeated pieces apart.
    `masked` cells (a key the mask hides from that query) are drawn grey, not as weight 0."""
    src, out, weights = item["src_pieces"], item["out_pieces"], item["attention"]
    rows = [
        {
            "out": o,
            "src": s,
            "weight": float(weights[o][s]),
            "masked": bool(masked[o][s]) if masked is not None else False,
        }
        for o in range(min(len(out), len(weights)))
        for s in range(min(len(src), len(weights[o])))
    ]
    data = pd.DataFrame(rows)
    src_labels, out_labels = json.dumps(src), json.dumps(out)
    cell = 30
    return (
        alt.Chart(data)
        .mark_rect()
        .encode(
            x=alt.X(
                "src:O",
                title=x_title or _("source pieces"),
                axis=alt.Axis(
                    labelExpr=f"{src_labels}[datum.value]",
                    labelAngle=0 if max(map(len, src), default=0) <= 4 else -40,
                    orient="top",
                ),
            ),
            y=alt.Y(
                "out:O",
                title=y_title or _("output pieces"),
                axis=alt.Axis(labelExpr=f"{out_labels}[datum.value]"),
            ),
            color=alt.condition(
                alt.datum.masked,
                alt.value(MASKED_COLOR),
                alt.Color(
                    "weight:Q", scale=alt.Scale(scheme="blues", domainMin=0), title=_("weight")
                ),
            ),
            tooltip=[
                alt.Tooltip("weight:Q", format=".2f"),
                alt.Tooltip("src:O", title=_("key position") if masked else "source position"),
                alt.Tooltip("out:O", title=_("query position") if masked else "output position"),
                *([alt.Tooltip("masked:N")] if masked is not None else []),
            ],
        )
        .properties(width=max(240, cell * len(src)), height=max(160, cell * len(out)))
    )


def attention_grid(data: pd.DataFrame) -> alt.Chart:
    """Small multiples: one heat-map per layer (rows) and head (columns) of long-form data
    (layer, head, query, key, weight, masked); masked cells grey."""
    queries, keys = int(data["query"].max()) + 1, int(data["key"].max()) + 1
    cell = max(3, min(12, 150 // max(queries, keys)))  # pixels: a map of about 150 px
    return (
        alt.Chart(data)
        .mark_rect()
        .encode(
            x=alt.X("key:O", axis=None),
            y=alt.Y("query:O", axis=None),
            color=alt.condition(
                alt.datum.masked,
                alt.value(MASKED_COLOR),
                alt.Color(
                    "weight:Q",
                    scale=alt.Scale(scheme="blues", domain=[0, 1]),
                    title=_("weight"),
                ),
            ),
            tooltip=[
                alt.Tooltip("layer:O"),
                alt.Tooltip("head:O"),
                alt.Tooltip("query:O", title=_("query position")),
                alt.Tooltip("key:O", title=_("key position")),
                alt.Tooltip("weight:Q", format=".2f"),
            ],
        )
        .properties(width=cell * keys, height=cell * queries)
        .facet(
            row=alt.Row("layer:O", title=_("layer"), header=alt.Header(labelAngle=0)),
            column=alt.Column("head:O", title=_("head")),
            spacing=6,
        )
    )


def positional_chart(data: pd.DataFrame, marked: int) -> alt.Chart:
    """The sinusoid table (position, dimension, value) as a heat-map; the first `marked`
    positions (the sentence's) solid, the others faded."""
    return (
        alt.Chart(data)
        .mark_rect()
        .encode(
            x=alt.X("dimension:O", title=_("dimension i"), axis=alt.Axis(labelOverlap=True)),
            y=alt.Y("position:O", title=_("position")),
            color=alt.Color(
                "value:Q", scale=alt.Scale(scheme="redblue", domain=[-1, 1]), title=_("PE")
            ),
            opacity=alt.condition(alt.datum.position < marked, alt.value(1.0), alt.value(0.25)),
            tooltip=["position:O", "dimension:O", alt.Tooltip("value:Q", format=".3f")],
        )
        .properties(height=max(120, 14 * data["position"].nunique()))
    )


def norms_chart(data: pd.DataFrame) -> alt.Chart:
    """‖embedding‖ and ‖PE‖ per source position (position, piece, signal, norm), grouped."""
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("position:O", title=_("source position")),
            xOffset="signal:N",
            y=alt.Y("norm:Q", title=_("L2 norm")),
            color=alt.Color("signal:N", title=None, legend=alt.Legend(orient="top")),
            tooltip=["position:O", "piece:N", "signal:N", alt.Tooltip("norm:Q", format=".2f")],
        )
        .properties(height=220)
    )


def top_k_chart(data: pd.DataFrame) -> alt.Chart:
    """The k most probable next pieces of a step (rank, piece, prob, chosen)."""
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y("label:N", sort=alt.EncodingSortField("rank"), title=None),
            x=alt.X("prob:Q", title=_("probability"), scale=alt.Scale(domain=[0, 1])),
            color=alt.condition(alt.datum.chosen, alt.value("#2f6fdf"), alt.value("#b8c7e6")),
            tooltip=["piece:N", "id:Q", alt.Tooltip("prob:Q", format=".3f")],
        )
        .properties(height=alt.Step(26))
    )


BEAM_COLORS = {"kept": "#2f6fdf", "finished": "#2a9d4b", "pruned": "#bbbbbb", "stopped": "#e39b2d"}
# core_model.beam_history.BEAM_STATUSES (stored in English; core_model knows no catalog): each
# status is its own message id, shown in the session's language.
BEAM_STATUS_LABELS = (N_("kept"), N_("finished"), N_("pruned"), N_("stopped"))


def beam_status_label(status: str) -> str:
    """A beam candidate's status in the session's language."""
    return translate(status)


def beam_chart(data: pd.DataFrame) -> alt.Chart:
    """Beam search candidates (step, log_prob, status, hypothesis, ...): each step's 2K
    best continuations by log-probability, coloured by what became of them; the returned
    translation is the ringed point."""
    statuses = [s for s in BEAM_COLORS if s in set(data["status"])]
    data = data.assign(state=data["status"].map(beam_status_label))  # shown; status: stored
    base = alt.Chart(data).encode(
        x=alt.X("step:O", title=_("step")),
        y=alt.Y("log_prob:Q", title=_("log P(prefix)")),
        tooltip=[
            "step:O",
            "hypothesis:N",
            alt.Tooltip("state:N", title=_("status")),
            alt.Tooltip("log_prob:Q", format=".3f"),
            alt.Tooltip("score:Q", format=".3f", title=_("log P / lp")),
        ],
    )
    points = base.mark_circle(size=70, opacity=0.85).encode(
        color=alt.Color(
            "state:N",
            scale=alt.Scale(
                domain=[beam_status_label(s) for s in statuses],
                range=[BEAM_COLORS[s] for s in statuses],
            ),
            legend=alt.Legend(orient="top", title=None),
        )
    )
    best = base.transform_filter(alt.datum.best).mark_point(size=260, color="#111", strokeWidth=2)
    return (points + best).properties(height=280)


def loss_with_step(metrics: pd.DataFrame, step: int | None) -> alt.Chart:
    """A run's loss curves with a rule at the step a version's weights come from."""
    chart = loss_chart(metrics)
    if step is None:
        return chart
    rule = (
        alt.Chart(
            pd.DataFrame({"step": [step], "label": [_("this version (step {step})", step=step)]})
        )
        .mark_rule(color="#d62728", strokeDash=[4, 3], strokeWidth=2)
        .encode(x="step:Q", tooltip=["label:N"])
    )
    return chart + rule
