"""The ONNX copy of an embedding model: exported once per user from sentence-transformers,
cached under a hash of everything the graph depends on, and checked every time it is opened.

sentence-transformers finds and loads the model (torch) the first time; the whole
pipeline (transformer, the model's own pooling, L2 normalisation) is exported to one
ONNX graph, the fast tokenizer is saved beside it, and a sidecar records how the two
were made and the vector the exported graph gives for a probe sentence. Each copy is a
folder named after the hash of its ``Recipe`` (the model's files, the variant, the opset,
the exporting libraries' versions), so every database and data folder of a user shares
it and anything that would export another graph gets another folder. Later starts read
the sidecar, run the probe, and compare: a copy that is unreadable, made by another
recipe, or whose probe vector drifted is rebuilt, never half-used. A copy is built in a
temporary folder and appears by one rename, so a crash mid-export leaves no partial copy,
and of two processes exporting at once the second keeps the first one's copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from store.analysis import imports
from store.errors import ModelUnavailable

log = logging.getLogger(__name__)

FORMAT = 2
"""Bumped when the layout of a cached copy changes, so old copies are rebuilt."""

OPSET = 17

Variant = Literal["fp32", "int8"]

PROBE_TEXT = "Ana works as a nurse at Santa Maria hospital in Lisbon."
PROBE_MIN_COSINE = 0.999
"""The exported graph must give (almost) the very vector it gave when it was verified."""

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
"""Where sentence-transformers folders keep the transformer's weights."""

EXPORTERS: dict[Variant, tuple[str, ...]] = {
    "fp32": ("torch", "transformers", "sentence-transformers"),
    "int8": ("torch", "transformers", "sentence-transformers", "onnxruntime"),
}
"""The packages whose code makes each variant's graph (tracing; int8 adds the quantiser): a new
version of one may export another graph."""

EXPORT_LOGGERS = ("sentence_transformers",)
"""Loggers whose INFO lines during an export only debugging wants (torch and transformers set
their own loggers to WARNING when imported, and must keep what they set)."""

ABANDONED_AFTER = 3600.0
"""Seconds after which a temporary export folder is a killed process's leftover: no export takes
that long, so a younger one may be another process's export in progress."""

GRAPH, TOKENIZER, SIDECAR = "model.onnx", "tokenizer.json", "export.json"
"""The files of a cached copy's folder."""


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
class Recipe:
    """Everything an exported graph depends on: its hash names the cached copy, so a change to
    any part (a retrained model, another variant, a new exporter) makes a new one."""

    format: int
    model_sha256: str
    variant: Variant
    opset: int
    exporters: dict[str, str]

    @classmethod
    def of(cls, source: Path, variant: Variant) -> Recipe:
        """The recipe for exporting the model at ``source`` with the installed libraries."""
        return cls(FORMAT, model_sha256(source), variant, OPSET,
                   {package: _version(package) for package in EXPORTERS[variant]})

    def folder_name(self, name: str) -> str:
        """The cached copy's folder: the model's name for people, the recipe's hash for the code."""
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()
        return f"{Path(name).name}-{self.variant}-{digest[:16]}"


@dataclass(frozen=True)
class Sidecar:
    """What the cache records beside each exported graph (JSON)."""

    recipe: dict[str, Any]
    source: str
    max_seq_length: int
    dimension: int
    input_names: list[str]
    probe_vector: list[float]


def model_files(source: Path) -> list[Path]:
    """The files of a sentence-transformers folder that decide its vectors: the weights, and
    every configuration and vocabulary file (architecture, pooling, sequence limit, tokenizer)."""
    found = [path for pattern in ("*.json", "*.txt") for path in source.rglob(pattern)]
    found += [source / name for name in WEIGHT_FILES if (source / name).is_file()]
    return sorted(found)


def model_sha256(source: Path) -> str:
    """SHA-256 over the names and contents of the model's ``model_files``."""
    digest = hashlib.sha256()
    for path in model_files(source):
        digest.update(path.relative_to(source).as_posix().encode() + b"\0")
        with path.open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()


def cached_model(name: str, source: Path, cache_dir: Path, variant: Variant, threads: int) -> OpenModel:
    """The verified ONNX copy of the model ``name`` at ``source``, open; exports it (needs torch,
    once per user) when there is no valid copy yet."""
    recipe = Recipe.of(source, variant)
    folder = cache_dir / recipe.folder_name(name)
    if folder.is_dir():
        try:
            return _open_verified(folder, recipe, threads)
        except Exception as exc:  # noqa: BLE001 - any unreadable piece means the same: rebuild it
            log.warning("the cached embedding model %s is damaged (%s); preparing it again", folder, exc)
            with _writing(cache_dir):
                _discard(folder)
    log.info("preparing the embedding model for first use (once per user, about ten seconds)")
    log.debug("exporting %s to ONNX (%s) into %s", source, variant, folder)
    with _writing(cache_dir), _quiet(EXPORT_LOGGERS, logging.WARNING):
        remove_abandoned(cache_dir)
        export(source, folder, recipe)
    try:
        return _open_verified(folder, recipe, threads)
    except Exception as exc:
        raise ModelUnavailable(
            f"the ONNX copy of {source} in {folder} cannot be used ({exc}); delete that folder and try "
            "again, or set embedding_backend = \"torch\" (TRIMEM_EMBEDDING_BACKEND=torch)"
        ) from exc


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


def _open_verified(folder: Path, recipe: Recipe, threads: int) -> OpenModel:
    """The cached copy in ``folder``, open; raises if it is unreadable, was made by another
    recipe, or no longer reproduces its probe vector."""
    sidecar = Sidecar(**json.loads((folder / SIDECAR).read_text()))
    if sidecar.recipe != asdict(recipe):
        raise ValueError("it was made by another recipe")
    model = CachedModel(
        folder / GRAPH, folder / TOKENIZER, sidecar.max_seq_length, sidecar.dimension,
        tuple(sidecar.input_names), recipe.variant,
    )
    opened = OpenModel(model, open_session(model.onnx_path, threads), tokenizer_for(model))
    (probe,) = opened.embed([PROBE_TEXT])
    if float(probe @ _unit(sidecar.probe_vector)) < PROBE_MIN_COSINE:
        raise ValueError("it no longer gives its recorded vectors")
    return opened


def export(source: Path, folder: Path, recipe: Recipe) -> None:
    """Export the sentence-transformers model at ``source`` (with its pooling and normalisation)
    to ONNX, check it against sentence-transformers, and publish it as ``folder``."""
    import numpy as np

    torch = imports.torch()
    model = imports.sentence_transformer(source)
    input_names = tuple(model.tokenizer.model_input_names)
    with _scratch(folder.parent, ".export-") as work:
        work.mkdir()
        sample = model.tokenizer(["a short example", "and a slightly longer second example"],
                                 padding=True, return_tensors="pt")
        # The tracer warns about shape checks it freezes; the export is verified below instead.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _pipeline(model, input_names).eval(),
                tuple(sample[name] for name in input_names),
                str(work / GRAPH),
                input_names=list(input_names),
                output_names=["embedding"],
                dynamic_axes={**{name: {0: "batch", 1: "tokens"} for name in input_names}, "embedding": {0: "batch"}},
                opset_version=recipe.opset,
                dynamo=False,
            )
        if recipe.variant == "int8":
            _quantize(work / GRAPH)
        model.tokenizer.backend_tokenizer.save(str(work / TOKENIZER))
        cached = CachedModel(
            work / GRAPH, work / TOKENIZER, int(model.max_seq_length), int(_dimension(model)), input_names,
            recipe.variant,
        )
        opened = OpenModel(cached, open_session(cached.onnx_path, threads=1), tokenizer_for(cached))
        texts = [PROBE_TEXT, *VERIFY_TEXTS]
        exported = opened.embed(texts)
        reference = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=log.isEnabledFor(logging.DEBUG))
        cosines = np.sum(exported * reference, axis=1)
        minimum = PROBE_MIN_COSINE if recipe.variant == "fp32" else INT8_MIN_COSINE
        if float(cosines.min()) < minimum:
            others = '"onnx" (fp32) or "torch"' if recipe.variant == "int8" else '"torch"'
            raise ModelUnavailable(
                f"the ONNX export ({recipe.variant}) of {source} differs from sentence-transformers "
                f"(cosine {cosines.min():.4f}); set embedding_backend = {others}"
            )
        sidecar = Sidecar(
            asdict(recipe), str(source), cached.max_seq_length, cached.dimension, list(input_names),
            # The probe alone, as the check on load runs it: int8 graphs quantise activations per
            # batch, so a text's vector moves slightly with the padding of its batch.
            [float(x) for x in opened.embed([PROBE_TEXT])[0]],
        )
        (work / SIDECAR).write_text(json.dumps(asdict(sidecar)))
        _publish(work, folder)


def _publish(work: Path, folder: Path) -> None:
    """Move the complete copy in ``work`` to ``folder`` in one rename. If another process
    published one first, keep theirs: the same recipe exports the same graph."""
    try:
        work.rename(folder)
    except OSError:
        if not folder.is_dir():
            raise
        log.debug("another process prepared %s first; using its copy", folder)


def _discard(folder: Path) -> None:
    """Move a damaged copy out of the way in one rename, then delete it: a process looking at
    that moment finds the whole copy or none."""
    with _scratch(folder.parent, ".discard-") as aside:
        try:
            folder.rename(aside)
        except FileNotFoundError:
            pass  # another process discarded it first


def remove_abandoned(cache_dir: Path, prefix: str = ".export-") -> None:
    """Delete the temporary folders (named ``prefix``…) of exports or unpackings whose process was
    killed (a closing client may kill its server mid-export), so they do not pile up."""
    for scratch in cache_dir.glob(f"{prefix}*"):
        with contextlib.suppress(FileNotFoundError):  # another process removed it first
            if time.time() - scratch.stat().st_mtime > ABANDONED_AFTER:
                shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _scratch(parent: Path, prefix: str) -> Iterator[Path]:
    """A path that does not exist yet, inside a temporary folder in ``parent`` (so a rename to or
    from it stays on one file system), deleted with everything in it on leaving."""
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=prefix) as holder:
        yield Path(holder) / "copy"


@contextlib.contextmanager
def _writing(cache_dir: Path) -> Iterator[None]:
    """A folder that cannot be written (read-only, full, a file in the way) is a message that
    says which setting moves it."""
    try:
        yield
    except OSError as exc:
        raise ModelUnavailable(
            f"cannot write the embedding model's ONNX copy into {cache_dir} ({exc}); set model_cache "
            "(TRIMEM_MODEL_CACHE) to a writable folder with 100 MB free"
        ) from exc


@contextlib.contextmanager
def _quiet(loggers: tuple[str, ...], level: int) -> Iterator[None]:
    """Raise ``loggers`` to at least ``level`` for a while, unless trimem logs at debug: a
    one-off export's library lines are noise on a user's command and what debugging needs."""
    if log.isEnabledFor(logging.DEBUG):
        yield
        return
    previous = {name: logging.getLogger(name).level for name in loggers}
    for name in loggers:
        logging.getLogger(name).setLevel(max(level, logging.getLogger(name).getEffectiveLevel()))
    try:
        yield
    finally:
        for name, old in previous.items():
            logging.getLogger(name).setLevel(old)


def _version(package: str) -> str:
    """An installed package's version, read from its metadata (nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


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
    # The quantiser logs through the root logger, and its advice to pre-process is for image models.
    with _quiet(("",), logging.ERROR):
        quantize_dynamic(
            str(onnx_path), str(quantized), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
            per_channel=True,
        )
    quantized.replace(onnx_path)


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
