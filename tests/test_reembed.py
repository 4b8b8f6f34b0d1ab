"""Changing the embedding model: ``Engine.reembed`` and ``trimem reembed``.

Two real second models, built here once per session with no network: a copy of the
packaged all-MiniLM-L6-v2 under another folder (another name, the very same vectors, so
results before and after can be compared), and a small randomly initialised BERT with
64-dimensional vectors (so the switch changes the vec0 tables' dimension).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sqlite_files import execute

from store import Config, Engine, InvalidArgument, MemoryInput, SchemaMismatch
from store.analysis.embeddings import OnnxEmbedder
from store.analysis.nlp import NLP
from store.analysis.packaged_models import default_model_path
from store.sqlite import connection, reembed

# Re-embedding in place is an SQLite capability; on PostgreSQL it is refused up front (tests/test_postgres.py).
pytestmark = pytest.mark.only_on("sqlite")

ROOT = Path(__file__).resolve().parents[1]
FACTS = [
    "Ana works as a nurse at Santa Maria hospital in Lisbon",
    "Ana's brother Tomás is a chef in Porto",
    "Ana prefers window seats on long flights",
    "The team standup moved to 9:30 on Mondays",
    "Kenji gave Ana a bonsai from Kyoto",
]


@pytest.fixture(scope="session")
def copy_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packaged model's folder copied elsewhere: a different model name, identical vectors
    (and the same ONNX copy, which is keyed by folder name and weights)."""
    folder = tmp_path_factory.mktemp("copy") / "all-MiniLM-L6-v2"
    shutil.copytree(default_model_path(), folder)
    return folder.resolve()  # as `trimem reembed --model` records a folder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer BERT with 64-dimensional output, random weights, the packaged tokenizer, mean
    pooling and normalisation, saved as a sentence-transformers folder."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    work = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    bert = BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2,
                                num_attention_heads=4, intermediate_size=128))
    bert.save_pretrained(work / "bert")
    tokenizer.save_pretrained(work / "bert")
    modules = [Transformer(str(work / "bert"), max_seq_length=128), Pooling(64, pooling_mode="mean"), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(work / "tiny-model"))
    return (work / "tiny-model").resolve()


def loaded(folder: Path, model_cache: Path) -> OnnxEmbedder:
    model = OnnxEmbedder(str(folder), cache_dir=model_cache)
    model.load()
    return model


@pytest.fixture(scope="session")
def copy_embedder(copy_model: Path, model_cache: Path) -> OnnxEmbedder:
    return loaded(copy_model, model_cache)


@pytest.fixture(scope="session")
def tiny_embedder(tiny_model: Path, model_cache: Path) -> OnnxEmbedder:
    return loaded(tiny_model, model_cache)


def with_model(config: Config, model: OnnxEmbedder) -> Config:
    return config.replace("store", embedding_model=model.name)


def ranking(engine: Engine, query: str) -> list[tuple[str, float]]:
    return [(hit.memory.id, hit.score) for hit in engine.search(query, user_id="ana", threshold=0)]


def stored_vectors_match_texts(engine: Engine) -> None:
    """Every memory's stored vector is the model's vector of its current text."""
    rows = execute(engine, "SELECT m.text, v.embedding FROM memories m "
                           "JOIN memory_vectors v ON v.memory_rowid = m.rowid")
    stored = np.stack([np.frombuffer(blob, dtype=np.float32) for _, blob in rows])
    fresh = engine.embedder.embed_batch([text for text, _ in rows])
    assert np.allclose(stored, fresh, atol=1e-4)


def interrupt(done: int, total: int) -> None:
    """A progress callback that stops the run after its first committed chunk, as Ctrl-C would."""
    raise KeyboardInterrupt


def leftovers(engine: Engine) -> list[str]:
    return [row[0] for row in execute(engine, "SELECT name FROM sqlite_master WHERE name LIKE 'reembed%'")]


def test_reembed_changes_the_dimension_and_only_the_new_model_opens(
    engine: Engine, config: Config, nlp: NLP, embedder: OnnxEmbedder, tiny_embedder: OnnxEmbedder
) -> None:
    engine.add_many([MemoryInput(text) for text in FACTS], user_id="ana")
    engine.add("Bob lives in Berlin", user_id="bob")
    before = engine.stats()
    engine.close()

    with Engine(with_model(config, tiny_embedder), embedder=tiny_embedder, nlp=nlp, reembedding=True) as target:
        report = target.reembed()
        assert target.search("Who is a nurse?", user_id="ana")  # usable at once
    assert (report.model, report.dimension, report.previous_model, report.previous_dimension) == (
        tiny_embedder.name, 64, "all-MiniLM-L6-v2", 384)
    assert report.memories == 6 and report.entities > 0 and report.embedded == report.memories + report.entities
    assert not report.resumed

    with Engine(with_model(config, tiny_embedder), embedder=tiny_embedder, nlp=nlp) as after:
        assert after.check() == []
        assert after.status()["embedding_dimension"] == "64"
        assert after.stats()["memories"] == before["memories"]
        assert [hit.memory.text for hit in after.search("Berlin", user_id="bob", threshold=0)] == ["Bob lives in Berlin"]
        stored_vectors_match_texts(after)
        assert leftovers(after) == []
    with pytest.raises(SchemaMismatch) as refused:
        Engine(config, embedder=embedder, nlp=nlp)
    assert "trimem reembed --model all-MiniLM-L6-v2" in str(refused.value)
    assert f"configure '{tiny_embedder.name}' again" in str(refused.value)


def test_the_model_the_database_already_uses_is_refused(
    engine: Engine, config: Config, nlp: NLP, tiny_embedder: OnnxEmbedder
) -> None:
    engine.add("Ana likes kayaking", user_id="ana")
    with pytest.raises(InvalidArgument, match="already uses the embedding model 'all-MiniLM-L6-v2'; nothing to do$"):
        engine.reembed()
    assert leftovers(engine) == []

    with (Engine(with_model(config, tiny_embedder), embedder=tiny_embedder, nlp=nlp, reembedding=True) as target,
          pytest.raises(KeyboardInterrupt)):
        target.reembed(progress=interrupt)
    assert leftovers(engine)
    # changing one's mind after an interrupted run: asking for the current model drops its tables
    with pytest.raises(InvalidArgument, match=f"unfinished re-embedding with '{tiny_embedder.name}' was discarded"):
        engine.reembed()
    assert leftovers(engine) == []
    assert engine.search("kayak", user_id="ana")


def test_an_engine_opened_to_reembed_does_nothing_else_until_it_has(
    engine: Engine, config: Config, nlp: NLP, copy_embedder: OnnxEmbedder
) -> None:
    engine.add("Ana likes kayaking", user_id="ana")
    engine.close()
    with pytest.raises(SchemaMismatch):  # a normal open still refuses the mismatch
        Engine(with_model(config, copy_embedder), embedder=copy_embedder, nlp=nlp)
    with Engine(with_model(config, copy_embedder), embedder=copy_embedder, nlp=nlp, reembedding=True) as target:
        with pytest.raises(SchemaMismatch):
            target.search("kayak", user_id="ana")
        with pytest.raises(SchemaMismatch):
            target.add("Ana likes sailing", user_id="ana")
        target.reembed()
        assert [hit.memory.text for hit in target.search("kayak", user_id="ana")] == ["Ana likes kayaking"]


def test_writes_of_other_processes_during_a_reembed_are_caught(
    engine: Engine, config: Config, nlp: NLP, tiny_embedder: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another engine (its own connections, the old model) adds, changes and deletes memories
    between committed chunks; the switched index has exactly the live rows, each embedded from
    its current text; the old engine is refused from then on."""
    monkeypatch.setattr(reembed, "CHUNK", 2)
    engine.add_many([MemoryInput(text) for text in FACTS], user_id="ana")
    # the first chunk takes the lowest rowids
    (first, first_text), (second, second_text) = execute(engine, "SELECT id, text FROM memories ORDER BY rowid LIMIT 2")
    calls = []

    def meanwhile(done: int, total: int) -> None:
        if not calls:  # the first two memories have their new vectors now
            engine.update(first, text="Ana now works as a paramedic in Madrid", user_id="ana")
            engine.delete(second, user_id="ana")
            engine.add("Mateo opened a bakery in Seville", user_id="ana")
        calls.append((done, total))

    with Engine(with_model(config, tiny_embedder), embedder=tiny_embedder, nlp=nlp, reembedding=True) as target:
        report = target.reembed(progress=meanwhile)
        assert len(calls) > 1 and calls[0] == (2, calls[0][1])
        assert report.memories == len(FACTS)  # one deleted, one added
        assert target.check() == []
        stored_vectors_match_texts(target)
        texts = {memory.text for memory in target.list(user_id="ana")}
        assert "Ana now works as a paramedic in Madrid" in texts and "Mateo opened a bakery in Seville" in texts
        assert first_text not in texts and second_text not in texts
    restart = re.escape(f"Set store.embedding_model (TRIMEM_EMBEDDING_MODEL) to '{tiny_embedder.name}' and restart")
    with pytest.raises(SchemaMismatch, match=restart):
        engine.search("nurse", user_id="ana")
    with pytest.raises(SchemaMismatch, match=restart):
        engine.add("Ana adopted a cat", user_id="ana")
    with engine_with(config, tiny_embedder, nlp) as after:
        assert "Ana adopted a cat" not in {memory.text for memory in after.list(user_id="ana")}


def test_an_interrupted_run_leaves_the_old_index_and_resumes(
    engine: Engine, config: Config, nlp: NLP, copy_embedder: OnnxEmbedder, tiny_embedder: OnnxEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reembed, "CHUNK", 2)
    engine.add_many([MemoryInput(text) for text in FACTS], user_id="ana")

    for model in (tiny_embedder, copy_embedder):  # the second run discards the first one's tables
        before = ranking(engine, "Where does Ana work?")
        with (Engine(with_model(config, model), embedder=model, nlp=nlp, reembedding=True) as target,
              pytest.raises(KeyboardInterrupt)):
            target.reembed(progress=interrupt)
        assert ranking(engine, "Where does Ana work?") == before
        engine.add(f"Ana read a book about {model.dimension} dimensions", user_id="ana")  # writes go on
        assert engine.check() == []

    expected = ranking(engine, "Where does Ana work?")
    with Engine(with_model(config, copy_embedder), embedder=copy_embedder, nlp=nlp, reembedding=True) as target:
        report = target.reembed()
        assert report.resumed and 0 < report.embedded < report.memories + report.entities
        assert leftovers(target) == []
        # the same weights under another name: the same vectors, so the same ranking
        assert same_ranking(ranking(target, "Where does Ana work?"), expected)


def same_ranking(got: list[tuple[str, float]], expected: list[tuple[str, float]]) -> bool:
    """The same memories in the same order, with scores equal but for float noise."""
    return [i for i, _ in got] == [i for i, _ in expected] and [s for _, s in got] == pytest.approx(
        [s for _, s in expected], abs=1e-3)


def engine_with(config: Config, model: OnnxEmbedder, nlp: NLP) -> Engine:
    return Engine(with_model(config, model), embedder=model, nlp=nlp)


def run_cli(config: Config, *args: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "TRIMEM_DB_PATH": str(config.database)}
    return subprocess.Popen([sys.executable, "-m", "mcp_server", *args], env=environment, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def reembedded_so_far(config: Config) -> int:
    conn = connection.connect(config.database)
    try:
        found = conn.execute("SELECT name FROM sqlite_master WHERE name = 'reembed_memory_vectors'").fetchone()
        return conn.execute("SELECT count(*) FROM reembed_memory_vectors").fetchone()[0] if found else 0
    finally:
        conn.close()


def test_trimem_reembed_killed_mid_run_keeps_the_old_model_and_a_rerun_completes(
    engine_factory: Callable[[Config], Engine], config: Config, nlp: NLP, copy_model: Path,
    copy_embedder: OnnxEmbedder,
) -> None:
    memories = 1500
    with engine_factory(config) as engine:
        engine.add_many([MemoryInput(f"Note {i}: Ana's {i}th errand was in district {i % 37}")
                         for i in range(memories)], user_id="ana")
        engine.add_many([MemoryInput(text) for text in FACTS], user_id="ana")
        before = ranking(engine, "Where does Ana work?")

    process = run_cli(config, "reembed", "--model", str(copy_model))
    deadline = time.monotonic() + 120
    while not reembedded_so_far(config) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done = reembedded_so_far(config)
    assert 0 < done < memories + len(FACTS), "the kill should land between the first chunk and the switch"

    with engine_factory(config) as engine:  # the old model still opens, and answers as before
        assert same_ranking(ranking(engine, "Where does Ana work?"), before)
    with pytest.raises(SchemaMismatch):
        engine_with(config, copy_embedder, nlp)

    process = run_cli(config, "reembed", "--model", str(copy_model))
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    report = json.loads(out)
    assert report["resumed"] and report["embedded"] < report["memories"] + report["entities"]
    assert "TRIMEM_EMBEDDING_MODEL" in err and "Traceback" not in err
    with engine_with(config, copy_embedder, nlp) as engine:
        assert same_ranking(ranking(engine, "Where does Ana work?"), before)
        assert engine.check() == []
    with pytest.raises(SchemaMismatch, match="trimem reembed --model all-MiniLM-L6-v2"):
        engine_factory(config)


def test_trimem_reembed_errors_are_short(config: Config, engine_factory: Callable[[Config], Engine]) -> None:
    missing = run_cli(config, "reembed", "--model", "all-MiniLM-L6-v2")
    _, err = missing.communicate(timeout=120)
    assert missing.returncode == 1 and "no database at" in err and "Traceback" not in err
    engine_factory(config).close()
    same = run_cli(config, "reembed", "--model", "all-MiniLM-L6-v2")
    _, err = same.communicate(timeout=120)
    assert same.returncode == 1 and "already uses the embedding model" in err and "Traceback" not in err


def test_a_folder_that_holds_no_model_is_a_message_and_changes_nothing(
    config: Config, engine_factory: Callable[[Config], Engine], tmp_path: Path
) -> None:
    with engine_factory(config) as engine:
        engine.add_many([MemoryInput(text) for text in FACTS], user_id="ana")
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "config.json").write_text("{}")
    for backend in ("onnx", "torch"):
        failed = run_cli(config, "reembed", "--model", str(not_a_model), "--backend", backend)
        _, err = failed.communicate(timeout=300)
        assert failed.returncode == 1 and "Traceback" not in err, err
        assert f"could not load embedding model '{not_a_model}'" in err
    with engine_factory(config) as engine:
        assert engine.search("where does Ana work?", user_id="ana")[0].memory.text == FACTS[0]
        assert engine.check() == []
