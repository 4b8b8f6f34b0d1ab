"""Files that hold memories are their owner's alone: made so here, and checked for ``doctor``.

A database holds every user's memories and the token hashes; an export or a backup holds the
same. Made the ordinary way they are 0644 under the usual umask (022): any account on the
machine could read them. So trimem creates each such file 0600, and a folder it makes for a
database 0700 (SQLite gives the -wal, -shm and -journal beside a database its file's mode, so
a database file made here first keeps all of them private). A file or folder that exists
already is never changed; ``open_to_others`` says which ``trimem doctor --check`` warns about.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterable
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_FOLDER = 0o700
GROUP_OR_OTHERS = stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH
"""The bits that let someone other than the owner read or write (a folder's x bits let them
reach a file by name, which a private file still refuses)."""


def create_private(path: Path) -> int:
    """Create ``path``, readable and writable by its owner only, and return a descriptor open
    for writing. An existing file (or a link) there is refused with ``FileExistsError``, never
    changed or followed."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)


def make_folder(path: Path) -> None:
    """Create the folder for a store's files, with its missing parents: the folder itself
    private (its parents as ``mkdir -p`` makes them); an existing one is left as it is."""
    path.mkdir(mode=PRIVATE_FOLDER, parents=True, exist_ok=True)


def open_to_others(paths: Iterable[Path]) -> list[str]:
    """Of ``paths``, those this user owns that group or others may read or write, each as one
    line naming it, who may, and the ``chmod`` that makes it private.

    A path that does not exist is passed over, and so is one another account owns: only its
    owner can change it, and a shared folder such as /tmp is open on purpose (its sticky bit
    keeps others from replacing a file in it). On Windows these bits mean nothing: no line.
    """
    if os.name != "posix":
        return []
    lines = []
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            continue
        open_bits = info.st_mode & GROUP_OR_OTHERS
        if info.st_uid != os.getuid() or not open_bits:
            continue
        private = PRIVATE_FOLDER if stat.S_ISDIR(info.st_mode) else PRIVATE_FILE
        lines.append(f"{path} can be {_who_may(open_bits)} (mode {stat.S_IMODE(info.st_mode):o}); "
                     f"`chmod {private:o} {shlex.quote(str(path))}` makes it its owner's alone")
    return lines


def _who_may(bits: int) -> str:
    """``bits`` in words: "read by its group and others", "read and written by its group, and read by others"."""
    whom: dict[str, list[str]] = {}
    for who, read, write in (("its group", stat.S_IRGRP, stat.S_IWGRP), ("others", stat.S_IROTH, stat.S_IWOTH)):
        if verbs := " and ".join(verb for verb, bit in (("read", read), ("written", write)) if bits & bit):
            whom.setdefault(verbs, []).append(who)
    return ", and ".join(f"{verbs} by {' and '.join(who)}" for verbs, who in whom.items())
