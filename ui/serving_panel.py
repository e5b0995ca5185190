"""Serving over HTTP on the Models page: whether a version is served, the server that
answers (started here on demand, stopped here), the request that calls it, the served pairs,
and the API keys (created, shown once, revoked).

The server is ``python -m workbench serve`` on this machine (``serving.launcher``): it
reads the same database, so what is chosen here takes effect there at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd
import streamlit as st

from ui import dialogs, feedback, formatting, pickers
from ui.i18n import N_, _
from ui.signin import can, role_label
from workbench.serving import api_keys, launcher, served
from workbench.serving.config import ServeConfig
from workbench.team.access import Permission

if TYPE_CHECKING:
    from workbench.models.registry import VersionInfo
    from workbench.serving.launcher import ServerState

# The server states that change by themselves soon: the page checks every FOLLOW_S seconds
# while it shows one of them, and not at all otherwise (an open tab does no work).
SETTLING = ("starting", "loading")
FOLLOW_S = 1.0


def version_serving(version: VersionInfo) -> None:
    """Is this version served, what would serving it replace, is the server running, and
    how to call it."""
    pairs = served.list_served()
    mine = next((p for p in pairs if p.version_id == version.id), None)
    other = next(
        (p for p in pairs if (p.src_lang, p.tgt_lang) == (version.src_lang, version.tgt_lang)),
        None,
    )
    pair = f"{version.src_lang}→{version.tgt_lang}"
    st.markdown("**" + _("Serving over HTTP") + "**")
    state = None
    with feedback.error_boundary(N_("reading the server's state")):
        state = launcher.server_state()
    if mine is not None:
        st.markdown(
            _(":green-badge[:material/cloud_done: served] answers {pair} requests", pair=pair)
            if state is not None and state.answering
            else _(
                ":green-badge[:material/cloud_done: served] for {pair}: its requests are "
                "answered once the server runs",
                pair=pair,
            )
        )
        if can(Permission.SERVE) and st.button(
            _("Stop serving"), icon=":material/cloud_off:", key="stop_serving"
        ):
            with feedback.error_boundary(N_("stopping serving")):
                served.stop_serving(version.id)
                feedback.flash(
                    _(
                        "Version #{id} no longer answers {pair} requests.",
                        id=version.id,
                        pair=pair,
                    )
                )
                st.rerun()
    else:
        if other:
            st.markdown(
                _(
                    ":gray-badge[not served] for {pair}, version #{id} answers them now",
                    pair=pair,
                    id=other.version_id,
                )
                if state is not None and state.answering
                else _(
                    ":gray-badge[not served] for {pair}: version #{id} is served for it, "
                    "answering once the server runs",
                    pair=pair,
                    id=other.version_id,
                )
            )
        else:
            st.markdown(_(":gray-badge[not served] for {pair}, no version does", pair=pair))
        if can(Permission.SERVE) and st.button(
            _("Serve this version"), icon=":material/cloud_upload:", key="serve_version"
        ):
            with feedback.error_boundary(N_("serving the version")):
                state = _start_server()  # first: a server that cannot start changes nothing
                served.serve_version(version.id)
                feedback.flash(
                    _(
                        "Version #{id} now answers {pair} requests at {url}.",
                        id=version.id,
                        pair=pair,
                        url=state.url,
                    )
                    if state.answering
                    else _(
                        "Version #{id} is served for {pair}; the server at {url} is still "
                        "starting.",
                        id=version.id,
                        pair=pair,
                        url=state.url,
                    )
                )
                st.rerun()
    if state is None:
        return
    _server_line(state, startable=mine is not None)
    st.code(
        served.curl_example(version.src_lang, version.tgt_lang, state.url),
        language="bash",
        wrap_lines=True,
    )
    if state.status in SETTLING:
        st.fragment(_follow_server, run_every=FOLLOW_S)(state.status)


def _follow_server(drawn: str) -> None:
    """While the server starts or loads its versions, the page follows it: it is drawn again
    once the server's state is no longer ``drawn`` (and then this check stops)."""
    with feedback.error_boundary(N_("reading the server's state")):
        if launcher.server_state().status != drawn:
            st.rerun()


def _start_server() -> ServerState:
    with st.spinner(_("Starting the HTTP server…")):
        return launcher.start_server()


def _server_line(state: ServerState, startable: bool) -> None:
    """The server's state in one line, the button that changes it (Start: when the version is
    served, else "Serve this version" starts it), and what it is."""
    if state.answering:
        line = _(":green-badge[:material/dns: **server running**] at {url}", url=state.url)
        if state.status == "loading":
            line += " · " + _("loading the served versions…")
    elif state.status == "starting":
        line = _(":orange-badge[**server starting**] at {url}", url=state.url)
    else:
        line = _(
            ":gray-badge[**server not running**] nothing answers at {url}: the request below "
            "is refused until it runs",
            url=state.url,
        )
    st.markdown(line)
    if state.status == "error" and state.error:
        st.warning(state.error, icon=":material/warning:")
    if can(Permission.SERVE):
        _server_button(state, startable)
    if state.pid is not None:
        about = _(
            "Started here (PID {pid}): it listens on this machine only, without API keys, and "
            "keeps running when this page or the app closes, until it is stopped here. Its "
            "output: {log}.",
            pid=state.pid,
            log="logs/server.log",
        )
    elif state.answering:
        about = _(
            "Started outside this app (e.g. `{command}`): stop it where it runs.",
            command="python -m workbench serve",
        )
    else:
        about = _(
            "“Serve this version” or “Start the server” starts it on this machine only, "
            "without API keys. To serve other machines, start `{command}` yourself and add "
            "`{field}` to the request body.",
            command="python -m workbench serve --require-keys --host 0.0.0.0",
            field='"api_key": "…"',
        )
    st.caption(about)


def _server_button(state: ServerState, startable: bool) -> None:
    if state.pid is not None:
        if st.button(_("Stop the server"), icon=":material/stop:", key="stop_server"):
            with feedback.error_boundary(N_("stopping the server")):
                launcher.stop_server()
                feedback.flash(_("Stopped the server at {url}.", url=state.url))
                st.rerun()
    elif (
        startable
        and state.status == "down"
        and st.button(_("Start the server"), icon=":material/play_arrow:", key="start_server")
    ):
        with feedback.error_boundary(N_("starting the server")):
            started = _start_server()
            feedback.flash(
                _("The server answers at {url}.", url=started.url)
                if started.answering
                else _("The server at {url} is still starting.", url=started.url)
            )
            st.rerun()


def served_column(version_ids: list[int]) -> list[str]:
    """For the versions table: the pair each version answers for over HTTP, or nothing."""
    pairs = {p.version_id: p.pair for p in served.list_served()}
    return [pairs.get(int(i), "") for i in version_ids]


def http_api_tab() -> None:
    """The served pairs and the API keys."""
    pairs = served.list_served()
    st.markdown("**" + _("Served language pairs") + "**")
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
                "pair": st.column_config.TextColumn(_("language pair")),
                "version": st.column_config.NumberColumn(_("version"), format="#%d"),
                "name": st.column_config.TextColumn(_("name")),
                "since": st.column_config.DatetimeColumn(_("since"), format="YYYY-MM-DD HH:mm"),
            },
        )
    else:
        st.caption(
            _("None yet: pick a version under “Manage a version” and click “Serve this version”.")
        )
    st.markdown("**" + _("API keys") + "**")
    if not can(Permission.API_KEYS):
        st.caption(_("Only an admin can see and manage API keys."))
        return
    _create_key_form()
    keys = api_keys.list_keys()
    if not keys:
        st.caption(_("No API keys: without keys, serve on 127.0.0.1 only (the default)."))
        return
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "id": k.id,
                    "name": k.name,
                    "key": k.shown,
                    "role": role_label(k.role),
                    "requests/min": _limit(k.requests_per_minute, _no_limit()),
                    "characters/request": _limit(k.chars_per_request, _default_chars()),
                    "created": k.created_at,
                    "revoked": k.revoked_at,
                }
                for k in keys
            ]
        ),
        hide_index=True,
        placeholder="",  # not revoked: empty, not "None"
        column_config={
            "id": st.column_config.NumberColumn(_("id")),
            "name": st.column_config.TextColumn(_("name")),
            "key": st.column_config.TextColumn(_("key")),
            "role": st.column_config.TextColumn(_("role")),
            "requests/min": st.column_config.TextColumn(_("requests/min"), help=_limit_help()),
            "characters/request": st.column_config.TextColumn(
                _("characters/request"), help=_limit_help()
            ),
            "created": st.column_config.DatetimeColumn(_("created"), format="YYYY-MM-DD HH:mm"),
            "revoked": st.column_config.DatetimeColumn(_("revoked"), format="YYYY-MM-DD HH:mm"),
        },
    )
    active = {k.id: k for k in keys if k.active}
    if not active:
        return
    row = st.columns([3, 1], vertical_alignment="bottom")
    chosen = row[0].selectbox(
        _("Key to revoke"),
        list(active),
        format_func=lambda i: f"#{i} {active[i].name} · {active[i].shown}",
        key="revoke_key_choice",
    )
    if row[1].button(_("Revoke…"), icon=":material/key_off:", key="revoke_key", width="stretch"):
        dialogs.ask_confirmation("revoke_key")
    key = active[chosen]
    dialogs.confirmation_dialog(
        "revoke_key",
        _("Revoke API key"),
        _(
            "Revoke key **#{id} {name}** ({shown})? Programs using it are refused from now on. "
            "This cannot be undone.",
            id=key.id,
            name=key.name,
            shown=key.shown,
        ),
        _("Revoke key"),
        lambda: _revoke(key.id),
    )


def _limit(value: int | None, otherwise: str) -> str:
    """A key's own limit, or what applies without one (said, not an empty cell)."""
    return otherwise if value is None else formatting.fmt_int(value)


def _revoke(key_id: int) -> str:
    api_keys.revoke_key(key_id)
    return _("Revoked API key #{id}.", id=key_id)


def _no_limit() -> str:
    """What a key without a request rate of its own gets (the app's server has none)."""
    return _("no limit")


def _default_chars() -> str:
    """What a key without a characters limit of its own gets: the server's default."""
    return _("default: {n}", n=formatting.fmt_int(ServeConfig.chars_per_request))


def _limit_help() -> str:
    return _(
        "Empty: the server's limit applies — none per minute and {n} characters per request, "
        "unless the server was started with `--requests-per-minute` or `--chars-per-request`.",
        n=formatting.fmt_int(ServeConfig.chars_per_request),
    )


def _limit_input(where: Any, label: str, step: int, placeholder: str) -> int | None:
    """A key's own limit: empty (None) leaves the server's, which ``placeholder`` names."""
    return where.number_input(
        label, min_value=1, value=None, step=step, placeholder=placeholder, help=_limit_help()
    )


def _create_key_form() -> None:
    # cleared once submitted: the next key starts from an empty form, not the last one's name
    with st.form("create_api_key", border=True, clear_on_submit=True):
        cols = st.columns([2, 1, 1, 1], vertical_alignment="bottom")
        name = cols[0].text_input(_("New key for"), placeholder=_("e.g. the CAT-tool plugin"))
        rpm = _limit_input(cols[1], _("Requests per minute"), 10, _no_limit())
        chars = _limit_input(cols[2], _("Characters per request"), 1000, _default_chars())
        role = pickers.role_picker(
            cols[3],
            key="api_key_role",
            help=_("What requests with the key may do: a viewer's key translates only."),
        )
        created = st.form_submit_button(_("Create key"), icon=":material/key:")
    if created:
        with feedback.error_boundary(N_("creating the key")):
            new = api_keys.create_key(
                name,
                int(rpm) if rpm is not None else None,
                int(chars) if chars is not None else None,
                role,
            )
            st.success(
                _(
                    "Key #{id} for “{name}”: copy it now, it is shown only this once (only a "
                    "digest of it is stored).",
                    id=new.info.id,
                    name=new.info.name,
                ),
                icon=":material/key:",
            )
            st.code(new.key, language=None)
