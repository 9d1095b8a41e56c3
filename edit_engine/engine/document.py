"""A document request planned but not run: from document + cursor (or selection) to the span, the text either
side, the sampler settings, how to finish each pass's text and how to check the result.

``plan_document`` parses the document (incrementally, per ``uri``), lets the planner choose the span, sets the
sampler, and prepares what slot 0 may hold: a block header's keyword, or the partial word at the cursor
(token healing: the word is left out of the model's prefix and slot 0 must start with it, so the word is
continued as the tokenizer would split it whole). With several candidate indentations the model chooses in one
pass (``choose_indent``).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from edit_engine.decoding.sampler import SamplerConfig
from edit_engine.engine import analysis, continuation, drafts, proposals
from edit_engine.engine.credentials import writes_credential
from edit_engine.engine.results import TYPED_THROUGH, unheal
from edit_engine.engine.runtime import Runtime
from edit_engine.syntax import planner, postprocess, repair
from edit_engine.syntax import trees as syntax


@dataclass(frozen=True)
class Answer:
    """A document request settled while planning, with no denoising round to run: a copy proposal the model
    verified (``source="copy"``), or no fill at all (``source="none"``, ``reason`` says why: a language the
    model was not trained on and no copy found). ``nfe``: the forward passes planning spent on it."""

    text: str
    source: str  # copy | memory | none
    reason: str = ""
    nfe: int = 0
    score: float = 0.0  # the source's own score: a copy's context match, a draft's probability


@dataclass(frozen=True)
class DocumentPlan:
    """A document request planned but not run (``Engine.plan_document``): the span, the text either side, the
    sampler settings, how to finish each pass's text and how to check the result.

    ``Engine.stream_complete`` runs the whole request. A server may run the first denoising round itself,
    batched with other requests: the hole between ``model_prefix`` and ``model_suffix`` under ``cfg`` (an empty
    canvas of ``cfg.initial_canvas`` slots growing to ``cfg.max_tokens``), each pass's decoded canvas shown through
    ``finish``; then, when ``checks``, hand the last canvas to ``Engine.finish_document`` for the parse check
    and the repair rounds. Rewrite mode (``rewrite``) starts from a scored canvas and runs only in the engine.
    """

    text: str  # the document
    doc: syntax.Document  # its syntax tree
    plan: planner.Plan
    prefix: str  # text[: plan.start]
    suffix: str  # text[plan.end :]
    cfg: SamplerConfig  # max_tokens and initial_canvas from the plan, clamped to the model
    mode: str  # insert | rewrite
    do_repair: bool  # check the fill and run repair rounds when it breaks the parse
    uri: str | None = None
    max_rounds: int = repair.MAX_ROUNDS  # repair rounds at most (0: check, keep the longest prefix that parses)
    timings: dict[str, float] = field(default_factory=dict)  # ms: parse, plan
    first: torch.Tensor | None = None  # (V,) bool: the only tokens slot 0 may take (a header's keyword)
    nfe: int = 0  # forward passes spent planning (the model's choice among ``plan.indents``)
    heal: str = ""  # the partial word before the cursor, which the model writes again (token healing)
    bias: torch.Tensor | None = None  # (V,) float: the novel-name penalty for this context (``Engine.novelty_bias``)
    ids: tuple[list[int], list[int]] | None = None  # the model's context tokens, when planning made them already
    # Settled while planning (a verified copy, or no fill): run no round, answer this (``Answer``). A server
    # that runs first rounds itself must check it and send ``Answer.text`` as the final pass.
    answer: Answer | None = None

    @property
    def start(self) -> int:
        return self.plan.start

    @property
    def end(self) -> int:
        return self.plan.end

    @property
    def rewrite(self) -> bool:
        """Rewrite mode over a selection: the first round starts from the selection's tokens, the least likely
        re-masked after a scoring pass, not from an empty canvas."""
        return self.mode == "rewrite" and self.plan.kind == "selection"

    @property
    def checks(self) -> bool:
        """The fill is parsed with the document and repaired if it breaks it (the span is code and a grammar
        is installed)."""
        return self.plan.check and self.do_repair

    @property
    def model_prefix(self) -> str:
        """The text the model is shown before the hole. For a fill on a blank line or a block body
        (``Plan.shows_lead``) it ends with the fill's first-line indentation (a body's line break too), less its
        last space: that space belongs to the first word's token (``" for"``, ``" return"``), as the tokenizer
        splits an indented line, so slot 0 holds that word (a header's keyword: ``first``). With token healing
        (``heal``) it ends before the partial word at the cursor, which slot 0 writes whole (``" sorted"`` for
        a cursor after ``" sor"``)."""
        if self.heal:
            return self.prefix[: len(self.prefix) - len(self.heal)]
        if not self.plan.shows_lead:
            return self.prefix
        p = self.prefix + self.plan.lead
        return p[:-1] if p.endswith(" ") else p

    @property
    def model_suffix(self) -> str:
        """The text the model is shown after the hole: the plan's ``close`` (a header's ":"), then the suffix."""
        return self.plan.close + self.suffix

    @functools.cached_property
    def _near(self) -> str:
        return self.prefix[-2000:]

    @functools.cached_property
    def _brackets(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return postprocess.bracket_context(self._near, self.suffix, self.doc.grammar)

    @property
    def suffix_closers(self) -> tuple[str, ...]:
        """The closers in the suffix of brackets opened before the span, innermost first."""
        return self._brackets[1]

    def finish(self, raw: str) -> str:
        """The text to show for the model's decoded fill ``raw`` (cuts, brackets, indentation: ``postprocess``).
        With token healing the raw fill starts with the partial word the document already holds: that part
        is not inserted again."""
        raw = unheal(raw, self.heal)
        near = self._near
        g = self.doc.grammar
        model_unit = postprocess.detect_indent(near + raw, self.plan.unit or g.indent)
        return postprocess.finish(raw, self.plan, self.suffix, g, model_unit, near, self._brackets)

    def check(self, fill: str) -> repair.Check | None:
        """What replacing the span by ``fill`` breaks in the parse; None when the plan asks for no check."""
        return repair.check(self.doc, self.plan.start, self.plan.end, fill) if self.checks else None


def repair_rounds(do_repair: bool | int) -> int:
    """The most repair rounds a request's ``repair`` argument allows: True, ``repair.MAX_ROUNDS``; False, none
    (nor a check); a number, that many (0: the fill is checked and cut to its longest prefix that parses)."""
    if isinstance(do_repair, bool):
        return repair.MAX_ROUNDS if do_repair else 0
    if not isinstance(do_repair, int) or do_repair < 0:
        raise ValueError(f"repair={do_repair!r}; expected true, false or a number of rounds >= 0")
    return do_repair


def plan_document(rt: Runtime, text: str, offset: int, language: str = "python",
                  selection: tuple[int, int] | None = None, max_tokens: int | None = None, mode: str = "insert",
                  do_repair: bool | int = True, uri: str | None = None, related: list[str] | None = None,
                  automatic: bool = False, **overrides: Any) -> DocumentPlan:
    """Plan a document request without running it (``Engine.plan_document`` documents the arguments).
    ``do_repair``: True, False (no check) or the most repair rounds to run (``repair_rounds``). ``automatic``: a
    request the editor made while the user types, not one the user asked for: a draft stops where its tokens
    stop being likely together (``DraftPolicy``), where an explicit request gets the whole line. Raises
    ValueError (bad mode, document too large, max_tokens < 1, a negative number of rounds)."""
    if mode not in ("insert", "rewrite"):
        raise ValueError(f"mode={mode!r}; expected 'insert' or 'rewrite'")
    max_rounds = repair_rounds(do_repair)
    t0 = time.perf_counter()
    doc = rt.document(text, language, uri)
    t1 = time.perf_counter()
    pl = planner.plan(text, offset, selection, max_tokens, language, doc)
    t2 = time.perf_counter()
    cfg = rt.config(pl.max_tokens, overrides)
    # A single-line span's fill is cut at its first newline: stop denoising once that line is decided.
    line_stop = overrides.get("line_stop", pl.single_line and mode == "insert")
    cfg = cfg.with_(initial_canvas=max(1, min(pl.initial_canvas, cfg.max_tokens)), line_stop=line_stop)
    first = rt.tables.keywords(doc.grammar) if pl.kind == "header" and rt.canvas else None
    heal = ""
    if first is None and mode == "insert" and pl.code and pl.start == pl.end and rt.canvas:
        heal, first = rt.tables.healing_at(text, pl.start)
    timings = {"parse": (t1 - t0) * 1e3, "plan": (t2 - t1) * 1e3}
    nfe = 0
    if len(pl.indents) > 1 and rt.canvas and rt.model.exact_context_cache:
        t3 = time.perf_counter()
        indent = choose_indent(rt, text[: pl.start], text[pl.end :], pl.indents, uri)
        pl = dataclasses.replace(pl, indent=indent, lead=indent if pl.lead else "")
        timings["indent"] = (time.perf_counter() - t3) * 1e3
        nfe = 1
    dp = DocumentPlan(text, doc, pl, text[: pl.start], text[pl.end :], cfg, mode, do_repair is not False, uri,
                      max_rounds, timings, first, nfe, heal)
    if cfg.novel_penalty > 0 and pl.code:
        ids = rt.context_ids(dp.model_prefix, dp.model_suffix)
        words = _analysed_words(rt, text, pl.start, language, uri, timings) if mode == "insert" else None
        dp = dataclasses.replace(dp, bias=rt.tables.novelty_bias(*ids, language, cfg, extra_words=words), ids=ids)
    if mode == "insert" and pl.start == pl.end == offset and selection is None:
        kept = rt.typed_through(uri, text, offset)
        if kept is not None:  # the user typed the start of the last fill: the rest of it still holds
            return dataclasses.replace(dp, answer=Answer(kept[0], kept[1], TYPED_THROUGH))
    policy = rt.draft_policy if automatic else rt.draft_policy.whole()
    if mode == "insert" and pl.code:
        dp = settle(rt, dp, language, related or (), policy)
    elif mode == "insert":  # a comment or a string: only a draft from the memory of code, where it is likely
        drafted = _drafted(rt, dp, language, related or (), dp.timings, policy)
        if drafted is None and not rt.knows(language):  # and never the model's guess in a language it never saw
            drafted = Answer("", "none", f"the model was not trained on {language}, and no draft from the memory "
                             "of code was likely enough")
        dp = dataclasses.replace(dp, answer=drafted)
    return dp


UNTRAINED_MIN_MATCH = 24  # a language the model does not know: a copy needs this much context match (characters)


def settle(rt: Runtime, dp: DocumentPlan, language: str, related: list[str] | tuple[str, ...],
           policy: drafts.DraftPolicy | None = None) -> DocumentPlan:
    """Settle an insert request while planning: a draft from the memory of code that passes its policy is the
    answer (``drafts``: on real code it is right far more often than a copy or the model's own text); else a
    copy proposal (``proposals``) the model verifies in one batched pass. In a language the model was not
    trained on (``Runtime.languages``) the model is not asked: the best-matching copy is the answer, or no fill
    with the reason. Otherwise the plan is returned as it was, to be denoised."""
    t0 = time.perf_counter()
    drafted = _drafted(rt, dp, language, related, dp.timings, policy or rt.draft_policy)
    if drafted is not None:
        return dataclasses.replace(dp, answer=drafted)
    cands = [c for c in proposals.candidates(dp.text, dp.plan, related, doc=dp.doc)
             if not writes_credential(_line_before(dp), c.text)]
    timings = {**dp.timings, "propose": (time.perf_counter() - t0) * 1e3}
    if not rt.knows(language):
        top = cands[0] if cands and cands[0].score >= UNTRAINED_MIN_MATCH else None
        settled = Answer(top.text, "copy", score=top.score) if top is not None and _parses(dp, top.text) else \
            Answer("", "none", f"the model was not trained on {language}, and neither a copy of the surrounding "
                   "code nor a draft from the memory of code was likely enough")
        return dataclasses.replace(dp, answer=settled, timings=timings)
    cands = [c for c in cands if c.score >= proposals.ACCEPT.match]
    if not cands or not rt.canvas:
        return dataclasses.replace(dp, timings=timings)
    tok = rt.tokenizer
    rows: list[tuple[proposals.Candidate, list[int]]] = []
    for c in cands:
        raw = _raw(dp, c.text.removesuffix(dp.plan.close) if dp.plan.close else c.text)
        ids = tok.encode(raw) if raw is not None else []
        if ids and len(ids) < dp.cfg.max_tokens and tok.decode(ids) == raw and _parses(dp, c.text):
            rows.append((c, ids))
        if len(rows) == proposals.MAX_VERIFY:
            break
    if not rows:
        return dataclasses.replace(dp, timings=timings)
    t1 = time.perf_counter()
    p_ids, s_ids = dp.ids or rt.context_ids(dp.model_prefix, dp.model_suffix)
    model, ids_rows = rt.model, [ids for _, ids in rows]
    if model.exact_context_cache:  # the document's cached context, repeated for the rows
        with rt.contexts.encoded(model, rt.key(dp.uri, p_ids, s_ids), p_ids, s_ids, dp.cfg.max_tokens) as cache:
            t2 = time.perf_counter()
            scores = proposals.verify(model, cache.repeat, ids_rows, tok.pad_id, tok.mask_id)
        timings["context"] = (t2 - t1) * 1e3
    else:  # an open model: the context depends on the canvas, so the rows' pass runs over it all
        t2 = t1
        scores = proposals.verify(model, lambda n, w: model.encode_context([p_ids] * n, [s_ids] * n, w),
                                  ids_rows, tok.pad_id, tok.mask_id)
    timings["verify"] = (time.perf_counter() - t2) * 1e3
    verdicts = [proposals.Verdict(c, m, w, len(ids)) for (c, ids), (m, w) in zip(rows, scores, strict=True)]
    nfe = dp.nfe + 1
    best = next((v for v in verdicts if v.accepted), None)  # the best context match the model does not veto
    answer = Answer(best.candidate.text, "copy", nfe=nfe, score=best.candidate.score) if best is not None else None
    return dataclasses.replace(dp, answer=answer, nfe=nfe, timings=timings, ids=(p_ids, s_ids))


def _drafted(rt: Runtime, dp: DocumentPlan, language: str, related: list[str] | tuple[str, ...],
             timings: dict[str, float], policy: drafts.DraftPolicy) -> Answer | None:
    """The memory's draft at the cursor as the answer (``drafts``), when the engine has a memory, the draft
    passes ``policy`` and the document parses with it; else None."""
    if rt.memory is None or dp.plan.start != dp.plan.end:
        return None
    t0 = time.perf_counter()
    d = drafts.draft_at(rt.memory, dp.text, dp.plan.start, language, dp.uri, related, policy)
    timings["draft"] = (time.perf_counter() - t0) * 1e3
    if d is None or not _viable(dp, d.text) or writes_credential(_line_before(dp), d.text):
        return None
    return Answer(d.text, "memory", nfe=dp.nfe, score=d.score)


def _line_before(dp: DocumentPlan) -> str:
    return dp.text[dp.text.rfind("\n", 0, dp.plan.start) + 1 : dp.plan.start]


def _viable(dp: DocumentPlan, text: str) -> bool:
    """Whether ``text`` at the cursor can still become code that parses (``continuation``)."""
    return continuation.can_continue(dp, text, lambda fill: _parses(dp, fill))


def _analysed_words(rt: Runtime, text: str, offset: int, language: str, uri: str | None,
                    timings: dict[str, float]) -> frozenset[str] | None:
    """The names a Python analyser knows at the cursor (``analysis``), when the engine runs one: they are
    not penalised as novel. None when off, not Python, or not ready within ``rt.analysis_ms``."""
    if not rt.analysis or language != "python":
        return None
    t = time.perf_counter()
    path = uri.removeprefix("file://") if uri and uri.startswith("file://") else None
    found = analysis.analyse(text, offset, path, budget_ms=rt.analysis_ms)
    timings["analysis"] = (time.perf_counter() - t) * 1e3
    return analysis.known_words(found) if found is not None else None


def _raw(dp: DocumentPlan, fill: str) -> str | None:
    """What the model would write for ``fill``: the text after its prefix (``model_prefix``) up to the span's end."""
    whole = dp.prefix + fill
    mp = dp.model_prefix
    return whole[len(mp) :] if whole.startswith(mp) and len(whole) > len(mp) else None


def _parses(dp: DocumentPlan, fill: str) -> bool:
    found = dp.check(fill)
    return found is None or found.errors == 0


def choose_indent(rt: Runtime, prefix: str, suffix: str, indents: tuple[str, ...], uri: str | None) -> str:
    """The model's choice among a blank line's possible indentations (``Plan.indents``): one pass over a
    small canvas after the bare line start, as a whole-line hole is laid out in training; the indentation
    whose token (a run of blanks, the last one left to the next word: ``"   "`` for four spaces) is most
    likely in slot 0 wins. Ties and indentations without such a token keep the planner's order."""
    tok = rt.tokenizer
    ids = []
    for ind in indents:
        t = tok.encode(ind + "x")  # "    x" -> "   " + " x": the indentation's own token comes first
        ids.append(t[0] if len(t) > 1 and not tok.decode([t[0]]).strip() else -1)
    if all(i < 0 for i in ids):
        return indents[0]
    p_ids, s_ids = rt.context_ids(prefix, suffix)
    size = 8
    with rt.contexts.encoded(rt.model, rt.key(uri, p_ids, s_ids), p_ids, s_ids, size) as cache:
        canvas = torch.full((1, size), tok.mask_id, dtype=torch.long, device=rt.model.device)
        with torch.no_grad():
            logits = rt.model.canvas_logits(canvas, cache)[0, 0].float()
    scores = [float(logits[i]) if i >= 0 else float("-inf") for i in ids]
    return indents[max(range(len(indents)), key=lambda j: (scores[j], -j))]
