"""Imports of the heavy libraries, on first use, lean and safe from several threads.

spaCy's numeric library (thinc) imports torch whenever torch is installed: over a second
and about 200 MB per process, though the pipelines trimem loads never use it and the
embedding model runs under ONNX Runtime. ``spacy()`` marks torch absent while spaCy
imports, so thinc takes its no-torch branch; ``torch()`` takes the same lock, so a thread
that does need torch (the ONNX export, the torch backend) never meets that marker.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from store.errors import ModelUnavailable

_lock = threading.Lock()


def spacy() -> ModuleType:
    """``import spacy`` without torch (unless torch is loaded already)."""
    with _lock:
        if "spacy" in sys.modules or "torch" in sys.modules:
            import spacy

            return spacy
        sys.modules["torch"] = None  # type: ignore[assignment] - makes "import torch" raise ImportError
        try:
            import spacy
        finally:
            del sys.modules["torch"]
        return spacy


def torch() -> ModuleType:
    """``import torch``, never while ``spacy()`` hides it."""
    with _lock:
        import torch

        return torch


def sentence_transformer(source: str | Path) -> Any:
    """A sentence-transformers model loaded on the CPU from local files (torch first, through
    ``torch()``), or ``ModelUnavailable`` saying what to configure instead."""
    # Refuse hub look-ups outright: a local path is the only source trimem uses.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    torch()
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # stderr is the server's log
    try:
        return SentenceTransformer(str(source), device="cpu")
    except Exception as exc:  # a missing folder, one without a model, a broken config: all the same to the user
        raise ModelUnavailable(
            f"could not load embedding model '{source}' from local files ({exc}); "
            "set embedding_model to a local sentence-transformers folder"
        ) from exc
