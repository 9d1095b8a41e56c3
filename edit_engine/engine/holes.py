"""A hole in, text out: the path of ``Engine.prepare``/``stream``/``infill``.

``prepare`` makes a hole ready to decode (sampler settings clamped to the model, token healing, context tokens,
the novel-name penalty): what the server's scheduler batches. ``passes`` runs the decoder on it and turns each
step's tokens into a ``Pass`` with the timings so far. ``document_passes`` is the document path's equivalent:
plan, run the rounds, and pass the final answer through the show gate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from edit_engine.decoding.sampler import SamplerConfig
from edit_engine.engine import rounds
from edit_engine.engine.credentials import REASON as CREDENTIAL
from edit_engine.engine.credentials import writes_credential
from edit_engine.engine.document import DocumentPlan
from edit_engine.engine.results import Pass, decode_preview, unheal
from edit_engine.engine.runtime import Runtime, check_text


@dataclass(frozen=True)
class Prepared:
    """A hole made ready to decode (``Engine.prepare``): what any sampler loop needs to start."""

    cfg: SamplerConfig
    prefix_ids: list[int]
    suffix_ids: list[int]
    healed: str = ""  # token healing: the partial word the model writes again (left out of the text)
    first: torch.Tensor | None = None  # (V,) bool: the only tokens slot 0 may take
    bias: torch.Tensor | None = None  # (V,) float: added to every pass's logits (the novel-name penalty)


def healing(rt: Runtime, prefix: str, suffix: str = "") -> tuple[str, torch.Tensor | None]:
    """The partial word at the end of ``prefix`` that the model writes again, and slot 0's tokens; ("", None)
    when there is none or the decoder has no canvas."""
    if not rt.canvas:
        return "", None
    return rt.tables.healing_at(prefix + suffix[:1], len(prefix))


def prepare(rt: Runtime, prefix: str, suffix: str, language: str, max_tokens: int | None,
            initial_slots: int | None, heal: bool, overrides: dict[str, Any]) -> Prepared:
    """``Engine.prepare`` (which documents it). Raises ValueError."""
    check_text(prefix, suffix)
    cfg = rt.config(max_tokens, overrides)
    if initial_slots is not None:
        cfg = cfg.with_(initial_canvas=max(1, min(initial_slots, cfg.max_tokens)))
    healed, first = healing(rt, prefix, suffix) if heal else ("", None)
    p_ids, s_ids = rt.context_ids(prefix[: len(prefix) - len(healed)], suffix)
    return Prepared(cfg, p_ids, s_ids, healed, first, rt.tables.novelty_bias(p_ids, s_ids, language, cfg))


def passes(rt: Runtime, prefix: str, suffix: str, language: str, max_tokens: int | None, seed: int,
           should_stop: Callable[[], bool] | None, uri: str | None, heal: bool, single_line: bool,
           initial_slots: int | None, overrides: dict[str, Any]) -> Iterator[tuple[Pass, dict[str, float]]]:
    """Every pass of filling the hole, with the timings so far (``Engine.stream`` documents the arguments)."""
    t0 = time.perf_counter()
    prep = prepare(rt, prefix, suffix, language, max_tokens, initial_slots, heal, overrides)
    cfg = prep.cfg
    t1 = time.perf_counter()
    key = rt.key(uri, prep.prefix_ids, prep.suffix_ids)
    with rt.decoder.steps(prep.prefix_ids, prep.suffix_ids, cfg, key, seed, should_stop, prep.first,
                          prep.bias) as steps:
        t2 = time.perf_counter()
        timings = {"tokenize": (t1 - t0) * 1e3, "context": (t2 - t1) * 1e3}
        cut_line = single_line or cfg.line_stop
        for step in steps:
            ids = step.tokens.tolist()
            text = _first_line(unheal(rt.tokenizer.decode(ids), prep.healed), cut_line, single_line)
            preview = _first_line(unheal(decode_preview(rt.tokenizer, ids), prep.healed), cut_line, single_line)
            now = time.perf_counter()
            timings["denoise"] = (now - t2) * 1e3
            timings["total"] = (now - t0) * 1e3
            yield Pass(step.index, text, step.masked, step.final, step.nfe, 0, 0, step.stop_reason,
                       preview), timings


def document_passes(rt: Runtime, plan: Callable[..., DocumentPlan], text: str, offset: int, language: str,
                    selection: tuple[int, int] | None,
                    max_tokens: int | None, seed: int, should_stop: Callable[[], bool] | None,
                    overrides: dict[str, Any], mode: str, do_repair: bool | int, uri: str | None,
                    related: list[str] | None, stream: bool = True,
                    show_threshold: float | None = 0.0) -> Iterator[tuple[Pass, tuple[str, dict[str, float]]]]:
    """Plan, denoise, post-process, check and repair; yields every pass with (span kind, timings so far).
    ``plan``: the engine's ``plan_document`` (a subclass may wrap it). ``stream=False``: only the passes that end
    a round (the caller wants the last one). No pass writes what
    looks like a credential (``credentials``: its text is dropped, whatever its source); the final pass goes
    through the show gate (``show_threshold``, as ``Engine.stream_complete``)."""
    t0 = time.perf_counter()
    # A request the gate may hide is the editor's own, made while the user types (``plan_document``'s automatic).
    dp = plan(text, offset, language, selection, max_tokens, mode, do_repair, uri, related,
              automatic=show_threshold != 0, **overrides)
    timings = {**dp.timings, "repair": 0.0}
    for p in rounds.document_passes(rt, dp, seed, should_stop, timings, stream):
        if p.text and writes_credential(dp.text[dp.text.rfind("\n", 0, p.start) + 1 : p.start], p.text):
            rt.forget(dp.uri)
            p = replace(p, text="", preview="", source="none", reason=CREDENTIAL)
        if p.final and mode == "insert":
            p = rt.gated(p, dp, show_threshold)
        timings["total"] = (time.perf_counter() - t0) * 1e3
        yield p, (dp.plan.kind, dict(timings))


def _first_line(text: str, cut: bool, drop_newline: bool) -> str:
    """With ``cut``: ``text`` up to its first newline (a completion drops the newline; a line-stopped infill
    keeps it)."""
    nl = text.find("\n") if cut else -1
    if nl < 0:
        return text
    return text[:nl] if drop_newline else text[: nl + 1]
