"""Confirmation dialogs: an action that cannot be undone asks first."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from ui.feedback import error_boundary, flash
from ui.i18n import _


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
        if right.button(_("Cancel"), key=f"{key}_cancel", width="stretch"):
            close()
            st.rerun()

    dialog()
