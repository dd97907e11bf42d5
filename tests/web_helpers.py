"""The web page's browser tests' helpers: Debian's chromium driven by Playwright (no browser download), a page
that records its console errors, and the page's own ways to act (by role and label, as a person does)."""
from __future__ import annotations

import os
import re
import shutil

import pytest

#: where the tests keep their screenshots (CI keeps the folder as an artifact); docs/web.md shows two of them
SHOTS = os.environ.get("LMCHAT_WEB_SHOTS", os.path.join(os.path.dirname(__file__), "..", "build", "web-shots"))
#: how long the bundled model on one thread of a busy machine may take over a turn
TURN_MS = 120_000


def chromium_path() -> str:
    """Debian's chromium (.ci/run installs it), else a skip that says how to get it."""
    pytest.importorskip("playwright.sync_api", reason="the browser tests need Playwright: pip install -e '.[test]'")
    found = os.environ.get("LMCHAT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("no chromium: the browser tests drive Debian's (apt-get install chromium; .ci/run does), "
                    "or set LMCHAT_CHROMIUM to a Chromium binary")
    return found


class Browser:
    """One chromium for a test module (Playwright's sync API); ``page()`` opens a page in a context of its own
    (its own session storage: another browser, as far as the server can tell)."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self.playwright = sync_playwright().start()
        self.browser = self.playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])

    def page(self, url: str, width: int = 1280, height: int = 800):
        context = self.browser.new_context(viewport={"width": width, "height": height},
                                           permissions=["clipboard-read", "clipboard-write"])
        page = context.new_page()
        page.errors = []  # every console error and uncaught exception, checked by the tests

        def console(message):
            if message.type == "error":
                page.errors.append(f"{message.text} ({message.location.get('url')})")

        page.on("console", console)
        page.on("pageerror", lambda exc: page.errors.append(f"uncaught: {exc}"))
        page.on("dialog", lambda dialog: dialog.accept())  # the delete confirmation
        page.set_default_timeout(TURN_MS)
        page.goto(url + "/")
        return page

    def close(self) -> None:
        self.browser.close()
        self.playwright.stop()


def shot(page, name: str) -> None:
    os.makedirs(SHOTS, exist_ok=True)
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"))


def ask(page, text: str) -> None:
    """Type a message and send it with Enter, as a person does."""
    box = page.get_by_role("textbox", name="Message", exact=True)
    box.fill(text)
    box.press("Enter")


def settled(page) -> None:
    """Until the turn is over and the conversation redrawn from the server: the page marks its log busy from the
    key press that asks (before the handler returns) until then."""
    page.locator("[role=log][aria-busy]").wait_for(state="detached", timeout=TURN_MS)


def answer(page, n: int):
    return page.get_by_role("article", name=f"Answer {n}", exact=True)


def statistics(page, n: int) -> str:
    """Answer ``n``'s statistics once the page shows them: they come from the answer's response, which the page
    asks for after the turn is redrawn (so after :func:`settled`)."""
    stats = answer(page, n).get_by_label("Answer statistics")
    stats.filter(has_text=re.compile(r"\S")).wait_for()
    return stats.inner_text()


def cached(page, n: int) -> int:
    """The cached prompt tokens answer ``n``'s statistics show."""
    stats = answer(page, n).get_by_label("Answer statistics")
    stats.filter(has_text="cached").wait_for()
    return int(re.search(r"\((\d+) cached", stats.inner_text()).group(1))


def setting(page, label: str, value: str) -> None:
    page.get_by_role("button", name="Settings", exact=True).click()
    page.get_by_label(label).fill(value)
    page.get_by_role("button", name="Save settings").click()
    page.get_by_role("status").filter(has_text="Saved.").wait_for()
    page.get_by_role("button", name="Settings", exact=True).click()


def use_key(page, key: str, refused: bool = False) -> None:
    """Give the page an API key in its dialog; until the dialog closes (the page behind it is inert till then),
    or says the key was refused."""
    page.get_by_label("Key", exact=True).fill(key)
    page.get_by_role("button", name="Use key").click()
    if refused:
        page.get_by_text("The server refused this key.").wait_for()
    else:
        page.get_by_role("dialog", name="API key").wait_for(state="hidden")

