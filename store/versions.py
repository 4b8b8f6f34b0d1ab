"""Installed distributions' versions, read from their metadata (nothing is imported)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or ``None`` when it is not installed."""
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def trimem_version() -> str:
    """This trimem's version; ``0+unknown`` for a checkout run without being installed."""
    return package_version("trimem") or "0+unknown"
