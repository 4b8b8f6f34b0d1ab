"""The embedding backends: ONNX Runtime gives sentence-transformers' vectors, a warm start never
imports torch, and a damaged model cache is rebuilt rather than used."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from store import Engine, load_config
from store.analysis.embeddings import NameVectors, OnnxEmbedder, SentenceTransformerEmbedder, open_embedder

SENTENCES = [
    "hi",
    "Ana is allergic to peanuts",
    "What did Caroline research about adoption agencies?",
    "Order A1B2 shipped on 2026-11-30 to 221B Baker Street, London.",
    # past the model's 256-token limit: both sides must truncate the same way
    "Melanie: we went camping by the lake and the kids roasted marshmallows all night long. " * 30,
    "Ana trabaja como enfermera en el hospital Santa María de Lisboa.",
    "Ana arbeitet als Krankenschwester im Krankenhaus.",
    "安娜在里斯本的圣玛丽亚医院当护士。",
    "東京に住んでいて、毎朝コーヒーを飲みます。",
    "أنا أعمل في المستشفى منذ عشر سنوات",
    "Привет! Как дела? 🙂",
]


@pytest.fixture(scope="module")
def reference(model_cache: Path) -> SentenceTransformerEmbedder:
    """sentence-transformers itself (torch), the source of truth for the vectors."""
    model = SentenceTransformerEmbedder(cache_dir=model_cache)
    model.load()
    return model


def test_onnx_vectors_match_sentence_transformers(embedder: OnnxEmbedder, reference: SentenceTransformerEmbedder):
    onnx, torch = embedder.embed_batch(SENTENCES), reference.embed_batch(SENTENCES)
    assert onnx.shape == torch.shape == (len(SENTENCES), 384)
    cosines = np.sum(onnx * torch, axis=1)
    assert cosines.min() >= 0.999, dict(zip(SENTENCES, cosines))
    # one at a time (no padding) gives the same vectors as a padded batch
    singles = np.vstack([embedder.embed_batch([text]) for text in SENTENCES])
    assert np.sum(singles * onnx, axis=1).min() >= 0.9999
    assert embedder.backend == "onnx-fp32" and reference.backend == "torch"


def test_a_warm_start_never_imports_torch(embedder: OnnxEmbedder, model_cache: Path, tmp_path: Path):
    """A second process (the model is already exported) adds and searches without torch."""
    program = textwrap.dedent(
        f"""
        import sys
        from store import Engine, load_config
        config = load_config(environ={{}}).replace(
            "store", db_path={str(tmp_path / "warm.db")!r}, model_cache={str(model_cache)!r})
        with Engine(config) as engine:
            engine.add("Ana is allergic to peanuts", user_id="ana")
            [hit] = engine.search("What is Ana allergic to?", user_id="ana")
            print(engine.status()["embedding_backend"], hit.memory.text, "torch" in sys.modules)
        """
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["onnx-fp32", "Ana", "is", "allergic", "to", "peanuts", "False"]


def cache_copy(model_cache: Path, into: Path) -> tuple[Path, Path]:
    """A private copy of the session's model cache, and the paths of the default model's graph and
    sidecar in it."""
    shutil.copytree(model_cache, into)
    [folder] = into.glob("all-MiniLM-L6-v2-fp32-*")
    return folder / "model.onnx", folder / "export.json"


def damage_graph(graph: Path, sidecar: Path) -> None:
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])  # a half-written file


def drift_probe(graph: Path, sidecar: Path) -> None:
    recorded = json.loads(sidecar.read_text())
    recorded["probe_vector"] = list(-np.asarray(recorded["probe_vector"]))  # no longer the graph's vector
    sidecar.write_text(json.dumps(recorded))


def remove_graph(graph: Path, sidecar: Path) -> None:
    graph.unlink()


@pytest.mark.parametrize("damage", [damage_graph, drift_probe, remove_graph])
def test_a_damaged_cache_is_rebuilt_not_used(
    embedder: OnnxEmbedder, model_cache: Path, tmp_path: Path, damage, caplog: pytest.LogCaptureFixture
):
    graph, sidecar = cache_copy(model_cache, tmp_path / "cache")
    good_size = graph.stat().st_size
    damage(graph, sidecar)
    rebuilt = OnnxEmbedder(cache_dir=tmp_path / "cache")
    with caplog.at_level(logging.WARNING, logger="store.analysis.onnx_cache"):
        vectors = rebuilt.embed_batch(SENTENCES[:4])
    [warning] = caplog.records
    assert warning.getMessage().startswith(f"the cached embedding model {graph.parent} is damaged (")
    assert np.sum(vectors * embedder.embed_batch(SENTENCES[:4]), axis=1).min() >= 0.9999
    assert graph.stat().st_size == good_size
    probe = json.loads(sidecar.read_text())["probe_vector"]
    assert np.allclose(probe, json.loads((model_cache / sidecar.parent.name / sidecar.name).read_text())["probe_vector"], atol=1e-4)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted(p.name for p in model_cache.iterdir())


def test_the_backend_is_a_setting(config, nlp, model_cache: Path):
    assert open_embedder("", "torch", cache_dir=model_cache, threads=1).backend == "torch"
    assert open_embedder("", "onnx-int8", cache_dir=model_cache, threads=1).backend == "onnx-int8"
    with Engine(config.replace("store", embedding_backend="torch"), nlp=nlp) as engine:
        assert engine.status()["embedding_backend"] == "torch"
    allowed = "embedding_backend = .tensorflow. is not allowed: use one of onnx, onnx-int8, torch"
    with pytest.raises(Exception, match=allowed):
        load_config(environ={"TRIMEM_EMBEDDING_BACKEND": "tensorflow"})


def test_name_vectors_embed_each_name_once_and_forget_the_least_recent(embedder: OnnxEmbedder):
    seen: list[list[str]] = []

    class Counting:
        name, dimension, backend = embedder.name, embedder.dimension, embedder.backend

        def embed_batch(self, texts):
            seen.append(list(texts))
            return embedder.embed_batch(texts)

    names = NameVectors(Counting(), size=2)
    first = names.embed(["caroline", "melanie", "caroline"])
    assert seen == [["caroline", "melanie"]]
    assert np.allclose(first, embedder.embed_batch(["caroline", "melanie", "caroline"]), atol=1e-6)
    names.embed(["melanie"])
    assert seen[-1] == []  # remembered: no name reached the model
    names.embed(["lisbon"])  # over the size: caroline, the least recently used, goes
    names.embed(["caroline", "melanie"])
    assert seen[-1] == ["caroline"]
    assert names.embed([]).shape == (0, 384)


def test_name_vectors_embed_an_unseen_name_on_the_executors_thread(embedder: OnnxEmbedder):
    """``embed_on``: a search goes on reading the store while an unseen name embeds on the side
    thread; names all remembered are answered at once, without a hand-off."""
    threads: list[str] = []

    class Recording:
        name, dimension, backend = embedder.name, embedder.dimension, embedder.backend

        def embed_batch(self, texts):
            if texts:
                threads.append(threading.current_thread().name)
            return embedder.embed_batch(texts)

    names = NameVectors(Recording())
    with ThreadPoolExecutor(1, thread_name_prefix="side") as side:
        unseen = names.embed_on(side, ["caroline", "pottery class"])
        assert np.allclose(unseen.result(), embedder.embed_batch(["caroline", "pottery class"]), atol=1e-6)
        known = names.embed_on(side, ["pottery class"])
        assert known.done() and np.allclose(known.result(), unseen.result()[1:], atol=1e-6)
        assert names.embed_on(side, []).result().shape == (0, 384)
    assert len(threads) == 1 and threads[0].startswith("side")  # once, for the unseen names


def test_int8_weights_stay_close_to_the_model(embedder: OnnxEmbedder, tmp_path: Path):
    """The int8 option: exported and verified like fp32, vectors within its documented distance."""
    int8 = OnnxEmbedder(cache_dir=tmp_path / "cache", int8=True)
    vectors = int8.embed_batch(SENTENCES)
    assert int8.backend == "onnx-int8" and vectors.shape == (len(SENTENCES), 384)
    assert np.sum(vectors * embedder.embed_batch(SENTENCES), axis=1).min() >= 0.98
    assert len(list((tmp_path / "cache").glob("all-MiniLM-L6-v2-int8-*/model.onnx"))) == 1
