"""Files beside a document on disk, as related code for its requests (the engine searches them for copies).

An editor has only a few documents open, while the code a line repeats usually sits in the same package. For a
``file://`` document the server also sends the files of the same language in its folder that are not open:
the largest first (more code to copy from), bounded in number (``MAX_FILES``), size (``MAX_FILE_CHARS`` each)
and entries looked at (``MAX_ENTRIES``, so a huge folder costs no more than a small one). Texts are kept by path
and modification time (``Workspace`` holds at most ``MAX_CACHED`` of them), so a keystroke costs a directory
listing and a ``stat`` per file, not a read.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from urllib.parse import unquote, urlparse

from edit_engine.engine.results import LANGUAGES_BY_SUFFIX

MAX_FILES = 16
MAX_FILE_CHARS = 300_000
MAX_ENTRIES = 2_000
MAX_CACHED = 256


def path_of(uri: str) -> Path | None:
    """The local path of a ``file://`` URI (None for any other scheme)."""
    u = urlparse(uri)
    return Path(unquote(u.path)) if u.scheme == "file" and u.path else None


class Workspace:
    """Reads and caches the files beside open documents. Thread-safe."""

    def __init__(self) -> None:
        self._texts: OrderedDict[Path, tuple[int, int, str]] = OrderedDict()  # path -> (mtime_ns, size, text)
        self._lock = threading.Lock()

    def siblings(self, uri: str, language: str, skip: set[str]) -> list[tuple[str, str]]:
        """(uri, text) of the files of ``language`` in ``uri``'s folder, largest first, leaving out ``uri``
        itself and the URIs in ``skip`` (documents the editor has open: their text is newer than the disk's)."""
        path = path_of(uri)
        if path is None:
            return []
        found: list[tuple[int, Path]] = []
        try:
            with os.scandir(path.parent) as it:
                for n, entry in enumerate(it):
                    if n >= MAX_ENTRIES:
                        break
                    p = Path(entry.path)
                    if LANGUAGES_BY_SUFFIX.get(p.suffix.lower()) != language or p == path \
                            or p.as_uri() in skip or not entry.is_file():
                        continue
                    size = entry.stat().st_size
                    if 0 < size <= MAX_FILE_CHARS:
                        found.append((size, p))
        except OSError:
            return []
        found.sort(key=lambda t: (-t[0], t[1]))
        out = []
        for _, p in found[:MAX_FILES]:
            text = self._read(p)
            if text:
                out.append((p.as_uri(), text))
        return out

    def _read(self, path: Path) -> str:
        try:
            st = path.stat()
        except OSError:
            return ""
        with self._lock:
            got = self._texts.get(path)
            if got is not None and got[:2] == (st.st_mtime_ns, st.st_size):
                self._texts.move_to_end(path)
                return got[2]
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ""
        with self._lock:
            self._texts[path] = (st.st_mtime_ns, st.st_size, text)
            while len(self._texts) > MAX_CACHED:
                self._texts.popitem(last=False)
        return text
