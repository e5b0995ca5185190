"""The Altair charts of the pages: loss and learning-rate curves, length histograms and the
cross-attention heat-map."""

from __future__ import annotations

import json
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st


def _long_losses(metrics: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """Training and validation losses in long form (step, loss, curve[, by]).

    The periodic rows (kind 'step') make the training curve and the epoch ends (kind 'epoch',
    after validation) the validation curve. An epoch row's training loss is the whole epoch's
    mean, not the recent window's (the training curve would zigzag), and the 'done' row
    repeats the final model's scores at the last step: neither belongs on the training curve.
    """
    keys = [by] if by else []
    train = metrics[metrics["kind"].eq("step") & metrics["train_loss"].notna()]
    if train.empty:  # a run too short for a periodic row
        train = metrics.dropna(subset=["train_loss"])
    valid = metrics[metrics["kind"].eq("epoch") & metrics["valid_loss"].notna()]
    frames = [train.assign(curve="training", loss=train["train_loss"])]
    if not valid.empty:
        frames.append(valid.assign(curve="validation", loss=valid["valid_loss"]))
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
        x=alt.X("step:Q", title="step"),
        y=alt.Y("loss:Q", title="loss", scale=alt.Scale(zero=False)),
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
    points = base.transform_filter(alt.datum.curve == "validation").mark_point(filled=True)
    return (lines + points).properties(height=height)


def lr_chart(metrics: pd.DataFrame, height: int = 260) -> alt.Chart:
    data = metrics.dropna(subset=["lr"])[["step", "lr"]]
    return (
        alt.Chart(data)
        .mark_line(color="#7c5cff")
        .encode(
            x=alt.X("step:Q", title="step"),
            y=alt.Y("lr:Q", title="learning rate", axis=alt.Axis(format=".1e")),
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
                title="length (tokens)",
                axis=alt.Axis(format="d"),
            ),
            y=alt.Y("count():Q", title="pairs"),
            tooltip=[
                alt.Tooltip("tokens:Q", bin=alt.Bin(maxbins=40, minstep=1), title="length"),
                alt.Tooltip("count():Q", title="pairs"),
            ],
        )
        .properties(height=240)
    )


def attention_chart(item: dict[str, Any]) -> alt.Chart:
    """Heat-map of [len(out), len(src)] weights; positions keep repeated pieces apart."""
    src, out, weights = item["src_pieces"], item["out_pieces"], item["attention"]
    rows = [
        {"out": o, "src": s, "weight": float(weights[o][s])}
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
                title="source pieces",
                axis=alt.Axis(
                    labelExpr=f"{src_labels}[datum.value]",
                    labelAngle=0 if max(map(len, src), default=0) <= 4 else -40,
                    orient="top",
                ),
            ),
            y=alt.Y(
                "out:O",
                title="output pieces",
                axis=alt.Axis(labelExpr=f"{out_labels}[datum.value]"),
            ),
            color=alt.Color(
                "weight:Q", scale=alt.Scale(scheme="blues", domainMin=0), title="weight"
            ),
            tooltip=[
                alt.Tooltip("weight:Q", format=".2f"),
                alt.Tooltip("src:O", title="source position"),
                alt.Tooltip("out:O", title="output position"),
            ],
        )
        .properties(width=max(240, cell * len(src)), height=max(160, cell * len(out)))
    )
