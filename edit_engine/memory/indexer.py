"""The workspace and installed-package tiers of a :class:`Memory`, built in the background.

An editor has a few documents open; the names and idioms a line repeats usually sit elsewhere in the project
and in the libraries it imports. ``Indexer`` walks the workspace folders on a thread of its own and reports
each source file of a known language to the memory's ``workspace`` tier, the files nearest the open documents
first (their folder, then its parent's subtree, then the rest, shallowest first). Then, for Python and
JavaScript/TypeScript, it finds the packages those files import (top-level names, skipping the workspace's own
modules) in the workspace's virtual environments and ``node_modules`` and in the interpreter's own path (the
standard library included), and reports their files to the ``packages`` tier, the most imported first (off by
default: ``packages=True``; on the typing replay's Python dev split that tier lowered the share of characters
typed by accepts, 26.1% to 24.4%).

Bounds: ``max_files`` workspace files and ``max_package_files`` package files, each at most ``max_file_bytes``
(checked when the file is read, not only when it is listed); regular files only, no symbolic link followed
(so nothing outside the folders is read through one), folders such as ``.git``, ``node_modules`` (but for the
packages found in it), build outputs and virtual environments skipped; the memory's byte budget caps what is
held (the workspace may fill half of it, the packages up to three-quarters; open documents keep the rest). A large file is counted a block of lines at a
time, so a request drafting meanwhile waits for one block at most.

Incremental: ``changed(path)`` re-reads one file (saved, created or deleted) and re-counts only its changed
lines. Cached on disk: when the walk ends, the counts and each file's size and modification time are written to
``cache_dir`` (one file per set of folders); the next start takes them back and reads only the files that
changed since (restoring the counts of a 54-file, 878 KB package took 0.39 s against 1.44 s to count them).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import queue
import re
import stat
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from importlib.machinery import PathFinder
from pathlib import Path

from .memory import Memory

__all__ = ["Indexer", "LANGUAGE_OF_SUFFIX", "imports_of", "read_regular"]

log = logging.getLogger(__name__)

LANGUAGE_OF_SUFFIX = {".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
                      ".cjs": "javascript", ".jsx": "javascript", ".ts": "typescript", ".tsx": "typescript",
                      ".mts": "typescript", ".go": "go", ".rs": "rust"}
SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", "env", ".env", ".tox",
             ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist", "target", "site-packages",
             ".idea", ".vscode", ".cache", ".eggs"}
WORKSPACE_SHARE, FILES_SHARE = 0.5, 0.75  # of the memory's byte budget: the workspace; workspace and packages
BLOCK_LINES = 200  # a file is counted this many lines at a time (the memory's lock is released between blocks)
CACHE_VERSION = 1
_PY_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([A-Za-z_]\w*)(?:\.\w+)*[ \t]+import|import[ \t]+([A-Za-z_]\w*))", re.M)
_JS_IMPORT = re.compile(r"""(?:\bfrom[ \t]*|\brequire\([ \t]*|\bimport\([ \t]*|^[ \t]*import[ \t]+)["']"""
                        r"""((?:@[\w.-]+/)?[\w.-]+)""", re.M)


def imports_of(text: str, language: str) -> list[str]:
    """The top-level modules or packages ``text`` imports (Python) or requires (JavaScript/TypeScript; relative
    paths and ``node:`` built-ins left out), in order of appearance, with repeats. Linear in the text."""
    if language == "python":
        return [a or b for a, b in _PY_IMPORT.findall(text)]
    if language in ("javascript", "typescript"):
        return [m for m in _JS_IMPORT.findall(text) if not m.startswith(".")]
    return []


class Indexer:
    """Feeds a memory's workspace and package tiers from folders on disk, on a daemon thread (``start``).
    ``done`` is set when the first walk has ended; ``stats`` says what it found."""

    def __init__(self, memory: Memory, roots: Iterable[str | Path], focus: Iterable[str | Path] = (),
                 max_files: int = 2_000, max_package_files: int = 400, max_file_bytes: int = 300_000,
                 packages: bool = False, search_paths: Iterable[str] | None = None,
                 cache_dir: str | Path | None = None,
                 on_event: Callable[[dict[str, object]], None] | None = None) -> None:
        self.memory = memory
        self.on_event = on_event  # called on the indexer's thread: {"event": "walked" | "changed", ...}
        self.roots = sorted({Path(r).resolve() for r in roots})
        self.focus = {Path(f).resolve() for f in focus}
        self.max_files, self.max_package_files, self.max_file_bytes = max_files, max_package_files, max_file_bytes
        self.packages = packages
        self.search_paths = list(sys.path if search_paths is None else search_paths)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.done = threading.Event()
        self.stats: dict[str, float] = {"files": 0, "package_files": 0, "packages": 0, "skipped": 0,
                                        "from_cache": 0, "seconds": 0.0}
        self._seen: dict[str, tuple[str, int, int]] = {}  # path -> (tier, mtime_ns, size) of what was counted
        self._stop = threading.Event()
        self._changes: queue.Queue[Path | None] = queue.Queue()
        self._open: set[str] = set()  # documents open in the editor (``opened``): not counted from disk
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ running
    def start(self) -> Indexer:
        """Walk the folders on a daemon thread; returns self."""
        self._thread = threading.Thread(target=self._run, name="edit-engine-indexer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the file being read (the counts so far stay in the memory)."""
        self._stop.set()
        self._changes.put(None)

    def changed(self, path: str | Path) -> None:
        """A file was saved, created or deleted: after the first walk, the indexer's thread counts it again
        (only its changed lines) or forgets it. Files outside the folders, of other languages or too large are
        ignored. ``flush`` waits until every change reported so far is handled."""
        self._changes.put(Path(path))

    def opened(self, path: str | Path) -> None:
        """A document the editor has open: its text reaches the memory as a document, so its copy on disk (stale
        while it is edited, a half-typed word included) is not counted."""
        self._open.add(str(Path(path)))
        self.focus.add(Path(path).parent)
        self._changes.put(Path(path))

    def closed(self, path: str | Path) -> None:
        """A document the editor closed: its file on disk is counted again."""
        self._open.discard(str(Path(path)))
        self._changes.put(Path(path))

    def flush(self) -> None:
        """Wait until the first walk has ended and every change reported so far is handled."""
        self.done.wait()
        self._changes.join()

    def _apply_change(self, p: Path) -> None:
        if LANGUAGE_OF_SUFFIX.get(p.suffix) is None or not any(_under(p, r) for r in self.roots):
            return
        with self._lock:
            tier = self._seen.get(str(p), ("workspace", 0, 0))[0]
            if self._add(p, tier) is None:
                self._seen.pop(str(p), None)
                self.memory.remove_workspace(str(p))

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            with self._lock:
                self._restore()
            files = list(self._workspace_files())
            kept = {str(p) for p in files}
            with self._lock:
                for gone in [p for p, (tier, _, _) in self._seen.items() if tier == "workspace" and p not in kept]:
                    self._seen.pop(gone)
                    self.memory.remove_workspace(gone)
            texts = self._count(files, "workspace", self.max_files, WORKSPACE_SHARE)
            if self.packages and not self._stop.is_set():
                pkg_files = list(self._package_files(texts))
                self._count(pkg_files, "packages", self.max_package_files, FILES_SHARE)
            self.stats["seconds"] = round(time.perf_counter() - t0, 3)
            if not self._stop.is_set():
                self._save()
            log.info("indexed %s", self.stats)
        except Exception:  # an indexer that fails leaves the memory as it was; requests go on without it
            log.exception("workspace indexing failed")
        finally:
            self.done.set()
        self._tell({"event": "walked", **self.stats})
        while not self._stop.is_set():
            change = self._changes.get()
            try:
                if change is not None and not self._stop.is_set():
                    self._apply_change(change)
                    self._tell({"event": "changed", "path": str(change)})
            except Exception:
                log.exception("cannot re-count %s", change)
            finally:
                self._changes.task_done()

    def _tell(self, event: dict[str, object]) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                log.exception("the index's listener failed")

    def _count(self, files: list[Path], tier: str, limit: int, budget: float) -> dict[str, tuple[str, str]]:
        """Report up to ``limit`` of ``files`` to ``tier`` while the memory holds less than ``budget`` of its
        byte budget (files already counted and unchanged cost nothing); returns path -> (language, text) of the
        files held."""
        texts: dict[str, tuple[str, str]] = {}
        cap = self.memory.max_bytes * budget
        pending, seen_focus = list(files), len(self.focus)
        while pending:
            if self._stop.is_set() or len(texts) >= limit:
                break
            if tier == "workspace" and len(self.focus) != seen_focus:  # a document opened since: nearest it first
                seen_focus = len(self.focus)
                pending.sort(key=lambda q: (self._distance(q.parent), len(q.parts), str(q)))
            p = pending.pop(0)
            with self._lock:
                full = self.memory.cache_bytes() > cap
                got = self._add(p, tier, only_known=full)
            if got is not None:
                texts[str(p)] = got
                self.stats["files" if tier == "workspace" else "package_files"] += 1
        return texts

    def _add(self, p: Path, tier: str, only_known: bool = False) -> tuple[str, str] | None:
        """Count ``p`` in ``tier`` unless it is unchanged since it was counted; its (language, text), or None
        when it cannot be read as a regular UTF-8 file within the size limit (or, with ``only_known``, it would
        have to be counted)."""
        language = LANGUAGE_OF_SUFFIX.get(p.suffix)
        read = read_regular(p, self.max_file_bytes) if language and str(p) not in self._open else None
        if read is None or language is None:
            self.stats["skipped"] += 1
            return None
        text, mtime, size = read
        key = str(p)
        if self._seen.get(key) == (tier, mtime, size):
            self.stats["from_cache"] += 1
            return language, text
        if only_known:
            return None
        # Block by block: the memory re-counts only what a block adds, and a draft waits for one block at most.
        for end in _block_ends(text):
            if self._stop.is_set():
                break
            self.memory.add_workspace(key, text[:end], language, tier)
        self._seen[key] = (tier, mtime, size)
        return language, text

    # ------------------------------------------------------------------ what to read
    def _workspace_files(self) -> Iterator[Path]:
        """The source files under the folders, nearest the open documents first (at most ``max_files`` * 4
        looked at, so a huge tree costs no more than a large one)."""
        found: list[tuple[int, int, str, Path]] = []
        for root in self.roots:
            for folder, names in _walk(root):
                for name in names:
                    if LANGUAGE_OF_SUFFIX.get(os.path.splitext(name)[1]) is None:
                        continue
                    p = folder / name
                    found.append((self._distance(folder), len(p.parts), str(p), p))
                    if len(found) >= self.max_files * 4:
                        break
        found.sort()
        return (p for *_, p in found)

    def _distance(self, folder: Path) -> int:
        if folder in self.focus:
            return 0
        if any(_under(folder, f.parent) for f in self.focus):
            return 1
        return 2

    def _package_files(self, texts: dict[str, tuple[str, str]]) -> Iterator[Path]:
        """The files of the packages the workspace imports, the most imported package first."""
        counts: Counter[tuple[str, str]] = Counter()
        own = {Path(p).stem for p in texts} | {Path(p).parent.name for p in texts}
        for language, text in texts.values():
            family = "python" if language == "python" else "js"
            for name in imports_of(text, language):
                if name not in own:
                    counts[(family, name)] += 1
        taken = 0
        for (family, name), _ in counts.most_common():
            where = self._find_python(name) if family == "python" else self._find_node(name)
            if where is None:
                continue
            self.stats["packages"] += 1
            files = [where] if where.is_file() else sorted(
                (folder / n for folder, names in _walk(where) for n in names
                 if LANGUAGE_OF_SUFFIX.get(os.path.splitext(n)[1]) and not n.endswith(".min.js")),
                key=lambda p: (len(p.parts), str(p)))
            for p in files[:60]:  # no one package takes the whole tier
                yield p
                taken += 1
            if taken >= self.max_package_files:
                return

    def _find_python(self, name: str) -> Path | None:
        venvs = [str(sp) for root in self.roots for venv in (".venv", "venv", "env")
                 for sp in (root / venv).glob("lib/python3*/site-packages")]
        spec = PathFinder.find_spec(name, venvs + [p for p in self.search_paths if p])
        if spec is None:
            return None
        if spec.submodule_search_locations:
            first = next(iter(spec.submodule_search_locations), None)
            return Path(first) if first else None
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None

    def _find_node(self, name: str) -> Path | None:
        for root in self.roots:
            where = root / "node_modules" / name
            if where.is_dir() and not where.is_symlink():
                return where
        return None

    # ------------------------------------------------------------------ the cache on disk
    def _cache_file(self) -> Path | None:
        if self.cache_dir is None:
            return None
        key = hashlib.sha1("\n".join(map(str, self.roots)).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return self.cache_dir / f"workspace-{key}.pickle"

    def _restore(self) -> None:
        f = self._cache_file()
        if f is None or not f.is_file():
            return
        try:
            with f.open("rb") as fh:
                saved = pickle.load(fh)  # written by ``_save`` into the user's own cache folder
            if saved.get("version") != CACHE_VERSION or saved.get("roots") != [str(r) for r in self.roots]:
                return
            if self.memory.restore(saved["memory"]):
                self._seen = saved["seen"]
        except Exception as e:  # a damaged or foreign cache: start from nothing
            log.info("ignoring the workspace cache %s: %s", f, e)

    def _save(self) -> None:
        f = self._cache_file()
        if f is None:
            return
        try:
            f.parent.mkdir(parents=True, exist_ok=True)
            tmp = f.with_suffix(f".{os.getpid()}.tmp")
            with self._lock:
                blob = pickle.dumps({"version": CACHE_VERSION, "roots": [str(r) for r in self.roots],
                                     "seen": dict(self._seen), "memory": self.memory.state()}, protocol=5)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.replace(tmp, f)
        except OSError as e:
            log.info("cannot write the workspace cache %s: %s", f, e)


def _block_ends(text: str) -> Iterator[int]:
    """Where each block of ``BLOCK_LINES`` lines ends, then the text's end."""
    end = 0
    while True:
        for _ in range(BLOCK_LINES):
            end = text.find("\n", end) + 1
            if end == 0:
                yield len(text)
                return
        yield end


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _walk(root: Path) -> Iterator[tuple[Path, list[str]]]:
    """(folder, regular file names) under ``root``, breadth first, no symbolic link followed, skipped folders
    and hidden ones left out."""
    queue = [root]
    while queue:
        folder = queue.pop(0)
        names: list[str] = []
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    if e.name not in SKIP_DIRS and not e.name.startswith("."):
                        queue.append(Path(e.path))
                elif e.is_file(follow_symlinks=False):
                    names.append(e.name)
            except OSError:
                continue
        yield folder, names


def read_regular(p: Path, max_bytes: int) -> tuple[str, int, int] | None:
    """(text, mtime_ns, size) of a regular file of at most ``max_bytes`` UTF-8 bytes, opened without following
    a symbolic link and without blocking on a FIFO; None otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(p, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        data = b""
        while len(data) <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - len(data))
            if not chunk:
                break
            data += chunk
        if len(data) > max_bytes:
            return None
        return data.decode("utf-8"), st.st_mtime_ns, st.st_size
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)
