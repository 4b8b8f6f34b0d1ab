"""Looking after a store: its check, repair, re-embedding, backup, counts and status.

The engine's upkeep calls (``Engine.check``, ``repair``, ``reembed``, ``backup``, ``users``,
``stats``, ``status``, ``file_warnings``) each hand their work to one function here. Each
function refuses, before it starts, what the backend's declared capabilities lack
(``store.backend.require``), and a write to a store this process cannot write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from store import clock
from store.analysis.embeddings import Embedder
from store.analysis.nlp import NLP
from store.analysis.reanalysis import DEGRADED_CHECK, waiting
from store.backend import WAYS_AROUND, Backend, Capability, Progress, require, require_writable
from store.records import ReembedReport, RepairReport, ScopeCount, Violation


def check(backend: Backend, nlp: NLP, *, deep: bool) -> list[Violation]:
    """The backend's check, given the NLP pipeline only for a deep one (which runs it)."""
    require(backend, "check", "a consistency check")
    if deep:
        require(backend, "deep_check", "a deep check")
    return backend.check(nlp if deep else None)


def check_advice(violations: list[Violation], capabilities: frozenset[Capability]) -> str:
    """What to do about a failed check, naming only what the backend can do: ``--repair`` where it
    can rebuild derived rows, else what to do instead. Memories the language model failed on are
    no derived rows (no repair analyses them); when they are the only problem, their line says
    what fixes them."""
    if all(violation.check == DEGRADED_CHECK for violation in violations):
        return "the line above says what fixes it"
    if "repair" in capabilities:
        return "`trimem doctor --repair` fixes derived rows"
    return WAYS_AROUND["repair"]


def file_warnings(backend: Backend) -> list[str]:
    """The backend's lines about files others may read; refused for a store kept by a server."""
    require(backend, "file_modes", "a check of file permissions")
    return backend.file_warnings()


def repair(backend: Backend, embedder: Embedder, nlp: NLP) -> RepairReport:
    """The backend's rebuild of derived rows, with both models (vectors and entity links)."""
    require(backend, "repair", "a repair")
    require_writable(backend)
    return backend.repair(embedder, nlp)


def reembed(backend: Backend, embedder: Embedder, progress: Progress | None) -> ReembedReport:
    """The backend's re-embedding with ``embedder``, the model the store is to record."""
    require(backend, "reembed", "re-embedding")
    require_writable(backend)
    return backend.reembed(embedder, progress)


def backup(backend: Backend, destination: Path) -> None:
    """The backend's online copy to ``destination``."""
    require(backend, "backup", "a backup")
    backend.backup(Path(destination))


def users(backend: Backend) -> list[ScopeCount]:
    """Every scope holding memories, read in one snapshot, with the ones expired by today."""
    with backend.snapshot() as view:
        rows = view.scope_counts(clock.today())
    return [ScopeCount(scope.user_id or None, scope.agent_id or None, scope.run_id or None, n, expired)
            for scope, n, expired in rows]


def stats(backend: Backend, embedder: Embedder) -> dict[str, Any]:
    """``users`` summed in all and per user, with the store's place and size, the memories
    awaiting re-analysis and the embedding model."""
    per_user: dict[str, dict[str, int]] = {}
    scopes = users(backend)
    for scope in scopes:
        counts = per_user.setdefault(scope.user_id or "", {"memories": 0, "expired": 0})
        counts["memories"] += scope.memories
        counts["expired"] += scope.expired
    return {
        "database": backend.location,
        "file_bytes": backend.size_bytes(),
        "memories": sum(scope.memories for scope in scopes),
        "expired": sum(scope.expired for scope in scopes),
        "users": per_user,
        "awaiting_reanalysis": awaiting_reanalysis(backend),
        "embedding_model": embedder.name,
        "embedding_backend": embedder.backend,
    }


def awaiting_reanalysis(backend: Backend) -> int:
    """How many memories still hold the terms and links of older analysis rules, until a server
    (or ``doctor --repair``) has analysed them again (``store.analysis.reanalysis``)."""
    with backend.snapshot() as view:
        return waiting(view)


def status(backend: Backend, embedder: Embedder, nlp: NLP) -> dict[str, Any]:
    """The backend's status, with whether it is read-only, the memories awaiting re-analysis and
    which models run (without loading spaCy)."""
    info = backend.status()
    info["read_only"] = backend.read_only
    info["awaiting_reanalysis"] = awaiting_reanalysis(backend)
    info["embedding_backend"] = embedder.backend
    info["spacy_tier"] = nlp.expected_tier  # without loading it: doctor answers in a moment
    info["spacy_loaded"] = nlp.loaded
    return info
