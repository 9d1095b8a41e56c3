"""Typing replay: what a person feels while writing code with inline suggestions on.

A simulated person writes each region of a case (``benchmarks/typing_set.py`` builds the data) into the file,
character by character, in an editor that shows one inline suggestion at a time. The document is always the
text before the region + what has been written so far + the text after it.

Protocol (the editor):

* **When it asks.** At the start of the region, right after each accept, and after a typed character ``c`` that
  is a word boundary: ``c`` is not a word character (a word character is a letter, digit or ``_``, i.e.
  ``c.isalnum() or c == "_"``: so space, tab, newline and punctuation), or ``c`` is a word character that ends
  a word (the next character of the true text is not a word character, or the region ends). It asks only while
  nothing is on screen.
* **What stays on screen.** A non-empty answer is shown (one *shown suggestion*). While the person types
  characters that agree with it, it stays on screen, shrinking (typing through it: no new request, counted
  once). A character that disagrees makes it disappear; so does typing it to its end.
* **Accepting.** Before each keystroke the person accepts what is exactly right, when that writes at least one
  character that is not blank (no one presses Tab for a line break alone): in accept mode ``whole`` the
  whole rest of the suggestion, if it is a prefix of the rest of the true text; in mode ``line`` that, else its
  first line with its newline, else its first line without it (the longest of these that is a prefix); in mode
  ``word`` those, else the longest run of its leading tokens (a token: a run of word characters, a run of
  whitespace, or one other character) that is a prefix. Accepting inserts that text, moves the cursor past it
  and clears the screen; the editor then asks again. Accepting only right text keeps the document on the path
  to the true file, so the final document equals it.

The modes are three separate replays (what is accepted changes what is asked next). All three ask at the same
document states most of the time, so a case's answers are kept by the number of characters written (the
document is determined by it) and the modes share them: the suggester runs once per distinct state per case
(``cache=False`` turns that off). Latency statistics count every request of a mode's replay, a shared answer
with the latency it took when it was computed.

Scores, per language and mode (micro-averaged over cases): ``share``: the region's non-blank characters that
accepts wrote / all its non-blank characters; ``shown``: distinct shown suggestions; ``accepted``: shown
suggestions accepted (whole or in part); ``acceptance``: accepted / shown; ``wrong``: shown and never accepted,
even in part; ``keys_saved``: the share less one key per accept (the key that takes it), what short suggestions
really save; ``latency_ms`` p50/p95 of the requests; ``sources``: who wrote the accepted suggestions.

    python -m edit_engine.eval.typing_replay --data runs/typing --split dev --language python --fill engine \\
        --json runs/typing_dev_engine.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODES = ("whole", "line", "word")
LANGUAGES = ("python", "javascript", "typescript", "go", "rust")
DEFAULT_LIMIT = 5  # cases per language: a Python dev run with the engine takes about 5 minutes on 2 busy cores
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")


@dataclass(frozen=True)
class Suggestion:
    """Text to insert at the cursor, who wrote it and how long the request took."""

    text: str
    source: str
    latency_ms: float
    score: float = 0.0  # the source's own score (a draft's probability, a copy's match)
    estimate: float | None = None  # the engine's show-gate estimate, when it gave one


Suggest = Callable[[str, int, str, str], "Suggestion | None"]  # (document, cursor, language, uri)


@dataclass(frozen=True)
class Case:
    """A region ``text[start:end]`` of a file that the person writes, with the rest of the file around it."""

    id: str
    language: str
    package: str
    path: str
    text: str
    start: int
    end: int

    @property
    def uri(self) -> str:
        return f"file:///typing/{self.package}/{self.path}"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Case:
        return cls(str(d["id"]), str(d["language"]), str(d["package"]), str(d["path"]), str(d["text"]),
                   int(d["start"]), int(d["end"]))


@dataclass
class CaseResult:
    """One replay of one case in one accept mode."""

    id: str
    language: str
    mode: str
    region_chars: int = 0  # non-blank characters of the region
    accepted_chars: int = 0  # of those, written by accepts
    typed_chars: int = 0  # of those, typed by hand
    requests: int = 0
    shown: int = 0
    accepted: int = 0
    partial: int = 0  # accepted in part only (line or word mode took less than the whole suggestion)
    wrong: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    sources: Counter[str] = field(default_factory=Counter)
    final: str = ""  # the document at the end (equals the true file)


# ---------------------------------------------------------------------------------------------------- accepting
def is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def is_boundary(typed: str, following: str) -> bool:
    """Whether the editor asks after ``typed`` was typed, ``following`` being the next true character ("" at
    the end): ``typed`` is not a word character, or it ends a word."""
    return not is_word_char(typed) or not following or not is_word_char(following)


def accept_length(shown: str, rest: str, mode: str) -> int:
    """How many characters of the suggestion ``shown`` the person accepts in ``mode`` when ``rest`` is the true
    text still to write (0: none)."""
    if not shown:
        return 0
    if rest.startswith(shown):
        return len(shown)
    if mode == "whole":
        return 0
    newline = shown.find("\n")
    if newline >= 0:
        for candidate in (shown[:newline + 1], shown[:newline]):
            if candidate and rest.startswith(candidate):
                return len(candidate)
    if mode == "line":
        return 0
    if mode != "word":
        raise ValueError(f"unknown accept mode {mode!r} (one of {', '.join(MODES)})")
    n = 0
    for token in _TOKEN.findall(shown):
        if not rest.startswith(token, n):
            break
        n += len(token)
    return n


def nonblank(s: str) -> int:
    return sum(not c.isspace() for c in s)


# ---------------------------------------------------------------------------------------------------- replay
class _Screen:
    """The suggestion on screen: what is left of it and who wrote it."""

    def __init__(self, s: Suggestion) -> None:
        self.rest = s.text
        self.source = s.source
        self.score = s.score
        self.estimate = s.estimate


def replay_case(case: Case, suggest: Suggest, mode: str,
                answers: dict[int, Suggestion | None] | None = None,
                record: list[dict[str, Any]] | None = None) -> CaseResult:
    """Write the case's region in ``mode`` (module docstring: the protocol); ``answers`` keeps the suggester's
    answer per number of characters written, shared between the modes of a case."""
    truth = case.text[case.start:case.end]
    before, after = case.text[:case.start], case.text[case.end:]
    r = CaseResult(case.id, case.language, mode, region_chars=nonblank(truth))
    i = 0
    screen: _Screen | None = None
    ask = True
    while i < len(truth):
        if screen is None and ask:
            screen = _request(r, suggest, case, before + truth[:i] + after, len(before) + i, i, answers)
            if record is not None and screen is not None:
                head = before + truth[:i]
                record.append(_record(case, screen, truth[i:], mode, head[head.rfind("\n") + 1:]))
        ask = False
        if screen is not None:
            n = accept_length(screen.rest, truth[i:], mode)
            if n and nonblank(truth[i:i + n]):  # accepting blanks only (a line break) is pressing Enter
                r.accepted += 1
                r.partial += n < len(screen.rest)
                r.accepted_chars += nonblank(truth[i:i + n])
                r.sources[screen.source] += 1
                i += n
                screen, ask = None, True
                continue
        c = truth[i]
        i += 1
        r.typed_chars += not c.isspace()
        if screen is not None:
            if screen.rest.startswith(c):
                screen.rest = screen.rest[1:]
                if screen.rest:
                    continue  # typing through it: it stays, no request
            else:
                r.wrong += 1  # it disappears, never accepted (an accepted one is cleared at once)
            screen = None
        ask = is_boundary(c, truth[i:i + 1])
    if screen is not None:
        r.wrong += 1  # still on screen when the region was done: more than the region, never taken
    r.final = before + truth + after
    return r


def _record(case: Case, screen: _Screen, rest: str, mode: str, line_before: str) -> dict[str, Any]:
    """What the show gate is fitted on: one shown suggestion, what its source said of it, and whether a person
    takes it whole or by its first line (``accept_length`` in line mode)."""
    n = accept_length(screen.rest, rest, "line")
    n = n if nonblank(rest[:n]) else 0
    return {"case": case.id, "language": case.language, "mode": mode, "text": screen.rest, "source": screen.source,
            "score": screen.score, "estimate": screen.estimate, "accepted": n > 0, "accepted_chars": nonblank(rest[:n]),
            "line_before": line_before}


def _request(r: CaseResult, suggest: Suggest, case: Case, document: str, cursor: int, written: int,
             answers: dict[int, Suggestion | None] | None) -> _Screen | None:
    """Ask (or reuse the answer for this state), record it, and return what goes on screen."""
    if answers is not None and written in answers:
        s = answers[written]
    else:
        s = suggest(document, cursor, case.language, case.uri)
        if answers is not None:
            answers[written] = s
    r.requests += 1
    if s is None:
        return None
    r.latencies_ms.append(s.latency_ms)
    if not s.text:
        return None
    r.shown += 1
    return _Screen(s)


def replay(cases: Iterable[Case], suggest: Suggest, modes: Sequence[str] = MODES, cache: bool = True,
           progress: bool = False, record: list[dict[str, Any]] | None = None,
           workspace: Callable[[Case], list[tuple[str, str]]] | None = None) -> list[CaseResult]:
    """Replay every case in every mode; ``record`` gets every shown suggestion of the ``line`` mode
    (``_record``). ``workspace``: each case's workspace files, handed to a suggester that takes them (its
    ``workspace`` attribute) before the case is written."""
    items = list(cases)
    results: list[CaseResult] = []
    bar = _progress(len(items), progress)
    take = getattr(suggest, "workspace", None)
    for case in items:
        if workspace is not None and take is not None:
            take(workspace(case), case.language)
        answers: dict[int, Suggestion | None] | None = {} if cache else None
        for mode in modes:
            results.append(replay_case(case, suggest, mode, answers, record if mode == "line" else None))
        bar(case.id)
    bar(None)
    return results


def _progress(total: int, on: bool) -> Callable[[str | None], None]:
    """A tqdm bar (stderr) advanced per case; closed with None."""
    if not on:
        return lambda _: None
    from tqdm import tqdm

    t = tqdm(total=total, unit="case", file=sys.stderr)

    def step(case_id: str | None) -> None:
        if case_id is None:
            t.close()
        else:
            t.set_postfix_str(case_id)
            t.update(1)
    return step


# ---------------------------------------------------------------------------------------------------- scoring
def percentile(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]); None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))]


def summarise(results: Sequence[CaseResult]) -> dict[str, dict[str, dict[str, Any]]]:
    """language -> mode -> scores (module docstring), over the given results."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for language in sorted({r.language for r in results}):
        out[language] = {}
        for mode in [m for m in MODES if any(r.mode == m for r in results)]:
            rs = [r for r in results if r.language == language and r.mode == mode]
            out[language][mode] = _scores(rs)
    return out


def _scores(rs: Sequence[CaseResult]) -> dict[str, Any]:
    region = sum(r.region_chars for r in rs)
    accepted_chars = sum(r.accepted_chars for r in rs)
    shown, accepted = sum(r.shown for r in rs), sum(r.accepted for r in rs)
    lat = [x for r in rs for x in r.latencies_ms]
    sources: Counter[str] = Counter()
    for r in rs:
        sources.update(r.sources)
    return {
        "cases": len(rs), "region_chars": region, "accepted_chars": accepted_chars,
        "typed_chars": sum(r.typed_chars for r in rs),
        "share": accepted_chars / region if region else 0.0,
        "keys_saved": (accepted_chars - accepted) / region if region else 0.0,
        "requests": sum(r.requests for r in rs), "shown": shown, "accepted": accepted,
        "partial": sum(r.partial for r in rs), "acceptance": accepted / shown if shown else 0.0,
        "wrong": sum(r.wrong for r in rs),
        "latency_ms": {"n": len(lat), "p50": percentile(lat, 50), "p95": percentile(lat, 95)},
        "sources": dict(sorted(sources.items())),
    }


def report(results: Sequence[CaseResult], meta: dict[str, Any]) -> dict[str, Any]:
    """The JSON report: the run's settings, the summary and one line per case and mode."""
    cases = [{k: v for k, v in asdict(r).items() if k not in ("latencies_ms", "final")}
             | {"sources": dict(r.sources)} for r in results]
    return {**meta, "modes": list(MODES), "summary": summarise(results), "cases": cases}


def table(summary: dict[str, dict[str, dict[str, Any]]]) -> Any:
    """A rich table of the summary: a row per language and mode."""
    from rich.table import Table

    t = Table(title="typing replay")
    for col in ("language", "mode", "cases", "share", "keys saved", "shown", "accepted", "acc. rate", "wrong", "requests",
                "p50 ms", "p95 ms", "sources"):
        t.add_column(col, justify="left" if col in ("language", "mode", "sources") else "right")
    for language, modes in summary.items():
        for mode, s in modes.items():
            lat = s["latency_ms"]
            t.add_row(language, mode, str(s["cases"]), f"{s['share']:.1%}", f"{s['keys_saved']:.1%}", str(s["shown"]),
                      str(s["accepted"]),
                      f"{s['acceptance']:.1%}", str(s["wrong"]), str(s["requests"]), _ms(lat["p50"]),
                      _ms(lat["p95"]), ", ".join(f"{k} {v}" for k, v in s["sources"].items()))
    return t


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


# ---------------------------------------------------------------------------------------------------- suggesters
def none_suggester() -> Suggest:
    """Never shows anything: the floor (every character typed by hand)."""
    def suggest(document: str, cursor: int, language: str, uri: str) -> Suggestion | None:
        return None
    return suggest


def insertion(document: str, cursor: int, text: str, start: int, end: int) -> str | None:
    """The text an edit (``text`` replacing ``document[start:end]``) inserts at ``cursor``: the middle of ``text``
    when it keeps ``document[start:cursor]`` before and ``document[cursor:end]`` after; None when the edit is
    not an insertion at the cursor."""
    if not start <= cursor <= end:
        return None
    head, tail = document[start:cursor], document[cursor:end]
    if len(head) + len(tail) > len(text) or not text.startswith(head) or not text.endswith(tail):
        return None
    return text[len(head):len(text) - len(tail)]


def engine_suggester(engine: Any, **complete_kw: Any) -> Suggest:
    """Suggestions from ``engine.complete`` (an ``edit_engine.Engine``): its edit as an insertion at the cursor
    (``insertion``); source ``none``, an empty fill, an edit that is not an insertion or a refused request
    (ValueError) show nothing. Latency: the call's wall time."""
    def suggest(document: str, cursor: int, language: str, uri: str) -> Suggestion | None:
        t0 = time.perf_counter()
        try:
            c = engine.complete(document, cursor, language=language, uri=uri, **complete_kw)
        except ValueError:
            return Suggestion("", "none", (time.perf_counter() - t0) * 1e3)
        ms = (time.perf_counter() - t0) * 1e3
        text = None if c.source == "none" or not c.text else insertion(document, cursor, c.text, c.start, c.end)
        return Suggestion(text or "", str(c.source) if text else "none", ms, c.score, c.estimate)

    suggest.workspace = lambda files, language: engine.set_workspace(files, language)  # type: ignore[attr-defined]
    return suggest


def memory_suggester(policy: Any = None) -> Suggest:
    """Drafts from the shipped memory of code alone (no model): the engine's draft policy, the document
    observed under its uri."""
    from edit_engine.engine.drafts import DEFAULT_POLICY, draft_at, set_workspace
    from edit_engine.memory import Memory

    memory = Memory.load()

    def suggest(document: str, cursor: int, language: str, uri: str) -> Suggestion | None:
        t0 = time.perf_counter()
        d = draft_at(memory, document, cursor, language, uri, (), policy or DEFAULT_POLICY)
        ms = (time.perf_counter() - t0) * 1e3
        return Suggestion(d.text, "memory", ms, d.score) if d is not None else Suggestion("", "none", ms)

    suggest.workspace = lambda files, language: set_workspace(memory, files, language)  # type: ignore[attr-defined]
    return suggest


def _lsp_position(text: str, offset: int) -> dict[str, int]:
    """LSP position (UTF-16 code units) of a character offset."""
    line = text.count("\n", 0, offset)
    col = text[text.rfind("\n", 0, offset) + 1:offset]
    return {"line": line, "character": len(col.encode("utf-16-le")) // 2}


def _position(text: str, offset: int) -> Any:
    """``_lsp_position`` as an lsprotocol Position."""
    from lsprotocol import types

    p = _lsp_position(text, offset)
    return types.Position(line=p["line"], character=p["character"])


def _lsp_offset(text: str, line: int, character: int) -> int:
    """Character offset of an LSP position (UTF-16 code units)."""
    start = 0
    for _ in range(line):
        start = text.index("\n", start) + 1
    end = text.find("\n", start)
    row = text[start:] if end < 0 else text[start:end]
    units = 0
    for k, ch in enumerate(row):
        if units >= character:
            return start + k
        units += 2 if ord(ch) > 0xFFFF else 1
    return start + len(row)


class LspSuggester:
    """Suggestions through the language server (``python -m edit_engine.lsp`` on stdio), as an editor gets
    them: ``didOpen`` per document, an incremental ``didChange`` (the changed middle of the text) before each
    ``textDocument/inlineCompletion`` (trigger kind Automatic), the item's range and insertText turned into an
    insertion at the cursor. Source ``lsp`` (the protocol does not say who wrote a fill). Call ``close``."""

    def __init__(self, model: str | None = None, threads: int | None = None,
                 options: dict[str, Any] | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._docs: dict[str, tuple[str, int]] = {}  # uri -> (text the server has, version)
        init = dict(options or {})
        if model:
            init["modelPath"] = model
        self._run(self._start(threads, init))

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _start(self, threads: int | None, init: dict[str, Any]) -> None:
        from lsprotocol import types
        from pygls.lsp.client import BaseLanguageClient

        self._client = BaseLanguageClient("typing-replay", "1")
        cmd = [sys.executable, "-m", "edit_engine.lsp"] + (["--threads", str(threads)] if threads else [])
        await self._client.start_io(*cmd)
        await self._client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options=init))
        self._client.initialized(types.InitializedParams())
        # One request on a scratch document first: the server loads the model lazily, not a cost of typing.
        warm = "file:///typing/warm-up.py"
        self._sync("def add(a, b):\n    return \n", "python", warm)
        await self._client.protocol.send_request_async("textDocument/inlineCompletion", types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=warm), position=types.Position(line=1, character=11),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))

    def __call__(self, document: str, cursor: int, language: str, uri: str) -> Suggestion | None:
        result: Any = self._run(self._ask(document, cursor, language, uri))
        if isinstance(result, Suggestion):
            return result
        result, ms = result
        items = getattr(result, "items", None) or []
        if not items:
            return Suggestion("", "none", ms)
        item = items[0]
        start, end = cursor, cursor
        if getattr(item, "range", None) is not None:
            start = _lsp_offset(document, item.range.start.line, item.range.start.character)
            end = _lsp_offset(document, item.range.end.line, item.range.end.character)
        text = insertion(document, cursor, str(item.insert_text), start, end)
        return Suggestion(text or "", "lsp" if text else "none", ms)

    async def _ask(self, document: str, cursor: int, language: str, uri: str) -> Any:
        """Sync the document and send the request on the client's loop: (result, ms), or an empty Suggestion
        when the server refused the request."""
        from lsprotocol import types
        from pygls.exceptions import JsonRpcException

        self._sync(document, language, uri)
        t0 = time.perf_counter()
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=_position(document, cursor),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
        try:
            result = await self._client.protocol.send_request_async("textDocument/inlineCompletion", params)
        except JsonRpcException:  # a refused request shows nothing, as in an editor
            return Suggestion("", "none", (time.perf_counter() - t0) * 1e3)
        return result, (time.perf_counter() - t0) * 1e3

    def _sync(self, document: str, language: str, uri: str) -> None:
        """Bring the server's copy of ``uri`` to ``document`` (open it, or send the changed middle)."""
        from lsprotocol import types

        if uri not in self._docs:
            self._client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
                uri=uri, language_id=language, version=1, text=document)))
            self._docs[uri] = (document, 1)
            return
        old, version = self._docs[uri]
        if old == document:
            return
        p = 0
        while p < min(len(old), len(document)) and old[p] == document[p]:
            p += 1
        s = 0
        while s < min(len(old), len(document)) - p and old[-1 - s] == document[-1 - s]:
            s += 1
        change = types.TextDocumentContentChangePartial(
            range=types.Range(_position(old, p), _position(old, len(old) - s)), text=document[p:len(document) - s])
        self._client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version + 1),
            content_changes=[change]))
        self._docs[uri] = (document, version + 1)

    def close(self) -> None:
        """Close the documents, shut the server down and stop the client's loop."""
        from lsprotocol import types

        async def stop() -> None:
            for uri in self._docs:
                self._client.text_document_did_close(
                    types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
            await self._client.shutdown_async(None)
            self._client.exit(None)
            await self._client.stop()
        try:
            self._run(stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


def lsp_suggester(model: str | None = None, threads: int | None = None,
                  options: dict[str, Any] | None = None) -> LspSuggester:
    """A started ``LspSuggester`` (close it when done)."""
    return LspSuggester(model, threads, options)


# ---------------------------------------------------------------------------------------------------- data + CLI
SUFFIXES = {"python": (".py",), "javascript": (".js", ".mjs", ".cjs"), "typescript": (".ts", ".tsx"),
            "go": (".go",), "rust": (".rs",)}


def workspace_of(data: Path, case: Case) -> list[tuple[str, str]]:
    """The case's package as an editor's workspace: (path, text) of every file of the case's language under
    ``DATA/files/PACKAGE`` but the case's own file (which would hold the answer)."""
    root = data / "files" / case.package
    if not root.is_dir():
        return []
    out = []
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root).as_posix()
        if f.is_file() and f.suffix in SUFFIXES.get(case.language, ()) and rel != case.path:
            out.append((rel, f.read_text(encoding="utf-8")))
    return out


def load_cases(data: Path, split: str, language: str = "all", limit: int | None = None) -> list[Case]:
    """The split's cases of ``language`` (or all), the first ``limit`` per language (the file's order is the
    builder's seeded sample, so a prefix is a smaller sample)."""
    path = data / f"{split}.jsonl"
    cases = [Case.from_json(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]
    out: list[Case] = []
    per: Counter[str] = Counter()
    for c in cases:
        if language not in ("all", c.language) or (limit is not None and per[c.language] >= limit):
            continue
        per[c.language] += 1
        out.append(c)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's flags (for a parser of its own or a ``--benchmark typing`` subcommand)."""
    parser.add_argument("--data", default="runs/typing", help="directory of benchmarks/typing_set.py's output")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--language", choices=(*LANGUAGES, "all"), default="all")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                        help=f"cases per language (default {DEFAULT_LIMIT}; 0 = all)")
    parser.add_argument("--fill", choices=("engine", "memory", "lsp", "none"), default="engine",
                        help="the suggester: the engine, the memory of code alone, the language server, nothing")
    parser.add_argument("--no-memory", action="store_true", help="the engine without its memory of code")
    parser.add_argument("--no-workspace", action="store_true",
                        help="do not hand the case's package (its other files) to the suggester as the workspace")
    parser.add_argument("--show-threshold", type=float, default=None,
                        help="the engine's show threshold (default: the fitted one; 0 shows every answer)")
    parser.add_argument("--draft", default=None, metavar="MIN_PROB,MIN_SCORE[,LOCAL_PROB]",
                        help="the same thresholds for every drafted token instead of the engine's rule, LOCAL_PROB a "
                        "number or none (the default)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--record", default=None, metavar="PATH",
                        help="write every shown suggestion of the line mode as JSON lines (what the gate is fitted on)")
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the packaged model)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of the engine or server")
    parser.add_argument("--modes", default=",".join(MODES), help="accept modes to replay (comma-separated)")
    parser.add_argument("--no-cache", action="store_true",
                        help="ask the suggester again in each mode instead of sharing answers per document state")
    parser.add_argument("--json", default=None, help="write the report here")


def make_suggester(fill: str, model: str | None = None, threads: int | None = None, memory: bool = True,
                   show_threshold: float | None = None,
                   draft: str | None = None) -> tuple[Suggest, Callable[[], None]]:
    """The suggester named by ``--fill`` and a function that releases it."""
    policy = None
    if draft:
        from edit_engine.engine.drafts import DraftPolicy

        parts = draft.split(",")
        local = None if len(parts) < 3 or parts[2] == "none" else float(parts[2])
        policy = DraftPolicy.uniform(float(parts[0]), local, float(parts[1]))
    if fill == "none":
        return none_suggester(), lambda: None
    if fill == "memory":
        return memory_suggester(policy), lambda: None
    if fill == "lsp":
        s = lsp_suggester(model, threads)
        return s, s.close
    from edit_engine import Engine

    engine = Engine.load(model, threads=threads, memory=memory)
    if policy is not None:
        engine.rt.draft_policy = policy
    engine.warm_up()
    # As an editor asks while the user types: the engine's fitted show gate unless a threshold is given.
    return engine_suggester(engine, show_threshold=show_threshold), lambda: None


def run_from_args(args: argparse.Namespace) -> int:
    """Run the benchmark for parsed ``add_arguments`` flags: print the table, write ``--json``; exit status."""
    from rich.console import Console

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        print(f"--modes: choose from {', '.join(MODES)}", file=sys.stderr)
        return 2
    cases = load_cases(Path(args.data), args.split, args.language, args.limit or None)
    if not cases:
        print(f"no {args.language} cases in {Path(args.data) / args.split}.jsonl", file=sys.stderr)
        return 1
    suggest, release = make_suggester(args.fill, args.model, args.threads, not args.no_memory,
                                      args.show_threshold, args.draft)
    t0 = time.perf_counter()
    record: list[dict[str, Any]] | None = [] if args.record else None
    try:
        ws = None if args.no_workspace else (lambda case: workspace_of(Path(args.data), case))
        results = replay(cases, suggest, modes, cache=not args.no_cache, progress=not args.no_progress, record=record, workspace=ws)
    finally:
        release()
    if args.record and record is not None:
        Path(args.record).parent.mkdir(parents=True, exist_ok=True)
        Path(args.record).write_text("".join(json.dumps(r) + "\n" for r in record), encoding="utf-8")
    meta = {"benchmark": "typing", "data": str(args.data), "split": args.split, "language": args.language,
            "limit": args.limit, "fill": args.fill, "model": args.model or "(packaged)", "cache": not args.no_cache,
            "memory": not args.no_memory, "workspace": not args.no_workspace, "show_threshold": args.show_threshold, "draft": args.draft,
            "seconds": round(time.perf_counter() - t0, 1)}
    rep = report(results, meta)
    Console(width=max(Console().width, 140)).print(table(rep["summary"]))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rep, indent=1) + "\n", encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add_arguments(p)
    return run_from_args(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
