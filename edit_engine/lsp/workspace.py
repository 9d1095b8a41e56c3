"""Files beside a document on disk, as related code for its requests (the engine searches them for copies).

An editor has only a few documents open, while the code a line repeats usually sits in the same package. For a
``file://`` document the server also sends the files of the same language in its folder that are not open:
the largest first (more code to copy from), bounded in number (``MAX_FILES``), size (``MAX_FILE_CHARS`` each)
and entries looked at (``MAX_ENTRIES``, so a huge folder costs no more than a small one). A folder's listing is
kept while the folder's modification time stays what it was (``MAX_LISTINGS`` folders; a listing taken less than
``SETTLE_NS`` after the folder last changed is not trusted, as a file system's clock may not tick between two
changes). Texts are kept by path and modification time (``MAX_CACHED`` of them, ``MAX_CACHED_BYTES`` together),
so a keystroke costs a ``stat`` of the folder and of each file sent, not a listing or a read (a 2,000-entry
folder's listing took 33-48 ms on a 2-core EPYC, on the server's event loop, every keystroke). Sizes, which order
the files, are those of the listing. Only regular files are read: a symbolic link is not followed (nothing outside the folder is read through
one), a FIFO is never opened for reading (it would block the event loop), and the size is checked again when the
file is read (a file grown past ``MAX_FILE_CHARS`` since the listing is not read).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from edit_engine.engine.results import LANGUAGES_BY_SUFFIX
from edit_engine.memory.indexer import read_regular
from edit_engine.syntax.lru import BoundedLRU

MAX_FILES = 16
MAX_FILE_CHARS = 300_000
MAX_ENTRIES = 2_000
MAX_CACHED = 256
MAX_CACHED_BYTES = 64 << 20  # the texts kept (``sys.getsizeof``): some two hundred files at the size limit
MAX_LISTINGS = 32
SETTLE_NS = 2_000_000_000  # a folder unchanged this long before its listing was taken keeps that listing


def path_of(uri: str) -> Path | None:
    """The local path of a ``file://`` URI (None for any other scheme)."""
    u = urlparse(uri)
    return Path(unquote(u.path)) if u.scheme == "file" and u.path else None


@dataclass(frozen=True)
class Listing:
    """A folder's files by language, each (size, path), largest first; taken when the folder's modification
    time was ``mtime_ns``, at ``taken_ns``."""

    mtime_ns: int
    taken_ns: int
    files: dict[str, list[tuple[int, Path]]]

    def fresh(self, mtime_ns: int) -> bool:
        return mtime_ns == self.mtime_ns and self.taken_ns - self.mtime_ns >= SETTLE_NS


class Workspace:
    """Reads and caches the files beside open documents. Thread-safe."""

    def __init__(self) -> None:
        # path -> (mtime_ns, size, text)
        self._texts: BoundedLRU[Path, tuple[int, int, str]] = BoundedLRU(MAX_CACHED, MAX_CACHED_BYTES,
                                                                         "workspace texts")
        self._listings: OrderedDict[Path, Listing] = OrderedDict()
        self._lock = threading.Lock()

    def siblings(self, uri: str, language: str, skip: set[str]) -> list[tuple[str, str]]:
        """(uri, text) of the files of ``language`` in ``uri``'s folder, largest first, leaving out ``uri``
        itself and the URIs in ``skip`` (documents the editor has open: their text is newer than the disk's)."""
        path = path_of(uri)
        listing = None if path is None else self.listing(path.parent)
        if path is None or listing is None:
            return []
        chosen: list[tuple[str, Path]] = []  # the largest MAX_FILES, stopping there (a folder may hold thousands)
        for _, p in listing.files.get(language, []):
            if len(chosen) == MAX_FILES:
                break
            u = p.as_uri()
            if p != path and u not in skip:
                chosen.append((u, p))
        return [(u, text) for u, p in chosen if (text := self._read(p))]

    def listing(self, folder: Path) -> Listing | None:
        """The folder's files by language (its first ``MAX_ENTRIES`` entries), kept while it is unchanged; None
        when it cannot be read."""
        try:
            mtime = folder.stat().st_mtime_ns
        except OSError:
            return None
        with self._lock:
            got = self._listings.get(folder)
            if got is not None and got.fresh(mtime):
                self._listings.move_to_end(folder)
                return got
        taken = time.time_ns()
        files: dict[str, list[tuple[int, Path]]] = {}
        try:
            with os.scandir(folder) as it:
                for n, entry in enumerate(it):
                    if n >= MAX_ENTRIES:
                        break
                    language = LANGUAGES_BY_SUFFIX.get(os.path.splitext(entry.name)[1].lower())
                    if language is None or not entry.is_file(follow_symlinks=False):  # no link out of the folder
                        continue
                    size = entry.stat().st_size
                    if 0 < size <= MAX_FILE_CHARS:
                        files.setdefault(language, []).append((size, Path(entry.path)))
        except OSError:
            return None
        for found in files.values():
            found.sort(key=lambda t: (-t[0], t[1]))
        listing = Listing(mtime, taken, files)
        with self._lock:
            self._listings[folder] = listing
            self._listings.move_to_end(folder)
            while len(self._listings) > MAX_LISTINGS:
                self._listings.popitem(last=False)
        return listing

    def _read(self, path: Path) -> str:
        try:
            st = path.stat()
        except OSError:
            return ""
        got = self._texts.get(path)
        if got is not None and got[:2] == (st.st_mtime_ns, st.st_size):
            return got[2]
        read = read_regular(path, MAX_FILE_CHARS)
        if read is None:
            return ""
        text, mtime, size = read
        self._texts.put(path, (mtime, size, text), sys.getsizeof(text) + 128)
        return text
