"""What a Python analyser (jedi) knows at a cursor: the names usable there, whether the cursor follows a
``.`` (and then the attributes of the receiver's inferred type), and the call signatures around it.

The API, for the fill path:

- ``analyse(text, offset, path=None, budget_ms=DEFAULT_BUDGET_MS) -> Analysis | None``: the analysis at
  character offset ``offset`` of ``text`` (a Python document; ``path`` its file, None for an unsaved buffer),
  or None when it is not ready within ``budget_ms``, the document is over ``MAX_CHARS``, or jedi failed. It
  never raises for the analyser's sake (failures are logged at debug); an ``offset`` outside the text is a
  ``ValueError``.
- ``prefetch(text, offset, path=None)``: start the analysis and return at once. A fill can prefetch when its
  request arrives, tokenise and plan, then ``analyse`` with the budget that is left: both join the same work.
- ``known_words(analysis) -> frozenset[str]``: the names usable at the cursor, for the novel-name penalty
  (``TokenTables.novelty_bias(..., extra_words=known_words(a))``): names jedi knows are not penalised.
- ``name_candidates(analysis, limit) -> list[str]``: what may follow the partial identifier at the cursor
  (the rest of each name that starts with it), in jedi's order, for copy proposals.
- ``jedi_position(text, offset) -> (line, column)``: a character offset as jedi's 1-based line and 0-based
  column in characters (line breaks ``\\n``, ``\\r\\n`` and ``\\r``, as in parso and ``positions``);
  ``jedi_offset`` is its inverse.
- ``warm_up()``: a first analysis, started at once and not waited for; a server calls it when it starts.
- ``Analyser``: the object behind the module functions (its own cache and ``stats``); tests and servers that
  want separate caches make their own. All of them share one jedi worker unless given an ``executor``.

Off the keystroke path. jedi takes 0.5 to 2 s for its first request in a process and 30 to 170 ms for later
ones (measured below), so it runs on a worker thread and ``analyse`` waits at most ``budget_ms``. A
computation that misses its budget goes on, and its result is cached per (path, hash of the document without
the partial identifier at the cursor, line and column where that identifier starts): the next request at the
same place, including the next keystroke of the same identifier, gets it at once. Only a few computations
wait in the queue (``max_pending``); a newer request drops the oldest that has not started, as typing moves
the cursor on.

One worker thread, not several: jedi is not thread-safe (its parser reuses module trees; jedi's ``Script``
doc says so), so every jedi call in the process goes through that one thread. It shares this interpreter's
lock: while it works, another thread waits up to 10-20 ms for the lock at times (so ``analyse`` may return
that much after its budget), and up to 0.4 s during jedi's first request, which unpickles its caches of the
builtins' stubs (``warm_up`` at start moves that out of a user's fill; ``Analyser``'s ``executor`` can move
jedi to a process).

The environment is the running interpreter (``jedi.InterpreterEnvironment``), not a subprocess of the same
executable. Measured on 2 shared CPU cores, jedi 0.20, Python 3.11; a request is jedi's completions and
signatures at the cursor:

    cursor                                   first in a process:                 later
                                             jedi's disk cache empty / filled
    examples/sample.py, the blank line       interpreter 1.8 s / 0.5-0.75 s     30-170 ms
      (19 lines)                             subprocess  2.2 s / 0.65-0.7 s     50-180 ms
    argparse.py, ``self.`` in a method       interpreter 1.7 s / 0.5-0.8 s      50-140 ms
      (2,630 lines)                          subprocess  1.6 s / 0.8-1.1 s      65-170 ms

Later requests cost the same either way; the interpreter saves the subprocess's start (0.1 to 0.3 s) and its
memory. Its cost: compiled extension modules that jedi introspects are imported into this process. Names are
resolved on this interpreter's ``sys.path`` plus the document's project (``jedi.get_default_project``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import sys
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import CancelledError, Executor, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edit_engine.syntax import positions
from edit_engine.syntax.lru import BoundedLRU

log = logging.getLogger(__name__)

# A warm jedi request at a cursor takes 30 to 170 ms (module doc), more than a keystroke can wait: the default
# budget only picks up finished (cached or prefetched) work and the tail of a running one.
DEFAULT_BUDGET_MS = 20.0
# jedi parses the whole document on every request. Measured at ``parser.`` after argparse.py repeated: 200 ms
# for 100 k characters, 500 ms for 300 k (85 and 220 ms with a path, whose last tree parso's diff parser
# reuses), 1 s for 600 k.
MAX_CHARS = 300_000
MAX_ENTRIES = 256  # cached analyses (a few hundred names each)
# Their estimated bytes together (``analysis_bytes``): a module of many thousand names makes an analysis of
# megabytes; ordinary ones (tens of kilobytes) are bounded by ``MAX_ENTRIES`` first.
MAX_BYTES = 32 << 20
MAX_PENDING = 4  # computations waiting for the worker; a newer request drops the oldest
MAX_PROJECTS = 32  # jedi projects kept, by folder


@dataclass(frozen=True)
class Signature:
    """A call the cursor is inside: ``sorted(xs, |`` → name ``"sorted"``, params ``("iterable", "key",
    "reverse")``, index 1, and the text jedi shows (``sorted(iterable: ..., /, *, key: ..., ...)``)."""

    name: str
    params: tuple[str, ...]
    index: int | None  # the parameter the cursor is at; None when jedi cannot tell
    text: str


@dataclass(frozen=True)
class Analysis:
    """What jedi knows at a cursor.

    ``names``: every name jedi completes where the identifier at the cursor starts, in jedi's order (public,
    then ``_private``, then ``__dunder__``, each alphabetical ignoring case): the names in scope, or the
    attributes of the receiver's inferred type when the cursor follows ``expr.`` or ``expr.partial``; keyword
    arguments of the call around the cursor without their ``=``. ``receiver``: the cursor follows a ``.``
    (after any ``partial``). ``partial``: the identifier characters typed before the cursor (``"pu"`` in
    ``s.pu|``). ``signatures``: the calls the cursor is inside. ``elapsed_ms``: what jedi took to compute it
    (not what this request waited)."""

    names: tuple[str, ...]
    receiver: bool
    partial: str
    signatures: tuple[Signature, ...]
    elapsed_ms: float


@dataclass(frozen=True)
class AnalyserStats:
    """Counts since an ``Analyser`` was made: requests answered from a finished analysis (``hits``),
    computations started (``submitted``), finished (``computed``), failed inside jedi (``failed``), dropped
    from the queue (``cancelled``), and requests whose budget ran out (``late``)."""

    hits: int = 0
    submitted: int = 0
    computed: int = 0
    failed: int = 0
    cancelled: int = 0
    late: int = 0


def analysis_bytes(analysis: Analysis | None) -> int:
    """Estimated resident bytes of a cached analysis (or of a computation not finished): its names' and
    signatures' strings (``sys.getsizeof``), a pointer for each in its tuple, and the objects around them."""
    if analysis is None:
        return 512
    sigs = sum(sys.getsizeof(s.text) + 200 + sum(sys.getsizeof(p) + 8 for p in s.params) for s in analysis.signatures)
    return 512 + sum(sys.getsizeof(n) + 8 for n in analysis.names) + sigs


def _is_name_char(c: str) -> bool:
    return c == "_" or c.isalnum() or ("a" + c).isidentifier()


def partial_at(text: str, offset: int) -> str:
    """The identifier characters right before ``offset`` (``""`` when they do not start an identifier, as in
    ``12|``)."""
    i = offset
    while i > 0 and _is_name_char(text[i - 1]):
        i -= 1
    word = text[i:offset]
    return word if word.isidentifier() else ""


def jedi_position(text: str, offset: int) -> tuple[int, int]:
    """Character offset → jedi's (line, column): line 1-based, column 0-based in characters of the line. Lines
    end at ``\\n``, ``\\r\\n`` or ``\\r``, as in parso and ``positions``. An offset between the ``\\r`` and
    ``\\n`` of a CRLF is the end of its line. ``ValueError`` for an offset outside the text.

    ``positions.offset_to_position(text, offset, "utf-32")`` gives the same (line - 1, column) but walks the
    text in Python (74 ms for 300 k characters); string methods take well under 1 ms, on every request."""
    if not 0 <= offset <= len(text):
        raise ValueError(f"offset {offset} outside the document (length {len(text)})")
    if 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n":
        offset -= 1
    line = 1 + text.count("\n", 0, offset) + text.count("\r", 0, offset) - text.count("\r\n", 0, offset)
    start = max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1
    return line, offset - start


def jedi_offset(text: str, line: int, col: int) -> int:
    """jedi's (line, column) → character offset (the inverse of ``jedi_position``; ``positions`` rules)."""
    return positions.position_to_offset(text, line - 1, col, "utf-32")


def known_words(analysis: Analysis | None) -> frozenset[str]:
    """The names usable at the cursor: ``analysis.names`` and the parameter names of its signatures (usable as
    keyword arguments). Empty for no analysis."""
    if analysis is None:
        return frozenset()
    params = (p for s in analysis.signatures for p in s.params)
    return frozenset(analysis.names).union(params)


def name_candidates(analysis: Analysis | None, limit: int = 16) -> list[str]:
    """The completions of the partial identifier at the cursor: for each name that starts with
    ``analysis.partial`` (case-sensitive) and is longer, the characters that follow the partial (``s.pu|`` →
    ``["sh"]``), in jedi's order, at most ``limit``. Empty for no analysis."""
    if analysis is None:
        return []
    p = analysis.partial
    out = [n[len(p):] for n in analysis.names if n.startswith(p) and len(n) > len(p)]
    return out[:limit]


# ------------------------------------------------------------------------------------------------------- jedi
_jedi_lock = threading.Lock()
_jedi_worker: ThreadPoolExecutor | None = None
_jedi_env: Any = None
_projects: OrderedDict[str, Any] = OrderedDict()


def _worker() -> ThreadPoolExecutor:
    """The one thread every jedi call runs on (module doc: jedi is not thread-safe)."""
    global _jedi_worker
    with _jedi_lock:
        if _jedi_worker is None:
            _jedi_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edit-engine-jedi")
        return _jedi_worker


def _environment_and_project(path: str | None) -> tuple[Any, Any]:
    """The interpreter environment and the jedi project of ``path``'s folder (the working directory's for
    None), made once each; finding a project walks up the folders."""
    import jedi

    global _jedi_env
    folder = str(Path(path).parent) if path else ""
    with _jedi_lock:
        if _jedi_env is None:
            _jedi_env = jedi.InterpreterEnvironment()
        project = _projects.get(folder)
        if project is not None:
            _projects.move_to_end(folder)
            return _jedi_env, project
    project = jedi.get_default_project(path if path else None)
    with _jedi_lock:
        _projects[folder] = project
        while len(_projects) > MAX_PROJECTS:
            _projects.popitem(last=False)
        return _jedi_env, project


def _run_jedi(code: str, line: int, col: int, path: str | None, receiver: bool) -> Analysis:
    """jedi's completions and signatures at (line, col) of ``code``, which has no partial identifier there."""
    import jedi

    t0 = time.perf_counter()
    env, project = _environment_and_project(path)
    script = jedi.Script(code=code, path=path, environment=env, project=project)
    names: dict[str, None] = {}  # ordered set
    for c in script.complete(line, col):
        name = c.name.removesuffix("=")
        if name.isidentifier():
            names.setdefault(name)
    sigs: dict[str, Signature] = {}  # by text: overloads jedi repeats
    for s in script.get_signatures(line, col):
        text = s.to_string()
        sigs.setdefault(text, Signature(s.name, tuple(p.name for p in s.params), s.index, text))
    ms = (time.perf_counter() - t0) * 1000
    return Analysis(tuple(names), receiver, "", tuple(sigs.values()), ms)


def analyse_place(code: str, line: int, col: int, path: str | None, receiver: bool) -> Analysis | None:
    """What an ``Analyser``'s executor runs: ``_run_jedi``, or None (logged at debug) when jedi fails. A
    module-level function of picklable arguments, so a process pool can run it too."""
    try:
        return _run_jedi(code, line, col, path, receiver)
    except Exception:  # jedi on a broken or odd document: no analysis, never an error for the fill
        log.debug("jedi failed at %s:%d:%d", path or "<buffer>", line, col, exc_info=True)
        return None


def warm_up() -> None:
    """Start a first analysis on the process's analyser and return at once: jedi's first request loads its
    caches of the builtins' and typing's stubs, unpickling that holds the interpreter lock for up to 0.4 s
    (measured: the longest pause of another thread during it), so a server does it at start, not during a
    user's first fill."""
    text = "import os\nimport typing\n\nos.path."
    prefetch(text, len(text))


# --------------------------------------------------------------------------------------------------- analyser
class Analyser:
    """Bounded, cached, off-thread jedi analyses (module doc). Thread-safe.

    ``executor``: where jedi runs; default the module's one jedi thread. Never give one that runs jedi on two
    threads at once. A ``ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))`` keeps jedi
    off this interpreter's lock altogether (measured: no pause of other threads over 20 ms, later requests as
    fast), at the cost of a second interpreter whose first request takes 6 s (it imports the package)."""

    def __init__(self, executor: Executor | None = None, max_entries: int = MAX_ENTRIES,
                 max_chars: int = MAX_CHARS, max_pending: int = MAX_PENDING, max_bytes: int = MAX_BYTES) -> None:
        self._executor = executor
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.max_pending = max_pending
        self._lock = threading.RLock()  # an executor may run work at once, in the caller's thread
        # Sized when put as a computation not finished, re-sized when it finishes (``_done``).
        self._cache: BoundedLRU[tuple[str, bytes, int, int], Future[Analysis | None]] = \
            BoundedLRU(max_entries, max_bytes, "analyses")
        self._queued: deque[Future[Analysis | None]] = deque()
        self._stats = AnalyserStats()

    @property
    def stats(self) -> AnalyserStats:
        with self._lock:
            return self._stats

    def _count(self, **more: int) -> None:
        # Called with self._lock held.
        self._stats = dataclasses.replace(
            self._stats, **{k: getattr(self._stats, k) + v for k, v in more.items()})

    def analyse(self, text: str, offset: int, path: str | None = None,
                budget_ms: float = DEFAULT_BUDGET_MS) -> Analysis | None:
        """The analysis at ``offset`` if it is ready within ``budget_ms`` (module doc), else None; the work
        goes on and is cached for the next request at the same place."""
        started = self._start(text, offset, path)
        if started is None:
            return None
        fut, partial = started
        try:
            result = fut.result(timeout=max(budget_ms, 0.0) / 1000)
        except FutureTimeout:
            with self._lock:
                self._count(late=1)
            return None
        except CancelledError:  # dropped from the queue by newer requests meanwhile
            return None
        except Exception:  # the executor's own failure (a worker process that died, say)
            log.debug("jedi worker failed", exc_info=True)
            return None
        if result is None or result.partial == partial:
            return result
        return dataclasses.replace(result, partial=partial)

    def prefetch(self, text: str, offset: int, path: str | None = None) -> None:
        """Start the analysis at ``offset`` (if it is not cached or running) and return at once."""
        self._start(text, offset, path)

    def _start(self, text: str, offset: int, path: str | None) -> tuple[Future[Analysis | None], str] | None:
        """The (cached, running or new) computation for the place of ``offset``, and the partial identifier
        there; None for a document too large."""
        if not 0 <= offset <= len(text):
            raise ValueError(f"offset {offset} outside the document (length {len(text)})")
        if len(text) > self.max_chars:
            return None
        partial = partial_at(text, offset)
        start = offset - len(partial)
        code = text[:start] + text[offset:]
        line, col = jedi_position(code, start)
        digest = hashlib.blake2b(code.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        key = (path or "", digest, line, col)
        drop: list[Future[Analysis | None]] = []
        with self._lock:
            fut = self._cache.get(key)
            if fut is not None and not fut.cancelled():
                if fut.done():
                    self._count(hits=1)
                return fut, partial
            receiver = start > 0 and code[start - 1] == "."
            try:
                fut = (self._executor or _worker()).submit(analyse_place, code, line, col, path, receiver)
            except RuntimeError:  # the executor is shut down (the interpreter is exiting)
                log.debug("no jedi worker", exc_info=True)
                return None
            self._count(submitted=1)
            self._cache.put(key, fut, analysis_bytes(None))
            fut.add_done_callback(functools.partial(self._done, key))
            self._queued = deque(f for f in self._queued if not (f.running() or f.done()))
            self._queued.append(fut)
            while len(self._queued) > self.max_pending:
                drop.append(self._queued.popleft())
        for f in drop:
            if f.cancel():
                with self._lock:
                    self._count(cancelled=1)
        return fut, partial

    def _done(self, key: tuple[str, bytes, int, int], fut: Future[Analysis | None]) -> None:
        if fut.cancelled():  # counted where it was dropped
            return
        result = None if fut.exception() is not None else fut.result()
        with self._lock:
            self._count(computed=1, failed=int(result is None))
            if self._cache.peek(key) is fut:
                self._cache.resize(key, analysis_bytes(result))


_default: Analyser | None = None


def default_analyser() -> Analyser:
    """The process's analyser, behind the module functions."""
    global _default
    with _jedi_lock:
        if _default is None:
            _default = Analyser()
        return _default


def analyse(text: str, offset: int, path: str | None = None,
            budget_ms: float = DEFAULT_BUDGET_MS) -> Analysis | None:
    """``Analyser.analyse`` on the process's analyser (module doc)."""
    return default_analyser().analyse(text, offset, path, budget_ms)


def prefetch(text: str, offset: int, path: str | None = None) -> None:
    """``Analyser.prefetch`` on the process's analyser (module doc)."""
    default_analyser().prefetch(text, offset, path)
