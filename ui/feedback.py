"""What every page says to the user: its header, one-shot messages after an action, and
errors as one line (never a traceback).

Everything here is view code. Data comes from `workbench` services only.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import streamlit as st

from ui import navigation
from ui.i18n import _, translate
from workbench.errors import WorkbenchError

log = logging.getLogger("workbench.ui")

_FLASH = "_flash_messages"


@contextlib.contextmanager
def error_boundary(action: str | None = None) -> Iterator[None]:
    """Turn a failure into one `st.error` line instead of a traceback.

    `WorkbenchError` messages are meant for users and shown as they are, in the session's
    language when the error carries a message id; anything else is logged with its traceback
    on the server (in English: ``action`` is a message id, ``N_("saving the edits")``) and
    summarised. Streamlit's own control flow (`st.rerun`, `st.stop`) derives from
    BaseException and passes through untouched.
    """
    try:
        yield
    except WorkbenchError as exc:
        message = translate(exc.msgid, exc.params) if exc.msgid else str(exc)
        st.error(_sentence(message), icon=":material/error:")
    except Exception as exc:
        log.exception("unexpected error%s", f" while {action}" if action else "")
        error = f"{type(exc).__name__}: {exc}"
        st.error(
            _(
                "Something went wrong while {action}: {error}. Nothing was changed; the "
                "details are in the server log.",
                action=translate(action),
                error=error,
            )
            if action
            else _(
                "Something went wrong on this page: {error}. Nothing was changed; the details "
                "are in the server log.",
                error=error,
            ),
            icon=":material/error:",
        )


def _sentence(message: str) -> str:
    """``message`` begun with a capital when it begins with a word ("key name must …" → "Key
    name must …"); one that begins with a value (an address, a number, a quoted name) is shown
    as it is: "alice@example.org", never "Alice@…"."""
    message = message.strip()
    if not message:
        return _("The action failed.")
    if not message.split(maxsplit=1)[0].rstrip(",:;.").isalpha():
        return message
    return message[0].upper() + message[1:]


def page(ref: navigation.PageRef) -> Callable[[], None]:
    """What every page draws: its title (as the navigation names it), the line on what it is
    for, the messages left by the last action, then its body; all of it inside the error
    boundary, so no traceback ever reaches the browser."""

    def draw() -> None:
        with error_boundary():
            st.title(ref.label, anchor=False)
            st.caption(translate(ref.caption))
            show_flashes()
            ref.render()

    return draw


def flash(message: str, kind: str = "success") -> None:
    """Show `message` on the next run (actions end with `st.rerun()` to refresh the data)."""
    st.session_state.setdefault(_FLASH, []).append((kind, message))


def show_flashes() -> None:
    for kind, message in st.session_state.pop(_FLASH, []):
        icon = {
            "success": ":material/check_circle:",
            "info": ":material/info:",
            "warning": ":material/warning:",
        }.get(kind)
        getattr(st, kind, st.info)(message, icon=icon)


def empty_state(message: str, go_to: navigation.PageRef | None = None) -> None:
    """What a page shows while it has nothing to work on yet (no corpus, no version): why,
    and a link to the page where that starts."""
    st.info(message, icon=":material/info:")
    if go_to is not None:
        navigation.link(go_to, _("Go to {page}", page=go_to.label))
