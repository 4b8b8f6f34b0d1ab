"""The exported model is prepared once per user: every data folder and database shares the copy in
the user's cache folder, named by what makes its graph; two first starts at once leave one good
copy; and a first start on a user's command says one line, not the libraries' output.

These tests run ``trimem`` as a user would, without ``TRIMEM_MODEL_CACHE`` (which the other tests
set), with the platform's cache folder pointed at a temporary one through ``XDG_CACHE_HOME``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from store import load_config
from store.analysis.onnx_cache import ABANDONED_AFTER, Recipe
from store.analysis.packaged_models import DEFAULT_MODEL, default_model_path

PREPARING = "INFO store.analysis.onnx_cache: preparing the embedding model for first use (once per user, about ten seconds)"


def trimem(*argv: str, cache_home: Path, home: Path, **settings: str) -> subprocess.Popen:
    """``trimem ARGV`` started in a new process as on a user's machine: no ``TRIMEM_*`` setting
    but the data folder ``home`` and ``settings`` (``model_cache="..."``), and the user cache
    folder in ``cache_home``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("TRIMEM_")}
    env |= {"TRIMEM_HOME": str(home), "XDG_CACHE_HOME": str(cache_home)}
    env |= {f"TRIMEM_{key.upper()}": value for key, value in settings.items()}
    return subprocess.Popen([sys.executable, "-m", "mcp_server", *argv], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(process: subprocess.Popen) -> str:
    """The stderr of ``process``, which must succeed."""
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    return stderr


def copies(cache_home: Path) -> Path:
    """The folder of exported copies under a user cache folder."""
    return cache_home / "trimem" / "onnx"


@pytest.fixture(scope="module")
def first_start(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A first ``trimem add`` on a machine with an empty user cache: the cache folder, the data
    folder, and what the command wrote to stderr."""
    cache_home, home = tmp_path_factory.mktemp("user-cache"), tmp_path_factory.mktemp("first-home")
    stderr = finished(trimem("add", "Ana drinks sencha", cache_home=cache_home, home=home))
    return cache_home, home, stderr


def test_a_first_start_says_one_line_and_shows_no_library_output(first_start):
    _, home, stderr = first_start
    [created, preparing] = stderr.splitlines()  # no progress bar, no sentence-transformers lines
    assert created == f"created new database at {home / 'memories.db'}"
    assert preparing.endswith(PREPARING)
    assert "\r" not in stderr


def test_every_data_folder_shares_the_users_copy(first_start, tmp_path: Path):
    cache_home, _, _ = first_start
    [folder] = copies(cache_home).iterdir()
    made = (folder / "model.onnx").stat()
    stderr = finished(trimem("add", "Ana drinks matcha", cache_home=cache_home, home=tmp_path / "other-home"))
    assert stderr.splitlines() == [f"created new database at {tmp_path / 'other-home' / 'memories.db'}"]
    assert [path.name for path in copies(cache_home).iterdir()] == [folder.name]
    again = (folder / "model.onnx").stat()
    assert (again.st_ino, again.st_mtime_ns) == (made.st_ino, made.st_mtime_ns)  # opened, not exported again


def test_debug_shows_the_export_as_it_happens(tmp_path: Path):
    stderr = finished(trimem("--log-level", "debug", "add", "Ana drinks sencha",
                             cache_home=tmp_path / "user-cache", home=tmp_path / "home"))
    assert "DEBUG store.analysis.onnx_cache: exporting " in stderr
    assert "INFO sentence_transformers" in stderr
    assert "Batches: 100%" in stderr  # sentence-transformers' progress bar while it checks the export


def test_two_first_starts_at_once_leave_one_good_copy(tmp_path: Path):
    """Both processes export; the second to finish keeps the first one's copy. A temporary
    folder a killed export left behind is removed; one as young as a running export is not."""
    cache_home = tmp_path / "user-cache"
    abandoned, running = copies(cache_home) / ".export-abandoned", copies(cache_home) / ".export-running"
    (abandoned / "copy").mkdir(parents=True)
    running.mkdir()
    long_ago = time.time() - ABANDONED_AFTER - 60
    os.utime(abandoned, (long_ago, long_ago))
    starts = [trimem("--log-level", "debug", "add", f"Ana drinks tea number {i}",
                     cache_home=cache_home, home=tmp_path / f"home-{i}") for i in range(2)]
    logs = [finished(start) for start in starts]
    assert sum("another process prepared" in log for log in logs) == 1, logs
    [folder] = [path.name for path in copies(cache_home).iterdir() if not path.name.startswith(".")]
    assert sorted(path.name for path in copies(cache_home).iterdir()) == [".export-running", folder]
    third = finished(trimem("search", "tea", cache_home=cache_home, home=tmp_path / "home-0"))
    assert "preparing" not in third and "damaged" not in third


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a 1 MB file system: the export cannot fit."""
    folder = tmp_path / "full"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_cache_without_room_is_a_message_and_leaves_nothing(full_disk: Path, tmp_path: Path):
    start = trimem("add", "Ana drinks sencha", cache_home=tmp_path / "user-cache", home=tmp_path / "home",
                   model_cache=str(full_disk))
    _, stderr = start.communicate(timeout=300)
    assert start.returncode == 1 and "Traceback" not in stderr
    assert stderr.splitlines()[-1] == (
        f"Error: cannot write the embedding model's ONNX copy into {full_disk} ([Errno 28] No space left on "
        "device); set model_cache (TRIMEM_MODEL_CACHE) to a writable folder with 100 MB free"
    )
    assert list(full_disk.iterdir()) == []  # no partial copy, no temporary folder


def test_the_copy_is_named_by_everything_that_makes_its_graph(tmp_path: Path):
    packaged = default_model_path()
    recipe = Recipe.of(packaged, "fp32")
    name = recipe.folder_name(DEFAULT_MODEL)
    copy = tmp_path / DEFAULT_MODEL
    shutil.copytree(packaged, copy)
    assert Recipe.of(copy, "fp32").folder_name(DEFAULT_MODEL) == name  # the same files: the same copy
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # the lowest bit of the last weight
    (copy / "model.safetensors").write_bytes(weights)
    retrained = Recipe.of(copy, "fp32").folder_name(DEFAULT_MODEL)
    pooling = copy / "1_Pooling" / "config.json"
    pooling.write_text(pooling.read_text().replace('"pooling_mode_mean_tokens": true', '"pooling_mode_mean_tokens": false'))
    repooled = Recipe.of(copy, "fp32").folder_name(DEFAULT_MODEL)
    assert len({name, retrained, repooled, Recipe.of(packaged, "int8").folder_name(DEFAULT_MODEL)}) == 4
    assert recipe.exporters["torch"] == version("torch")
    newer_torch = dataclasses.replace(recipe, exporters={**recipe.exporters, "torch": "99.0"})
    assert newer_torch.folder_name(DEFAULT_MODEL) != name


def test_the_cache_is_the_users_unless_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    assert load_config(environ={}).model_cache_dir == tmp_path / "user-cache" / "trimem" / "onnx"
    assert load_config(environ={"TRIMEM_MODEL_CACHE": str(tmp_path / "mine")}).model_cache_dir == tmp_path / "mine"
