"""Infill-shaped training examples: (prefix, hole, suffix) cut at character boundaries, then tokenized apart.

The hole kinds follow what editors ask for: the rest of a line, whole lines (with their newline, as in
HumanEval-infilling), a line without its newline (as in SantaCoder-FIM), a span inside a line, the indented body
after a block header, a random span, and an empty hole. Prefix, hole and suffix are tokenized separately,
exactly as the engine does when serving, so token boundaries at the cursor look the same in training and use.

A batch uses the model's layout: [prefix (left-padded) | suffix (right-padded) | canvas], with token kinds that
give the attention mask and positions (``model.layout_mask`` / ``layout_positions``). The canvas holds the hole's
tokens, then ``<|pad|>`` up to its bucket; slots past the bucket are absent.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from ..model import ABSENT, CANVAS, PREFIX, SUFFIX
from ..tokenizer import Tokenizer, trim_end, trim_start

BUCKETS = (4, 8, 16, 32, 64)
HOLE_KINDS: dict[str, float] = {
    "rest_of_line": 0.22,
    "whole_lines": 0.22,
    "line_no_newline": 0.10,
    "in_line": 0.12,
    "block_body": 0.10,
    "random_span": 0.16,
    "multi_from_cursor": 0.05,
    "empty": 0.03,
}


@dataclass(frozen=True)
class Example:
    prefix: list[int]
    hole: list[int]
    suffix: list[int]
    kind: str


def _line_bounds(text: str, i: int) -> tuple[int, int]:
    """Start of the line holding offset i, and the offset of its newline (or len(text))."""
    s = text.rfind("\n", 0, i) + 1
    e = text.find("\n", i)
    return s, (len(text) if e < 0 else e)


def sample_hole(text: str, rng: random.Random, kind: str | None = None) -> tuple[int, int, str]:
    """Character offsets [a, b) of a hole in ``text`` and its kind."""
    if kind is None:
        kind = rng.choices(list(HOLE_KINDS), weights=list(HOLE_KINDS.values()))[0]
    n = len(text)
    i = rng.randrange(n)
    s, e = _line_bounds(text, i)
    line = text[s:e]
    indent = len(line) - len(line.lstrip())
    if kind == "rest_of_line":
        a = rng.randint(min(s + indent, e), e)
        return a, e, kind
    if kind == "whole_lines":
        k = rng.choice((1, 1, 1, 2, 3, 4))
        b = e
        for _ in range(k - 1):
            nb = text.find("\n", b + 1)
            b = n if nb < 0 else nb
        return s, min(n, b + 1), kind
    if kind == "line_no_newline":
        return s, e, kind
    if kind == "in_line":
        a = rng.randint(s, e)
        return a, rng.randint(a, e), kind
    if kind == "block_body":
        # The lines after a header ending with ':' that are indented deeper than it.
        j = text.find(":\n", i)
        if j < 0:
            return sample_hole(text, rng, "whole_lines")
        hs, _ = _line_bounds(text, j)
        hdr = text[hs:j]
        base = len(hdr) - len(hdr.lstrip())
        a = j + 2
        b = a
        while b < n:
            le = text.find("\n", b)
            le = n if le < 0 else le
            ln = text[b:le]
            if ln.strip() and len(ln) - len(ln.lstrip()) <= base:
                break
            b = min(n, le + 1)
        return a, b, kind
    if kind == "random_span":
        return i, min(n, i + rng.randint(1, 300)), kind
    if kind == "multi_from_cursor":
        a = rng.randint(min(s + indent, e), e)
        b = e
        for _ in range(rng.randint(1, 3)):
            nb = text.find("\n", b + 1)
            b = n if nb < 0 else nb
        return a, b, kind
    return i, i, "empty"


def make_example(
    tok: Tokenizer,
    text: str,
    rng: random.Random,
    max_prefix: int,
    max_suffix: int,
    max_hole: int = BUCKETS[-1],
) -> Example | None:
    if not text:
        return None
    a, b, kind = sample_hole(text, rng)
    # Context windows in characters (about 4 chars per token, generous), trimmed in tokens below.
    pre = text[max(0, a - 6 * max_prefix) : a]
    hole = text[a:b]
    suf = text[b : b + 6 * max_suffix]
    hole_ids = tok.encode(hole)
    if len(hole_ids) > max_hole:
        head = tok.decode(hole_ids[:max_hole])
        if not hole.startswith(head):  # cut inside a multi-byte character: skip
            return None
        hole_ids = hole_ids[:max_hole]
        suf = (hole[len(head) :] + suf)[: 6 * max_suffix]
    p_ids = trim_start(tok, pre, tok.encode(pre)[-max_prefix:])
    s_ids = trim_end(tok, suf, tok.encode(suf)[:max_suffix])
    return Example(p_ids, hole_ids, s_ids, kind)


def bucket_for(n: int, rng: random.Random | None = None, p_larger: float = 0.3) -> int:
    """Smallest canvas bucket that holds n tokens; with probability p_larger a larger one (teaches long pads)."""
    fits = [c for c in BUCKETS if c >= n] or [BUCKETS[-1]]
    if rng is not None and len(fits) > 1 and rng.random() < p_larger:
        return rng.choice(fits[1:])
    return fits[0]


@dataclass
class Batch:
    tokens: torch.Tensor  # (B, T) inputs with masks on the canvas
    kind: torch.Tensor  # (B, T) int8 layout kinds
    targets: torch.Tensor  # (B, T) target ids; -100 where there is no canvas target
    weights: torch.Tensor  # (B, T) fp32 loss weight of each canvas target (1/t on masked slots)
    ar_targets: torch.Tensor  # (B, T) next-token targets for prefix rows; -100 elsewhere
    n_canvas: int  # canvas slots present in the batch (the loss normaliser)


def collate(
    examples: list[Example], tok: Tokenizer, rng: random.Random, t_min: float = 0.05
) -> Batch:
    """Lay out examples and draw the diffusion time t ~ U(t_min, 1] per example (MDLM / LLaDA objective)."""
    buckets = [bucket_for(len(e.hole), rng) for e in examples]
    pl = max(len(e.prefix) for e in examples)
    sl = max(len(e.suffix) for e in examples)
    cl = max(buckets)
    B, T = len(examples), pl + sl + cl
    tokens = torch.full((B, T), tok.pad_id, dtype=torch.long)
    kind = torch.full((B, T), ABSENT, dtype=torch.int8)
    targets = torch.full((B, T), -100, dtype=torch.long)
    weights = torch.zeros(B, T)
    ar = torch.full((B, T), -100, dtype=torch.long)
    n_canvas = 0
    for r, (e, c) in enumerate(zip(examples, buckets, strict=True)):
        p = len(e.prefix)
        if p:
            tokens[r, pl - p : pl] = torch.tensor(e.prefix)
            kind[r, pl - p : pl] = PREFIX
            # Next-token targets for the causal prefix; the last one predicts the hole's first token (or pad).
            nxt = e.prefix[1:] + [e.hole[0] if e.hole else tok.pad_id]
            ar[r, pl - p : pl] = torch.tensor(nxt)
        if e.suffix:
            tokens[r, pl : pl + len(e.suffix)] = torch.tensor(e.suffix)
            kind[r, pl : pl + len(e.suffix)] = SUFFIX
        canvas = e.hole[:c] + [tok.pad_id] * (c - len(e.hole[:c]))
        t = rng.uniform(t_min, 1.0)
        m = torch.rand(c, generator=None) < t
        if not bool(m.any()):
            m[rng.randrange(c)] = True
        ct = torch.tensor(canvas)
        o = pl + sl
        kind[r, o : o + c] = CANVAS
        tokens[r, o : o + c] = torch.where(m, torch.full_like(ct, tok.mask_id), ct)
        targets[r, o : o + c] = torch.where(m, ct, torch.full_like(ct, -100))
        weights[r, o : o + c] = m.float() / t
        n_canvas += c
    return Batch(tokens, kind, targets, weights, ar, n_canvas)
