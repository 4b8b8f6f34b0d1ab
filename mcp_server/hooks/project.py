"""The project a session works in: where it lives, not what its folder is called.

Two checkouts may share a folder name (``clientA/backend``, ``clientB/backend``); their
memories must not. A project is the repository the working folder is in (the first folder,
walking up from it, that holds a ``.git`` folder or file: a clone, a worktree or a submodule),
else the working folder itself; its absolute path identifies it, and its folder's name only
labels it in the block's heading and in searches.

A captured prompt keeps both in its metadata (``PROJECT_KEY``, ``PROJECT_PATH_KEY``). One
captured before trimem kept the path holds only the name: it still counts as the project's
when the name matches, since nothing tells which folder of that name it came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

PROJECT_KEY = "project"
"""The metadata key holding the name of a captured memory's project."""
PROJECT_PATH_KEY = "project_path"
"""The metadata key holding the absolute path of a captured memory's project."""
LONGEST_PATH = 4096
"""Linux's PATH_MAX: no session runs in a longer folder, so such a path is taken as it is, not walked."""


@dataclass(frozen=True)
class Project:
    """A project: the absolute path of its root, which identifies it, and the root's name."""

    name: str
    path: str

    def metadata(self) -> dict[str, str]:
        """What a captured memory keeps about its project."""
        return {PROJECT_KEY: self.name, PROJECT_PATH_KEY: self.path}

    def captured_here(self) -> dict[str, Any]:
        """A filter for the memories captured in this project: at its path, or (captured before
        paths were kept) under its name with no path."""
        return {"OR": [{PROJECT_PATH_KEY: self.path}, {PROJECT_PATH_KEY: None, PROJECT_KEY: self.name}]}

    def not_captured_elsewhere(self) -> dict[str, Any]:
        """A filter for every memory except those captured in another project: the memories
        with no project path, and this project's."""
        return {"OR": [{PROJECT_PATH_KEY: None}, {PROJECT_PATH_KEY: self.path}]}


def project_of(cwd: str | None) -> Project | None:
    """The project of a session working in ``cwd`` (an absolute path, as Claude Code sends it);
    ``None`` without one (or with a relative one, which says nothing about where), or for a root
    folder, which has no name."""
    if not cwd or not os.path.isabs(cwd):
        return None
    folder = os.path.normpath(cwd)
    root = repository_root(folder) or folder
    name = os.path.basename(root)
    return Project(name, root) if name else None


def repository_root(folder: str) -> str | None:
    """The nearest folder at or above ``folder`` holding ``.git``, or ``None``.

    ``os.path.exists`` answers ``False`` for a folder it cannot read, so a path that names no
    folder on this machine (a client's, over HTTP) is simply its own project."""
    if len(folder) > LONGEST_PATH:
        return None
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
