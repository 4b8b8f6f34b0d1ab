"""The ONNX copy of an embedding model: exported once from sentence-transformers, cached by
the weights' hash, and checked every time it is opened.

sentence-transformers finds and loads the model (torch) the first time; the whole
pipeline (transformer, the model's own pooling, L2 normalisation) is exported to one
ONNX graph, the fast tokenizer is saved beside it, and a sidecar records how the two
were made and the vector the exported graph gives for a probe sentence. Later starts
read the sidecar, run the probe, and compare: a copy that is missing, unreadable, made
from other weights, or whose probe vector drifted is rebuilt, never half-used. Files
appear by atomic rename, so a crash mid-export leaves no partial copy behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from . import imports
from .errors import ModelUnavailable

log = logging.getLogger(__name__)

FORMAT = 1
"""Bumped when the layout of the cached files changes, so old copies are rebuilt."""

Variant = Literal["fp32", "int8"]

PROBE_TEXT = "Ana works as a nurse at Santa Maria hospital in Lisbon."
PROBE_MIN_COSINE = 0.999
"""The exported graph must give (almost) the very vector it gave when it was verified."""

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
"""Where sentence-transformers folders keep the transformer's weights."""


@dataclass(frozen=True)
class CachedModel:
    """An exported model on disk and what is needed to run it like sentence-transformers."""

    onnx_path: Path
    tokenizer_path: Path
    max_seq_length: int
    dimension: int
    input_names: tuple[str, ...]
    variant: Variant


@dataclass(frozen=True)
class OpenModel:
    """A cached model ready to run: its ONNX Runtime session and its tokenizer."""

    model: CachedModel
    session: Any
    tokenizer: Any

    def embed(self, texts: list[str]) -> Any:
        """Unit vectors for ``texts`` in one forward pass (see ``run_session``)."""
        return run_session(self.session, self.tokenizer, self.model.input_names, texts)


@dataclass(frozen=True)
class Sidecar:
    """What the cache records beside each exported graph (JSON)."""

    format: int
    source: str
    weights_sha256: str
    variant: Variant
    max_seq_length: int
    dimension: int
    input_names: list[str]
    probe_vector: list[float]


def weights_sha256(source: Path) -> str:
    """SHA-256 of the model's weights and config: the cache key (a retrained model gets a new copy)."""
    digest = hashlib.sha256()
    for name in ("config.json", *WEIGHT_FILES):
        path = source / name
        if path.is_file():
            with path.open("rb") as handle:
                digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()


def cached_model(name: str, source: Path, cache_dir: Path, variant: Variant, threads: int) -> OpenModel:
    """The verified ONNX copy of the model ``name`` at ``source``, open; exports it (needs torch,
    once) when there is no valid copy yet."""
    key = f"{Path(name).name}-{weights_sha256(source)[:16]}-{variant}"
    stem = cache_dir / key
    found = _open_verified(stem, threads)
    if found is not None:
        return found
    log.info("exporting embedding model %s to ONNX (%s), once, into %s", source, variant, cache_dir)
    export(source, stem, variant)
    found = _open_verified(stem, threads)
    if found is None:
        raise ModelUnavailable(f"the ONNX export of {source} does not match sentence-transformers; "
                               "set embedding_backend = \"torch\" (TRIMEM_EMBEDDING_BACKEND=torch)")
    return found


def open_session(onnx_path: Path, threads: int) -> Any:
    """An ONNX Runtime CPU session with ``threads`` intra-op threads.

    The memory arena is off: with inputs of every length it keeps growing to the largest
    batch ever seen, while plain allocation returns memory after each call.
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = False
    options.log_severity_level = 3  # warnings about unused initialisers are noise to users
    return onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])


def _open_verified(stem: Path, threads: int) -> OpenModel | None:
    """The cached copy, open, if it exists, loads, and reproduces its probe vector."""
    sidecar_path, onnx_path, tokenizer_path = _paths(stem)
    if not (sidecar_path.is_file() and onnx_path.is_file() and tokenizer_path.is_file()):
        return None
    try:
        sidecar = Sidecar(**json.loads(sidecar_path.read_text()))
        if sidecar.format != FORMAT:
            return None
        model = CachedModel(
            onnx_path, tokenizer_path, sidecar.max_seq_length, sidecar.dimension,
            tuple(sidecar.input_names), sidecar.variant,
        )
        opened = OpenModel(model, open_session(onnx_path, threads), tokenizer_for(model))
        (probe,) = opened.embed([PROBE_TEXT])
    except Exception as exc:  # any unreadable piece means the same: rebuild it
        log.warning("cached ONNX model %s is unusable (%s); rebuilding it", onnx_path, exc)
        return None
    if float(probe @ _unit(sidecar.probe_vector)) < PROBE_MIN_COSINE:
        log.warning("cached ONNX model %s no longer gives its recorded vectors; rebuilding it", onnx_path)
        return None
    return opened


def export(source: Path, stem: Path, variant: Variant) -> None:
    """Export the sentence-transformers model at ``source`` (with its pooling and normalisation)
    to ONNX, check it against sentence-transformers, and publish it under ``stem``."""
    import numpy as np

    torch = imports.torch()
    model = imports.sentence_transformer(source)
    input_names = tuple(model.tokenizer.model_input_names)
    stem.parent.mkdir(parents=True, exist_ok=True)
    sidecar_path, onnx_path, tokenizer_path = _paths(stem)
    with tempfile.TemporaryDirectory(dir=stem.parent, prefix=".export-") as work:
        work_onnx, work_tokenizer = Path(work) / onnx_path.name, Path(work) / tokenizer_path.name
        sample = model.tokenizer(["a short example", "and a slightly longer second example"],
                                 padding=True, return_tensors="pt")
        # The tracer warns about shape checks it freezes; the export is verified below instead.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _pipeline(model, input_names).eval(),
                tuple(sample[name] for name in input_names),
                str(work_onnx),
                input_names=list(input_names),
                output_names=["embedding"],
                dynamic_axes={**{name: {0: "batch", 1: "tokens"} for name in input_names}, "embedding": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )
        if variant == "int8":
            _quantize(work_onnx)
        model.tokenizer.backend_tokenizer.save(str(work_tokenizer))
        cached = CachedModel(
            work_onnx, work_tokenizer, int(model.max_seq_length), int(_dimension(model)), input_names, variant
        )
        opened = OpenModel(cached, open_session(work_onnx, threads=1), tokenizer_for(cached))
        texts = [PROBE_TEXT, *VERIFY_TEXTS]
        exported = opened.embed(texts)
        reference = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
        cosines = np.sum(exported * reference, axis=1)
        minimum = PROBE_MIN_COSINE if variant == "fp32" else INT8_MIN_COSINE
        if float(cosines.min()) < minimum:
            raise ModelUnavailable(
                f"the ONNX export of {source} differs from sentence-transformers (cosine {cosines.min():.4f}); "
                "set embedding_backend = \"torch\""
            )
        sidecar = Sidecar(
            FORMAT, str(source), weights_sha256(source), variant, cached.max_seq_length, cached.dimension,
            # The probe alone, as the check on load runs it: int8 graphs quantise activations per
            # batch, so a text's vector moves slightly with the padding of its batch.
            list(input_names), [float(x) for x in opened.embed([PROBE_TEXT])[0]],
        )
        Path(work, sidecar_path.name).write_text(json.dumps(asdict(sidecar)))
        # The sidecar goes last: a reader that finds it finds the other two complete.
        for name in (onnx_path.name, tokenizer_path.name, sidecar_path.name):
            os.replace(Path(work, name), stem.parent / name)


VERIFY_TEXTS = (
    "hi",
    "What did Caroline research about adoption agencies last summer?",
    "Melanie: I ran a charity race for mental health last Saturday, it was so rewarding! " * 12,
    "Café crème brûlée à Paris, s'il vous plaît",
    "東京に住んでいて、毎朝コーヒーを飲みます",
    "مرحبا، أنا أعمل في المستشفى",
)
"""Texts the export is checked on: short, long (past the token limit), and non-English."""

INT8_MIN_COSINE = 0.98
"""int8 weights move vectors a little; retrieval quality is what decides whether to use them."""


def _paths(stem: Path) -> tuple[Path, Path, Path]:
    return stem.with_suffix(".json"), stem.with_suffix(".onnx"), stem.with_suffix(".tokenizer.json")


def _unit(values: list[float]) -> Any:
    import numpy as np

    vector = np.asarray(values, dtype=np.float32)
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


def _dimension(model: Any) -> int:
    # sentence-transformers renamed the method; accept both spellings.
    size = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(size())


def _quantize(onnx_path: Path) -> None:
    """Dynamic int8 quantisation of the matrix products' weights, per output channel, in place.

    Per-tensor scales, or quantising the other operators too, moved vectors far more
    (mean cosine to fp32 0.956 against 0.992 on LoCoMo turns) for little extra speed.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantized = onnx_path.with_suffix(".int8.onnx")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantiser's advice to pre-process is for image models
    try:
        quantize_dynamic(
            str(onnx_path), str(quantized), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
            per_channel=True,
        )
    finally:
        root.setLevel(level)
    os.replace(quantized, onnx_path)


def _pipeline(model: Any, input_names: tuple[str, ...]) -> Any:
    """A torch module running sentence-transformers' forward (transformer and the model's own
    pooling) on positional inputs, then L2 normalisation: the graph that gets exported."""
    import torch

    class Pipeline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            features = self.model(dict(zip(input_names, inputs)))
            return torch.nn.functional.normalize(features["sentence_embedding"], p=2, dim=1)

    return Pipeline()


def tokenizer_for(model: CachedModel) -> Any:
    """The model's fast tokenizer, truncating at its sequence limit and padding to the longest."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model.tokenizer_path))
    tokenizer.enable_truncation(model.max_seq_length)
    tokenizer.enable_padding()
    return tokenizer


def run_session(session: Any, tokenizer: Any, input_names: tuple[str, ...], texts: list[str]) -> Any:
    """Unit vectors for ``texts`` in one forward pass, shape ``(len(texts), dimension)``."""
    import numpy as np

    encodings = tokenizer.encode_batch(texts)
    columns = {
        "input_ids": [e.ids for e in encodings],
        "attention_mask": [e.attention_mask for e in encodings],
        "token_type_ids": [e.type_ids for e in encodings],
    }
    feed = {name: np.asarray(columns[name], dtype=np.int64) for name in input_names}
    (vectors,) = session.run(["embedding"], feed)
    return np.asarray(vectors, dtype=np.float32)
