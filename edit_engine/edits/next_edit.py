"""Next edit: from what the user just changed, propose the next change, wherever it is in the document.

``next_edit(rt, document, cursor, history)`` answers with one edit, or None. A front end may give an *editable
region* (the rows it lets the engine touch); without one, the patterns are sought in the whole document and the
model rewrites a row around the cursor (``REGION_ABOVE`` rows above it to ``REGION_BELOW`` below, the
benchmark's rule around a target). Structure first, model second:

1. **Patterns.** The history's diffs are analysed (``patterns.analyse``: renames, repeated statement edits,
   changed calls, added parameters, aliases) and turned into rules, one per transformation (``propagate.infer``:
   the patterns' rules, and tree rules anti-unified from the changed rows); every place where one applies again
   is found (``propagate.candidates``, tree-sitter for calls and definitions). The edits group into hunks (edits
   on adjacent rows are one hunk, as a diff tool would show them); the first hunk after the cursor is proposed,
   else the nearest one before it that renames a name left dangling (``bindings``) or takes a name the history
   imported anew out of an older import (behind the cursor, where the user has passed, a repeated change is one
   they did not make): one edit at a time, as editors present them,
   however far (a front end shows the way to one off screen). A hunk whose edit would add a syntax error
   (tree-sitter, and Python's own parser for Python) is skipped. No pattern edit is proposed in the document
   while the user writes new code: when the last diff wrote ``NEW_NAMES`` words or more that stand nowhere else
   in the file (``patterns.Analysis.new_names``), their next change there is more of it, not a repeat of the
   history (on the release histories such proposals were right in 4 of 32). When the document has none and no
   region was given, the other open documents the front end sent (``others``: name -> text, the most relevant
   first) are searched the same way, each from its top, by the rules that hold across files
   (``propagate.for_elsewhere``; a rename carried to the files that use it is still due while new code is written);
   the proposal names its document. With ``others_first`` (the user moved to another file, which has no history
   of its own) they come before it.
2. **Model.** Where no pattern applies, the model rewrites the row most likely to change next (the first after
   the cursor sharing the most words with the last change; rewrite mode re-masks its least likely tokens and
   denoises, ``rounds``). The rewrite is proposed only when it changes the row, breaks nothing in the parse,
   uses no word absent from the document, the history and the related snippets, and the model scores it above
   the row as it stands by ``MODEL_MARGIN`` (mean log-probability per token, one scoring pass each): else None.
   No proposal beats a wrong one.

``stream`` yields the engine's ``Pass`` objects (a pattern's edit is one final pass; the model's rewrite streams
its denoising passes); a final pass with ``stop_reason == "no_edit"`` (and an empty range at the cursor) says
there is no proposal.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from edit_engine.edits import bindings, budget, edit_prompt, patterns, propagate
from edit_engine.engine import rounds
from edit_engine.engine.document import plan_document
from edit_engine.engine.results import Pass
from edit_engine.engine.runtime import Runtime, check_text
from edit_engine.syntax import positions, repair
from edit_engine.syntax import trees as syntax

REGION_ABOVE, REGION_BELOW = 5, 10  # default region: [line - 5, line + 11), the benchmark's rule around a target
MAX_REGION_ROWS = 400  # a larger region given by a front end is refused (a region is 10-25 rows in practice)
MAX_HISTORY = 64  # diffs in a history (the analysis reads the last ``patterns.MAX_DIFFS``)
MAX_HUNKS_TRIED = 4  # pattern hunks checked against the parse before giving up on patterns
MAX_OTHERS = 16  # other open documents a request may send
NEW_NAMES = 3  # words the last diff wrote that stand nowhere else in the file: the user is writing new code
# Nats per token the model's rewrite must gain over the row as it stands. Set on the development set
# (``edit-engine eval --benchmark next-edit-history``: 169 cases cut from this repository's history, never the
# benchmark): the packaged model's 8 rewrites there that passed the other checks were all wrong, with gains up to
# 1.50; above that margin the model proposes only what it finds much likelier than the code as it stands.
MODEL_MARGIN = 2.0
MODEL_MAX_TOKENS = 96  # the rewritten row's canvas
MODEL_WINDOW_ROWS = 40  # rows either side of the rewritten row that the model's planning sees
NO_EDIT = "no_edit"  # stop_reason of a stream's final pass when there is no proposal


@dataclass(frozen=True)
class NextEdit:
    """The proposed edit: ``text`` replaces ``document[start:end]`` (whole rows). ``kind``: "pattern" (propagated
    from the history) or "model" (rewritten by the model); ``patterns``: the pattern kinds it applies
    (``propagate.KINDS``); ``confidence``: the model's gain in nats per token (pattern edits: 1.0);
    ``document``: the name of the other open document it edits (None: the request's document; the offsets are
    that document's)."""

    start: int
    end: int
    text: str
    kind: str
    elapsed_ms: float
    patterns: tuple[str, ...] = ()
    confidence: float = 1.0
    timings: dict[str, float] = field(default_factory=dict)
    document: str | None = None

    def apply(self, document: str) -> str:
        return document[: self.start] + self.text + document[self.end :]


@dataclass(frozen=True)
class Request:
    """A checked next-edit request: the document, its cursor, the region rows ``[first, last)``."""

    document: str
    cursor: int
    history: tuple[str, ...]
    language: str
    related: tuple[str, ...]
    first: int
    last: int
    anywhere: bool = False  # no region was given: patterns are sought in the whole document
    others: tuple[tuple[str, str], ...] = ()  # other open documents (name, text), the most relevant first
    others_first: bool = False  # search them before the document (the history is the document's, the user elsewhere)


def check_request(document: str, cursor: int, history: list[str], language: str = "python",
                  related: list[str] | None = None, region: tuple[int, int] | None = None,
                  others: Mapping[str, str] | None = None, others_first: bool = False) -> Request:
    """The request, checked; ``region`` (rows, end exclusive) defaults to ``default_region``; ``others``: the
    other open documents of the language, name -> text, the most relevant first. Raises ValueError: a document
    over the engine's limit or not valid Unicode, a cursor outside it, a history that is not a list of strings, a
    region outside the document or over ``MAX_REGION_ROWS``, other documents that are not names and texts (or
    more than ``MAX_OTHERS``). ``others_first``: the user is in the first of ``others`` and the history is this
    document's (the one they changed last): those are searched first, this document last."""
    if not isinstance(document, str):
        raise ValueError("document must be a string")
    if related is not None and (not isinstance(related, (list, tuple)) or not all(isinstance(x, str) for x in related)):
        raise ValueError("related must be a list of strings")
    check_text(document, *(related or []))
    if not isinstance(language, str) or not language:
        raise ValueError("language must be a non-empty string")
    if isinstance(cursor, bool) or not isinstance(cursor, int) or not 0 <= cursor <= len(document):
        raise ValueError(f"cursor {cursor!r} is outside the document (0..{len(document)})")
    if not isinstance(history, (list, tuple)) or not all(isinstance(d, str) for d in history):
        raise ValueError("history must be a list of unified diff strings")
    if len(history) > MAX_HISTORY:
        raise ValueError(f"history of {len(history)} diffs exceeds the limit of {MAX_HISTORY}")
    check_text(*history)
    for k, d in enumerate(history):
        try:
            patterns.parse_diff(d)
        except ValueError as e:
            raise ValueError(f"history[{k}]: {e}") from None
    rows = document.count("\n") + 1
    first, last = region if region is not None else default_region(document, cursor)
    if not 0 <= first < last <= rows:
        raise ValueError(f"region rows [{first}, {last}) outside the document's {rows} rows")
    if last - first > MAX_REGION_ROWS:
        raise ValueError(f"region of {last - first} rows exceeds the limit of {MAX_REGION_ROWS}")
    return Request(document, cursor, tuple(history), language, tuple(related or ()), first, last, region is None,
                   _check_others(others), bool(others_first))


def _check_others(others: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if others is None:
        return ()
    if not isinstance(others, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in others.items()):
        raise ValueError("others must map document names to their texts")
    if len(others) > MAX_OTHERS:
        raise ValueError(f"{len(others)} other documents exceed the limit of {MAX_OTHERS}")
    for name, text in others.items():
        if not name:
            raise ValueError("an other document's name must not be empty")
        try:
            check_text(text)
        except ValueError as e:
            raise ValueError(f"others[{name!r}]: {e}") from None
    return tuple(others.items())


def default_region(document: str, cursor: int) -> tuple[int, int]:
    """Rows ``[line - REGION_ABOVE, line + REGION_BELOW + 1)`` around the cursor's line, clamped."""
    line = document.count("\n", 0, cursor)
    rows = document.count("\n") + 1
    return max(0, line - REGION_ABOVE), min(rows, line + REGION_BELOW + 1)


# ---------------------------------------------------------------------------------------------------- patterns
@dataclass(frozen=True)
class Hunk:
    """Pattern edits on adjacent rows, and the whole-row edit they make."""

    edits: tuple[propagate.Edit, ...]
    start: int
    end: int
    text: str

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(k for k in propagate.KINDS if any(e.kind == k for e in self.edits))


def hunks(region: propagate.Region, edits: list[propagate.Edit]) -> list[Hunk]:
    """Resolved edits (in document order) grouped by adjacent rows, each group as a whole-row edit."""
    groups: list[list[propagate.Edit]] = []
    last_row = -2
    for e in edits:
        first, stop = region.row_of(e.start), region.row_of(max(e.start, e.end - 1))
        if groups and first <= last_row + 1:
            groups[-1].append(e)
            last_row = max(last_row, stop)
        else:
            groups.append([e])
            last_row = stop
    return [_as_rows(region, g) for g in groups]


def _as_rows(region: propagate.Region, group: list[propagate.Edit]) -> Hunk:
    text = region.text
    lo, hi = min(e.start for e in group), max(e.end for e in group)
    start = region.starts[region.row_of(lo)]
    at_row_start = hi == len(text) or hi in region.starts[1:] and (hi > lo or hi == start)
    end = hi if at_row_start else region.line_end(region.row_of(hi))
    out, pos = [], start
    for e in group:
        out.append(text[pos : e.start])
        out.append(e.text)
        pos = e.end
    out.append(text[pos:end])
    return Hunk(tuple(group), start, end, "".join(out))


def order_hunks(found: list[Hunk], cursor: int, behind: Callable[[Hunk], bool] | None = None) -> list[Hunk]:
    """Hunks after the cursor in document order, then those before it that ``behind`` keeps, nearest first."""
    after = [h for h in found if h.start >= cursor or h.end > cursor]
    before = [h for h in found if h not in after and (behind is None or behind(h))]
    before.sort(key=lambda h: cursor - h.end)
    return after + before


def propose_pattern(req: Request, doc: syntax.Document, analysis: patterns.Analysis) -> Hunk | None:
    """The pattern edit to propose: the first hunk (``order_hunks``) that adds no syntax error. Sought in the
    request's region, or in the whole document when the front end gave none (``Request.anywhere``)."""
    starts = positions.line_starts(req.document)
    first, last = (0, len(starts)) if req.anywhere else (req.first, req.last)
    return _first_hunk(propagate.Region(doc, starts, first, last, req.cursor), propagate.infer(analysis, doc.language),
                       req.cursor, propagate.fresh_rows(analysis))


def _first_hunk(region: propagate.Region, rules: list[propagate.Rule], cursor: int,
                fresh: list[tuple[int, int]]) -> Hunk | None:
    found = hunks(region, propagate.resolve(propagate.candidates(region, rules, fresh)))
    names: list[frozenset[str] | None] = []  # the names the document binds, read once when asked

    def needed(h: Hunk) -> bool:
        """Behind the cursor, where the user has passed, only what the code needs is proposed: a rename, in code,
        of a name the document binds nowhere any more, or an import of a name the history imported anew (a
        repeated change there is one the user did not make)."""
        if all(e.kind == "import" for e in h.edits):
            return True
        if not all(e.kind == "rename" and patterns.is_identifier(region.text[e.start : e.end])
                   and not propagate.quoted(region, e.start) for e in h.edits):
            return False
        if not names:
            names.append(bindings.bound(region.doc))
        bound = names[0]
        return bound is not None and not any(region.text[e.start : e.end] in bound for e in h.edits)

    for h in order_hunks(found, cursor, needed)[:MAX_HUNKS_TRIED]:
        if h.text == region.text[h.start : h.end]:
            continue
        if region.doc.tree is not None and repair.check(region.doc, h.start, h.end, h.text).errors:
            continue
        return h
    return None


def propose_elsewhere(rt: Runtime | None, req: Request, analysis: patterns.Analysis,
                      should_stop: Callable[[], bool] | None = None) -> tuple[str, Hunk] | None:
    """The pattern edit to propose in another open document (``Request.others``, in their order): the first
    hunk from a document's top that adds no syntax error, by the kinds that carry across documents. Within a
    budget of its own: past it, the documents not yet searched are left (None), the request is not refused."""
    if not req.others:
        return None
    try:
        with budget.scope(budget.limit(*(t for _, t in req.others)), "next edit in other documents", should_stop):
            carried: list[propagate.Rule] | None = None
            for name, text in req.others:
                doc = rt.document(text, req.language, name) if rt is not None else \
                    syntax.Document.parse(text, req.language)
                if carried is None:
                    carried = propagate.for_elsewhere(propagate.infer(analysis, doc.language), req.document)
                starts = positions.line_starts(text)
                h = _first_hunk(propagate.Region(doc, starts, 0, len(starts)), carried, 0, [])
                if h is not None:
                    return name, h
    except budget.OverBudget:
        return None
    return None


# ---------------------------------------------------------------------------------------------------- the model
def target_row(req: Request, analysis: patterns.Analysis) -> int | None:
    """The region row the model rewrites: the row sharing the most words with the last change (removed and
    added rows), the first after the cursor among equals, else the nearest before; None when none shares one."""
    last = analysis.last
    if last is None:
        return None
    words = {m.group() for row in last.removed + last.added for m in patterns.WORD.finditer(row)
             if len(m.group()) > 1}
    lines = req.document.split("\n")
    cursor_row = req.document.count("\n", 0, req.cursor)
    best: tuple[int, bool, int] | None = None
    pick = None
    for row in range(req.first, req.last):
        line = lines[row]
        if not line.strip() or line in last.added:
            continue
        shared = len(words & {m.group() for m in patterns.WORD.finditer(line)})
        key = (shared, row > cursor_row, -abs(row - cursor_row))
        if shared and (best is None or key > best):
            best, pick = key, row
    return pick


def _known_words(req: Request) -> set[str]:
    known = {m.group() for m in patterns.WORD.finditer(req.document)}
    for t in req.history + req.related:
        known.update(m.group() for m in patterns.WORD.finditer(t))
    return known


def _breaks(rt: Runtime, req: Request, p: Pass) -> bool:
    doc = rt.document(req.document, req.language, None)
    return doc.tree is not None and repair.check(doc, p.start, p.end, p.text).errors > 0


def mean_logp(rt: Runtime, cache: Any, text: str, capacity: int) -> float:
    """The model's mean log-probability of ``text``'s tokens in an encoded context (one scoring pass: every
    token seen with all the others, as rewrite mode scores a selection)."""
    ids = rt.tokenizer.encode(text)[:capacity]
    if not ids:
        return 0.0
    with torch.no_grad():
        conf = rt.scores(torch.tensor(ids, device=rt.model.device), cache)
    return float(torch.log(conf.clamp_min(1e-9)).mean())


def model_passes(rt: Runtime, req: Request, analysis: patterns.Analysis, seed: int,
                 should_stop: Callable[[], bool] | None,
                 timings: dict[str, float]) -> Iterator[tuple[Pass, float | None]]:
    """The model's rewrite of ``target_row`` (its text from the first non-blank character to the last): its
    passes, then, with the final one, the gain that decides it (None: rejected). The model is shown the rows
    around it (``MODEL_WINDOW_ROWS``: its context holds a few hundred tokens), without repair rounds (a
    rewrite that breaks the parse is rejected)."""
    row = target_row(req, analysis)
    if row is None:
        return
    starts = positions.line_starts(req.document)
    first, stop = max(0, row - MODEL_WINDOW_ROWS), min(len(starts), row + MODEL_WINDOW_ROWS + 1)
    base = starts[first]
    window = req.document[base : starts[stop] if stop < len(starts) else len(req.document)]
    line_end = starts[row + 1] - 1 if row + 1 < len(starts) else len(req.document)
    line = req.document[starts[row] : line_end]
    s = starts[row] - base + len(line) - len(line.lstrip())
    e = starts[row] - base + len(line.rstrip())
    dp = plan_document(rt, window, s, req.language, (s, e), MODEL_MAX_TOKENS, "rewrite", False)
    if not dp.rewrite:
        return
    edit_model = rt.record.get("task") == "edit"
    if edit_model:  # the recent changes and the row as it stands lead the context (``edit_prompt``)
        mc = rt.model.cfg
        p_ids, s_ids = edit_prompt.prompt_ids(rt.tokenizer, [(c.removed, c.added) for c in analysis.changes],
                                              line.strip(), window[:s], window[e:], mc.max_prefix, mc.max_suffix)
    else:
        p_ids, s_ids = dp.ids or rt.context_ids(dp.model_prefix, dp.model_suffix)
    cap = dp.cfg.max_tokens
    with rt.contexts.encoded(rt.model, rt.key(None, p_ids, s_ids), p_ids, s_ids, cap) as cache:
        st = rounds.Rounds(nfe=dp.nfe)
        # The edit model writes the row anew (it was trained so); the infill model edits the row's own tokens.
        init = None if edit_model else rounds.rewrite_canvas(rt, dp, cache, st)
        last: Pass | None = None
        for p in rounds.rounds(rt, dp, cache, init, st, seed, should_stop, timings):
            p = dataclasses.replace(p, start=p.start + base, end=p.end + base)
            if p.final:
                last = p
                break
            yield p, None
        if last is None:
            return
        old = window[s:e]
        gain: float | None = None
        words = {m.group() for m in patterns.WORD.finditer(last.text)}
        if last.text.strip() and last.text != old and "\n" not in last.text and words <= _known_words(req) \
                and not _breaks(rt, req, last):
            t = time.perf_counter()
            gain = mean_logp(rt, cache, last.text, cap) - mean_logp(rt, cache, old, cap)
            timings["verify"] = (time.perf_counter() - t) * 1e3
            if gain < MODEL_MARGIN:
                gain = None
    yield last, gain


# ---------------------------------------------------------------------------------------------------- the request
@dataclass(frozen=True)
class Staged:
    """A request after its pattern stage: the history's analysis and the pattern edit it proposes (None: the
    model's stage may still propose one)."""

    req: Request
    analysis: patterns.Analysis
    proposal: NextEdit | None
    t0: float
    timings: dict[str, float]


def pattern_stage(rt: Runtime | None, req: Request,
                  should_stop: Callable[[], bool] | None = None) -> Staged | None:
    """The history analysed and the pattern edit chosen, within the request's work budget
    (``budget.limit``: past it, ``budget.OverBudget``); None when ``should_stop`` stopped it."""
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    limit = budget.limit(req.document, *req.history, *req.related)
    first = req.others_first and req.anywhere and bool(req.others)
    try:
        with budget.scope(limit, "next edit", should_stop):
            analysis = patterns.analyse(list(req.history), req.document, req.language)
            doc = rt.document(req.document, req.language, None) if rt is not None else \
                syntax.Document.parse(req.document, req.language)
            timings["analyse"] = (time.perf_counter() - t0) * 1e3
            writing = analysis.new_names >= NEW_NAMES  # new code: the history's repeats are not the next change
            h = None if first or writing else propose_pattern(req, doc, analysis)
        timings["patterns"] = (time.perf_counter() - t0) * 1e3 - timings["analyse"]
        name = None
        if h is None and req.anywhere and req.others:
            t1 = time.perf_counter()
            got = propose_elsewhere(rt, req, analysis, should_stop)
            timings["elsewhere"] = (time.perf_counter() - t1) * 1e3
            if got is not None:
                name, h = got
        if h is None and first and not writing:
            with budget.scope(limit, "next edit", should_stop):
                h = propose_pattern(req, doc, analysis)
    except budget.Stopped:
        return None
    except RecursionError:
        raise ValueError("the document or its history nests too deeply to analyse") from None
    ne = None if h is None else NextEdit(h.start, h.end, h.text, "pattern", (time.perf_counter() - t0) * 1e3,
                                         h.kinds, 1.0, timings, name)
    return Staged(req, analysis, ne, t0, timings)


def model_stage(rt: Runtime | None, staged: Staged, use_model: bool = True, seed: int = 0,
                should_stop: Callable[[], bool] | None = None) -> Iterator[tuple[Pass, NextEdit | None]]:
    """The passes after the pattern stage: its proposal as one final pass, else the model's rewrite (when
    ``use_model``), ending with a ``NO_EDIT`` pass when nothing is proposed."""
    req, t0, timings = staged.req, staged.t0, staged.timings
    if staged.proposal is not None:
        ne = staged.proposal
        yield Pass(0, ne.text, 0, True, 0, ne.start, ne.end, "complete"), ne
        return
    if use_model and rt is not None and rt.canvas:
        index = 0
        for p, gain in model_passes(rt, req, staged.analysis, seed, should_stop, timings):
            index = p.index + 1
            if not p.final:
                yield p, None
            elif gain is not None:
                elapsed = (time.perf_counter() - t0) * 1e3
                timings["total"] = elapsed
                yield p, NextEdit(p.start, p.end, p.text, "model", elapsed, (), round(gain, 4), timings)
                return
        if should_stop is not None and should_stop():
            return
        yield Pass(index, "", 0, True, 0, req.cursor, req.cursor, NO_EDIT), None
        return
    yield Pass(0, "", 0, True, 0, req.cursor, req.cursor, NO_EDIT), None


def passes(rt: Runtime | None, req: Request, use_model: bool = True, seed: int = 0,
           should_stop: Callable[[], bool] | None = None) -> Iterator[tuple[Pass, NextEdit | None]]:
    """Every pass of a next-edit request with, on the final one, the proposal (None: no edit); nothing when
    ``should_stop`` stopped it."""
    staged = pattern_stage(rt, req, should_stop)
    if staged is not None:
        yield from model_stage(rt, staged, use_model, seed, should_stop)


def next_edit(rt: Runtime | None, req: Request, use_model: bool = True, seed: int = 0,
              should_stop: Callable[[], bool] | None = None) -> NextEdit | None:
    """The proposal for a checked request (``check_request``), or None (also when ``should_stop`` stopped it)."""
    out: NextEdit | None = None
    for _, ne in passes(rt, req, use_model, seed, should_stop):
        out = ne
    return out
