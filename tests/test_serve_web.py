"""The web page's server side, in process on the echo engine: ``/`` and its assets with their headers, the
package data that ships them, and ``GET /v1/conversations`` (the list the page's sidebar shows), per key.
The page itself, in a real browser: tests/test_web_page.py."""
from __future__ import annotations

import configparser
import fnmatch
import os

import pytest

from lmchat.serve import page

pytest.importorskip("fastapi")

STATIC = os.path.join(os.path.dirname(page.__file__), "static")


@pytest.fixture(scope="module")
def keyed():
    """The echo server with two API keys, in process."""
    from tests.conftest import MEMORY
    from tests.serve_helpers import InProcess

    app = InProcess(*MEMORY, keys=("key-a", "key-b"))
    yield app
    app.stop()


def test_the_page_and_its_assets_are_served_inert(memory_app):
    http = memory_app.client()
    index = http.get("/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/static/app.js">' in index.text
    for response in (index, http.get("/static/app.js"), http.get("/static/vendor/purify.es.mjs")):
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"
    assert http.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    assert http.get("/static/app.css").headers["content-type"].startswith("text/css")
    # only the files of the folder: no path leads out of it, a licence text is not served
    for name in ("../page.py", "..%2Fpage.py", "vendor/../../page.py", "nothing.js", "vendor/marked.LICENSE"):
        assert http.get(f"/static/{name}").status_code == 404, name


def test_every_asset_the_page_loads_is_package_data():
    """setup.cfg's package_data names every file of the folder the server serves (a wheel carries the page)."""
    config = configparser.ConfigParser()
    config.read(os.path.join(os.path.dirname(STATIC), "..", "..", "setup.cfg"))
    value = config["options.package_data"]["lmchat.serve"]  # a list as setuptools reads one: lines, else commas
    patterns = [p.strip() for p in (value.splitlines() if "\n" in value else value.split(",")) if p.strip()]
    files = [os.path.relpath(os.path.join(d, f), os.path.dirname(STATIC)).replace(os.sep, "/")
             for d, _, names in os.walk(STATIC) for f in names]
    assert "static/index.html" in files and "static/vendor/marked.esm.js" in files
    assert [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)] == []
    assert set(page.load_assets()) >= {"index.html", "app.js", "chat.js", "api.js", "tree.js", "render.js",
                                       "app.css", "vendor/marked.esm.js", "vendor/purify.es.mjs",
                                       "vendor/highlight.min.js", "vendor/hljs-github.css"}


def test_the_page_needs_no_key_and_the_api_still_does(keyed):
    http = keyed.client()
    assert http.get("/").status_code == 200
    assert http.get("/v1/conversations").status_code == 401


def test_conversations_are_listed_per_key_newest_first_and_only_conversations(keyed):
    a, b = keyed.client("key-a"), keyed.client("key-b")
    first = a.post("/v1/conversations", json={"metadata": {"title": "first"}}).json()
    second = a.post("/v1/conversations", json={"metadata": {"title": "second"}}).json()
    theirs = b.post("/v1/conversations", json={"metadata": {"title": "theirs"}}).json()
    # a Responses chain and a chat session of the same key are no conversations
    a.post("/v1/responses", json={"input": "a chain"})
    a.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "chat"}]},
           headers={"X-Session-Id": "a-chat"})
    a.post("/v1/responses", json={"conversation": first["id"], "input": "now the first is the newest"})

    listed = a.get("/v1/conversations").json()
    assert [c["id"] for c in listed["data"]] == [first["id"], second["id"]]
    assert listed["object"] == "list" and listed["first_id"] == first["id"] and listed["has_more"] is False
    assert listed["data"][0]["metadata"] == {"title": "first"}
    assert listed["data"][0]["updated_at"] >= listed["data"][1]["updated_at"] >= second["created_at"]
    assert [c["id"] for c in b.get("/v1/conversations").json()["data"]] == [theirs["id"]]

    # renamed (its metadata replaced) and deleted, as the page does
    a.post(f"/v1/conversations/{second['id']}", json={"metadata": {"title": "renamed"}})
    assert a.get("/v1/conversations").json()["data"][0]["metadata"] == {"title": "renamed"}
    assert a.delete(f"/v1/conversations/{second['id']}").json()["deleted"] is True
    assert [c["id"] for c in a.get("/v1/conversations").json()["data"]] == [first["id"]]


def test_a_page_of_conversations_says_there_may_be_more(memory_app):
    http = memory_app.client()
    made = [http.post("/v1/conversations", json={}).json()["id"] for _ in range(3)]
    listed = http.get("/v1/conversations", params={"limit": 2}).json()
    assert [c["id"] for c in listed["data"]] == made[:0:-1] and listed["has_more"] is True
    bad = http.get("/v1/conversations", params={"limit": 0})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"


def test_a_branch_holds_copies_of_the_earlier_turns(memory_app):
    """What the page does to edit turn 1: a conversation made with the items before it, then the new question;
    its items read as the original's up to there."""
    http = memory_app.client()
    root = http.post("/v1/conversations", json={"metadata": {"title": "t"}}).json()["id"]
    for question in ("one", "two"):
        http.post("/v1/responses", json={"conversation": root, "input": question})
    items = http.get(f"/v1/conversations/{root}/items", params={"order": "asc"}).json()["data"]
    branch = http.post("/v1/conversations", json={"items": items[:2], "metadata": {
        "root": root, "parent": root, "turn": "1"}}).json()["id"]
    answer = http.post("/v1/responses", json={"conversation": branch, "input": "deux"}).json()
    assert answer["output"][0]["content"][0]["text"] == "deux"
    texts = [i["content"][0]["text"] for i in http.get(f"/v1/conversations/{branch}/items",
                                                        params={"order": "asc"}).json()["data"]]
    assert texts == ["one", "one", "deux", "deux"]


def test_serve_open_opens_the_page_once_the_server_answers(tmp_path):
    """``lmchat serve --open``: the user's browser ($BROWSER here: a script that notes what it was asked to open)
    gets the page's URL once the server answers; the page is there."""
    import sys
    import time

    from tests.serve_helpers import Server

    opened = tmp_path / "opened"
    script = tmp_path / "browser.py"
    script.write_text(f"import sys\nopen({str(opened)!r}, 'w').write(sys.argv[1])\n")
    server = Server("--template", "qwen2.5", "--store", "memory", "--open",
                    env={"BROWSER": f"{sys.executable} {script} %s"})
    try:
        deadline = time.monotonic() + 30
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert opened.read_text() == f"{server.url}/"
        assert '<script type="module" src="/static/app.js">' in server.client().get("/").text
    finally:
        server.stop()


def test_the_help_says_where_the_page_is():
    from lmchat.cli import main

    help_text = main.build_parser()._subparsers._group_actions[0].choices["serve"].format_help()
    assert "web chat page" in help_text and "--open" in help_text


def test_chat_web_serves_the_same_engine_options():
    """``lmchat chat --web``'s server: chat's engine, template and sampling options as given, serve's defaults
    otherwise, --open; what only the terminal has is refused, naming it."""
    from lmchat.cli import chat_web, main

    chat = main.build_parser().parse_args(["chat", "--web", "--backend", "echo", "--template", "qwen2.5",
                                           "--temperature", "0.5", "--backend-option", "delay=0", "--port", "1234"])
    served = chat_web.serve_args(chat)
    assert (served.backend, served.template, served.temperature, served.backend_option) == (
        "echo", "qwen2.5", 0.5, ["delay=0"])
    assert (served.open, served.port, served.store, served.drift, served._module) == (
        True, 1234, None, "rewind", "lmchat.cli.serve_cmd")
    for extra, named in ((["hello"], "PROMPT"), (["--resume"], "--resume"), (["--store", "memory"], "--store")):
        with pytest.raises(main.UsageError, match=named):
            chat_web.serve_args(main.build_parser().parse_args(["chat", "--web", *extra]))


def test_lmchat_chat_web_starts_the_server_and_opens_the_page(tmp_path):
    import sys

    from tests.serve_helpers import Service, free_port

    opened = tmp_path / "opened"
    script = tmp_path / "browser.py"
    script.write_text(f"import sys\nopen({str(opened)!r}, 'w').write(sys.argv[1])\n")
    port = free_port()
    web = Service()
    web.url = f"http://127.0.0.1:{port}"
    web.start([sys.executable, "-m", "lmchat", "chat", "--web", "--backend", "echo", "--template", "qwen2.5",
               "--port", str(port)], {**os.environ, "LMCHAT_DATA_DIR": str(tmp_path), "LMCHAT_API_KEYS": "",
                                      "BROWSER": f"{sys.executable} {script} %s"})
    try:
        import time

        deadline = time.monotonic() + 30
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert opened.read_text() == f"{web.url}/"
        import httpx

        assert '<script type="module" src="/static/app.js">' in httpx.get(web.url + "/").text
    finally:
        web.stop()
