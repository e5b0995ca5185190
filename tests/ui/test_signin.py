"""Sign-in and roles on the pages (Streamlit AppTest, which seeds ``st.user``; ``[auth]``
given as the app's secrets): an anonymous visitor sees only the sign-in button, a viewer
reads but is offered no control that writes, an editor edits, an admin has the Team page;
without ``[auth]`` the person at the machine is the local admin."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from tests.conftest import fingerprint_database
from tests.helpers import ROOT, make_toy_corpus
from ui import feedback, grid, i18n, navigation
from workbench import settings
from workbench.corpus import corpora, demo, drafts
from workbench.team import access
from workbench.team.access import acting_as

APP = ROOT / "streamlit_app.py"
AUTH = {  # what .streamlit/secrets.toml [auth] holds (the provider is never called here)
    "redirect_uri": "http://localhost:8501/oauth2callback",
    "cookie_secret": "a-test-cookie-secret-of-enough-length",
    "client_id": "workbench",
    "client_secret": "secret",
    "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration",
}


@pytest.fixture
def team(wb_home: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A corpus, an admin by configuration, a viewer and an editor; the demo stays out."""
    monkeypatch.setattr(demo, "ensure_demo_corpus", lambda: None)
    monkeypatch.setenv("WORKBENCH_ADMINS", "ada@example.org")
    corpus_id = make_toy_corpus()
    access.set_role("vera@example.org", "viewer")
    access.set_role("ed@example.org", "editor")
    return corpus_id


def run_as(
    user: dict[str, Any],
    page: navigation.PageRef = navigation.CORPUS,
    lang: str | None = None,
    drafts_key: str | None = None,
) -> AppTest:
    """The app as ``user`` sees ``page`` (in ``lang``, else the browser's language; with
    ``drafts_key``, an address holding that browser's drafts)."""
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.secrets["auth"] = AUTH
    at.user = user
    if lang is not None:
        at.query_params[i18n.PARAM] = lang
    if drafts_key is not None:
        at.query_params[grid.PARAM] = drafts_key
    at.run()
    if page != navigation.CORPUS:
        at._page_hash = calc_hash(page.url_path)
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def signed_in(email: str, verified: object = True) -> dict[str, Any]:
    """What ``st.user`` holds for ``email`` (its provider's ``email_verified``: ``verified``,
    left out when None)."""
    user = {"is_logged_in": True, "email": email, "name": email.split("@")[0]}
    return user if verified is None else user | {"email_verified": verified}


def _keys(elements: Any) -> set[str]:
    return {e.key for e in elements if e.key}


def test_an_anonymous_visitor_sees_only_the_sign_in(team: int) -> None:
    at = run_as({"is_logged_in": False})
    assert [b.label for b in at.button] == ["Sign in"]
    assert not at.data_editor and not at.dataframe and not at.selectbox and not at.tabs
    # A direct address shows nothing more.
    at = run_as({"is_logged_in": False}, navigation.MODELS)
    assert [b.label for b in at.button] == ["Sign in"] and not at.dataframe


def test_a_signed_in_stranger_is_told_to_ask_an_admin(team: int) -> None:
    at = run_as(signed_in("stranger@example.org"))
    assert "not a member of this team" in at.warning[0].value
    assert [b.label for b in at.button] == ["Sign out"]
    assert not at.data_editor


def test_a_viewer_reads_but_is_offered_no_write(team: int) -> None:
    at = run_as(signed_in("vera@example.org"))
    assert "vera@example.org** (viewer)" in at.sidebar.caption[0].value
    assert len(at.data_editor) == 1 and len(at.data_editor[0].value) > 0  # reads the pairs
    assert at.data_editor[0].proto.disabled  # locked, no rows to add
    buttons = _keys(at.button)
    assert not buttons & {"delete_corpus", "save_edits", "discard_edits", "rename_corpus"}
    assert "Sign out" in [b.label for b in at.button]
    at.session_state["corpus_tab"] = ":material/download: Export & clean up"
    at.run()
    assert at.download_button(key="export_download")  # reading includes exporting
    assert "dedupe" not in _keys(at.button) and "cleanup_preview" not in _keys(at.button)
    at = run_as(signed_in("vera@example.org"), navigation.TRAIN)
    assert "train_button" not in _keys(at.button)
    at = run_as(signed_in("vera@example.org"), navigation.TEAM)  # not offered: lands on Corpus
    assert "team_email" not in _keys(at.text_input)


def test_an_editor_edits_but_cannot_delete(team: int) -> None:
    at = run_as(signed_in("ed@example.org"))
    assert not at.data_editor[0].proto.disabled
    keys = _keys(at.button)
    assert "save_edits" in keys and "delete_corpus" not in keys
    at.text_input(key=f"rename_{team}").set_value("toy renamed")
    at.button(key="rename_corpus").click().run()
    assert not at.exception and corpora.get_corpus(team).name == "toy renamed"
    at = run_as(signed_in("ed@example.org"), navigation.TRAIN)
    assert "train_button" in _keys(at.button)


def test_an_admin_manages_the_team_on_its_page(team: int) -> None:
    at = run_as(signed_in("ada@example.org"), navigation.TEAM)
    assert "team_email" in _keys(at.text_input)
    allowed = at.dataframe[0].value.set_index("role")["may"]  # labels from access.Permission
    assert allowed.to_dict() == {
        "viewer": "read and translate",
        "editor": "read and translate, edit corpora, train, review the pool",
        "admin": ", ".join(access.Permission),
    }
    shown = at.dataframe[1].value  # the members
    assert list(shown["e-mail"]) == ["ada@example.org", "ed@example.org", "vera@example.org"]
    at.text_input(key="team_email").set_value("New.Person@example.org")
    at.selectbox(key="team_role").set_value("editor")
    next(b for b in at.button if b.label == "Save").click().run()
    assert not at.exception
    assert access.role_of("new.person@example.org") == access.Role.EDITOR
    at = run_as(signed_in("ada@example.org"))
    assert "delete_corpus" in _keys(at.button)
    assert corpora.get_corpus(team).name == "toy"  # (the admin only looked)


def test_without_sign_in_the_local_admin_uses_every_page(team: int) -> None:
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception
    assert "delete_corpus" in _keys(at.button)
    assert "Sign out" not in [b.label for b in at.button] and not at.sidebar.caption


def test_the_team_page_says_in_chinese_what_it_did_and_what_it_refused(team: int) -> None:
    """A saved role and a refused change read Chinese (their texts: one sentence per role,
    and the service's message id)."""
    at = run_as(signed_in("ada@example.org"), navigation.TEAM, lang="zh_Hans")
    at.text_input(key="team_email").set_value("ed@example.org")
    at.selectbox(key="team_role").set_value("viewer")
    next(b for b in at.button if b.label == "保存").click().run()
    assert not at.exception
    assert "ed@example.org 现在是查看者。" in [s.value for s in at.success]
    assert access.role_of("ed@example.org") == access.Role.VIEWER

    at.text_input(key="team_email").set_value("ada@example.org")  # an admin by configuration
    next(b for b in at.button if b.label == "保存").click().run()
    assert not at.exception
    [error] = [e.value for e in at.error]
    assert error == "ada@example.org 是由配置（WORKBENCH_ADMINS）指定的管理员。", error


def test_a_message_that_begins_with_an_address_keeps_it_as_it_is(team: int) -> None:
    """Team walk, item 5: every error had its first letter made a capital, values too:
    "Ada@example.org is an admin by configuration". A message that begins with a value is
    shown as it is; one that begins with a word still begins with a capital."""
    at = run_as(signed_in("ada@example.org"), navigation.TEAM, lang="en")
    at.text_input(key="team_email").set_value("ada@example.org")
    next(b for b in at.button if b.label == "Save").click().run()
    assert [e.value for e in at.error] == [
        "ada@example.org is an admin by configuration (WORKBENCH_ADMINS)."
    ]
    assert feedback._sentence("no corpus 'x'") == "No corpus 'x'"
    assert feedback._sentence("key name must not be empty") == "Key name must not be empty"
    assert feedback._sentence("3 pairs left") == "3 pairs left"
    assert feedback._sentence("'clinic' is in the trash") == "'clinic' is in the trash"


def test_a_viewer_keeps_no_draft_and_browses_without_errors(team: int) -> None:
    """Issue 30, item 8: a draft is an edit not saved yet (the edit role's). An editor made
    a viewer in the middle of a session, and a viewer who opens an address holding a
    browser's drafts, read the corpus without an error, a pending-edits warning or a
    draft kept for them; the editor's draft waits, untouched, for an editor."""
    at = run_as(signed_in("ed@example.org"))
    key = at.session_state[grid._BROWSER_KEY]
    editor = at.data_editor[0]
    at.session_state[editor.key] = {
        "edited_rows": {0: {"target": "changed"}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    with acting_as(access.member_actor("ed@example.org")):
        assert drafts.load(key, team, "pairs").count == 1
    with acting_as(access.local_admin()):
        access.set_role("ed@example.org", "viewer")
    stored = fingerprint_database()
    at.session_state[editor.key] = {
        "edited_rows": {0: {"target": "changed again"}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()  # the grid drawn on the last run was editable: its edits are not kept now
    for page in (at, run_as(signed_in("vera@example.org"), drafts_key=key)):
        assert not page.exception and not page.error, [e.value for e in page.error]
        assert page.data_editor[0].proto.disabled
        shown = [e.value for e in [*page.warning, *page.caption]]
        assert not [t for t in shown if "unsaved" in t], shown
        assert "Open" not in [b.label for b in page.button]
    assert fingerprint_database() == stored


def test_a_copied_address_shows_another_member_her_own_drafts_not_his(team: int) -> None:
    """Team walk, item 1: the drafts' key is in the address, and a member opening another's
    copied address saw his unsaved change (her Save would write it under her name). She
    finds her own, none; his draft stays his, untouched."""
    at = run_as(signed_in("ed@example.org"))
    key = at.session_state[grid._BROWSER_KEY]
    at.session_state[at.data_editor[0].key] = {
        "edited_rows": {0: {"target": "his change"}},
        "added_rows": [],
        "deleted_rows": [],
    }
    at.run()
    assert [c for c in at.caption if "1 unsaved change" in c.value], "he sees his own draft"
    ada = run_as(signed_in("ada@example.org"), drafts_key=key)
    assert ada.session_state[grid._BROWSER_KEY] == key
    assert "his change" not in ada.data_editor[0].value["target"].tolist()
    assert not [t.value for t in [*ada.warning, *ada.caption] if "unsaved change" in t.value]
    with acting_as(access.member_actor("ed@example.org")):
        assert drafts.load(key, team, "pairs").count == 1


@pytest.mark.parametrize("verified", [False, "false", None], ids=["false", "'false'", "absent"])
def test_an_e_mail_its_provider_has_not_verified_is_refused(
    team: int, verified: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30, item 8: sign-in trusted the e-mail claim without ``email_verified``; with
    an account at the provider under a member's unverified address, anyone had their role.
    A provider that does not say the address is verified (OIDC's claim false, or absent)
    vouches for nothing: refused, with the reason on the page."""
    at = run_as(signed_in("ed@example.org", verified))
    [error] = [e.value for e in at.error]
    assert "ed@example.org" in error and "verified" in error, error
    assert not at.data_editor and not at.tabs
    assert [b.label for b in at.button] == ["Sign out"]
    if verified is None:  # an admin whose provider verifies every address may say so
        assert settings.ENV_PROVIDER_VERIFIES_EMAILS in error
        monkeypatch.setenv(settings.ENV_PROVIDER_VERIFIES_EMAILS, "1")
        at = run_as(signed_in("ed@example.org", verified))
        assert not at.error and not at.data_editor[0].proto.disabled
        at = run_as(signed_in("ed@example.org", False))  # a false claim is refused still
        assert at.error and not at.data_editor


def test_the_refusal_of_an_unverified_e_mail_reads_chinese(team: int) -> None:
    at = run_as(signed_in("ed@example.org", False), lang="zh_Hans")
    [error] = [e.value for e in at.error]
    assert "ed@example.org" in error and re.search(r"[\u4e00-\u9fff]", error), error


def test_a_provider_that_sends_no_e_mail_gets_a_clear_refusal(
    team: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: ``st.user.email`` raised AttributeError, shown as a traceback with source
    lines; even a provider trusted to verify every address gets the refusal."""
    monkeypatch.setenv(settings.ENV_PROVIDER_VERIFIES_EMAILS, "1")
    for user in (
        {"is_logged_in": True, "name": "ed"},
        {"is_logged_in": True, "name": "ed", "email": "", "email_verified": True},
        {"is_logged_in": True, "name": "ed", "email": "not an address", "email_verified": True},
    ):
        at = run_as(user)
        [error] = [e.value for e in at.error]
        assert error.startswith("Your sign-in provider sent no e-mail address"), error
        assert not at.data_editor and not at.tabs
        assert [b.label for b in at.button] == ["Sign out"]


def test_an_e_mail_with_spaces_and_capitals_is_the_member_and_renders_plain(team: int) -> None:
    """Issue 37: " ED@Example.ORG " showed as "** ED@Example.ORG **" (Markdown's bold does not
    open before a space) and missed the member ed@example.org."""
    at = run_as(signed_in(" ED@Example.ORG "))
    [caption] = [c.value for c in at.sidebar.caption if "Signed in as" in c.value]
    assert caption == "Signed in as **ed@example.org** (editor)"
    assert not at.data_editor[0].proto.disabled
    at = run_as(signed_in("Str_an*ger@Example.org", "TRUE"))
    assert "Str_an" not in at.warning[0].value
    assert "str\\_an\\*ger@example.org, who is not a member" in at.warning[0].value
