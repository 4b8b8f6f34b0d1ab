"""The repository holds source and text only: no archive, no binary, no build output.

A 10 MB wheel once rode along in every clone unnoticed; a picture, a model or a database file
would too. Every file git tracks must be text (no NUL byte), no archive or compiled file by
name, and under 1 MB.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LARGEST = 1_000_000
"""Bytes a tracked file may hold: the largest text here is a tenth of it."""
NOT_SOURCE = (
    ".whl", ".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".zst", ".7z", ".egg", ".jar", ".so", ".dylib", ".dll",
    ".pyc", ".onnx", ".bin", ".pt", ".safetensors", ".db", ".sqlite", ".png", ".jpg", ".gif", ".pdf",
)
"""Names of archives, compiled code, models, databases and pictures: build outputs or binaries."""


def tracked() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing is tracked")
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listing.decode().split("\0") if name]


def test_no_archive_or_binary_is_tracked() -> None:
    files = tracked()
    assert files, "git tracks nothing here"
    by_name = [str(path.relative_to(ROOT)) for path in files if path.name.lower().endswith(NOT_SOURCE)]
    binary = [str(path.relative_to(ROOT)) for path in files if path.is_file() and b"\0" in path.read_bytes()]
    assert (by_name, binary) == ([], [])


def test_no_tracked_file_is_over_a_megabyte() -> None:
    large = {str(path.relative_to(ROOT)): path.stat().st_size for path in tracked()
             if path.is_file() and path.stat().st_size > LARGEST}
    assert large == {}
