"""Configuration: ``configs/default.toml``, then a ``--config`` file, then ``TRIMEM_*`` variables.

Built once by the CLI or the MCP server and passed down explicitly; nothing reads it
from a global. Every key lives in the default file with a comment saying why it has
its value, and an unknown key is an error rather than a silent no-op.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from store.errors import InvalidArgument, shown
from store.validation import check_id

ENV_PREFIX = "TRIMEM_"
HOME_VARIABLE = "TRIMEM_HOME"
_PACKAGED_DEFAULTS = Path(__file__).with_name("default.toml")
_CHECKOUT_DEFAULTS = Path(__file__).resolve().parents[1] / "configs" / "default.toml"


EmbeddingBackend = Literal["onnx", "onnx-int8", "torch"]
EMBEDDING_BACKENDS: tuple[str, ...] = get_args(EmbeddingBackend)
Ranking = Literal["trimem", "mem0", "learned"]
RANKINGS: tuple[str, ...] = get_args(Ranking)
EntityWeighting = Literal["mem0", "rarity"]
ENTITY_WEIGHTINGS: tuple[str, ...] = get_args(EntityWeighting)
EntityMatching = Literal["all", "best", "names"]
ENTITY_MATCHINGS: tuple[str, ...] = get_args(EntityMatching)
KeywordContextShare = Literal["raw", "score"]
KEYWORD_CONTEXT_SHARES: tuple[str, ...] = get_args(KeywordContextShare)

MEM0_RANKING: dict[str, Any] = {
    "candidate_pool": "semantic", "keyword_context": 0.0, "question_keywords": 1.0,
    "entity_weighting": "mem0", "entity_match": "all", "relevance_check": False, "standing_recall": False,
}
"""The ``[search]`` values that reproduce Mem0 exactly; ``ranking = "mem0"`` imposes them."""


@dataclass(frozen=True)
class StoreConfig:
    db_path: str
    database_url: str
    database_pool_size: int
    embedding_model: str
    spacy_pipeline: str
    embedding_backend: EmbeddingBackend
    model_cache: str
    inference_threads: int
    vector_memory_mb: int


@dataclass(frozen=True)
class SearchConfig:
    top_k: int
    threshold: float
    use_bm25: bool
    use_entities: bool
    candidate_pool: Literal["semantic", "union"]
    overfetch_factor: int
    overfetch_minimum: int
    ranking: Ranking
    keyword_context: float
    keyword_context_share: KeywordContextShare
    keyword_context_seconds: float
    keyword_context_reach: int
    question_keywords: float
    entity_weighting: EntityWeighting
    entity_match: EntityMatching
    relevance_check: bool
    relevance_floor: float
    relevance_floor_unknown_names: float
    min_score: float
    min_similarity: float
    standing_recall: bool

    def resolved(self) -> SearchConfig:
        """The options retrieval runs with: ``ranking = "mem0"`` overrides every departure from
        Mem0 (``MEM0_RANKING``), so that one setting restores its exact behaviour."""
        return dataclasses.replace(self, **MEM0_RANKING) if self.ranking == "mem0" else self


@dataclass(frozen=True)
class LimitsConfig:
    max_text_chars: int
    max_top_k: int
    max_metadata_bytes: int
    max_messages: int


@dataclass(frozen=True)
class ServerConfig:
    user_id: str
    max_result_chars: int
    log_level: str
    log_file: str


@dataclass(frozen=True)
class ServiceConfig:
    public_hosts: str
    resource_url: str
    issuer_url: str
    max_body_bytes: int
    rate_per_second: float
    rate_burst: int
    failed_auth_per_second: float
    failed_auth_burst: int
    failed_auth_total_per_second: float
    failed_auth_total_burst: int
    max_sessions_per_token: int
    session_idle_seconds: int
    tool_timeout_seconds: float
    log_texts: bool

    @property
    def hosts(self) -> list[str]:
        """``public_hosts`` as a list of host names."""
        return [host.strip() for host in self.public_hosts.split(",") if host.strip()]


@dataclass(frozen=True)
class HooksConfig:
    recall_top_k: int
    recall_min_score: float
    max_block_chars: int
    capture_min_chars: int
    redact_secrets: bool
    session_recent: int
    session_standing: int
    deadline_seconds: float


@dataclass(frozen=True)
class Config:
    store: StoreConfig
    search: SearchConfig
    limits: LimitsConfig
    server: ServerConfig
    service: ServiceConfig
    hooks: HooksConfig

    @property
    def database(self) -> Path:
        """The database file: the configured path, else ``memories.db`` in the data folder."""
        if self.store.db_path:
            return Path(self.store.db_path).expanduser()
        return data_dir() / "memories.db"

    @property
    def location(self) -> str:
        """Where the memories are, as messages name it: the database file, or the PostgreSQL
        server and database (never a password)."""
        return database_location(self.store.database_url) if self.store.database_url else str(self.database)

    @property
    def model_cache_dir(self) -> Path:
        """Where exported model copies live: the configured folder, else ``onnx`` in the user's
        cache folder, which every database and data folder of the user shares."""
        if self.store.model_cache:
            return Path(self.store.model_cache).expanduser()
        return user_cache_dir() / "onnx"

    def handshake_cache_dir(self) -> Path:
        """Where the stdio server keeps its last answers to an MCP client's handshake
        (``mcp_server/tools/handshake.py``): ``handshake`` in the user's cache folder."""
        return user_cache_dir() / "handshake"

    def using(self, database: str) -> Config:
        """A copy that stores memories in ``database``: a ``postgresql://`` URL, or an SQLite file
        (``trimem --db`` takes either)."""
        if database.startswith(POSTGRES_SCHEMES):
            return self.replace("store", database_url=database)
        return self.replace("store", db_path=database, database_url="")

    def replace(self, section: str, **values: Any) -> Config:
        """A copy with some keys of one section changed (flags, tests, benchmark ablations)."""
        return dataclasses.replace(self, **{section: dataclasses.replace(getattr(self, section), **values)})


def database_location(url: str) -> str:
    """A PostgreSQL URL as a person may see it: user, host, port and database, without the
    password (a server reached by socket names the socket's folder, from ``?host=``)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    socket = urllib.parse.parse_qs(parts.query).get("host", [""])[0]
    host = parts.hostname or socket or "localhost"
    user = f"{urllib.parse.unquote(parts.username)}@" if parts.username else ""
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # not a number: libpq will say so when it connects
        port = ""
    return f"postgresql://{user}{host}{port}{parts.path}"


SECTIONS: dict[str, type] = {
    "store": StoreConfig,
    "search": SearchConfig,
    "limits": LimitsConfig,
    "server": ServerConfig,
    "service": ServiceConfig,
    "hooks": HooksConfig,
}


def data_dir() -> Path:
    """``$TRIMEM_HOME``, else the platform's per-user data folder for trimem."""
    if home := os.environ.get(HOME_VARIABLE):
        return Path(home).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("trimem", appauthor=False))


def user_cache_dir() -> Path:
    """The platform's per-user cache folder for trimem (``~/.cache/trimem`` on Linux): the model
    copies and the stdio server's handshake answers live below it."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("trimem", appauthor=False))


def defaults_path() -> Path:
    """The default file: packaged beside this module in a wheel, in ``configs/`` in a checkout."""
    return _PACKAGED_DEFAULTS if _PACKAGED_DEFAULTS.exists() else _CHECKOUT_DEFAULTS


def load_config(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Defaults, overridden by the file at ``path``, overridden by ``TRIMEM_<KEY>`` variables."""
    raw = _read(defaults_path())
    if path is not None:
        for section, values in _read(path).items():
            if section not in raw:
                raise InvalidArgument(f"unknown section [{section}] in {path}; known: {', '.join(SECTIONS)}")
            for key, value in values.items():
                if key not in raw[section]:
                    raise InvalidArgument(f"unknown key '{key}' in [{section}] of {path}")
                raw[section][key] = value
    environ = os.environ if environ is None else environ
    for section, values in raw.items():
        for key, default in values.items():
            variable = ENV_PREFIX + key.upper()
            if variable in environ:
                values[key] = _parse_env(variable, environ[variable], default)
    return _build(raw)


OTHER_VARIABLES = (HOME_VARIABLE,)
"""``TRIMEM_*`` variables read outside the configuration keys."""
TEST_VARIABLE_PREFIX = "TRIMEM_STRESS"
"""The test suite's own knobs (``tests/test_reliability.py``), not settings."""


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """A warning for each ``TRIMEM_*`` variable that names no setting, with the closest name.

    Warnings, not errors as unknown keys in a file are: the environment is shared with
    every other program, and a variable left over from another version must not stop the
    server. But a typo (``TRIMEM_TRESHOLD``) would otherwise be silently ignored.
    """
    import difflib

    environ = os.environ if environ is None else environ
    known = [ENV_PREFIX + key.upper() for values in _read(defaults_path()).values() for key in values]
    known += OTHER_VARIABLES
    warnings = []
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX) or variable in known or variable.startswith(TEST_VARIABLE_PREFIX):
            continue
        closest = difflib.get_close_matches(variable, known, n=1, cutoff=0.6)
        hint = f"; did you mean {closest[0]}?" if closest else f"; settings are {ENV_PREFIX}<KEY> for the keys of " \
            "configs/default.toml"
        warnings.append(f"{shown(variable)} is not a trimem setting and is ignored{hint}")
    return warnings


def _read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidArgument(f"cannot read configuration {path}: {exc}") from exc


def _parse_env(variable: str, text: str, default: Any) -> Any:
    """Environment values are strings: read them as the type of the default."""
    try:
        if isinstance(default, bool):
            if text.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(text)
            return text.lower() in ("1", "true", "yes", "on")
        return type(default)(text)
    except ValueError:
        raise InvalidArgument(f"{variable}={shown(text)} is not a valid {type(default).__name__}") from None


def _build(raw: dict[str, dict[str, Any]]) -> Config:
    sections = {}
    for name, cls in SECTIONS.items():
        values = raw.get(name, {})
        for field in dataclasses.fields(cls):
            if field.name not in values:
                raise InvalidArgument(f"configuration lacks [{name}] {field.name}")
        sections[name] = cls(**values)
    config = Config(**sections)
    _check(config)
    return config


POSTGRES_SCHEMES = ("postgresql://", "postgres://")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _refuse(section: str, key: str, value: Any, allowed: str) -> InvalidArgument:
    """A message naming the key, its value and what it may be, and where settings come from."""
    return InvalidArgument(
        f"configuration [{section}] {key} = {shown(value)} is not allowed: {allowed} "
        f"(set it in a --config file or {ENV_PREFIX}{key.upper()})"
    )


def _check_types(config: Config) -> None:
    """Each value has its key's type (a TOML file may hold a string where a number belongs)."""
    for section, cls in SECTIONS.items():
        values = getattr(config, section)
        for field in dataclasses.fields(cls):
            value, kind = getattr(values, field.name), type(getattr(values, field.name))
            expected = {"int": int, "float": (int, float), "bool": bool, "str": str}.get(str(field.type))
            if expected is None:  # a Literal: checked by value below
                continue
            if isinstance(value, bool) and expected is not bool or not isinstance(value, expected):
                raise _refuse(section, field.name, value, f"it must be of type {field.type}, not {kind.__name__}")


def _check(config: Config) -> None:
    """Refuse, at start-up, values that would make calls fail later (or silently misbehave)."""
    _check_types(config)
    search, limits, server = config.search, config.limits, config.server
    if config.store.database_url and not config.store.database_url.startswith(POSTGRES_SCHEMES):
        scheme = config.store.database_url.partition(":")[0]  # the rest may hold a password
        raise InvalidArgument(
            f"configuration [store] database_url starts with {shown(scheme)}, not postgresql://: trimem stores "
            f"memories in PostgreSQL, or in the SQLite file at db_path when it is empty (set it in a --config file "
            f"or {ENV_PREFIX}DATABASE_URL)"
        )
    if config.store.embedding_backend not in EMBEDDING_BACKENDS:
        raise _refuse("store", "embedding_backend", config.store.embedding_backend,
                      f"use one of {', '.join(EMBEDDING_BACKENDS)}")
    if not 0.0 <= search.threshold <= 1.0:
        raise _refuse("search", "threshold", search.threshold, "it must be between 0 and 1; 0.1 is the default")
    for name in ("relevance_floor", "relevance_floor_unknown_names", "min_similarity"):
        if not 0.0 <= getattr(search, name) <= 1.0:
            raise _refuse("search", name, getattr(search, name), "it must be a similarity between 0 and 1")
    if not 0.0 <= search.min_score <= 1.0:
        raise _refuse("search", "min_score", search.min_score, "it must be a probability between 0 and 1")
    if search.candidate_pool not in ("semantic", "union"):
        raise _refuse("search", "candidate_pool", search.candidate_pool, "use 'semantic' or 'union'")
    if search.ranking not in RANKINGS:
        raise _refuse("search", "ranking", search.ranking, f"use one of {', '.join(RANKINGS)}")
    if search.entity_weighting not in ENTITY_WEIGHTINGS:
        raise _refuse(
            "search", "entity_weighting", search.entity_weighting, f"use one of {', '.join(ENTITY_WEIGHTINGS)}"
        )
    if search.entity_match not in ENTITY_MATCHINGS:
        raise _refuse("search", "entity_match", search.entity_match, f"use one of {', '.join(ENTITY_MATCHINGS)}")
    if search.keyword_context_share not in KEYWORD_CONTEXT_SHARES:
        raise _refuse(
            "search", "keyword_context_share", search.keyword_context_share,
            f"use one of {', '.join(KEYWORD_CONTEXT_SHARES)}",
        )
    if not 0.0 <= search.keyword_context <= 1.0:
        raise _refuse("search", "keyword_context", search.keyword_context, "it must be between 0 and 1; 0 turns it off")
    if not 0.0 <= search.keyword_context_seconds < math.inf:
        raise _refuse(
            "search", "keyword_context_seconds", search.keyword_context_seconds,
            "it must be a number of seconds, 0 or more; 0 lets any neighbour count",
        )
    if not 1 <= search.keyword_context_reach <= 8:
        raise _refuse(
            "search", "keyword_context_reach", search.keyword_context_reach,
            "it must be between 1 (only the memories just before and after) and 8",
        )
    if not 0.0 <= search.question_keywords <= 1.0:
        raise _refuse(
            "search", "question_keywords", search.question_keywords, "it must be between 0 and 1; 1 turns it off"
        )
    if config.store.vector_memory_mb < 0:
        raise _refuse("store", "vector_memory_mb", config.store.vector_memory_mb,
                      "it must be a whole number of megabytes, 0 or more; 0 holds no vectors in memory")
    for section, name in (
        ("limits", "max_text_chars"), ("limits", "max_top_k"), ("limits", "max_metadata_bytes"),
        ("limits", "max_messages"),
        ("search", "overfetch_factor"), ("search", "overfetch_minimum"),
        ("server", "max_result_chars"), ("store", "inference_threads"), ("store", "database_pool_size"),
        ("service", "max_body_bytes"), ("service", "rate_burst"), ("service", "max_sessions_per_token"),
        ("service", "session_idle_seconds"), ("service", "failed_auth_burst"), ("service", "failed_auth_total_burst"),
        ("hooks", "max_block_chars"), ("hooks", "capture_min_chars"),
    ):
        value = getattr(getattr(config, section), name)
        if value < 1:
            raise _refuse(section, name, value, "it must be a whole number of at least 1")
    for name in ("rate_per_second", "failed_auth_per_second", "failed_auth_total_per_second", "tool_timeout_seconds"):
        if getattr(config.service, name) <= 0:
            raise _refuse("service", name, getattr(config.service, name), "it must be more than 0")
    for name in ("resource_url", "issuer_url"):
        url = getattr(config.service, name)
        if url and not url.startswith(("http://", "https://")):
            raise _refuse("service", name, url, "it must be an http:// or https:// URL, or empty")
    if config.hooks.deadline_seconds <= 0:
        raise _refuse("hooks", "deadline_seconds", config.hooks.deadline_seconds, "it must be more than 0")
    if not 0.0 <= config.hooks.recall_min_score <= 1.0:
        raise _refuse("hooks", "recall_min_score", config.hooks.recall_min_score, "it must be a probability between 0 and 1")
    for name in ("recall_top_k", "session_recent", "session_standing"):
        if not 1 <= getattr(config.hooks, name) <= limits.max_top_k:
            raise _refuse("hooks", name, getattr(config.hooks, name), f"it must be between 1 and max_top_k ({limits.max_top_k})")
    if not 1 <= search.top_k <= limits.max_top_k:
        raise _refuse("search", "top_k", search.top_k, f"it must be between 1 and max_top_k ({limits.max_top_k})")
    if server.log_level.upper() not in LOG_LEVELS:
        raise _refuse("server", "log_level", server.log_level, f"use one of {', '.join(LOG_LEVELS)}")
    try:  # the same rule as a user_id sent by a caller
        check_id(server.user_id, "user_id")
    except InvalidArgument:
        raise _refuse(
            "server", "user_id", server.user_id, "it must be a non-empty id without spaces, e.g. 'ana_lopez'"
        ) from None
