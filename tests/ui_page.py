"""The page under test: a real ``trimem ui`` process on the test's database, seeded with Ana's
memories, and Debian's Chromium driven by Playwright. Fixtures shared by the page's test
modules (registered in ``conftest.py``). Without /usr/bin/chromium the page's tests skip,
except under CI (``CI=true``), where a missing browser is a failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import Config, Engine

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]
USER = "ana"
MEMORIES = [
    ("Ana booked train tickets to Porto for 14 August", {"category": "travel"}),
    ("Ana's sister Marta lives in Porto and visits Lisbon every Christmas", {"category": "family"}),
    ("Ana's manager Priya approved two weeks of leave in August", {"category": "work"}),
    ("Ana prefers a window seat on long train journeys", {"category": "travel"}),
    ("Ana is learning Portuguese phrases before the trip", {"category": "travel"}),
    ("Ana works as a nurse at Santa Maria hospital in Lisbon", {"category": "work"}),
    ("Ana is allergic to peanuts and carries an EpiPen", {"category": "health", "priority": 5}),
    ("Ana grows tomatoes and basil on her balcony", {"category": "home"}),
    ("Ana's cat Miso needs a vet check-up in September", {"category": "home"}),
    ("Ana drinks oat milk flat whites", {"category": "food"}),
]

def chromium_or_skip() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield instance
        instance.close()


class Ui:
    """A running ``trimem ui`` and the port it chose."""

    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.port = int(url.rsplit(":", 1)[1].strip("/"))
        self.log = log


@pytest.fixture
def ui_env() -> dict[str, str]:
    """Variables the page's process gets beside its database and user; a test parametrizes it."""
    return {}


@pytest.fixture
def ui(engine: Engine, config: Config, tmp_path: Path, ui_env: dict[str, str]) -> Iterator[Ui]:
    for text, metadata in MEMORIES:
        engine.add(text, user_id=USER, metadata=metadata)
    engine.add("Bob keeps his bike in the hallway", user_id="bob")
    log = tmp_path / "ui.log"
    env = {**os.environ, "TRIMEM_DB_PATH": config.store.db_path, "TRIMEM_DATABASE_URL": config.store.database_url,
           "TRIMEM_USER_ID": USER, **ui_env}
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "mcp_server", "ui", "--no-browser", "--port", "0"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
        )
        try:
            line = process.stdout.readline()
            match = re.fullmatch(r"trimem ui: (http://127\.0\.0\.1:\d+/)\n", line)
            assert match, f"no address on stdout: {line!r}; log: {log.read_text()}"
            yield Ui(match.group(1), log)
        finally:
            process.terminate()
            process.wait(timeout=30)
    assert "Traceback" not in log.read_text()


@pytest.fixture
def page(browser: Any, ui: Ui) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 820}, device_scale_factor=1)
    tab = context.new_page()
    tab.goto(ui.url)
    yield tab
    context.close()
