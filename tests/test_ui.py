"""``trimem ui`` in a real headless browser: Debian's Chromium driven by Playwright.

The page is served by a real ``trimem ui --no-browser --port 0`` process on the test's
database; memories are seeded and checked through ``Engine`` on the same file, as an MCP
server beside the page would see them. Without /usr/bin/chromium these tests skip, except
under CI (``CI=true``), where a missing browser is a failure.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_page import USER, Ui  # pytest puts tests/ on sys.path (prepend import mode)

from mcp_server.wording import learned_line
from store import Engine, NotFound
from store.ranking.scoring import KEYWORD_SOURCES

QUERY = "When does Ana take the train to Porto?"


def search(page: Any, query: str) -> None:
    page.fill("input[name=q]", query)
    page.wait_for_selector("li.hit")


def drawn_bars(page: Any) -> list[dict[str, Any]]:
    """Each hit's id; each part's drawn width as a share of the score bar; and, on the bar that
    holds the gate mark, the semantic part's width and the mark's centre as shares of that bar."""
    return page.eval_on_selector_all(
        "li.hit",
        """hits => hits.map(hit => {
            const gate = hit.querySelector('.gate');
            const gauge = gate.parentElement;
            const score = [...hit.querySelectorAll('.bar')].find(bar => bar !== gauge);
            const start = bar => bar.getBoundingClientRect().left + bar.clientLeft;
            const share = (bar, name) => bar.querySelector('.seg.' + name).getBoundingClientRect().width
                                         / bar.clientWidth;
            return {id: hit.dataset.id, semantic: share(score, 'semantic'), bm25: share(score, 'bm25'),
                    entity: share(score, 'entity'), meaning: share(gauge, 'semantic'),
                    gate: (gate.getBoundingClientRect().left + 1 - start(gauge)) / gauge.clientWidth};
        })""",
    )


def assert_bars_match(page: Any, explanation: Any) -> None:
    bars = drawn_bars(page)
    assert [bar["id"] for bar in bars] == [hit.memory.id for hit in explanation.hits]
    for bar, hit in zip(bars, explanation.hits, strict=True):
        parts = hit.details
        for name, value in (("semantic", parts.semantic_score), ("bm25", parts.bm25_score),
                            ("entity", parts.entity_boost)):
            assert bar[name] == pytest.approx(value / parts.max_possible_score, abs=0.005), (name, hit.memory.text)
        # The gate is drawn on the scale it gates: the semantic score's, 0 to 1 like the slider.
        assert bar["meaning"] == pytest.approx(parts.semantic_score, abs=0.005)
        assert bar["gate"] == pytest.approx(parts.threshold, abs=0.005)
        assert bar["meaning"] >= bar["gate"] - 0.005, hit.memory.text  # what passed reaches past the mark


def test_search_draws_each_score_as_its_parts_and_reranks_live(
    page: Any, engine: Engine, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    search(page, QUERY)
    explanation = engine.explain(QUERY, user_id=USER)
    assert len(explanation.hits) >= 3
    assert {"bm25", "entity"} <= set(explanation.analysis.signals_active)
    assert_bars_match(page, explanation)
    makeups = {(h.details.bm25_score > 0, h.details.entity_boost > 0) for h in explanation.hits}
    assert len(makeups) >= 2, "the picture should show bars of different make-up"

    page.click("li.hit:first-child details.why summary")
    first = explanation.hits[0]
    expected = KEYWORD_SOURCES[first.keyword_source] if first.keyword_source else "no keyword score"
    assert expected in page.inner_text("li.hit:first-child details.why")
    page.click("details.analysis summary")
    assert "porto" in page.inner_text("details.analysis")
    assert "midpoint" in page.inner_text("details.analysis")
    page.click("li.hit:first-child p.text")
    page.wait_for_selector("form#edit")
    # The picture shows the default database location rather than this test's temporary file.
    page.eval_on_selector(".database", "e => e.textContent = '~/.local/share/trimem/memories.db'")
    picture = Path(request.config.getoption("--ui-screenshot") or tmp_path / "ui.png")
    page.screenshot(path=str(picture), full_page=False)
    assert picture.read_bytes().startswith(b"\x89PNG")

    page.uncheck("input[name=bm25]")
    page.wait_for_function("() => !document.querySelector('details.analysis').textContent.includes('bm25 +')"
                           " && !document.querySelector('details.analysis').textContent.includes('+ bm25')")
    assert_bars_match(page, engine.explain(QUERY, user_id=USER, use_bm25=False))
    page.uncheck("input[name=entities]")
    page.wait_for_function("() => document.querySelector('details.analysis').textContent.includes('semantic; ')")
    assert_bars_match(page, engine.explain(QUERY, user_id=USER, use_bm25=False, use_entities=False))

    page.fill("input[name=threshold]", "0.45")
    strict = engine.explain(QUERY, user_id=USER, threshold=0.45, use_bm25=False, use_entities=False)
    page.wait_for_function(f"() => document.querySelectorAll('li.hit').length === {len(strict.hits)}")
    assert_bars_match(page, strict)
    assert "below the semantic gate" in page.inner_text("details.analysis")


def test_each_score_says_what_moved_the_learned_order(page: Any, engine: Engine) -> None:
    search(page, QUERY)
    explanation = engine.explain(QUERY, user_id=USER)  # the default ranking: learned fusion
    shown = page.eval_on_selector_all("li.hit", "hits => hits.map(h => [h.dataset.id, h.querySelector('b').textContent])")
    assert shown == [[hit.memory.id, f"{hit.score:.3f}"] for hit in explanation.hits]
    page.click("li.hit:first-child details.why summary")
    first = explanation.hits[0]
    assert first.learned is not None and learned_line(first.learned) in page.inner_text("li.hit:first-child details.why")


def test_a_search_with_no_relevant_memory_says_so_and_shows_why(page: Any, engine: Engine) -> None:
    query = "What is John's job?"
    explanation = engine.explain(query, user_id=USER)
    assert explanation.hits == [] and explanation.withheld  # the store does have memories, none relevant
    page.fill("input[name=q]", query)
    page.wait_for_selector("p.empty a.why")
    assert page.inner_text("p.empty").startswith("No stored memory is relevant to this query.")
    assert page.eval_on_selector("details.analysis", "e => e.open") is False
    page.click("p.empty a.why")
    page.wait_for_function("() => document.querySelector('details.analysis').open")
    shown = page.inner_text("details.analysis")
    assert "nothing relevant (best score" in shown and "names: john" in shown
    withheld = page.eval_on_selector_all("ol.withheld li.withheld", "items => items.map(item => item.dataset.id)")
    assert withheld == [hit.memory.id for hit in explanation.withheld]


def test_browse_lists_the_scope_newest_first_and_filters(page: Any, engine: Engine) -> None:
    listed = [m.id for m in engine.list(user_id=USER)]
    assert page.eval_on_selector_all("li.memory", "items => items.map(i => i.dataset.id)") == listed
    assert "Bob" not in page.inner_text("#results")
    assert page.eval_on_selector_all("select[name=user_id] option", "o => o.map(x => x.value)") == ["ana", "bob"]
    page.fill("input[name=filters]", '{"category": "travel"}')
    page.wait_for_function(f"() => document.querySelectorAll('li.memory').length === {3}")
    travel = [m.id for m in engine.list(user_id=USER, filters={"category": "travel"})]
    assert page.eval_on_selector_all("li.memory", "items => items.map(i => i.dataset.id)") == travel
    page.fill("input[name=filters]", '{"category": {"nope": 1}}')
    page.wait_for_selector("#message:not([hidden])")
    message = page.inner_text("#message")
    assert "nope" in message and "Traceback" not in message


def test_edit_and_delete_a_memory_change_the_database(page: Any, engine: Engine) -> None:
    [memory] = [m for m in engine.list(user_id=USER) if m.text.startswith("Ana drinks")]
    page.click(f"li.memory[data-id='{memory.id}']")
    page.wait_for_selector("form#edit")
    page.fill("form#edit textarea[name=text]", "Ana drinks soy milk cappuccinos")
    page.fill("form#edit textarea[name=metadata]", '{"category": "food", "checked": true}')
    page.click("form#edit button[type=submit]")
    page.wait_for_selector("#message.ok")
    stored = engine.get(memory.id, user_id=USER)
    assert (stored.text, stored.metadata) == ("Ana drinks soy milk cappuccinos", {"category": "food", "checked": True})
    page.wait_for_selector("ol.history li:nth-child(2)")
    assert "UPDATE" in page.inner_text("ol.history")

    page.fill("form#edit textarea[name=metadata]", "[1, 2]")
    page.click("form#edit button[type=submit]")
    page.wait_for_selector("#message:not(.ok):not([hidden])")
    assert "JSON object" in page.inner_text("#message")
    assert engine.get(memory.id, user_id=USER).metadata == {"category": "food", "checked": True}

    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("#delete")
    assert engine.get(memory.id, user_id=USER)  # a dismissed confirmation deletes nothing
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete")
    page.wait_for_selector("#message.ok")
    with pytest.raises(NotFound):
        engine.get(memory.id, user_id=USER)
    assert [event.event for event in engine.history(memory.id, user_id=USER)] == ["ADD", "UPDATE", "DELETE"]


def test_an_entity_chip_opens_the_memories_linked_to_it(page: Any, engine: Engine) -> None:
    [memory] = [m for m in engine.list(user_id=USER) if m.text.startswith("Ana booked")]
    page.click(f"li.memory[data-id='{memory.id}']")
    page.click("button.chip[data-entity='porto']")
    page.wait_for_selector("#results h2:has-text('porto')")
    linked = [m.id for m in engine.list_by_entity("porto", user_id=USER)]
    assert len(linked) == 2
    assert page.eval_on_selector_all("li.memory", "items => items.map(i => i.dataset.id)") == linked


def test_export_downloads_the_scope_and_filter_on_screen(
    page: Any, engine: Engine, engine_factory: Any, another_store: Any, tmp_path: Path
) -> None:
    """The button's file is ``trimem export``'s format for what the pickers and filter show:
    imported into an empty database it gives back those memories, ids and all, and no one else's."""
    page.fill("input[name=filters]", '{"category": "travel"}')
    page.wait_for_function("() => document.querySelectorAll('li.memory').length === 3")
    with page.expect_download() as download:
        page.click("#export")
    assert download.value.suggested_filename == f"trimem-{USER}.jsonl"
    exported = tmp_path / "exported.jsonl"
    download.value.save_as(exported)
    header = json.loads(exported.read_text().splitlines()[0])
    assert header["counts"]["memories"] == 3 and header["filters"] == {"category": "travel"}

    with engine_factory(another_store("fresh")) as fresh:
        report = fresh.import_memories(exported)
        assert report.imported == 3
        travel = engine.list(user_id=USER, filters={"category": "travel"})
        copied = fresh.list(user_id=USER)
        assert [(m.id, m.text, m.metadata, m.created_at) for m in copied] == [
            (m.id, m.text, m.metadata, m.created_at) for m in travel
        ]
        assert fresh.list(user_id="bob") == []


def request(ui: Ui, method: str, path: str, headers: dict[str, str]) -> int:
    call = urllib.request.Request(ui.url.rstrip("/") + path, method=method, headers=headers, data=b"{}")
    try:
        with urllib.request.urlopen(call, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


@contextlib.contextmanager
def elsewhere() -> Iterator[str]:
    """The address of a page served by another origin (another port on loopback)."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<p>another site</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_cross_origin_write_is_refused(browser: Any, page: Any, ui: Ui, engine: Engine) -> None:
    memory = engine.list(user_id=USER)[0]
    token = page.get_attribute("meta[name=trimem-token]", "content")
    target = f"{ui.url}memory?id={memory.id}&user_id={USER}"

    # A page of another origin (another port on loopback, so that the browser's own guard for
    # private networks lets it try) posts to the trimem page, as any site's script could.
    other = browser.new_page()
    with elsewhere() as hostile:
        other.goto(hostile)
        other.evaluate(
            """([url, token]) => fetch(url, {method: 'POST', mode: 'no-cors', headers: {'X-Trimem-Token': token},
                                              body: JSON.stringify({text: 'Ana owes elsewhere money'})})""",
            [target, token],
        )
    other.close()
    assert "refused POST /memory" in ui.log.read_text()  # it reached the server, which refused it
    own = f"http://127.0.0.1:{ui.port}"
    path = f"/memory?id={memory.id}&user_id={USER}"
    assert request(ui, "DELETE", path, {"Origin": "http://evil.example", "X-Trimem-Token": token}) == 403
    assert request(ui, "DELETE", path, {"Origin": own}) == 403  # no token
    assert request(ui, "DELETE", path, {"X-Trimem-Token": token}) == 403  # neither Origin nor Referer
    assert request(ui, "GET", "/", {"Host": f"evil.example:{ui.port}"}) == 421  # DNS rebinding
    assert engine.get(memory.id, user_id=USER) == memory
    # The same request from the page's own origin with its token goes through.
    assert request(ui, "DELETE", path, {"Referer": f"{own}/", "X-Trimem-Token": token}) == 200
    with pytest.raises(NotFound):
        engine.get(memory.id, user_id=USER)


def answer(ui: Ui, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(ui.url.rstrip("/") + path, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


BAD_REQUESTS = [
    ("/memories?offset=1.5", 400, "offset must be an integer, got '1.5'"),
    ("/memories?offset=-1", 400, "offset"),
    ("/search?q=tea&threshold=nan", 400, "threshold must be a number between 0 and 1"),
    ("/search?q=tea&threshold=2", 400, "threshold must be between 0 and 1"),
    ("/search?q=%20", 400, "type something to search for"),
    ("/search?q=tea&bm25=yes", 400, "bm25 must be 1 (on) or 0 (off), got 'yes'"),
    ("/memories?filters=" + "%5B" * 3000, 400, "nested too deeply"),
    ("/memories?filters=%7B%22user_id%22%3A%22bob%22%7D", 400, "user_id"),
    ("/memory?id=no-such-id", 404, "not found for user_id='ana'"),
    ("/memory", 400, "which memory? give its id as ?id="),
    ("/entity?name=", 400, "which entity? give its name as ?name="),
    ("/export?filters=%7B%22category%22%3A%7B%22nope%22%3A1%7D%7D", 400, "nope"),  # refused before the download
    ("/static/page.html", 404, "not found"),
    ("/?user_id=" + "x" * 5000, 200, "user_id has 5000 characters"),  # the page, with the message in it
]


def test_bad_input_gets_the_engines_short_message(ui: Ui) -> None:
    for path, status, message in BAD_REQUESTS:
        got_status, text = answer(ui, path)
        assert (got_status, message in text) == (status, True), (path[:80], text[:300])
        assert "Traceback" not in text
        if not path.startswith("/?"):  # the page itself is long; a fragment is the short message alone
            assert len(text) < 500, (path[:80], text[:300])


def test_a_port_in_use_is_a_short_error(tmp_path: Path) -> None:
    from mcp_server.ui import bind

    taken = bind(0)
    try:
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "mcp_server", "--db", str(tmp_path / "m.db"), "ui", "--no-browser", "--port",
             str(port)],
            capture_output=True, text=True, timeout=120, check=False,
        )
    finally:
        taken.close()
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--port" in result.stderr


@pytest.mark.parametrize(
    ("method", "headers", "refused"),
    [
        ("GET", {"host": "127.0.0.1:8000"}, None),
        ("GET", {"host": "localhost:8000"}, None),
        ("GET", {"host": "127.0.0.1:8001"}, 421),  # another port: not this page
        ("GET", {"host": "attacker.example:8000"}, 421),  # a rebound name
        ("GET", {}, 421),
        ("POST", {"host": "localhost:8000", "origin": "http://localhost:8000", "x-trimem-token": "t0k"}, None),
        ("DELETE", {"host": "127.0.0.1:8000", "referer": "http://127.0.0.1:8000/?q=x", "x-trimem-token": "t0k"}, None),
        ("POST", {"host": "127.0.0.1:8000", "origin": "null", "x-trimem-token": "t0k"}, 403),
        ("POST", {"host": "127.0.0.1:8000", "referer": "http://127.0.0.1:8000.evil/", "x-trimem-token": "t0k"}, 403),
        ("POST", {"host": "127.0.0.1:8000", "origin": "http://127.0.0.1:8000", "x-trimem-token": "t0"}, 403),
        ("PUT", {"host": "127.0.0.1:8000", "origin": "http://127.0.0.1:8000"}, 403),
    ],
)
def test_the_guard_lets_through_only_the_pages_own_requests(method: str, headers: dict, refused: int | None) -> None:
    from starlette.datastructures import Headers

    from mcp_server.ui.guard import Guard

    result = Guard(app=None, port=8000, token="t0k").refusal(method, Headers(headers))
    assert (result and result[0]) == refused


def test_the_page_words_every_reason_the_engine_drops_a_candidate() -> None:
    from typing import get_args

    from mcp_server.ui.render import DROP_REASONS
    from store.records import DropReason

    assert set(DROP_REASONS) == set(get_args(DropReason))
