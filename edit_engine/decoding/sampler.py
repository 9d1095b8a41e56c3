"""The denoising loop: parallel decoding over a canvas of masks, and the plain reference sampler beside it.

``denoise`` (the fast sampler) encodes the context once (``DiffusionLM.encode_context``) and runs each pass on
the canvas rows only. Every pass it scores the masked slots and commits all whose score clears a threshold, at
least ``min_commit`` and at most ``max_commit`` of them (Fast-dLLM, Wu et al. 2025, Sec. 3.2, "threshold
parallel decoding"). With ``floor_ramp`` R > 0 the floor ramps up over a fresh canvas's first passes: R slots
in the first pass, twice as many in each pass after it, up to ``min_commit`` (R, 2R, 4R, ...; MaskGIT's schedule
idea, Chang et al. 2022). The first pass chooses with nothing of the fill decided, and each slot it commits is a
guess made independently of the others; later passes condition on what is already there.

Fill length: the canvas starts at ``initial_canvas`` slots; the model predicts ``<|pad|>`` for slots past the
end of the fill; when every slot holds a real token the canvas grows (doubling, up to ``max_tokens``) and
decoding continues on the new masks. No oracle length.

Pad rules (the training layout puts pads only at the canvas tail): a slot before the last committed real token
cannot become a pad, and once a pad is committed every later masked slot becomes a pad in the same pass. The
first ``min_tokens`` slots (default 1) cannot be pads: a request for a completion gets a non-empty one (an
under-trained model otherwise collapses to all-pad fills; docs/results-archive-2026-12-05.md).

Length rule (``pad_threshold`` > 0). Training draws the canvas size independently of the fill's length
(``train/data.py``), so on the first pass over freshly opened slots, with nothing of the fill decided yet, the
model's pad probability at slot j estimates P(length <= j). That pass fixes the length: the first open slot whose
pad probability reaches ``pad_threshold`` (0.5: the median length) and every slot after it become pads, and the
slots before it may no longer be pads. If no slot reaches it, the whole canvas must hold real tokens; once full
it grows and the next pass decides again over the new slots. Deciding the length once, from the model's own
distribution, is what keeps fills from collapsing to empty (pads winning slot by slot) or running on (pads never
winning). With ``pad_threshold = 0`` pads are committed slot by slot like any token.

Line stop (``line_stop``, for single-line completions, whose fill is cut at its first newline anyway): the run
ends as soon as every slot up to and including the first committed token that holds a newline is decided
(``line_end``: which token ids hold one). Until then the passes are the same as without the rule, and a
committed slot never changes, so the first line is exactly the one the full run would give, in fewer passes.
The stop reason is ``line``. (This holds for one denoising run; the engine's repair rounds start from the canvas
as it stopped, its tail still masked, so a repaired fill may differ from repairing a fully denoised canvas.)

Novel names (``novel_penalty`` > 0, given to the run as ``bias``: ``Engine.novelty_bias``). A small model
invents names: ``len(lens)`` where the function's list is ``numbers``. Code mostly uses the names its context
defines, or the language's common ones. So a name token (a word, with or without its leading space) whose word
occurs nowhere in the model's context and is not a common word of the language (the grammar's
``common_words``) has ``novel_penalty`` taken off its logit in every pass. It is a prior, not a ban: a new local
name still wins where the model is sure of it.

The loop keeps canvas, mask and scores as tensors: per pass there is one host read (is anything still masked?)
and no Python loop over positions. It counts forward passes (nfe).

``reference_denoise`` is the baseline and oracle: full recompute of the whole sequence every pass, one token per
pass, the most confident masked slot committed and the rest left masked (LLaDA's low-confidence remasking,
Nie et al. 2025, Alg. 5, with one token per step). With ``threshold > 1`` and ``max_commit = 1`` the fast
sampler must produce exactly the same tokens (tested).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch

from edit_engine import kernels
from edit_engine.decoding.sampler_settings import SETTINGS
from edit_engine.model.interfaces import CanvasModel
from edit_engine.model.network import CANVAS, PREFIX, SUFFIX, ContextCache, DiffusionLM


@dataclass(frozen=True)
class SamplerConfig:
    """How the canvas is denoised (each field's meaning and range: ``SETTINGS``). Defaults are the plain
    sampler; a checkpoint's ``sampler.json`` holds its measured operating point."""

    threshold: float = 0.9
    min_commit: int = 1
    # The floor takes no two slots within R of each other (each the best of its +-R masked neighbourhood,
    # kernels.commit.spread_eligible): neighbours chosen independently in one pass are where parallel decoding
    # breaks (a repeated word, a doubled bracket). Threshold commits are unaffected. Once no more than
    # ``min_commit`` slots are masked, the floor takes them all (kernels.commit.commit_mask_ref).
    spread: int = 0
    max_commit: int = 0
    # Canvases given to the run (repair, rewrite) keep ``min_commit`` from their first pass (``floor_at``).
    floor_ramp: int = 0
    temperature: float = 0.0
    initial_canvas: int = 16
    max_tokens: int = 128
    min_tokens: int = 1
    pad_threshold: float = 0.5  # module doc, "Length rule"
    line_stop: bool = False  # module doc, "Line stop"
    novel_penalty: float = 0.0  # module doc, "Novel names"

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, SETTINGS[f.name].check(getattr(self, f.name)))
        if self.max_commit and self.max_commit < self.min_commit:
            raise ValueError("max_commit must be >= min_commit")
        if self.min_tokens > self.max_tokens:
            raise ValueError("min_tokens must be between 0 and max_tokens")

    def floor_at(self, n_pass: int) -> int:
        """The floor of pass ``n_pass`` (0-based) over a fresh canvas: ``min_commit``, or with ``floor_ramp``
        R > 0, R * 2**n_pass capped at ``min_commit`` (so a ramp above ``min_commit`` is ``min_commit``)."""
        if self.floor_ramp <= 0:
            return self.min_commit
        return min(self.min_commit, self.floor_ramp << min(n_pass, 30))

    def with_(self, **kw: object) -> SamplerConfig:
        return replace(self, **kw)  # type: ignore[arg-type]

    @classmethod
    def for_checkpoint(cls, path: str | Path | None) -> SamplerConfig:
        """The checkpoint's own operating point: ``sampler.json`` beside its weights (fields of this class, as
        measured for that model, e.g. by ``benchmarks/sweep_commit.py``), else the defaults."""
        f = Path(path) / SAMPLER_FILE if path is not None else None
        if f is None or not f.is_file():
            return cls()
        raw = json.loads(f.read_text())
        if not isinstance(raw, dict):
            raise ValueError(f"{f}: expected a JSON object of sampler settings")
        known = {x.name for x in fields(cls)}
        kw = {k: v for k, v in raw.items() if not k.startswith("_")}
        unknown = sorted(set(kw) - known)
        if unknown:
            raise ValueError(f"{f}: unknown sampler settings {unknown}")
        return cls(**kw)


SAMPLER_FILE = "sampler.json"
SEED_MAX = 2**63 - 1  # sampling seeds are 0..SEED_MAX (torch generators take 64-bit seeds)


@dataclass
class Step:
    """The state after one denoising pass (tensors on the model's device, batch of one)."""

    index: int  # 0-based pass number
    tokens: torch.Tensor  # (C,) canvas ids; masked slots hold the mask id
    masked: int  # undecided slots: still masked, or not yet opened by canvas growth (never rises)
    nfe: int  # forward passes so far
    final: bool
    stop_reason: str  # "" while running; "complete" (a pad ended the fill), "length" (max_tokens reached) or
    # "line" (line stop: the first line is decided)


def _pad_banned(canvas: torch.Tensor, masked: torch.Tensor, pad_id: int, cfg: SamplerConfig,
                extra: torch.Tensor | None = None) -> torch.Tensor:
    """(B, C) bool: slots where pad is forbidden (the first min_tokens; before the last committed real token;
    ``extra``: before the length the length rule chose)."""
    ban = torch.zeros_like(masked) if extra is None else extra.clone()
    ban[:, : cfg.min_tokens] = True
    real = (~masked) & (canvas != pad_id)  # (B, C)
    ban |= real.flip(-1).cummax(-1).values.flip(-1)  # some real token committed at a slot >= j
    return ban


def _propagate_pads(canvas: torch.Tensor, masked: torch.Tensor, pad_id: int) -> None:
    """Once a pad is committed, every later masked slot becomes a pad (in place)."""
    pad = (~masked) & (canvas == pad_id)
    after = pad.cummax(-1).values & masked
    canvas.masked_fill_(after, pad_id)
    masked &= ~after


def _choice(logits: torch.Tensor, temperature: float, gen: torch.Generator | None) -> torch.Tensor | None:
    """Sampled tokens (B, C) when temperature > 0 (Gumbel-max), else None (arg-max inside the commit)."""
    if temperature <= 0:
        return None
    u = torch.rand(logits.shape, generator=gen, device=logits.device, dtype=torch.float32)
    g = -torch.log((-torch.log(u.clamp_min(1e-20))).clamp_min(1e-20))
    return (logits.float() / temperature + g).argmax(-1)


def decide_length(
    logits: torch.Tensor,
    canvas: torch.Tensor,
    masked: torch.Tensor,
    length_ban: torch.Tensor,
    lo: int,
    cfg: SamplerConfig,
    pad_id: int,
    mask_id: int,
) -> None:
    """The length rule (module doc), in place: over the open slots from ``lo``, the first masked slot whose pad
    probability reaches ``cfg.pad_threshold`` and all after it become pads; ``length_ban`` forbids pads before it
    (the whole canvas when no slot reaches it). No host read."""
    lg = logits.float()
    lg[..., mask_id] = float("-inf")
    ban = _pad_banned(canvas, masked, pad_id, cfg, length_ban)
    p_pad = torch.softmax(lg, -1)[..., pad_id]  # (B, C)
    c = canvas.shape[1]
    j = torch.arange(c, device=canvas.device)
    cand = (p_pad >= cfg.pad_threshold) & masked & ~ban & (j >= lo)
    first = torch.where(cand.any(-1), cand.int().argmax(-1), torch.full_like(cand[:, 0], c, dtype=torch.long))
    tail = (j >= first.unsqueeze(-1)) & masked
    canvas.masked_fill_(tail, pad_id)
    masked &= ~tail
    length_ban |= j < first.unsqueeze(-1)


def commit_pass(
    logits: torch.Tensor,
    canvas: torch.Tensor,
    masked: torch.Tensor,
    cfg: SamplerConfig,
    pad_id: int,
    mask_id: int,
    gen: torch.Generator | None = None,
    length_ban: torch.Tensor | None = None,
    floor: int | None = None,
    first: torch.Tensor | None = None,
) -> None:
    """One pass's decision, shared by every sampler: constrain, score, commit, propagate pads (in place).
    ``floor``: this pass's floor (``cfg.floor_at``; None = ``cfg.min_commit``). ``first`` (V,) bool: the only
    tokens slot 0 may take (a block header's keyword, ``keyword_tokens``; a healed word's tokens); None = any."""
    if first is not None:
        logits[:, 0].masked_fill_(~first.to(logits.device), float("-inf"))
    logits[..., mask_id] = float("-inf")  # the model never commits a mask
    logits[..., pad_id].masked_fill_(_pad_banned(canvas, masked, pad_id, cfg, length_ban), float("-inf"))
    kernels.commit_step(
        logits, canvas, masked,
        kernels.CommitRule(cfg.threshold, cfg.min_commit if floor is None else floor, cfg.max_commit, cfg.spread),
        _choice(logits, cfg.temperature, gen),
    )
    _propagate_pads(canvas, masked, pad_id)


def newline_tokens(decode: Callable[[list[int]], str], vocab_size: int) -> torch.Tensor:
    """(V,) bool: the token ids whose text holds a newline (the line stop's table)."""
    return torch.tensor(["\n" in decode([i]) for i in range(vocab_size)], dtype=torch.bool)


def keyword_tokens(decode: Callable[[list[int]], str], vocab_size: int, words: tuple[str, ...]) -> torch.Tensor:
    """(V,) bool: the token ids whose text is blanks, then one of ``words``, then nothing or a character that
    cannot continue a word (``" for"``, ``"if"``, ``" else:"``; not ``" format"``). What slot 0 of a block
    header may hold (``commit_pass``'s ``first``)."""
    pat = re.compile(r"[ \t]*(?:" + "|".join(map(re.escape, words)) + r")(?![\w])", re.S) if words else None
    return torch.tensor([bool(pat and pat.match(decode([i]))) for i in range(vocab_size)], dtype=torch.bool)


def line_decided(canvas: torch.Tensor, masked: torch.Tensor, line_end: torch.Tensor) -> torch.Tensor:
    """(B,) long, 1 where the fill's first line is decided: some token holding a newline is committed and every
    slot before it is too. No host read."""
    decided = (~masked).long().cumprod(-1).bool()  # (B, C): slots with nothing masked at or before them
    return (decided & line_end.to(canvas.device)[canvas]).any(-1).long()


def _grown(size: int, cfg: SamplerConfig) -> int:
    return min(cfg.max_tokens, size * 2)


def grow_canvas(
    canvas: torch.Tensor, masked: torch.Tensor, length_ban: torch.Tensor, new: int, mask_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The canvas, mask and length ban extended to ``new`` slots; the new slots are masks, not yet banned."""
    extra = new - canvas.shape[1]
    fresh = torch.full((canvas.shape[0], extra), mask_id, dtype=canvas.dtype, device=canvas.device)
    return (torch.cat([canvas, fresh], 1), torch.cat([masked, torch.ones_like(fresh, dtype=torch.bool)], 1),
            torch.cat([length_ban, torch.zeros_like(fresh, dtype=torch.bool)], 1))


class DenoiseState:
    """One denoising run's state (batch ``B``, usually 1): canvas, masks, the length rule's ban and the pass
    counters. The one state machine behind every sampler that shares a forward pass: the
    library's ``denoise`` steps one run; the server's batching scheduler steps many runs on the rows of one
    forward pass. Per pass: ``step`` (or ``step_hidden``) on the run's logits, then ``advance`` with the host
    values of ``stats`` (read for many runs at once), which says whether the run stopped and grows a full canvas.

    ``init`` (C,) starts from a partly decided canvas (repair, rewrite): slots holding the mask id are denoised,
    the others are kept; it keeps its own length and takes ``min_commit`` from its first pass. ``first`` (V,)
    bool: the only tokens slot 0 may take (``commit_pass``). ``bias`` (V,) float: added to every slot's logits in
    every pass (module doc, "Novel names"). ``line_end`` (V,) bool: the token ids that hold a newline
    (``newline_tokens``); required by ``cfg.line_stop``.
    """

    def __init__(self, cfg: SamplerConfig, pad_id: int, mask_id: int, device: torch.device | str = "cpu",
                 batch: int = 1, init: torch.Tensor | None = None, seed: int = 0, capacity: int | None = None,
                 line_end: torch.Tensor | None = None, first: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None) -> None:
        if cfg.line_stop and line_end is None:
            raise ValueError("line_stop needs line_end (sampler.newline_tokens)")
        self.cfg, self.pad_id, self.mask_id = cfg, pad_id, mask_id
        self.line_end = line_end.to(device) if line_end is not None else None
        self.first, self.bias = first, bias
        if not 0 <= seed <= SEED_MAX:
            raise ValueError(f"seed must be an integer from 0 to {SEED_MAX}; got {seed}")
        self.gen = torch.Generator(device=device).manual_seed(seed) if cfg.temperature > 0 else None
        if init is not None:
            self.canvas = init.to(device, torch.long).reshape(1, -1).expand(batch, -1).clone()  # (B, C)
            if capacity is not None and self.size > capacity:
                raise ValueError(f"init canvas of {self.size} slots exceeds the cache capacity {capacity}")
        else:
            size = min(cfg.initial_canvas, cfg.max_tokens)
            self.canvas = torch.full((batch, size), mask_id, dtype=torch.long, device=device)
        self.masked = self.canvas == mask_id  # (B, C)
        self.use_length = cfg.pad_threshold > 0 and init is None  # repair / rewrite canvases keep their length
        self.ramp = init is None  # the floor ramp (cfg.floor_at) is for a fresh canvas
        self.length_ban = torch.zeros_like(self.masked)  # (B, C): pads forbidden here by the length rule
        self.open_from: int | None = 0 if self.use_length else None  # slots from here await the length rule
        self.nfe = 0  # forward passes so far
        self.index = 0  # the next pass's index

    @property
    def size(self) -> int:
        return int(self.canvas.shape[1])

    def settled(self) -> Step | None:
        """The final Step when the run starts with nothing masked (an ``init`` canvas fully decided), else None.
        One host read."""
        if bool(self.masked.any()):
            return None
        has_pad = bool((self.canvas == self.pad_id).any())
        return Step(0, self.canvas[0].clone(), 0, 0, True, "complete" if has_pad else "length")

    @property
    def floor(self) -> int:
        """This pass's floor: the ramp over a fresh canvas, else ``min_commit``."""
        return self.cfg.floor_at(self.nfe) if self.ramp else self.cfg.min_commit

    def wants_logits(self, model: CanvasModel) -> bool:
        """Whether the next pass needs the canvas logits; False where ``step_hidden`` may take the hidden states
        instead: greedy, no slot-0 table, no length decision pending, and a model whose logits are its hidden
        states times a tied head (``CanvasModel.tied_head``)."""
        return not (self.open_from is None and self.cfg.temperature <= 0 and self.first is None
                    and model.tied_head is not None)

    def step(self, logits: torch.Tensor) -> None:
        """One pass's decision from this run's canvas logits (B, C, V): the length rule on freshly opened slots,
        then ``commit_pass``. In place; no host read."""
        logits = kernels.add_logit_bias(logits, self.bias)
        if self.open_from is not None:
            decide_length(logits, self.canvas, self.masked, self.length_ban, self.open_from, self.cfg,
                          self.pad_id, self.mask_id)
            self.open_from = None
        commit_pass(logits, self.canvas, self.masked, self.cfg, self.pad_id, self.mask_id, self.gen,
                    self.length_ban, self.floor, self.first)
        self.nfe += 1

    def step_hidden(self, h: torch.Tensor, head_weight: torch.Tensor) -> None:
        """The same decision from the canvas hidden states (B, C, D) and the tied head's weight (V, D), where
        ``wants_logits`` is False: (token, score) straight from the hidden states; on GPUs with a large
        vocabulary the fused kernel never writes the canvas logits (kernels/head.py)."""
        cfg = self.cfg
        ban = _pad_banned(self.canvas, self.masked, self.pad_id, cfg, self.length_ban)
        rows = masked_rows(h, self.masked)
        with torch.no_grad():  # the head's weight is a parameter: no graph, and the Triton path on a GPU
            if rows is None:
                idx, sc = kernels.head_token_stats(h, head_weight, kernels.HeadBans(self.mask_id, self.pad_id,
                                                                                    ban, self.bias))
            else:  # the masked slots only (``pass_logits``); a committed slot scores 0 and is never read
                part_idx, part_sc = kernels.head_token_stats(h[:, rows], head_weight, kernels.HeadBans(
                    self.mask_id, self.pad_id, ban[:, rows], self.bias))
                idx = torch.zeros_like(self.canvas).index_copy_(1, rows, part_idx)
                sc = torch.zeros(self.canvas.shape, dtype=part_sc.dtype).index_copy_(1, rows, part_sc)
        kernels.commit_from_stats(idx, sc, self.canvas, self.masked,
                                  kernels.CommitRule(cfg.threshold, self.floor, cfg.max_commit, cfg.spread))
        _propagate_pads(self.canvas, self.masked, self.pad_id)
        self.nfe += 1

    def stats(self) -> torch.Tensor:
        """(3,) long, on the device: masked slots, whether a pad is committed, whether the first line is decided
        (0 without the line stop). Stack many runs' and read them in one host read for ``advance``."""
        zero = torch.zeros((), dtype=torch.long, device=self.canvas.device)
        line = line_decided(self.canvas, self.masked, self.line_end)[0] if self.cfg.line_stop and \
            self.line_end is not None else zero
        return torch.stack([self.masked.sum(), (self.canvas == self.pad_id).any().long(), line])

    def advance(self, n_masked: int, has_pad: int, line_done: int) -> Step:
        """After a pass, from the host values of ``stats``: the pass's Step (``final`` with its stop reason:
        ``line``, ``complete`` or ``length``); when not final, the next pass's index, and a canvas whose every
        slot holds a real token grows (doubling up to ``max_tokens``) with its new slots open to the length rule.
        """
        cfg = self.cfg
        stop = ""
        if line_done:
            stop = "line"
        elif n_masked == 0:
            if has_pad:
                stop = "complete"
            elif self.size >= cfg.max_tokens:
                stop = "length"
        # Undecided slots: masked ones plus those the canvas may still grow into.
        undecided = 0 if stop else n_masked + max(0, cfg.max_tokens - self.size)
        step = Step(self.index, self.canvas[0].clone(), undecided, self.nfe, bool(stop), stop)
        if stop:
            return step
        self.index += 1
        if n_masked == 0:  # every slot holds a real token: grow the canvas
            new = _grown(self.size, cfg)
            if new <= self.size:  # an init canvas already at max_tokens: nothing left to decide
                return dataclasses.replace(step, final=True, masked=0)
            size = self.size
            self.canvas, self.masked, self.length_ban = grow_canvas(self.canvas, self.masked, self.length_ban,
                                                                    new, self.mask_id)
            if self.use_length:
                self.open_from = size
        return step


def masked_rows(h: torch.Tensor, masked: torch.Tensor) -> torch.Tensor | None:
    """The canvas slots whose head output a pass needs, (n,) int64, where computing only those pays: one CPU row
    with some slot already committed (a committed slot's logits are never read: ``commit_mask_ref`` scores it -1).
    None = every slot (a GPU, where finding them would wait on the device, or a batch)."""
    if h.device.type != "cpu" or masked.shape[0] != 1:
        return None
    rows = masked[0].nonzero().squeeze(1)
    return rows if 0 < rows.numel() < masked.shape[1] else None


@torch.no_grad()
def pass_logits(model: CanvasModel, canvas: torch.Tensor, masked: torch.Tensor, cache: Any) -> torch.Tensor:
    """One pass's logits (B, C, V). On one CPU row the head, a third of a small model's weights, runs on the
    masked slots only (``masked_rows``); the committed slots' rows are left 0."""
    h = model.canvas_hidden(canvas, cache)
    rows = masked_rows(h, masked)
    if rows is None:
        return model.head(h)
    part = model.head(h[:, rows])  # (1, n, V)
    out = part.new_zeros(1, h.shape[1], part.shape[-1])
    out[:, rows] = part
    return out


def denoise(
    model: CanvasModel,
    cache: ContextCache,
    cfg: SamplerConfig,
    pad_id: int,
    mask_id: int,
    seed: int = 0,
    should_stop: Callable[[], bool] | None = None,
    init: torch.Tensor | None = None,
    line_end: torch.Tensor | None = None,
    first: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> Iterator[Step]:
    """The fast sampler: yields a Step after every pass; the last has ``final=True``.

    ``cache`` must have room for ``cfg.max_tokens`` canvas slots. Closing the generator or ``should_stop()``
    returning True stops the work before the next pass. ``init``, ``line_end``, ``first``, ``bias``: as
    ``DenoiseState`` takes them.
    """
    st = DenoiseState(cfg, pad_id, mask_id, model.device, cache.batch, init, seed, cache.capacity, line_end,
                      first, bias)
    done = st.settled()
    if done is not None:
        yield done
        return
    while True:
        if should_stop is not None and should_stop():
            return
        if st.wants_logits(model):
            st.step(pass_logits(model, st.canvas, st.masked, cache))  # (B, C, V)
        else:  # (token, score) straight from the hidden states and the tied head
            head = model.tied_head
            assert head is not None
            st.step_hidden(model.canvas_hidden(st.canvas, cache), head)  # (B, C, D)
        step = st.advance(*st.stats().tolist())  # the one host read per pass
        yield step
        if step.final:
            return


def reference_denoise(
    model: DiffusionLM,
    prefix: list[int],
    suffix: list[int],
    cfg: SamplerConfig,
    pad_id: int,
    mask_id: int,
) -> Iterator[Step]:
    """Baseline: full recompute every pass, one token per pass (the most confident masked slot), greedy.

    Written plainly on purpose (it is the oracle); follows the same pad rules and canvas growth.
    """
    dev = model.device
    size = min(cfg.initial_canvas, cfg.max_tokens)
    canvas = [mask_id] * size
    nfe = 0
    index = 0
    use_length = cfg.pad_threshold > 0
    no_pad_before = 0  # the length rule's ban: no pad before this slot
    open_from: int | None = 0 if use_length else None
    while True:
        tokens = torch.tensor([prefix + suffix + canvas], device=dev)
        kind = torch.tensor([[PREFIX] * len(prefix) + [SUFFIX] * len(suffix) + [CANVAS] * size],
                            dtype=torch.int8, device=dev)
        with torch.no_grad():
            h = model(tokens, kind)[0, len(prefix) + len(suffix) :]  # (C, D)
            logits = model.head(h)  # (C, V)
            if logits.dtype != torch.float64:
                logits = logits.float()
        nfe += 1
        logits[:, mask_id] = float("-inf")
        logits[: cfg.min_tokens, pad_id] = float("-inf")
        last_real = max((j for j, t in enumerate(canvas) if t not in (mask_id, pad_id)), default=-1)
        logits[: last_real + 1, pad_id] = float("-inf")
        logits[:no_pad_before, pad_id] = float("-inf")
        if open_from is not None:  # the length rule: first open slot with P(pad) >= threshold, and all after it
            p_pad = torch.softmax(logits.float(), -1)[:, pad_id]
            first = next((j for j in range(open_from, size)
                          if canvas[j] == mask_id and float(p_pad[j]) >= cfg.pad_threshold), size)
            canvas = [pad_id if (j >= first and t == mask_id) else t for j, t in enumerate(canvas)]
            no_pad_before = max(no_pad_before, first)
            logits[:no_pad_before, pad_id] = float("-inf")
            open_from = None
            if mask_id not in canvas:  # the length pass decided every slot (all pads past min_tokens)
                stop = "complete"
                yield Step(index, torch.tensor(canvas), 0, nfe, True, stop)
                return
        probs = torch.softmax(logits, -1)
        conf, tok = probs.max(-1)
        best_j, best_c = -1, -1.0
        for j, t in enumerate(canvas):
            if t == mask_id and float(conf[j]) > best_c:
                best_j, best_c = j, float(conf[j])
        canvas[best_j] = int(tok[best_j])
        if canvas[best_j] == pad_id:
            canvas = [pad_id if (j > best_j and t == mask_id) else t for j, t in enumerate(canvas)]
        n_masked = canvas.count(mask_id)
        stop = ""
        if n_masked == 0:
            if pad_id in canvas:
                stop = "complete"
            elif size >= cfg.max_tokens:
                stop = "length"
        undecided = 0 if stop else n_masked + max(0, cfg.max_tokens - size)
        yield Step(index, torch.tensor(canvas), undecided, nfe, bool(stop), stop)
        if stop:
            return
        index += 1
        if n_masked == 0:
            new = _grown(size, cfg)
            canvas = canvas + [mask_id] * (new - size)
            if use_length:
                open_from = size
            size = new
