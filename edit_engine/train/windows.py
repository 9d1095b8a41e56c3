"""Several holes per window: one shared causal prefix, then each hole's suffix and canvas, in one row.

A single-hole example spends most of its row on context: about 256 prefix and 96 suffix tokens carry one canvas
of about 33 slots, half of them masked, so about 4% of the tokens a step processes are diffusion targets. A
window puts ``K`` holes into one row and shares the prefix between them:

    [ prefix: the text up to the last hole's start (causal) | suffix 1 | canvas 1 | suffix 2 | canvas 2 | ... ]

The prefix is causal, so hole i's canvas can read exactly the prefix tokens before its own start (``cut``) and
nothing of the text after it: each hole sees what a single-hole example of it would (its prefix, its suffix, its
canvas), and no hole's canvas sees another hole's slots. The prefix is always the real text, so holes may even
overlap: a later hole reads an earlier hole's true text as context, never its own. Positions are those of the
single-hole layout (``model.layout_positions``) per hole: prefix token m at m, hole i's canvas slot j at
cut_i + j, its suffix token j at cut_i + ``max_canvas`` + j. With one hole, the mask and positions equal the
single-hole layout's (``tests/test_windows.py`` checks this, and that every canvas's hidden states equal those
of its own single-hole row).

Tokenization matches serving at each cursor: the prefix is tokenized in pieces split at every hole's start, so
each hole's prefix ends on a token boundary, and every hole and suffix is tokenized on its own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from edit_engine.model.network import ABSENT, CANVAS, PREFIX, SUFFIX
from edit_engine.model.tokenizer import Tokenizer, trim_end, trim_start
from edit_engine.train.data import MAX_HOLE, Batch, SyntaxSpans, canvas_size, lay_canvas, sample_hole

CHARS_PER_TOKEN = 4  # a generous estimate of the characters per token of Python source


@dataclass(frozen=True)
class WindowHole:
    cut: int  # prefix tokens before this hole's start (what its canvas may read of the prefix)
    start: int  # the hole's character offsets [start, end) in the text it was cut from
    end: int
    hole: list[int]
    suffix: list[int]
    kind: str


@dataclass(frozen=True)
class Window:
    prefix: list[int]  # the text up to the last hole's start, tokenized in pieces split at every hole's start
    holes: list[WindowHole]  # in order of their start


def make_window(
    tok: Tokenizer,
    text: str,
    rng: random.Random,
    max_prefix: int,
    max_suffix: int,
    holes: int,
    span_tokens: int = 128,
    spans: SyntaxSpans | None = None,
    max_hole: int = MAX_HOLE,
) -> Window | None:
    """Up to ``holes`` holes whose starts lie within about ``span_tokens`` tokens of each other, each with at
    least ``max_prefix`` prefix tokens where the file has them (the shared prefix keeps ``max_prefix +
    2 * span_tokens`` tokens at most; a hole whose start falls before it is dropped; the last one never is)."""
    if not text or holes < 1:
        return None
    n = len(text)
    span_chars = CHARS_PER_TOKEN * span_tokens
    lo = rng.randrange(max(1, n - span_chars // 2))  # the region the holes start in: [lo, lo + span_chars)
    got = [sample_hole(text, rng, spans=spans, lo=lo, hi=lo + span_chars) for _ in range(holes)]
    got.sort(key=lambda h: (h[0], h[1]))
    budget = max_prefix + 2 * span_tokens
    start = max(0, got[0][0] - 6 * max_prefix)
    # Prefix pieces split at every distinct hole start; the first one is cut mid-token at `start`.
    starts = sorted({a for a, _, _ in got})
    bounds = [start, *starts]
    ids: list[int] = []
    cut_at: dict[int, int] = {}
    for p, q in zip(bounds, bounds[1:], strict=False):
        ids.extend(tok.encode(text[p:q]))
        cut_at[q] = len(ids)
    # Keep the last `budget` tokens, then drop any leading token that does not decode to whole characters (the
    # character cut at `start`, or the token cut, can fall inside a byte-level token).
    prefix = trim_start(tok, text[start : starts[-1]], ids[max(0, len(ids) - budget) :])
    drop = len(ids) - len(prefix)
    out: list[WindowHole] = []
    for a, b, kind in got:
        cut = cut_at[a] - drop
        if cut < 0 or (cut == 0 and drop > 0):
            continue  # its prefix would be cut away (a hole at the file's start keeps cut 0)
        hole = text[a : min(b, a + 8 * max_hole)]
        suf = text[b : b + 6 * max_suffix]
        hole_ids = tok.encode(hole)[: max_hole + 1]  # one past the window, as make_example
        s_ids = trim_end(tok, suf, tok.encode(suf)[:max_suffix])
        out.append(WindowHole(cut, a, b, hole_ids, s_ids, kind))
    assert out and out[-1].cut == len(prefix)
    return Window(prefix, out)


def collate_windows(
    windows: list[Window], tok: Tokenizer, rng: random.Random, max_canvas_pos: int, t_min: float = 0.05,
    max_canvas: int = MAX_HOLE,
) -> Batch:
    """Lay out windows, one per row: the prefix left-padded to the batch's longest, then each hole's suffix and
    canvas packed tightly, rows right-padded. Canvas sizes and the diffusion time t are drawn per hole as in
    ``data.collate``; ``max_canvas_pos`` is the model's ``max_canvas`` (where suffix positions start)."""
    sizes = [[canvas_size(rng, max_canvas) for _ in w.holes] for w in windows]
    pl = max(len(w.prefix) for w in windows)
    widths = [pl + sum(len(h.suffix) + c for h, c in zip(w.holes, cs, strict=True))
              for w, cs in zip(windows, sizes, strict=True)]
    B, T = len(windows), max(widths)
    tokens = torch.full((B, T), tok.pad_id, dtype=torch.long)
    kind = torch.full((B, T), ABSENT, dtype=torch.int8)
    targets = torch.full((B, T), -100, dtype=torch.long)
    weights = torch.zeros(B, T)
    ar = torch.full((B, T), -100, dtype=torch.long)
    seg = torch.zeros(B, T, dtype=torch.int16)
    limit = torch.zeros(B, T, dtype=torch.int32)
    pos = torch.zeros(B, T, dtype=torch.long)
    n_canvas = 0
    for r, (w, cs) in enumerate(zip(windows, sizes, strict=True)):
        p = len(w.prefix)
        o = pl - p
        if p:
            tokens[r, o:pl] = torch.tensor(w.prefix)
            kind[r, o:pl] = PREFIX
            last_hole = w.holes[-1].hole
            ar[r, o:pl] = torch.tensor(w.prefix[1:] + [last_hole[0] if last_hole else tok.pad_id])
            pos[r, o:pl] = torch.arange(p)
        x = pl
        for i, (h, c) in enumerate(zip(w.holes, cs, strict=True)):
            ns = len(h.suffix)
            if ns:
                tokens[r, x : x + ns] = torch.tensor(h.suffix)
                kind[r, x : x + ns] = SUFFIX
                pos[r, x : x + ns] = h.cut + max_canvas_pos + torch.arange(ns)
                seg[r, x : x + ns] = i + 1
            x += ns
            lay_canvas(tokens, kind, targets, weights, r, x, h.hole, c, tok, rng, t_min)
            pos[r, x : x + c] = h.cut + torch.arange(c)
            seg[r, x : x + c] = i + 1
            limit[r, x : x + c] = o + h.cut
            x += c
            n_canvas += c
    return Batch(tokens, kind, targets, weights, ar, n_canvas, seg=seg, limit=limit, pos=pos)


def window_mask(kind: torch.Tensor, seg: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """The attention mask (B, 1, T, T), True = may attend, of a window batch: the prefix causal; a suffix
    token reads its own hole's suffix; a canvas slot reads the prefix before its hole's start (tensor index
    below ``limit``), its hole's suffix and its hole's canvas. Absent tokens attend to themselves only."""
    q, k = kind.unsqueeze(-1), kind.unsqueeze(-2)
    t = kind.shape[-1]
    idx = torch.arange(t, device=kind.device)
    causal = idx.unsqueeze(-1) >= idx.unsqueeze(0)
    same = (seg.unsqueeze(-1) == seg.unsqueeze(-2)) & (seg.unsqueeze(-1) > 0)
    before = idx.view(1, 1, t) < limit.unsqueeze(-1)  # (B, T, T): key index below the query's limit
    allow = (q == PREFIX) & (k == PREFIX) & causal
    allow |= (q == SUFFIX) & (k == SUFFIX) & same
    allow |= (q == CANVAS) & (((k == PREFIX) & before) | (((k == SUFFIX) | (k == CANVAS)) & same))
    allow |= torch.eye(t, dtype=torch.bool, device=kind.device)
    return allow.unsqueeze(1)
