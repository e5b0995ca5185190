"""Widgets and helpers shared by the pages: the error boundary, one-shot messages, pickers,
confirmation dialogs, the demo seeding and the Altair curves.

Everything here is view code. Data comes from `workbench` services only.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

import altair as alt
import pandas as pd
import streamlit as st

from workbench import demo
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench.corpus import CorpusInfo
    from workbench.registry import VersionInfo

log = logging.getLogger("workbench.ui")

APP_TITLE = "Translation workbench"
CORPUS_PAGE = "ui/corpus_page.py"
TRAIN_PAGE = "ui/train_page.py"
TRANSLATE_PAGE = "ui/translate_page.py"
MODELS_PAGE = "ui/models_page.py"

CURRENT_CORPUS = "current_corpus_id"  # view state shared by the pages (not a widget key)
CURRENT_VERSION = "current_version_id"
_FLASH = "_flash_messages"
_PENDING = "_pending_selection"


# ------------------------------------------------------------------------------ errors


@contextlib.contextmanager
def error_boundary(action: str | None = None) -> Iterator[None]:
    """Turn a failure into one `st.error` line instead of a traceback.

    `WorkbenchError` messages are meant for users and shown as they are; anything else is
    logged with its traceback on the server and summarised. Streamlit's own control flow
    (`st.rerun`, `st.stop`) derives from BaseException and passes through untouched.
    """
    try:
        yield
    except WorkbenchError as exc:
        st.error(_sentence(str(exc)), icon=":material/error:")
    except Exception as exc:
        log.exception("unexpected error%s", f" while {action}" if action else "")
        what = f"while {action}" if action else "on this page"
        st.error(
            f"Something went wrong {what}: {type(exc).__name__}: {exc}. "
            "Nothing was changed; the details are in the server log.",
            icon=":material/error:",
        )


def _sentence(message: str) -> str:
    message = message.strip()
    if not message:
        return "The action failed."
    return message[0].upper() + message[1:]


def run_page(render: Callable[[], None]) -> None:
    """Run a page inside the error boundary: no traceback ever reaches the browser."""
    with error_boundary():
        render()


def page_header(title: str, caption: str) -> None:
    """Title, one line on what the page is for, then the messages left by the last action."""
    st.title(title, anchor=False)
    st.caption(caption)
    show_flashes()


_STYLE = """
<style>
/* Less empty space between the top navigation and the page title. */
[data-testid="stMainBlockContainer"] { padding-top: 3.5rem; }
</style>
"""


def apply_style() -> None:
    st.html(_STYLE)


# ----------------------------------------------------------------------- flash messages


def flash(message: str, kind: str = "success") -> None:
    """Show `message` on the next run (actions end with `st.rerun()` to refresh the data)."""
    st.session_state.setdefault(_FLASH, []).append((kind, message))


def show_flashes() -> None:
    for kind, message in st.session_state.pop(_FLASH, []):
        icon = {"success": ":material/check_circle:", "info": ":material/info:"}.get(kind)
        getattr(st, kind, st.info)(message, icon=icon)


# ---------------------------------------------------------------------------- pickers

PairScope = Literal["all", "training", "snapshot"]


def pair_count_label(n: int, scope: PairScope) -> str:
    """One wording per kind of pair count, so that counts of one corpus that differ say why:
    'all' = every pair of a corpus, whatever its split; 'training' = the pairs a run learns
    from; 'snapshot' = what a version was trained on (the corpus may have changed since)."""
    if scope == "all":
        return f"{plural(n, 'pair')} (all splits)"
    if scope == "training":
        return plural(n, "training pair")
    return f"trained on {plural(n, 'pair')} (snapshot)"


def corpus_label(c: CorpusInfo) -> str:
    return f"{c.name} · {c.src_lang}→{c.tgt_lang} · {pair_count_label(c.pair_count, 'all')}"


def select_later(key: str, value: Any) -> None:
    """Make the picker with widget `key` show `value` on the next run (a widget's value can
    only be changed before the widget is drawn)."""
    st.session_state.setdefault(_PENDING, {})[key] = value


def keep_label_fresh(key: str, shown: Any) -> None:
    """Call before drawing the keyed widget `key` whose chosen option(s) read `shown`.

    The browser keeps showing the label it was sent with the choice (e.g. "… · 48 pairs")
    even when the options are re-sent with new labels (49 pairs after a Save, a new name after
    a rename). Re-assigning the value makes Streamlit send the choice again, with its label.
    """
    sent = f"_label_sent:{key}"
    if key in st.session_state and st.session_state.get(sent) != shown:
        st.session_state[key] = st.session_state[key]
    st.session_state[sent] = shown


def _prepare_picker(key: str, labels: dict[Any, str], shared: str) -> None:
    """Give a keyed picker its value before it is drawn: a pending choice, else its own last
    value if still valid, else the choice shared across pages, else the first option."""
    options = list(labels)
    pending = st.session_state.get(_PENDING, {})
    if key in pending and pending[key] in options:
        st.session_state[key] = pending.pop(key)
    elif st.session_state.get(key) not in options:
        current = st.session_state.get(shared)
        st.session_state[key] = current if current in options else options[0]
    keep_label_fresh(key, labels[st.session_state[key]])


def corpus_picker(
    corpora: Sequence[CorpusInfo], *, key: str, label: str = "Corpus", help: str | None = None
) -> CorpusInfo:
    """A selectbox over the corpora; the choice is remembered across pages."""
    by_id = {c.id: c for c in corpora}
    labels = {i: corpus_label(c) for i, c in by_id.items()}
    _prepare_picker(key, labels, CURRENT_CORPUS)
    chosen = st.selectbox(label, list(by_id), format_func=labels.__getitem__, key=key, help=help)
    st.session_state[CURRENT_CORPUS] = chosen
    return by_id[chosen]


def version_label(v: VersionInfo) -> str:
    return f"#{v.id} {v.name} · {v.src_lang}→{v.tgt_lang}"


def version_picker(
    versions: Sequence[VersionInfo], *, key: str, label: str = "Model version"
) -> VersionInfo:
    """A selectbox over the versions (newest first); the choice is remembered across pages."""
    by_id = {v.id: v for v in versions}
    labels = {i: version_label(v) for i, v in by_id.items()}
    _prepare_picker(key, labels, CURRENT_VERSION)
    chosen = st.selectbox(label, list(by_id), format_func=labels.__getitem__, key=key)
    st.session_state[CURRENT_VERSION] = chosen
    return by_id[chosen]


DECODINGS = ("Greedy", "Beam search")


def decoding_picker(prefix: str) -> int:
    """Greedy or beam search (and its width); returns the beam size, 1 for greedy. Widget keys
    are `{prefix}_mode` and `{prefix}_beam`."""
    mode = st.segmented_control(
        "Decoding",
        DECODINGS,
        default=DECODINGS[0],
        key=f"{prefix}_mode",
        help="Greedy takes the likeliest next piece; beam search keeps several candidate "
        "translations and is usually a little better, and slower.",
    )
    if mode == "Beam search":
        return int(st.slider("Beam size", 2, 8, 4, key=f"{prefix}_beam"))
    return 1


# ------------------------------------------------------------------------ confirmation


def ask_confirmation(key: str) -> None:
    """Open the confirmation dialog `key` (drawn by `confirmation_dialog` on this run)."""
    st.session_state[f"_confirm:{key}"] = True


def confirmation_dialog(
    key: str,
    title: str,
    message: str,
    confirm_label: str,
    action: Callable[[], str | None],
) -> None:
    """Draw the dialog while it is requested. `action` runs on confirmation; the message it
    returns is shown after the page refreshes. Errors stay inside the dialog.

    The open/closed state lives in session_state (not only in the button that opened it), so
    the dialog survives the reruns its own buttons cause.
    """
    state_key = f"_confirm:{key}"
    if not st.session_state.get(state_key):
        return

    def close() -> None:
        st.session_state.pop(state_key, None)

    @st.dialog(title, on_dismiss=close)
    def dialog() -> None:
        st.markdown(message)
        left, right = st.columns(2)
        if left.button(confirm_label, type="primary", key=f"{key}_confirm", width="stretch"):
            with error_boundary(title.lower()):
                done = action()
                close()
                if done:
                    flash(done)
                st.rerun()
        if right.button("Cancel", key=f"{key}_cancel", width="stretch"):
            close()
            st.rerun()

    dialog()


# ------------------------------------------------------------------------------- demo


@st.cache_resource(show_spinner=False)
def _seed_demo(database: str) -> dict[str, Any]:
    """Once per server process and database: add the demo corpus to an empty database."""
    info = demo.ensure_demo_corpus()
    return {"name": info.name if info is not None else None, "announced": False}


def database_key() -> str:
    """Which database this process talks to (a cache key; no connection is opened)."""
    return os.environ.get("WORKBENCH_DB_URL") or os.path.abspath(
        os.environ.get("WORKBENCH_HOME") or "./workbench_data"
    )


def seed_demo() -> None:
    """Add the demo corpus on first start (see `workbench.demo`) and say so, once."""
    with error_boundary("adding the demo corpus"):
        seeded = _seed_demo(database_key())
        if seeded["name"] and not seeded["announced"]:
            seeded["announced"] = True
            st.toast(
                f"Added the demo corpus “{seeded['name']}”. Open **Train** and click Train "
                "to try it.",
                icon=":material/waving_hand:",
            )


# ----------------------------------------------------------------------------- charts


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


# ---------------------------------------------------------------------------- formats


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:  # None or NaN
        return "—"
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 pair', '2 pairs', '1,000 pairs'."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def fmt_number(value: float | None, digits: int = 3) -> str:
    if value is None or value != value:
        return "—"
    return f"{value:,.{digits}f}"


def curves(metrics: pd.DataFrame) -> None:
    """A run's loss curves beside its learning-rate curve."""
    charts = st.columns([3, 2])
    charts[0].altair_chart(loss_chart(metrics), width="stretch")
    charts[1].altair_chart(lr_chart(metrics), width="stretch")


def no_versions_notice(message: str) -> None:
    """The empty state of the pages that need a trained version."""
    st.info(message, icon=":material/info:")
    st.page_link(TRAIN_PAGE, label="Go to Train", icon=":material/model_training:")
