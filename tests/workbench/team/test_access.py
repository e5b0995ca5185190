"""Roles are checked in the services (real SQLite): a viewer is refused every write and
nothing changes, an editor edits, imports and trains but cannot delete, serve or manage keys
and users, an admin can; the permissions are one table; the command line acts as the local
admin; API keys carry a role; a run records who started it and its version who trained it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from db.tables import Role
from tests.helpers import cli_in_process, make_toy_corpus, toy_pairs
from ui import i18n
from workbench import settings
from workbench.corpus import corpora, glossary, importing, pairs
from workbench.errors import PermissionDenied, WorkbenchError
from workbench.messages import Message
from workbench.models import registry
from workbench.serving import api_keys, served
from workbench.team import access, history
from workbench.team.access import Actor, Permission, acting_as
from workbench.training import run_info, runs

VIEWER = Actor("vera@example.org", Role.VIEWER)
EDITOR = Actor("ed@example.org", Role.EDITOR)
ADMIN = Actor("ada@example.org", Role.ADMIN)
CJK = re.compile(r"[\u4e00-\u9fff]")


def in_chinese(text: WorkbenchError | Message) -> str:
    """A service's error or message as a page in 简体中文 shows it (``ui.feedback``,
    ``ui.i18n.localized``); a message id without a translation would stay English."""
    msgid, params = text.msgid, text.params
    assert msgid is not None, f"no message id: {text}"
    with mock.patch.object(i18n, "current", lambda: "zh_Hans"):
        shown = i18n.translate(msgid, params)
    assert CJK.search(shown) and "{" not in shown, shown
    return shown


def _tsv(tmp_path: Path) -> Path:
    path = tmp_path / "more.tsv"
    path.write_text("你好世界\tHello world\n再见朋友\tGoodbye friend\n", encoding="utf-8")
    return path


def _fake_version(tmp_path: Path, corpus_id: int, run_id: int | None = None) -> int:
    """A registered version whose folder holds the two files the registry checks for
    (the registry's real path; nothing here loads the model)."""
    folder = tmp_path / f"model-{run_id}"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"not loaded in this test")
    (folder / "config.json").write_text(json.dumps({"model": {}}), encoding="utf-8")
    return registry.register_version(folder, {}, run_id=run_id, corpus_id=corpus_id)


def _writes(corpus_id: int, tmp_path: Path) -> dict[str, Callable[[], Any]]:
    """One call of every kind of write an editor may make."""
    return {
        "create corpus": lambda: corpora.create_corpus("another", "zh", "en"),
        "rename corpus": lambda: corpora.rename_corpus(corpus_id, "renamed"),
        "add pair": lambda: pairs.add_pair(corpus_id, "早上好", "Good morning"),
        "import": lambda: importing.import_file(corpus_id, _tsv(tmp_path), fmt="tsv"),
        "glossary": lambda: glossary.set_terms(corpus_id, [("世界", "world")]),
        "train": lambda: runs.enqueue_training(corpus_id, preset="tiny", epochs=1),
    }


@pytest.mark.usefixtures("wb_home")
def test_a_viewer_is_refused_every_write_and_nothing_changes(
    tmp_path: Path, db_fingerprint: Callable[[], str]
) -> None:
    corpus_id = make_toy_corpus()
    version_id = _fake_version(tmp_path, corpus_id)
    before = db_fingerprint()
    admin_only = {
        "delete corpus": lambda: corpora.delete_corpus(corpus_id),
        "delete version": lambda: registry.delete_version(version_id),
        "serve": lambda: served.serve_version(version_id),
        "api key": lambda: api_keys.create_key("k"),
        "users": lambda: access.set_role("new@example.org", "viewer"),
    }
    with acting_as(VIEWER):
        for what, write in {**_writes(corpus_id, tmp_path), **admin_only}.items():
            with pytest.raises(PermissionDenied, match=r"vera@example\.org is a viewer") as err:
                write()
            assert "\n" not in str(err.value), what
        assert not access.can(Permission.EDIT)
        # Reading and translating need no role.
        assert corpora.get_corpus(corpus_id).name == "toy"
        assert len(registry.list_versions()) == 1
    assert db_fingerprint() == before


@pytest.mark.usefixtures("wb_home")
def test_an_editor_edits_imports_and_trains_but_only_an_admin_deletes(tmp_path: Path) -> None:
    corpus_id = make_toy_corpus()
    with acting_as(EDITOR):
        for write in _writes(corpus_id, tmp_path).values():
            write()
        version_id = _fake_version(tmp_path, corpus_id)
        for refused in (
            lambda: corpora.delete_corpus(corpus_id),
            lambda: registry.delete_version(version_id),
            lambda: served.serve_version(version_id),
            lambda: api_keys.create_key("k"),
        ):
            with pytest.raises(PermissionDenied, match="only an admin may"):
                refused()
    assert corpora.get_corpus(corpus_id).name == "renamed"
    assert glossary.list_terms(corpus_id) == [("世界", "world")]
    with acting_as(ADMIN):
        registry.delete_version(version_id)
        corpora.delete_corpus(corpus_id)
    with pytest.raises(WorkbenchError, match=r"does not exist|no corpus"):
        corpora.get_corpus(corpus_id)


@pytest.mark.usefixtures("wb_home")
def test_nobody_acting_is_refused(tmp_path: Path) -> None:
    access.use_actor_source(None)  # a front end that never said who acts
    with pytest.raises(PermissionDenied, match="Sign in to edit corpora"):
        corpora.create_corpus("c", "zh", "en")
    assert corpora.list_corpora() == []


@pytest.mark.usefixtures("wb_home")
def test_members_and_their_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_ADMINS", "Boss@Example.org, ada@example.org")
    assert access.role_of("boss@example.org") == Role.ADMIN  # from configuration
    assert access.member_actor("stranger@example.org") is None  # signed in, not a member
    with acting_as(access.member_actor("ada@example.org")):
        access.set_role(" Vera@Example.org ", "viewer")
        access.set_role("ed@example.org", "editor")
        access.set_role("vera@example.org", "editor")  # a change, not a second row
        for bad, message in [
            (("boss@example.org", "viewer"), "admin by configuration"),
            (("ada@example.org", "viewer"), "admin by configuration"),
            (("not an email", "viewer"), "Not an e-mail"),
            (("x@example.org", "owner"), "Unknown role 'owner'"),
        ]:
            with pytest.raises(WorkbenchError, match=message):
                access.set_role(*bad)
    members = {m.email: (m.role, m.configured) for m in access.list_members()}
    assert members == {
        "ada@example.org": (Role.ADMIN, True),
        "boss@example.org": (Role.ADMIN, True),
        "ed@example.org": (Role.EDITOR, False),
        "vera@example.org": (Role.EDITOR, False),
    }
    with (
        acting_as(access.member_actor("ed@example.org")),
        pytest.raises(PermissionDenied, match="only an admin may manage users"),
    ):
        access.remove_member("vera@example.org")
    access.set_role("dora@example.org", "admin")
    with acting_as(access.member_actor("dora@example.org")):
        with pytest.raises(WorkbenchError, match="your own role"):
            access.set_role("dora@example.org", "viewer")
        access.remove_member("vera@example.org")
    assert access.member_actor("vera@example.org") is None


@pytest.mark.usefixtures("wb_home")
def test_a_run_records_who_started_it_and_its_version_who_trained_it(tmp_path: Path) -> None:
    corpus_id = make_toy_corpus()
    with acting_as(EDITOR):
        run_id = runs.enqueue_training(corpus_id, preset="tiny", epochs=1)
    assert run_info.get_run(run_id).started_by == "ed@example.org"
    # The worker registers the version (no one acts there): it inherits the run's starter,
    # and keeps it when the run is deleted.
    access.use_actor_source(None)
    version_id = _fake_version(tmp_path, corpus_id, run_id)
    assert registry.get_version(version_id).trained_by == "ed@example.org"
    access.use_actor_source(access.local_admin)
    runs.cancel_run(run_id)
    runs.delete_run(run_id)
    assert registry.get_version(version_id).trained_by == "ed@example.org"
    result = cli_in_process("versions", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["id"] == version_id and row["trained by"] == "ed@example.org"


@pytest.mark.usefixtures("wb_home")
def test_the_command_line_acts_as_the_configured_local_admin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_LOCAL_ADMIN", "ops@lab.example")
    tsv = tmp_path / "toy.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in toy_pairs()), encoding="utf-8")
    steps = [
        ("import", "--corpus", "toy", "--src-lang", "zh", "--tgt-lang", "en", str(tsv)),
        ("api-key-create", "--name", "translator", "--role", "editor"),  # an admin's write
    ]
    access.use_actor_source(None)  # as in a fresh process: the command line installs its own
    for args in steps:
        result = cli_in_process(*args)
        assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["role"] == "editor"
    (toy,) = corpora.list_corpora()
    assert history.actors(toy.id) == ["ops@lab.example"]  # the import, by the named admin
    (key,) = api_keys.list_keys()
    assert key.role == Role.EDITOR
    result = cli_in_process("api-key-create", "--name", "x", "--role", "owner")
    assert result.returncode == 2 and "invalid choice" in result.stderr


@pytest.mark.usefixtures("wb_home")
def test_an_api_key_acts_with_its_role() -> None:
    viewer = api_keys.create_key("reader")
    editor = api_keys.create_key("trainer", role="editor")
    found = api_keys.find_active_key(viewer.key)
    assert found is not None and found.role == Role.VIEWER
    corpus_id = make_toy_corpus()
    with acting_as(api_keys.key_actor(found)):
        with pytest.raises(PermissionDenied, match=r"API key wbk_\S+… is a viewer"):
            runs.enqueue_training(corpus_id, preset="tiny", epochs=1)
        with pytest.raises(PermissionDenied):
            corpora.delete_corpus(corpus_id)
    trainer = api_keys.find_active_key(editor.key)
    assert trainer is not None
    with acting_as(api_keys.key_actor(trainer)):
        runs.enqueue_training(corpus_id, preset="tiny", epochs=1)
        with pytest.raises(PermissionDenied, match="only an admin may delete"):
            corpora.delete_corpus(corpus_id)


@pytest.mark.usefixtures("wb_home")
def test_the_http_api_answers_a_write_refused_to_the_keys_role_with_403() -> None:
    """What the HTTP front end does with a request: act as its key (``authorize``) and call
    services through ``_call``; the actor ends with the request's context."""
    import asyncio

    from workbench.serving import http_app
    from workbench.serving.protocol import ApiError

    corpus_id = make_toy_corpus()
    found = api_keys.find_active_key(api_keys.create_key("reader").key)
    assert found is not None

    async def request() -> None:
        access.act_in_this_task(api_keys.key_actor(found))
        await http_app._call(corpora.delete_corpus, corpus_id)

    with pytest.raises(ApiError) as err:
        asyncio.run(request())
    assert err.value.status == 403 and "is a viewer" in err.value.message
    assert access.current_actor() == access.local_admin()  # nothing leaked out of the request
    assert corpora.get_corpus(corpus_id).name == "toy"


@pytest.mark.usefixtures("wb_home")
def test_the_command_line_sets_up_a_team() -> None:
    for args in (("user-role", "Vera@Example.org", "viewer"), ("user-role", "ed@x.org", "editor")):
        result = cli_in_process(*args)
        assert result.returncode == 0, result.stderr
    # text for people, as `users` prints it; JSON only when asked
    [line] = result.stdout.splitlines()
    assert line.startswith("ed@x.org  editor  added by ") and "{" not in line
    changed = json.loads(cli_in_process("user-role", "ed@x.org", "admin", "--json").stdout)
    assert (changed["email"], changed["role"]) == ("ed@x.org", "admin")
    result = cli_in_process("users", "--json")
    assert [(m["email"], m["role"]) for m in json.loads(result.stdout)] == [
        ("ed@x.org", "admin"),
        ("vera@example.org", "viewer"),
    ]
    assert access.role_of("vera@example.org") == Role.VIEWER
    assert cli_in_process("user-remove", "ed@x.org").returncode == 0
    result = cli_in_process("user-remove", "ed@x.org")
    assert result.returncode == 2 and result.stderr.strip() == (
        "error: ed@x.org is not a member of the team."
    )


ZH_REFUSALS = {  # (the actor's role, the weakest that may): who the Chinese sentence names
    (Role.VIEWER, Role.EDITOR): "是查看者：只有编辑者或管理员可以",
    (Role.VIEWER, Role.ADMIN): "是查看者：只有管理员可以",
    (Role.EDITOR, Role.ADMIN): "是编辑者：只有管理员可以",
}


def test_every_refusal_is_one_sentence_translated_and_english_on_the_cli() -> None:
    """Each refusal is a whole sentence per pair of roles, the permission's label and the actor
    its parameters: English on the CLI (each permission's ``min_role`` names who may), Chinese
    on a page, the label translated inside it."""
    for permission in Permission:
        access.use_actor_source(None)
        with pytest.raises(PermissionDenied) as err:
            access.require(permission)
        assert str(err.value) == f"Sign in to {permission}."
        assert in_chinese(err.value) == f"请先登录，才能{in_chinese(Message(permission.value))}。"
        for role in access.ROLES:
            if access.allows(role, permission):
                continue
            who = " or ".join(r for r in access.ROLES if access.allows(r, permission))
            article = "an" if role[0] in "aeiou" else "a"
            with acting_as(Actor("pat@example.org", role)), pytest.raises(PermissionDenied) as err:
                access.require(permission)
            assert str(err.value) == (
                f"pat@example.org is {article} {role}: only an {who} may {permission}."
            )
            label = in_chinese(Message(permission.value))
            who_zh = ZH_REFUSALS[role, permission.min_role]
            assert in_chinese(err.value) == f"pat@example.org {who_zh}{label}。"


def test_the_permissions_are_one_complete_table() -> None:
    """Every permission has its weakest role, a refusal for each role below it, and a label
    the Team page shows translated (no more refusals than such pairs); a stronger role
    holds all a weaker one does, every member may read (the HTTP API's GET routes ask it
    of a key), and only the writes are refused to a viewer."""
    for permission in Permission:
        assert permission.min_role in access.ROLES
        in_chinese(Message(permission.value))  # the Team page's label, translated
    assert set(access.REFUSED) == {
        (r, p.min_role) for p in Permission for r in access.ROLES if not access.allows(r, p)
    }
    for weaker, stronger in zip(access.ROLES, access.ROLES[1:], strict=False):
        assert set(access.permissions_of(weaker)) < set(access.permissions_of(stronger))
    assert access.permissions_of(Role.VIEWER) == [Permission.READ]
    assert access.permissions_of(Role.ADMIN) == list(Permission)


@pytest.mark.usefixtures("wb_home")
def test_a_refused_team_change_reads_chinese_on_a_page() -> None:
    with acting_as(ADMIN):
        for bad, chinese in [
            (("not an email", "viewer"), "这不是电子邮件地址：“not an email”。"),
            (("x@example.org", "owner"), "未知角色“owner”：可选的角色有 viewer, editor, admin。"),
            (("ada@example.org", "viewer"), "你不能修改自己的角色：请另一位管理员来修改。"),
        ]:
            with pytest.raises(WorkbenchError) as err:
                access.set_role(*bad)
            assert in_chinese(err.value) == chinese
        with pytest.raises(WorkbenchError) as err:
            access.remove_member("nobody@example.org")
        assert in_chinese(err.value) == "nobody@example.org 不是团队成员。"


def test_a_signed_in_e_mail_counts_only_when_its_provider_verified_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenID Connect's ``email_verified``, as a boolean or as text (Apple, Cognito): true
    is trusted; false never; absent only when the admin says the provider verifies every
    address it sends."""
    monkeypatch.delenv(settings.ENV_PROVIDER_VERIFIES_EMAILS, raising=False)
    for claim in (True, "true", " TRUE "):
        assert access.unverified_email("ed@example.org", claim) is None, claim
    for claim in (False, "false", 0, 1, "yes", None):
        refusal = access.unverified_email("ed@example.org", claim)
        assert refusal is not None and "ed@example.org" in refusal, claim
        in_chinese(refusal)
    monkeypatch.setenv(settings.ENV_PROVIDER_VERIFIES_EMAILS, "1")
    assert access.unverified_email("ed@example.org", None) is None  # absent: the admin vouches
    for claim in (True, "true", "True"):
        assert access.unverified_email("ed@example.org", claim) is None, claim
    # Issue 37: any claim that is there and not true is a no, even when absent would be a yes.
    for claim in (False, "false", "FALSE", "0", "no", "1", "", " ", 0, 1, [], {}):
        refusal = access.unverified_email("ed@example.org", claim)
        assert refusal is not None and "says that ed@example.org is not verified" in refusal, claim
