"""Who is acting, what each role allows, and the team's members with their roles.

One source for the roles: each ``Permission`` says which role it needs and how the Team page
and a refusal (``SIGN_IN``, ``REFUSED``) name it; pages, the CLI, the HTTP API and the Team
page read it.
Every write service starts with ``require(Permission.…)``, so no front end can skip the
check.

Who acts is said by the front end, never guessed here:

* the command line: ``use_actor_source(local_admin)`` (whoever runs it owns the data folder);
* the UI: a source that reads ``st.user`` on every call (Streamlit runs callbacks and page
  runs in threads of their own, so a per-thread value set once would go stale), or the
  local admin when sign-in is off;
* the HTTP API: ``acting_as(key_actor(key))`` around each request's work.

With no source and no ``acting_as``, nobody acts and every write is refused: a front end
that forgets to say who acts fails closed. Reading services need no actor.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NoReturn

from sqlalchemy import select

from db.tables import Role, User
from workbench import settings
from workbench.errors import PermissionDenied, WorkbenchError
from workbench.messages import N_, Message, MessageId
from workbench.storage import session_scope

ROLES: tuple[Role, ...] = (Role.VIEWER, Role.EDITOR, Role.ADMIN)  # weakest first


class Permission(StrEnum):
    """What a service needs: one row each, the only table of permissions. The value names it
    in English and is its message id (the Team page's label, and the ``{permission}`` of a
    refusal: a verb phrase that ends "only an editor or admin may …"); ``min_role`` is the
    weakest role that holds it. A new permission is one row and one label to translate.

    READ is every member's: reading services need no actor (a page is shown to members only,
    ``ui.signin``), and the HTTP API asks it of a request's key when it runs with
    ``--require-keys`` (``serving.runtime.Server.identify``). Every other permission guards
    writes: a viewer holds none of them (a translation saved into a corpus is an edit).
    """

    min_role: Role

    def __new__(cls, label: MessageId, min_role: Role) -> Permission:
        member = str.__new__(cls, label)
        member._value_ = label
        member.min_role = min_role
        return member

    READ = N_("read and translate"), Role.VIEWER
    # create/rename corpora, pairs, imports, glossaries, clean-ups, drafts, undo
    EDIT = N_("edit corpora"), Role.EDITOR
    # queue, cancel, resume, delete runs; register versions; rename them
    TRAIN = N_("train"), Role.EDITOR
    REVIEW = N_("review the pool"), Role.EDITOR
    DELETE = N_("delete corpora and versions"), Role.ADMIN
    SERVE = N_("serve versions"), Role.ADMIN
    API_KEYS = N_("manage API keys"), Role.ADMIN
    USERS = N_("manage users"), Role.ADMIN


# The refusals, whole sentences with the permission's label and the actor as parameters (a
# page shows them translated, the CLI and the HTTP API answer the English): nobody acting,
# and each (actor's role, permission's weakest role) where the actor's is below.
# Translators: {permission} is a permission's label, a verb phrase ("edit corpora")
SIGN_IN = N_("Sign in to {permission}.")
REFUSED: Mapping[tuple[Role, Role], MessageId] = {
    # Translators: {permission} is a permission's label, a verb phrase ("edit corpora")
    (Role.VIEWER, Role.EDITOR): N_(
        "{actor} is a viewer: only an editor or admin may {permission}."
    ),
    # Translators: {permission} is a permission's label, a verb phrase ("manage users")
    (Role.VIEWER, Role.ADMIN): N_("{actor} is a viewer: only an admin may {permission}."),
    # Translators: {permission} is a permission's label, a verb phrase ("manage users")
    (Role.EDITOR, Role.ADMIN): N_("{actor} is an editor: only an admin may {permission}."),
}


def allows(role: Role, permission: Permission) -> bool:
    """Whether ``role`` holds ``permission`` (a stronger role holds all a weaker one does)."""
    return ROLES.index(role) >= ROLES.index(permission.min_role)


def permissions_of(role: Role) -> list[Permission]:
    """What a role may do (for the Team page)."""
    return [p for p in Permission if allows(role, p)]


@dataclass(frozen=True)
class Actor:
    """Someone acting: an e-mail (or the local admin's name) and the role it holds."""

    email: str
    role: Role

    def can(self, permission: Permission) -> bool:
        return allows(self.role, permission)


# -------------------------------------------------------------------------- the actor

_acting: ContextVar[Actor | None] = ContextVar("workbench_actor", default=None)
_source: Callable[[], Actor | None] | None = None


def local_admin() -> Actor:
    """The person on this machine: the command line, and the UI when sign-in is off."""
    return Actor(settings.local_admin_name(), Role.ADMIN)


def use_actor_source(source: Callable[[], Actor | None] | None) -> None:
    """Say, for this whole process, how to learn who acts (None: nobody)."""
    global _source
    _source = source


@contextmanager
def acting_as(actor: Actor | None) -> Iterator[None]:
    """Within the block (this thread or task), ``actor`` acts, whatever the source says."""
    token = _acting.set(actor)
    try:
        yield
    finally:
        _acting.reset(token)


def act_in_this_task(actor: Actor | None) -> None:
    """``actor`` acts for the rest of this context: an HTTP request (uvicorn runs each in a
    fresh context, and the thread pool copies it, so it ends with the request)."""
    _acting.set(actor)


def current_actor() -> Actor | None:
    """Who acts now: ``acting_as``'s actor, else the process's source, else nobody."""
    actor = _acting.get()
    if actor is not None:
        return actor
    return _source() if _source is not None else None


def can(permission: Permission) -> bool:
    """Whether the current actor may (pages use it to hide controls)."""
    actor = current_actor()
    return actor is not None and actor.can(permission)


def require(permission: Permission) -> Actor:
    """The current actor, if it holds ``permission``; else a one-line ``PermissionDenied``."""
    actor = current_actor()
    if actor is None:
        _refuse(SIGN_IN, permission)
    if not actor.can(permission):
        _refuse(REFUSED[actor.role, permission.min_role], permission, actor=actor.email)
    return actor


def _refuse(refusal: MessageId, permission: Permission, **params: object) -> NoReturn:
    """Raise one of the refusals (``SIGN_IN``, ``REFUSED``): the one raise that carries a
    message id from a table, not an ``N_("literal")`` of its own. The label is a ``Message``,
    so that a page translates it inside the sentence."""
    raise PermissionDenied(refusal, permission=Message(permission.value), **params)


# ------------------------------------------------------------------------ the members

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+")


@dataclass(frozen=True)
class Member:
    email: str
    role: Role
    configured: bool  # an admin named in WORKBENCH_ADMINS (cannot be changed here)
    added_by: str | None
    added_at: datetime | None


def normalize_email(email: object) -> str:
    """An e-mail as it is stored and compared: stripped, lower case; else WorkbenchError."""
    text = str(email or "").strip().lower()
    if not _EMAIL.fullmatch(text) or len(text) > 320:
        raise WorkbenchError(N_("Not an e-mail address: {text!r}."), text=str(email)[:80])
    return text


def parse_role(role: object) -> Role:
    """A role from its name (the one list is ``ROLES``); else WorkbenchError."""
    try:
        return Role(str(role).strip().lower())
    except ValueError:
        raise WorkbenchError(
            N_("Unknown role {role!r}: one of {roles}."),
            role=str(role)[:40],
            roles=", ".join(ROLES),
        ) from None


def unverified_email(email: str, email_verified: object) -> Message | None:
    """Why the e-mail a sign-in provider sent cannot be trusted, or None when it can.

    Members are known by e-mail, so a sign-in must not take a member's role from an account
    that merely claims the address: OpenID Connect's ``email_verified`` claim says whether the
    provider checked that the user controls it (Core §5.1; Apple and Cognito send it as text).
    False is refused. Absent is refused too: the providers that verify addresses say so
    (Google, Keycloak, Okta, Auth0, Cognito, Apple), and one that does not (Microsoft Entra ID;
    an Entra account's e-mail could be set to anyone's, "nOAuth") vouches for nothing,
    unless the admin says their provider only sends addresses it controls
    (``settings.provider_verifies_emails``). Parsed strictly: only JSON true or the text
    "true" (any case) is a yes; any other value that is there ("false", "0", "no", "1", 1, an
    empty text) is a no, never taken for an absent claim."""
    if email_verified is True or (
        isinstance(email_verified, str) and email_verified.strip().lower() == "true"
    ):
        return None
    if email_verified is None and settings.provider_verifies_emails():
        return None
    if email_verified is None:
        return Message(
            N_(
                "Your sign-in provider does not say that {email} is verified, so this "
                "workbench cannot trust it. An admin whose provider verifies every address "
                "it sends can set {variable}=1."
            ),
            email=email,
            variable=settings.ENV_PROVIDER_VERIFIES_EMAILS,
        )
    return Message(
        N_(
            "Your sign-in provider says that {email} is not verified: verify the address "
            "there, then sign out and sign in again."
        ),
        email=email,
    )


def role_of(email: str) -> Role | None:
    """The role of a signed-in e-mail: admin if configured, else its row; None: not a member."""
    email = email.strip().lower()
    if email in settings.configured_admins():
        return Role.ADMIN
    with session_scope() as s:
        role = s.scalar(select(User.role).where(User.email == email))
    return Role(role) if role is not None else None


def member_actor(email: str) -> Actor | None:
    """The actor for a signed-in e-mail, or None when it is not a member of the team."""
    role = role_of(email)
    return Actor(email.strip().lower(), role) if role is not None else None


def list_members() -> list[Member]:
    """The configured admins, then every member by e-mail."""
    configured = settings.configured_admins()
    members = [Member(e, Role.ADMIN, True, None, None) for e in sorted(configured)]
    with session_scope() as s:
        for row in s.scalars(select(User).order_by(User.email)):
            if row.email not in configured:
                members.append(
                    Member(row.email, Role(row.role), False, row.added_by, row.created_at)
                )
    return members


def set_role(email: object, role: object) -> Member:
    """Add a member or change their role (admins only; not oneself, not a configured admin)."""
    actor = require(Permission.USERS)
    email, new_role = normalize_email(email), parse_role(role)
    _check_changeable(actor, email)
    with session_scope() as s:
        row = s.scalar(select(User).where(User.email == email))
        if row is None:
            row = User(email=email, role=new_role.value, added_by=actor.email)
            s.add(row)
        else:
            row.role = new_role.value
        s.flush()
        return Member(row.email, new_role, False, row.added_by, row.created_at)


def remove_member(email: object) -> None:
    """Remove a member: they may still sign in, but see nothing until added again."""
    actor = require(Permission.USERS)
    email = normalize_email(email)
    _check_changeable(actor, email)
    with session_scope() as s:
        row = s.scalar(select(User).where(User.email == email))
        if row is None:
            raise WorkbenchError(N_("{email} is not a member of the team."), email=email)
        s.delete(row)


def _check_changeable(actor: Actor, email: str) -> None:
    if email in settings.configured_admins():
        raise WorkbenchError(
            N_("{email} is an admin by configuration ({variable})."),
            email=email,
            variable=settings.ENV_ADMINS,
        )
    if email == actor.email:
        raise WorkbenchError(N_("You cannot change your own role: ask another admin."))
