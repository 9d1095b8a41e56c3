"""Running a planned document request: the first denoising round (or rewrite mode's scored canvas), then the
parse check and the repair rounds. After a round the fill is parsed with the document; when it broke the parse,
the slots behind what broke are re-masked (one scoring pass) and denoised again, at most
``repair.MAX_ROUNDS`` times; the final pass is the best fill, or the longest prefix of it that parses
(``repair.salvage``). ``finish_document`` runs the check and the repairs after a first round run elsewhere
(the server's batched scheduler).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from edit_engine.decoding.sampler import Step, denoise
from edit_engine.engine.credentials import REASON as CREDENTIAL
from edit_engine.engine.credentials import writes_credential
from edit_engine.engine.document import DocumentPlan
from edit_engine.engine.results import Pass, decode_preview
from edit_engine.engine.runtime import Runtime
from edit_engine.model.interfaces import TextTokenizer
from edit_engine.syntax import planner, repair

REWRITE_SHARE = 0.25  # rewrite mode re-masks this share of the selection's tokens (the least likely)


@dataclass
class Rounds:
    """A document request's counters across its denoising rounds (the first, then repairs)."""

    index: int = 0  # the next pass's index
    nfe: int = 0  # forward passes so far
    rounds: int = 0  # repair rounds started
    stop_reason: str = "complete"
    best: tuple[str, int] | None = None  # the fill with the fewest new parse errors, and their count

    def final(self, pl: planner.Plan) -> Pass:
        assert self.best is not None
        return Pass(self.index, self.best[0], 0, True, self.nfe, pl.start, pl.end, self.stop_reason)



def document_passes(rt: Runtime, dp: DocumentPlan, seed: int, should_stop: Callable[[], bool] | None,
                     timings: dict[str, float], stream: bool = True) -> Iterator[Pass]:
    """Run a planned document request; adds to ``timings`` (ms) as it goes. ``stream=False`` skips the
    post-processing and the yield of every pass but those that end a round (same results, less work). A plan
    settled while planning (``DocumentPlan.answer``) is answered with no round."""
    if dp.answer is not None:
        a = dp.answer
        if dp.start == dp.end:
            rt.remember(dp.uri, dp.text, dp.start, a.text, a.source)
        yield Pass(0, a.text, 0, True, a.nfe, dp.start, dp.end, "complete", source=a.source, reason=a.reason,
                   score=a.score)
        return
    cfg = dp.cfg
    t2 = time.perf_counter()
    p_ids, s_ids = dp.ids or rt.context_ids(dp.model_prefix, dp.model_suffix)
    t3 = time.perf_counter()
    doc_key = rt.key(dp.uri, p_ids, s_ids)
    timings["tokenize"] = (t3 - t2) * 1e3
    if not rt.canvas:  # one round: no rewrite scoring and no repair rounds (they re-mask a canvas)
        yield from _one_round(rt, dp, p_ids, s_ids, doc_key, should_stop, timings, stream)
        return
    # The new prefix tokens are computed with the first canvas pass (``defer``): one forward, not two.
    with rt.contexts.encoded(rt.model, doc_key, p_ids, s_ids, cfg.max_tokens, defer=True) as cache:
        t4 = time.perf_counter()
        timings["context"] = timings.get("context", 0.0) + (t4 - t3) * 1e3
        st = Rounds(nfe=dp.nfe)  # the planning pass, when the model chose the indentation
        init = rewrite_canvas(rt, dp, cache, st) if dp.rewrite else None
        yield from rounds(rt, dp, cache, init, st, seed, should_stop, timings, stream)


def _one_round(rt: Runtime, dp: DocumentPlan, p_ids: list[int], s_ids: list[int], key: Any,
               should_stop: Callable[[], bool] | None, timings: dict[str, float], stream: bool) -> Iterator[Pass]:
    """A decoder without a canvas (the autoregressive baseline): its passes, post-processed, the last final."""
    tok, pl = rt.tokenizer, dp.plan
    with rt.decoder.steps(p_ids, s_ids, dp.cfg, key, should_stop=should_stop, bias=dp.bias) as steps:
        timings["context"] = 0.0
        t4 = time.perf_counter()
        prev: Step | None = None
        fill = preview = ""
        for step in steps:
            if prev is not None and stream:
                yield Pass(prev.index, fill, prev.masked, False, prev.nfe, pl.start, pl.end, preview=preview)
            prev = step
            if stream:
                fill, preview = dp.finish(_text(tok, step)), _preview(tok, dp, step)
        if prev is None or not prev.final:  # cancelled
            return
        if not stream:
            fill = dp.finish(_text(tok, prev))
        timings["denoise"] = (time.perf_counter() - t4) * 1e3
        yield Pass(prev.index, fill, 0, True, prev.nfe, pl.start, pl.end, prev.stop_reason)


def _text(tok: TextTokenizer, step: Step) -> str:
    return tok.decode(step.tokens.tolist())


def _preview(tok: TextTokenizer, dp: DocumentPlan, step: Step) -> str:
    """The pass's preview (``results.decode_preview``), post-processed like its text; "" when none is masked."""
    preview = decode_preview(tok, step.tokens.tolist()) if step.masked else ""
    return dp.finish(preview) if preview else ""


def rewrite_canvas(rt: Runtime, dp: DocumentPlan, cache: Any, st: Rounds) -> torch.Tensor | None:
    """Rewrite mode's first canvas: the selection's tokens, the least likely of them masked (one scoring
    pass), and a few masked slots to grow or end early. None (start from an empty canvas) when the
    selection is empty or does not fit."""
    tok, cfg = rt.tokenizer, dp.cfg
    ids = tok.encode(dp.text[dp.start : dp.end])
    if not 0 < len(ids) < cfg.max_tokens:
        return None
    extra = min(cfg.max_tokens - len(ids), max(2, len(ids) // 8))  # room to grow or end early
    canvas = torch.tensor(ids + [tok.mask_id] * extra, device=rt.model.device)
    conf = rt.scores(torch.tensor(ids, device=rt.model.device), cache)
    st.nfe += 1
    redo = repair.least_likely(conf, torch.ones_like(conf, dtype=torch.bool), REWRITE_SHARE)
    canvas[: len(ids)][redo] = tok.mask_id
    return canvas

def rounds(rt: Runtime, dp: DocumentPlan, cache: Any, init: torch.Tensor | None, st: Rounds, seed: int,
            should_stop: Callable[[], bool] | None, timings: dict[str, float],
            stream: bool = True) -> Iterator[Pass]:
    """Denoising rounds from ``init`` (None: an empty canvas) until the fill checks out or the repair rounds
    run out; then the final pass (the best fill). Returns without one when cancelled. ``stream=False``:
    only a round's last pass is post-processed and the in-between passes are not yielded."""
    tok, pl = rt.tokenizer, dp.plan
    t_round = time.perf_counter()
    while True:
        last: Step | None = None
        fill = preview = ""
        for step in denoise(rt.model, cache, dp.cfg, tok.pad_id, tok.mask_id, seed, should_stop, init,
                            line_end=rt.tables.line_end_for(dp.cfg), first=dp.first, bias=dp.bias):
            last = step
            if stream:
                fill, preview = dp.finish(_text(tok, step)), _preview(tok, dp, step)
            if not step.final:  # streamed at once; a round's last step waits for its check (repair may follow)
                if stream:
                    yield Pass(st.index, fill, step.masked, False, st.nfe + step.nfe, pl.start, pl.end,
                               preview=preview)
                st.index += 1
        if last is None or not last.final:  # cancelled
            return
        if not stream:
            fill = dp.finish(_text(tok, last))
        st.nfe += last.nfe
        key = "denoise" if st.rounds == 0 else "repair"
        timings[key] = timings.get(key, 0.0) + (time.perf_counter() - t_round) * 1e3
        found = judge(rt, dp, st, fill, last.stop_reason, should_stop, timings)
        if found is None:
            break
        yield Pass(st.index, fill, 0, False, st.nfe, pl.start, pl.end)
        st.index += 1
        t_round = time.perf_counter()
        init = remask(rt, dp, cache, last.tokens, fill, found, st)
    yield final(rt, dp, st, timings)

def final(rt: Runtime, dp: DocumentPlan, st: Rounds, timings: dict[str, float]) -> Pass:
    p = _final(rt, dp, st, timings)
    if p.text and writes_credential(dp.text[dp.text.rfind("\n", 0, p.start) + 1 : p.start], p.text):
        return dataclasses.replace(p, text="", preview="", source="none", reason=CREDENTIAL)
    if dp.start == dp.end and dp.mode == "insert":
        rt.remember(dp.uri, dp.text, dp.start, p.text, p.source)
    return p


def _final(rt: Runtime, dp: DocumentPlan, st: Rounds, timings: dict[str, float]) -> Pass:
    """The final pass: the best fill of the rounds; when even that one still breaks the parse, its longest
    prefix that does not and still holds code (``repair.salvage``; ``timings["salvage"]`` then says so)."""
    assert st.best is not None
    if st.best[1] > 0 and dp.checks:
        t = time.perf_counter()
        cut = repair.salvage(dp.doc, dp.start, dp.end, st.best[0], close=dp.plan.close)
        if cut is not None:
            st.best = (cut, 0)
            timings["salvage"] = (time.perf_counter() - t) * 1e3
        else:
            timings["parse"] = timings.get("parse", 0.0) + (time.perf_counter() - t) * 1e3
    return st.final(dp.plan)

def judge(rt: Runtime, dp: DocumentPlan, st: Rounds, fill: str, stop_reason: str,
           should_stop: Callable[[], bool] | None, timings: dict[str, float]) -> repair.Check | None:
    """After a round: check its fill and keep the best one so far. Returns the check when another (repair)
    round should run, else None."""
    st.stop_reason = stop_reason or st.stop_reason
    tp = time.perf_counter()
    found = dp.check(fill)
    timings["parse"] = timings.get("parse", 0.0) + (time.perf_counter() - tp) * 1e3
    if st.best is None or found is not None and found.errors < st.best[1]:
        st.best = (fill, found.errors if found is not None else 0)
    if found is None or found.errors == 0 or st.rounds >= dp.max_rounds \
            or (should_stop is not None and should_stop()):
        return None
    return found

def remask(rt: Runtime, dp: DocumentPlan, cache: Any, canvas: torch.Tensor, fill: str,
            found: repair.Check, st: Rounds) -> torch.Tensor:
    """The next repair round's canvas: one scoring pass, then the slots behind what broke re-masked."""
    tok = rt.tokenizer
    real = (canvas != tok.pad_id) & (canvas != tok.mask_id)
    conf = rt.scores(canvas, cache)
    st.nfe += 1
    pieces = [tok.decode([int(t)]) if bool(r) else ""
              for t, r in zip(canvas.tolist(), real.tolist(), strict=True)]
    raw = tok.decode(canvas.tolist())
    spans = (repair.slot_spans(pieces) if "".join(pieces) == raw
             else _prefix_spans(tok, canvas, real))
    st.rounds += 1
    return repair.remask(canvas, conf, spans, repair.to_raw(found.ranges, raw, fill), found.elsewhere, real,
                         tok.mask_id)



def finish_document(rt: Runtime, dp: DocumentPlan, tokens: torch.Tensor, index: int, nfe: int, stop_reason: str,
                    seed: int = 0, should_stop: Callable[[], bool] | None = None,
                    context: Callable[[], Any] | None = None) -> Iterator[Pass]:
    """The rest of an insert-mode document request whose first denoising round ran elsewhere (the server's
    batched scheduler), as ``stream_complete`` would run it: check the fill and, when it broke the parse,
    run the repair rounds.

    ``tokens`` (C,): that round's last canvas, whose pass ``index`` has not been shown yet; ``nfe``: forward
    passes so far; ``stop_reason``: that round's. ``context`` makes the request's encoded context (room for
    ``dp.cfg.max_tokens`` canvas slots; the caller's, e.g. the batch's) when a repair round needs it;
    without it the context is encoded here, through the per-document cache. Yields the passes from
    ``index`` on; the last is final.
    """
    if dp.rewrite or not rt.canvas:
        raise ValueError("finish_document continues an insert-mode diffusion request only")
    pl = dp.plan
    fill = dp.finish(rt.tokenizer.decode(tokens.tolist()))
    st = Rounds(index=index, nfe=nfe)
    timings: dict[str, float] = {"parse": 0.0, "repair": 0.0}
    found = judge(rt, dp, st, fill, stop_reason, should_stop, timings)
    if found is None:
        yield final(rt, dp, st, timings)
        return
    yield Pass(st.index, fill, 0, False, st.nfe, pl.start, pl.end)
    st.index += 1
    with contextlib.ExitStack() as stack:
        if context is not None:
            cache = context()
        else:
            p_ids, s_ids = dp.ids or rt.context_ids(dp.model_prefix, dp.model_suffix)
            key = rt.key(dp.uri, p_ids, s_ids)
            cache = stack.enter_context(rt.contexts.encoded(rt.model, key, p_ids, s_ids, dp.cfg.max_tokens))
        init = remask(rt, dp, cache, tokens, fill, found, st)
        yield from rounds(rt, dp, cache, init, st, seed, should_stop, timings)


def _prefix_spans(tok: TextTokenizer, canvas: torch.Tensor, real: torch.Tensor) -> list[tuple[int, int]]:
    """Character range of each slot in the decoded canvas, by decoding growing prefixes (a token may hold part
    of a multi-byte character, so decoding tokens one by one does not add up)."""
    ids = canvas.tolist()
    spans, prev = [], 0
    for j in range(len(ids)):
        n = len(tok.decode(ids[: j + 1])) if bool(real[j]) else prev
        spans.append((prev, n))
        prev = n
    return spans
