"""Imports of the heavy libraries, on first use, lean and safe from several threads.

spaCy's numeric library (thinc) imports torch whenever torch is installed: over a second
and about 200 MB per process, though the pipelines trimem loads never use it and the
embedding model runs under ONNX Runtime. ``spacy()`` marks torch absent while spaCy
imports, so thinc takes its no-torch branch; ``torch()`` takes the same lock, so a thread
that does need torch (the ONNX export, the torch backend) never meets that marker.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType

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
