"""The models a benchmark builds and searches with: the configured embedder on a chosen backend,
and ``Replay``, the stand-in that builds scopes beyond the real turns in minutes.

A real turn is analysed and embedded by the real models; a variant of it (``corpus.variants``)
reuses its turn's analysis and vector plus small noise. The SQL stays real, and every timed
call of a benchmark uses the real models.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from store import Config
from store.analysis.embeddings import Embedder, open_embedder
from store.analysis.nlp import NLP


def backend_embedder(config: Config, backend: str) -> Embedder:
    """The configured model on ``backend``, with the configuration's model cache and threads."""
    store = config.store
    return open_embedder(
        store.embedding_model, backend, cache_dir=config.model_cache_dir, threads=store.inference_threads  # type: ignore[arg-type]
    )


class Replay:
    """Build-time stand-in for the embedder and the NLP pipeline, for scopes beyond the real turns.

    A real turn is analysed and embedded by the real models (once, cached). A variant
    ("Caroline: Also, …") gets its turn's analysis (same BM25 terms: the opening is a
    stop word) and its turn's vector plus Gaussian noise, renormalised (median cosine 0.99 to
    its turn, as the model gives for such pairs). Entity names are embedded for
    real. Everything after the models — the SQL of ``Engine.add_many`` — is real.
    """

    def __init__(
        self, embedder: Embedder, nlp: NLP, base_of: dict[str, str], sigma: float = 0.0073
    ) -> None:
        self.name, self.dimension, self.tier = embedder.name, embedder.dimension, nlp.tier
        self.backend = f"replay of {embedder.backend}"
        self.expected_tier, self.loaded = self.tier, True  # what Engine.status reads of an NLP
        self._embedder, self._nlp, self._base_of, self._sigma = embedder, nlp, base_of, sigma
        self._vectors: dict[str, np.ndarray] = {}
        self._analyses: dict[str, object] = {}
        self._random = np.random.default_rng(0)
        self.model_texts = 0

    def analyze_batch(self, texts: Sequence[str]) -> list:
        bases = [self._base_of.get(text, text) for text in texts]
        missing = list(dict.fromkeys(base for base in bases if base not in self._analyses))
        self._analyses.update(zip(missing, self._nlp.analyze_batch(missing)))
        return [self._analyses[base] for base in bases]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        bases = [self._base_of.get(text, text) for text in texts]
        missing = list(dict.fromkeys(base for base in bases if base not in self._vectors))
        if missing:
            self._vectors.update(zip(missing, self._embedder.embed_batch(missing)))
            self.model_texts += len(missing)
        rows = np.stack([self._vectors[base] for base in bases]) if bases else np.zeros((0, self.dimension))
        varied = np.array([text != base for text, base in zip(texts, bases)])
        if varied.any():
            noisy = rows[varied] + self._random.normal(0.0, self._sigma, (int(varied.sum()), self.dimension))
            rows[varied] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
        return rows.astype(np.float32)
