"""Sign-in for the browser UI: who is using the page, and the gate every page passes.

Off by default: without an ``[auth]`` section in ``.streamlit/secrets.toml`` the person at
this machine is the local admin (the UI listens on loopback only, ``.streamlit/config.toml``).
With ``[auth]`` (OpenID Connect: ``st.login`` / ``st.user``), an anonymous visitor sees only
the sign-in button, and a signed-in person acts with the role the team gave their e-mail
(``workbench.team.access``), once their provider says the address is verified
(``access.unverified_email``: else the page says why, and nobody acts). The services check
that role; pages only hide what it cannot use.
"""

from __future__ import annotations

import streamlit as st

from ui.feedback import error_boundary
from ui.formatting import markdown_literal
from ui.i18n import N_, _, localized, translate
from workbench.errors import WorkbenchError
from workbench.team import access
from workbench.team.access import Actor, Permission

READ_ONLY = N_("You may read and translate here; only an editor or admin can change it.")


ROLE_LABELS = {"viewer": N_("viewer"), "editor": N_("editor"), "admin": N_("admin")}


def role_label(role: str) -> str:
    """A role's name (``workbench.team.access.ROLES``) in the session's language."""
    return translate(ROLE_LABELS.get(role, role))


def role_labels() -> dict[str, str]:
    """Every role's name in the session's language, made in the run: a widget's
    ``format_func`` takes its ``__getitem__`` (it must not translate, see ``ui.i18n``)."""
    return {str(role): role_label(role) for role in access.ROLES}


def sign_in_configured() -> bool:
    """Whether ``[auth]`` is configured (then every page needs a signed-in member)."""
    return st.secrets.load_if_toml_exists() and "auth" in st.secrets


def session_actor() -> Actor | None:
    """Who acts in this browser session, read afresh on every call (a button's callback runs
    in a thread of its own): the local admin without sign-in, else the signed-in member."""
    if not sign_in_configured():
        return access.local_admin()
    if not st.user.is_logged_in:
        return None
    email = claimed_email()
    if email is None or access.unverified_email(email, st.user.get("email_verified")) is not None:
        return None
    return access.member_actor(email)


def claimed_email() -> str | None:
    """The e-mail the sign-in provider sent, as members are known by it (stripped, lower
    case); None when it sent none, or something that is no e-mail address."""
    try:
        return access.normalize_email(st.user.get("email"))
    except WorkbenchError:
        return None


def install() -> None:
    """Tell the services to ask this session who acts (once per script run, before pages)."""
    access.use_actor_source(session_actor)


def gate() -> Actor:
    """Stop the script unless someone may see the pages; otherwise show who is signed in
    (with the sign-out button) and return them. Without sign-in: the local admin, silently."""
    if not sign_in_configured():
        return access.local_admin()
    if not st.user.is_logged_in:
        st.title(_("Translation workbench"))
        st.write(_("Sign in to use this workbench."))
        st.button(_("Sign in"), type="primary", icon=":material/login:", on_click=st.login)
        st.stop()
    actor = None
    with error_boundary(N_("reading your role")):
        actor = session_actor()
    email = claimed_email()
    shown = markdown_literal(email or "")
    with st.sidebar:
        if email is not None:
            st.caption(
                _("Signed in as **{email}** ({role})", email=shown, role=role_label(actor.role))
                if actor
                else _("Signed in as **{email}**", email=shown)
            )
        st.button(_("Sign out"), icon=":material/logout:", on_click=st.logout, key="sign_out")
    if email is None:
        st.title(_("Translation workbench"))
        st.error(
            _(
                "Your sign-in provider sent no e-mail address, and this workbench knows its "
                "members by e-mail: an admin must have the provider send the “email” claim "
                "(the “email” scope), then sign out and sign in again."
            ),
            icon=":material/gpp_bad:",
        )
        st.stop()
    unverified = access.unverified_email(email, st.user.get("email_verified"))
    if unverified is not None:
        st.title(_("Translation workbench"))
        st.error(localized(unverified), icon=":material/gpp_bad:")
        st.stop()
    if actor is None:
        st.title(_("Translation workbench"))
        st.warning(
            _(
                "You are signed in as {email}, who is not a member of this team yet: ask an "
                "admin to add you on the Team page.",
                email=shown,
            ),
            icon=":material/lock:",
        )
        st.stop()
    return actor


def can(permission: Permission) -> bool:
    """Whether the person using the page may (to hide controls they cannot use)."""
    return access.can(permission)
