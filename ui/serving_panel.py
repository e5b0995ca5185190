"""Serving over HTTP on the Models page: whether a version is served (and the request that
calls it), the served pairs, and the API keys (created, shown once, revoked).

The server itself runs apart (``python -m workbench serve``) and reads the same database:
what is chosen here takes effect there at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import streamlit as st

from ui import dialogs, feedback
from ui.signin import can
from workbench.serving import api_keys, served
from workbench.team import access
from workbench.team.access import Permission

if TYPE_CHECKING:
    from workbench.models.registry import VersionInfo

SERVE_HELP = (
    "Start the server with `python -m workbench serve` (it listens on 127.0.0.1:5000 by "
    'default). With `--require-keys`, add `"api_key": "…"` to the request body.'
)


def version_serving(version: VersionInfo) -> None:
    """Is this version served, what would serving it replace, and how to call it."""
    pairs = served.list_served()
    mine = next((p for p in pairs if p.version_id == version.id), None)
    other = next(
        (p for p in pairs if (p.src_lang, p.tgt_lang) == (version.src_lang, version.tgt_lang)),
        None,
    )
    pair = f"{version.src_lang}→{version.tgt_lang}"
    st.markdown("**Serving over HTTP**")
    if mine is not None:
        st.markdown(f":green-badge[:material/cloud_done: served] answers {pair} requests")
        if can(Permission.SERVE) and st.button(
            "Stop serving", icon=":material/cloud_off:", key="stop_serving"
        ):
            with feedback.error_boundary("stopping serving"):
                served.stop_serving(version.id)
                feedback.flash(f"Version #{version.id} no longer answers {pair} requests.")
                st.rerun()
    else:
        now = f"version #{other.version_id} answers them now" if other else "no version does"
        st.markdown(f":gray-badge[not served] for {pair}, {now}")
        if can(Permission.SERVE) and st.button(
            "Serve this version", icon=":material/cloud_upload:", key="serve_version"
        ):
            with feedback.error_boundary("serving the version"):
                served.serve_version(version.id)
                feedback.flash(f"Version #{version.id} now answers {pair} requests over HTTP.")
                st.rerun()
    st.code(
        served.curl_example(version.src_lang, version.tgt_lang), language="bash", wrap_lines=True
    )
    st.caption(SERVE_HELP)


def served_column(version_ids: list[int]) -> list[str]:
    """For the versions table: the pair each version answers for over HTTP, or nothing."""
    pairs = {p.version_id: p.pair for p in served.list_served()}
    return [pairs.get(int(i), "") for i in version_ids]


def http_api_tab() -> None:
    """The served pairs and the API keys."""
    pairs = served.list_served()
    st.markdown("**Served language pairs**")
    if pairs:
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "pair": p.pair,
                        "version": p.version_id,
                        "name": p.version_name,
                        "since": p.since,
                    }
                    for p in pairs
                ]
            ),
            hide_index=True,
            column_config={
                "version": st.column_config.NumberColumn("version", format="#%d"),
                "since": st.column_config.DatetimeColumn("since", format="YYYY-MM-DD HH:mm"),
            },
        )
    else:
        st.caption("None yet: pick a version under “Manage a version” and click Serve.")
    st.markdown("**API keys**")
    if not can(Permission.API_KEYS):
        st.caption("Only an admin can see and manage API keys.")
        return
    _create_key_form()
    keys = api_keys.list_keys()
    if not keys:
        st.caption("No API keys: without keys, serve on 127.0.0.1 only (the default).")
        return
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "id": k.id,
                    "name": k.name,
                    "key": k.shown,
                    "role": str(k.role),
                    "requests/min": k.requests_per_minute,
                    "characters/request": k.chars_per_request,
                    "created": k.created_at,
                    "revoked": k.revoked_at,
                }
                for k in keys
            ]
        ),
        hide_index=True,
        column_config={
            "requests/min": st.column_config.NumberColumn(help="Empty: the server's default"),
            "characters/request": st.column_config.NumberColumn(help="Empty: the server's default"),
            "created": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
            "revoked": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
        },
    )
    active = {k.id: k for k in keys if k.active}
    if not active:
        return
    row = st.columns([3, 1], vertical_alignment="bottom")
    chosen = row[0].selectbox(
        "Key to revoke",
        list(active),
        format_func=lambda i: f"#{i} {active[i].name} · {active[i].shown}",
        key="revoke_key_choice",
    )
    if row[1].button("Revoke…", icon=":material/key_off:", key="revoke_key", width="stretch"):
        dialogs.ask_confirmation("revoke_key")
    key = active[chosen]
    dialogs.confirmation_dialog(
        "revoke_key",
        "Revoke API key",
        f"Revoke key **#{key.id} {key.name}** ({key.shown})? Programs using it are refused "
        "from now on. This cannot be undone.",
        "Revoke key",
        lambda: _revoke(key.id),
    )


def _revoke(key_id: int) -> str:
    api_keys.revoke_key(key_id)
    return f"Revoked API key #{key_id}."


def _create_key_form() -> None:
    with st.form("create_api_key", border=True):
        cols = st.columns([2, 1, 1, 1], vertical_alignment="bottom")
        name = cols[0].text_input("New key for", placeholder="e.g. the CAT-tool plugin")
        rpm = cols[1].number_input("Requests per minute", min_value=1, value=None, step=10)
        chars = cols[2].number_input("Characters per request", min_value=1, value=None, step=1000)
        role = cols[3].selectbox(
            "Role",
            [str(r) for r in access.ROLES],
            key="api_key_role",
            help="What requests with the key may do: a viewer's key translates only.",
        )
        created = st.form_submit_button("Create key", icon=":material/key:")
    if created:
        with feedback.error_boundary("creating the key"):
            new = api_keys.create_key(
                name,
                int(rpm) if rpm is not None else None,
                int(chars) if chars is not None else None,
                role,
            )
            st.success(
                f"Key #{new.info.id} for “{new.info.name}”: copy it now, it is shown only "
                "this once (only a digest of it is stored).",
                icon=":material/key:",
            )
            st.code(new.key, language=None)
