"""Sign-in in a real headless Chromium against a real local OpenID Connect provider
(``oidc-provider-mock``, on a free 127.0.0.1 port in this process): the app started as
`make run` does, with ``[auth]`` in a secrets file of the test's own (``--secrets.files``).

An anonymous visitor sees only the sign-in button; a viewer signs in at the provider and reads
the corpus, offered no control that writes; sign-out brings the sign-in back; an account whose
provider has not verified its e-mail (the editor's) is refused; an editor signs in and creates
a corpus from the page. Needs /usr/bin/chromium; processes are stopped by PID.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_browser import (
    CHROMIUM,
    EXPECT_TIMEOUT_MS,
    ROOT,
    VIEWPORT,
    _no_traceback,
    _stop,
    _wait_http,
    free_port,
    launch,
)
from workbench.corpus import corpora

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
]
VIEWER, EDITOR = "vera@example.org", "ed@example.org"


# An account at the provider that claims the editor's address without having verified it.
MALLORY = "mallory"


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real OIDC provider: any client id is accepted, the user typed in is the subject.
    The team's members have verified e-mails; mallory's e-mail is the editor's, unverified."""
    from oidc_provider_mock import User, run_server_in_thread

    users = [User(sub=e, claims={"email": e, "email_verified": True}) for e in (VIEWER, EDITOR)]
    users.append(User(sub=MALLORY, claims={"email": EDITOR, "email_verified": False}))
    monkeypatch.setenv("AUTHLIB_INSECURE_TRANSPORT", "1")  # plain http on loopback
    with run_server_in_thread(port=free_port(), user_claims=users) as server:
        yield f"http://127.0.0.1:{server.server_port}"


@pytest.fixture
def team_app(wb_home: Path, tmp_path: Path, provider: str) -> Iterator[str]:
    from workbench.team import access

    access.set_role(VIEWER, "viewer")
    access.set_role(EDITOR, "editor")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    secrets = tmp_path / "secrets.toml"
    secrets.write_text(
        "[auth]\n"
        f'redirect_uri = "{url}/oauth2callback"\n'
        'cookie_secret = "a-cookie-secret-for-this-test-only-0123456789"\n'
        'client_id = "workbench"\n'
        'client_secret = "not-checked-by-the-mock"\n'
        f'server_metadata_url = "{provider}/.well-known/openid-configuration"\n',
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "AUTHLIB_INSECURE_TRANSPORT": "1"}
    log = open(tmp_path / "streamlit.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "streamlit_app.py",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--server.headless", "true", "--browser.gatherUsageStats", "false",
         "--secrets.files", str(secrets)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _wait_http(url, proc)
        yield url
    except Exception as exc:
        log.flush()
        raise AssertionError(f"{exc}\n{(tmp_path / 'streamlit.log').read_text()[-3000:]}") from exc
    finally:
        _stop(proc)
        log.close()


def _sign_in(page, expect, subject: str, email: str | None = None) -> None:
    page.get_by_role("button", name="Sign in").click()
    page.locator('input[name="sub"]').fill(subject)  # the provider's own form
    page.get_by_role("button", name="Authorize").click()
    expect(page.get_by_text(f"Signed in as {email or subject}")).to_be_visible()


def _sign_out(page, expect) -> None:
    page.get_by_role("button", name="Sign out").click()
    # Streamlit ends the session at the provider too (its end_session endpoint), whose own
    # page asks to confirm, then sends the browser back to the app.
    page.get_by_role("button", name="End session").click()
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()


def test_sign_in_roles_and_sign_out_in_a_browser(team_app: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(60_000)

            # Anonymous: the sign-in button and nothing of the workbench.
            page.goto(team_app)
            expect(page.get_by_role("button", name="Sign in")).to_be_visible()
            assert page.locator('[data-testid="stDataFrame"]').count() == 0
            assert page.get_by_role("heading", name="Corpus").count() == 0
            page.goto(f"{team_app}/models")  # a page's address shows nothing more
            expect(page.get_by_role("button", name="Sign in")).to_be_visible()
            assert page.get_by_role("heading", name="Models").count() == 0

            # A viewer reads the (demo) corpus, locked: no New, Rename, Delete, Save.
            page.goto(team_app)
            _sign_in(page, expect, VIEWER)
            expect(page.get_by_text("(viewer)")).to_be_visible()
            expect(page.get_by_role("heading", name="Corpus")).to_be_visible()
            expect(page.locator('[data-testid="stDataFrame"]')).to_be_visible()
            for label in ("New", "Rename", "Delete", "Save"):
                assert page.get_by_role("button", name=label, exact=True).count() == 0, label
            expect(page.get_by_text("read only")).to_be_visible()
            _no_traceback(page)
            page.screenshot(path=str(tmp_path / "viewer.png"))

            # Sign-out works: the sign-in is all there is again.
            _sign_out(page, expect)
            assert page.get_by_role("heading", name="Corpus").count() == 0

            # Mallory's account claims the editor's address, unverified: refused, and told so.
            _sign_in(page, expect, MALLORY, EDITOR)
            expect(page.get_by_text(f"says that {EDITOR} is not verified")).to_be_visible()
            assert page.get_by_role("heading", name="Corpus").count() == 0
            assert page.locator('[data-testid="stDataFrame"]').count() == 0
            _no_traceback(page)
            _sign_out(page, expect)

            # An editor may: creates a corpus from the page.
            _sign_in(page, expect, EDITOR)
            expect(page.get_by_text("(editor)")).to_be_visible()
            assert page.get_by_role("button", name="Delete", exact=True).count() == 0
            page.get_by_role("button", name="New", exact=True).click()
            popover = page.locator('[data-testid="stPopoverBody"]')
            popover.get_by_role("textbox", name="Name").fill("Team corpus")  # zh→en preset
            popover.get_by_role("button", name="Create corpus").click()
            expect(page.get_by_text("Created corpus “Team corpus”")).to_be_visible()
            _no_traceback(page)
            page.screenshot(path=str(tmp_path / "editor.png"))
            _sign_out(page, expect)
        finally:
            browser.close()
    assert "Team corpus" in [c.name for c in corpora.list_corpora()]
