"""``trimem ui`` under awkward input: malformed writes, odd ids, hostile text, a phone, parallel
editors and a damaged row. The same real ``trimem ui`` process and headless Chromium as
``test_ui.py``; writes go over HTTP with the page's own token and origin, as its script sends them.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlite_files import execute
from test_ui import answer  # pytest puts tests/ on sys.path (prepend import mode)
from ui_page import USER, Ui

from store import Engine, NotFound


def token_of(ui: Ui) -> str:
    """The token the page is served with, read from the page as its script reads it."""
    status, html = answer(ui, "/")
    assert status == 200
    return re.search(r'<meta name="trimem-token" content="([^"]+)">', html).group(1)


def send(ui: Ui, token: str, method: str, memory_id: str, body: bytes) -> tuple[int, str]:
    """A write to one memory as the page's script sends it: own origin, token, JSON body."""
    query = urllib.parse.urlencode({"id": memory_id, "user_id": USER})
    call = urllib.request.Request(
        f"{ui.url}memory?{query}", method=method, data=body,
        headers={"Origin": f"http://127.0.0.1:{ui.port}", "X-Trimem-Token": token,
                 "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(call, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def save(ui: Ui, token: str, memory_id: str, fields: dict[str, Any]) -> tuple[int, str]:
    return send(ui, token, "POST", memory_id, json.dumps(fields).encode())


MALFORMED_SAVES = [
    (b'{"metadata": {"category": "food"}}', "metadata must be the text of its box (a string), got dict"),
    (b'{"text": 42}', "text must be the text of its box (a string), got int"),
    (b'{"text": null}', "text must be the text of its box (a string), got NoneType"),
    (b'{"txt": "Ana drinks tea"}', "unknown field 'txt'; the form sends text and metadata"),
    (b"{}", "nothing to save: send text and/or metadata"),
    (b"", "nothing to save: send text and/or metadata"),
    (b'["text"]', "the request: must be a JSON object"),
    (b'{"text": ', "the request: not valid JSON"),
    (b'{"text": "caf\xe9"}', "the request is not UTF-8 text; send a JSON object"),
    (b'{"metadata": "[1, 2]"}', "the metadata: must be a JSON object"),
]


def test_a_malformed_save_is_a_400_that_changes_nothing(ui: Ui, engine: Engine) -> None:
    memory = engine.list(user_id=USER)[0]
    token = token_of(ui)
    for body, message in MALFORMED_SAVES:
        status, text = send(ui, token, "POST", memory.id, body)
        assert (status, message in text) == (400, True), (body, text)
        assert len(text) < 200
    assert engine.get(memory.id, user_id=USER) == memory
    assert [event.event for event in engine.history(memory.id, user_id=USER)] == ["ADD"]


def test_a_field_left_out_of_a_save_is_left_as_it_was(ui: Ui, engine: Engine) -> None:
    memory = next(m for m in engine.list(user_id=USER) if m.metadata.get("priority") == 5)
    token = token_of(ui)
    assert save(ui, token, memory.id, {"text": "Ana is allergic to peanuts and to cashews"}) == (200, "saved")
    stored = engine.get(memory.id, user_id=USER)
    assert (stored.text, stored.metadata) == ("Ana is allergic to peanuts and to cashews", memory.metadata)

    assert save(ui, token, memory.id, {"metadata": '{"category": "health"}'}) == (200, "saved")
    stored = engine.get(memory.id, user_id=USER)
    assert (stored.text, stored.metadata) == ("Ana is allergic to peanuts and to cashews", {"category": "health"})

    assert save(ui, token, memory.id, {"metadata": " "}) == (200, "saved")  # a blank box clears it
    assert engine.get(memory.id, user_id=USER).metadata == {}


AWKWARD_IDS = ["a/b", "../x", "..", "50%/?#&id=1"]


def test_an_id_with_slashes_or_dots_opens_saves_and_deletes_on_the_page(
    page: Any, engine: Engine, tmp_path: Path
) -> None:
    """Import keeps any id without whitespace; the page reaches each one."""
    lines = [{"format": "trimem-memories", "format_version": 1}] + [
        {"id": memory_id, "text": f"Ana keeps note number {n} in the drawer", "user_id": USER}
        for n, memory_id in enumerate(AWKWARD_IDS)
    ]
    exported = tmp_path / "awkward.jsonl"
    exported.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert engine.import_memories(exported).imported == len(AWKWARD_IDS)
    page.reload()
    page.on("dialog", lambda dialog: dialog.accept())
    for n, memory_id in enumerate(AWKWARD_IDS):
        item = page.locator("li.memory").filter(has_text=f"note number {n} in")
        assert item.get_attribute("data-id") == memory_id
        item.click()
        form = page.locator("form#edit")
        form.wait_for()
        assert form.get_attribute("data-id") == memory_id
        page.fill("form#edit textarea[name=text]", f"Ana moved note number {n} to the shelf")
        page.click("form#edit button[type=submit]")
        page.wait_for_selector("#message.ok")
        assert engine.get(memory_id, user_id=USER).text == f"Ana moved note number {n} to the shelf"
        page.click("#delete")
        page.wait_for_selector("#message.ok:has-text('deleted')")
        with pytest.raises(NotFound):
            engine.get(memory_id, user_id=USER)
        assert [e.event for e in engine.history(memory_id, user_id=USER)] == ["ADD", "UPDATE", "DELETE"]


OVERRIDE = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "\u202egnp.exe" reads "exe.png"

# The left edges, in document order, of the given parts of one element: each selector's
# elements, or for a string the text node holding it (a Range's box: it may have no element).
LEFT_EDGES = """([root, parts]) => {
    const element = document.querySelector(root);
    const box = part => {
        if (part.startsWith('css:')) return [...element.querySelectorAll(part.slice(4))];
        const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
        while (walker.nextNode()) {
            if (walker.currentNode.data.includes(part)) {
                const range = document.createRange();
                range.selectNodeContents(walker.currentNode);
                return [range];
            }
        }
        throw new Error('no text ' + part);
    };
    return parts.flatMap(box).map(thing => {
        const r = thing.getBoundingClientRect();
        return {left: r.left, top: r.top};
    });
}"""


def left_to_right_on_one_line(edges: list[dict[str, float]]) -> bool:
    """Whether the boxes sit on one line (chips are a few pixels taller) in document order."""
    tops = [edge["top"] for edge in edges]
    lefts = [edge["left"] for edge in edges]
    return max(tops) - min(tops) < 8 and lefts == sorted(lefts)


def test_a_right_to_left_override_cannot_reorder_the_page_around_it(page: Any, engine: Engine) -> None:
    [added] = engine.add(
        f"{OVERRIDE}gnp.exe is the invoice Ana forwarded", user_id=USER, agent_id=f"{OVERRIDE}mail",
        metadata={"file": f"{OVERRIDE}gnp.exe", "zone": "last"},
    )
    memory_id = added.memory.id
    page.reload()
    facts = f"li.memory[data-id='{memory_id}'] p.facts"
    # The id, the created and updated times, then the two metadata chips, left to right.
    edges = page.evaluate(LEFT_EDGES, [facts, ["css:code", "css:time", "css:.kv"]])
    assert len(edges) == 5 and left_to_right_on_one_line(edges), edges

    page.click(f"li.memory[data-id='{memory_id}']")
    page.wait_for_selector("ol.history li")
    # In the history the new text comes first and the metadata after it, not the other way round.
    edges = page.evaluate(LEFT_EDGES, ["ol.history li", ["invoice Ana forwarded", "css:code"]])
    assert left_to_right_on_one_line(edges), edges


def test_the_page_has_an_icon_and_loads_without_an_error(browser: Any, ui: Ui) -> None:
    context = browser.new_context()
    tab = context.new_page()
    failures: list[str] = []
    tab.on("console", lambda message: failures.append(message.text) if message.type == "error" else None)
    tab.on("response", lambda response: failures.append(response.url) if response.status >= 400 else None)
    tab.goto(ui.url)
    icon = tab.evaluate(
        """async () => {
            const response = await fetch(document.querySelector('link[rel=icon]').href);
            return [response.status, response.headers.get('content-type'), await response.text()];
        }"""
    )
    assert icon[:2] == [200, "image/svg+xml"] and icon[2].startswith("<svg")
    context.close()
    assert failures == []
    status, body = answer(ui, "/favicon.ico")  # where a browser looks when a page names no icon
    assert status == 200 and body.startswith("<svg")


SIX_KEYS = {"category": "home", "room": "kitchen", "floor": 2, "shared": True, "since": "2024", "owner": "Ana"}


def test_on_a_phone_a_tapped_memory_opens_in_view_with_all_its_metadata(
    browser: Any, ui: Ui, engine: Engine
) -> None:
    engine.add("Ana keeps the spare keys in the kitchen drawer", user_id=USER, metadata=SIX_KEYS)
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    tab = phone.new_page()
    tab.goto(ui.url)
    tab.locator("li.memory").first.tap()
    tab.wait_for_selector("form#edit")
    tab.wait_for_function("() => document.querySelector('form#edit').getBoundingClientRect().top >= 0")
    top = tab.evaluate("() => document.querySelector('form#edit').getBoundingClientRect().top")
    assert 0 <= top < 844 - 200, "the editor's text box is in view"
    box = tab.locator("form#edit textarea[name=metadata]")
    assert json.loads(box.input_value()) == SIX_KEYS
    assert box.evaluate("b => b.scrollHeight <= b.clientHeight"), "every line of the JSON shows"
    box.fill(json.dumps({**SIX_KEYS, "extra": 1, "more": 2}, indent=1))  # it grows as it is typed in
    assert box.evaluate("b => b.scrollHeight <= b.clientHeight")
    phone.close()


EDITORS, SAVES = 4, 100


def test_parallel_editors_all_save_and_every_save_is_in_the_history(ui: Ui, engine: Engine) -> None:
    memory = engine.list(user_id=USER)[0]
    token = token_of(ui)
    texts = [f"Ana drinks oat milk flat whites, version {n}" for n in range(SAVES)]

    def edit(n: int) -> int:
        return save(ui, token, memory.id, {"text": texts[n], "metadata": json.dumps({"version": n})})[0]

    with ThreadPoolExecutor(EDITORS) as editors:
        statuses = list(editors.map(edit, range(SAVES)))
    assert statuses == [200] * SAVES
    updates = [event for event in engine.history(memory.id, user_id=USER) if event.event == "UPDATE"]
    assert sorted(event.new_text for event in updates) == sorted(texts)
    assert sorted(event.new_metadata["version"] for event in updates) == list(range(SAVES))
    final = engine.get(memory.id, user_id=USER)
    assert (final.text, final.metadata) == (updates[-1].new_text, updates[-1].new_metadata)


@pytest.mark.only_on("sqlite")
def test_an_unexpected_failure_is_a_short_answer_and_one_log_line(ui: Ui, engine: Engine) -> None:
    """A row the engine cannot read (its text damaged outside trimem: not UTF-8) fails each request
    that reads it with a short line, and the export before its download starts, not halfway."""
    memory = engine.list(user_id=USER)[0]
    execute(engine, "UPDATE memories SET text = CAST(X'416E61FF' AS TEXT) WHERE id = ?", (memory.id,))
    failed = "the server failed on this request (UnicodeDecodeError); its log says why"
    for path in (f"/memory?id={memory.id}", "/export", "/"):
        assert answer(ui, path) == (500, failed), path
    log = ui.log.read_text()
    assert "GET /export failed: UnicodeDecodeError: 'utf-8' codec can't decode" in log
    assert "Traceback" not in log  # the fixture checks this too: the terminal gets one line per failure
