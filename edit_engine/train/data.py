"""Infill-shaped training examples: (prefix, hole, suffix) cut at character boundaries, then tokenized apart.

The hole kinds follow what editors ask for: the rest of a line, whole lines (with their newline, as in
HumanEval-infilling), a line without its newline (as in SantaCoder-FIM), a span inside a line, the indented body
after a block header, a random span, an empty hole, and syntax units chosen with tree-sitter (a statement, an
expression, the inside of an argument or parameter list, a block body; ``syntax_spans``). Prefix, hole and
suffix are tokenized separately, exactly as the engine does when serving, so token boundaries at the cursor look
the same in training and use.

A batch uses the model's layout: [prefix (left-padded) | suffix (right-padded) | canvas], with token kinds that
give the attention mask and positions (``model.layout_mask`` / ``layout_positions``).

**Fill length.** The canvas size is drawn *independently of the hole's length* (``CANVAS_SIZES``). A hole shorter
than the canvas is followed by ``<|pad|>`` slots up to the canvas end; a longer one fills the canvas with its first
tokens and no pad (the canvas is a window onto a fill that goes on). So for any canvas size the model's
probability of a pad at slot j estimates P(fill length <= j): the sampler reads the fill length off the first pass
(``sampler.SamplerConfig.pad_threshold``), and a canvas full of real tokens means "grow", as in serving. When
the canvas size depended on the length (the smallest bucket that holds the hole), the size itself leaked the
length, and at serving time a 16-slot canvas biased every fill towards 9-16 tokens; pads drawn from such a
distribution were also what collapsed earlier models to empty fills.

``collate_ar`` lays out the same examples for the autoregressive baseline (``edit_engine.decoding.ar``): prefix-suffix-
middle sequences, causal, next-token targets.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from edit_engine.model.network import ABSENT, CANVAS, PREFIX, SUFFIX
from edit_engine.model.tokenizer import Tokenizer, trim_end, trim_start

# Canvas sizes seen in training and their probabilities (independent of the hole; see the module doc).
CANVAS_SIZES: dict[int, float] = {8: 0.15, 16: 0.35, 32: 0.28, 64: 0.17, 128: 0.05}
MAX_HOLE = max(CANVAS_SIZES)  # hole tokens kept: the largest canvas is a window onto at most this many
HOLE_KINDS: dict[str, float] = {
    "rest_of_line": 0.17,
    "whole_lines": 0.17,
    "line_no_newline": 0.08,
    "in_line": 0.08,
    "block_body": 0.07,
    "random_span": 0.10,
    "multi_from_cursor": 0.05,
    "empty": 0.03,
    "syntax": 0.25,
}
# Tree-sitter node types (Python grammar) that make a syntax hole, by the unit an editor asks for.
SYNTAX_UNITS: dict[str, tuple[str, ...]] = {
    "statement": ("expression_statement", "return_statement", "raise_statement", "assert_statement",
                  "import_statement", "import_from_statement", "delete_statement", "pass_statement"),
    "expression": ("call", "binary_operator", "comparison_operator", "boolean_operator", "attribute",
                   "subscript", "list", "dictionary", "tuple", "set", "list_comprehension",
                   "dictionary_comprehension", "generator_expression", "conditional_expression", "lambda",
                   "parenthesized_expression", "string", "keyword_argument", "assignment", "augmented_assignment"),
    "arguments": ("argument_list", "parameters"),  # the inside, without the brackets
    "block": ("block",),  # a compound statement's body
    "compound": ("if_statement", "for_statement", "while_statement", "try_statement", "with_statement",
                 "function_definition"),
}
_UNIT_OF = {t: u for u, ts_ in SYNTAX_UNITS.items() for t in ts_}


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


_SYNTAX: Any = None


def _python_syntax() -> Any:
    """(parser, units query) for Python's syntax units, or False when the grammar wheel is missing (syntax holes
    then fall back to line-based ones)."""
    global _SYNTAX
    if _SYNTAX is None:
        try:
            import tree_sitter as ts
            import tree_sitter_python as tsp

            lang = ts.Language(tsp.language())
            src = "\n".join(f"({t}) @{u}" for u, types in SYNTAX_UNITS.items() for t in types)
            _SYNTAX = (ts.Parser(lang), ts.Query(lang, src))
        except Exception:  # no wheel on this machine: line-based holes only
            _SYNTAX = False
    return _SYNTAX


@dataclass
class SyntaxSpans:
    """A file's syntax units: byte spans by unit, converted to character offsets when one is chosen."""

    data: bytes
    units: dict[str, list[tuple[int, int]]]

    def char(self, byte: int) -> int:
        return len(self.data[:byte].decode("utf-8", "replace"))

    def byte(self, char: int) -> int:
        """The byte offset of character ``char`` (the inverse of ``char`` on character boundaries)."""
        return len(self.data.decode("utf-8", "surrogatepass")[:char].encode("utf-8", "surrogatepass"))


def syntax_spans(text: str) -> SyntaxSpans | None:
    """The syntax units of ``text`` (Python) from its tree-sitter tree (a query, matched in C), or None when no
    parser is available or the file has none."""
    got = _python_syntax()
    if not got:
        return None
    import tree_sitter as ts

    data = text.encode("utf-8", "surrogatepass")
    caps = ts.QueryCursor(got[1]).captures(got[0].parse(data).root_node)
    units: dict[str, list[tuple[int, int]]] = {}
    for unit, nodes in caps.items():
        spans = []
        for node in nodes:
            sb, eb = node.start_byte, node.end_byte
            if unit == "arguments":
                sb, eb = sb + 1, eb - 1  # the inside of the brackets
            if eb > sb:
                spans.append((sb, eb))
        if spans:
            units[unit] = sorted(spans)
    # Sorted: tree-sitter returns captures in no fixed order, and a seeded run must draw the same holes.
    return SyntaxSpans(data, dict(sorted(units.items()))) if units else None


def sample_hole(
    text: str, rng: random.Random, kind: str | None = None, spans: SyntaxSpans | None = None,
    lo: int = 0, hi: int | None = None,
) -> tuple[int, int, str]:
    """Character offsets [a, b) of a hole in ``text`` and its kind. ``spans`` (from ``syntax_spans``) serve
    the ``syntax`` kind; without them it falls back to whole lines. ``lo``/``hi`` keep the hole's anchor (the
    character it is drawn around, a syntax unit's start) in ``[lo, hi)``: several holes of one window
    (``windows.make_window``); a line-based hole may start a little before ``lo``, at its line's start."""
    if kind is None:
        kind = rng.choices(list(HOLE_KINDS), weights=list(HOLE_KINDS.values()))[0]
    n = len(text)
    lo = max(0, min(lo, n - 1))
    hi = n if hi is None else max(lo + 1, min(hi, n))
    if kind == "syntax":
        if not spans:
            return sample_hole(text, rng, "whole_lines", lo=lo, hi=hi)
        return _syntax_hole(text, rng, spans, lo, hi)
    return _line_hole(text, rng, kind, rng.randrange(lo, hi))


def _syntax_hole(text: str, rng: random.Random, spans: SyntaxSpans, lo: int, hi: int) -> tuple[int, int, str]:
    """A ``syntax`` hole: a random unit kind, then a random unit of it whose start lies in ``[lo, hi)``
    (whole lines when none does); a statement, compound statement or block is widened to whole lines half the
    time."""
    n = len(text)
    unit = rng.choice(sorted(spans.units))
    pool = spans.units[unit]
    if lo > 0 or hi < n:
        blo, bhi = (lo, hi) if len(spans.data) == n else (spans.byte(lo), spans.byte(hi))
        pool = [sp for sp in pool if blo <= sp[0] < bhi]
        if not pool:
            return sample_hole(text, rng, "whole_lines", lo=lo, hi=hi)
    sb, eb = rng.choice(pool)
    if len(spans.data) == n:  # ASCII: bytes are characters
        a, b = sb, eb
    else:
        a, b = spans.char(sb), spans.char(eb)
    a, b = max(0, min(a, n)), max(0, min(b, n))
    if unit in ("statement", "compound", "block") and rng.random() < 0.5:
        a = text.rfind("\n", 0, a) + 1  # whole lines, with the indentation and the newline
        e = text.find("\n", max(a, b - 1) if b > a else b)
        b = n if e < 0 else e + 1
    return a, max(a, b), "syntax"


def _line_hole(text: str, rng: random.Random, kind: str, i: int) -> tuple[int, int, str]:
    """A line-based hole of ``kind`` around character ``i`` (any kind but ``syntax``; an unknown one is
    ``empty``)."""
    n = len(text)
    s, e = _line_bounds(text, i)
    line = text[s:e]
    indent = len(line) - len(line.lstrip())
    if kind == "rest_of_line":
        a = rng.randint(min(s + indent, e), e)
        return a, e, kind
    if kind == "whole_lines":
        k = rng.choice((1, 1, 1, 2, 3, 4))
        return s, min(n, _lines_on(text, e, k - 1) + 1), kind
    if kind == "line_no_newline":
        return s, e, kind
    if kind == "in_line":
        a = rng.randint(s, e)
        return a, rng.randint(a, e), kind
    if kind == "block_body":
        return _block_body_hole(text, rng, i)
    if kind == "random_span":
        return i, min(n, i + rng.randint(1, 400)), kind
    if kind == "multi_from_cursor":
        a = rng.randint(min(s + indent, e), e)
        return a, _lines_on(text, e, rng.randint(1, 3)), kind
    return i, i, "empty"


def _lines_on(text: str, e: int, k: int) -> int:
    """The end (newline offset, or len(text)) of the k-th line after the line that ends at ``e``."""
    b = e
    for _ in range(k):
        nb = text.find("\n", b + 1)
        b = len(text) if nb < 0 else nb
    return b


def _block_body_hole(text: str, rng: random.Random, i: int) -> tuple[int, int, str]:
    """The lines after the first header ending with ':' at or after ``i`` that are indented deeper than it
    (whole lines anywhere when no header follows)."""
    n = len(text)
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
    return a, b, "block_body"


def make_example(
    tok: Tokenizer,
    text: str,
    rng: random.Random,
    max_prefix: int,
    max_suffix: int,
    max_hole: int = MAX_HOLE,
    spans: SyntaxSpans | None = None,
) -> Example | None:
    """One example. The hole keeps at most ``max_hole`` tokens (a window onto a longer one: the suffix still
    starts where the hole ends, so nothing after the window is shown to the model)."""
    if not text:
        return None
    a, b, kind = sample_hole(text, rng, spans=spans)
    # Context windows in characters (about 4 chars per token, generous), trimmed in tokens below.
    pre = text[max(0, a - 6 * max_prefix) : a]
    hole = text[a : min(b, a + 8 * max_hole)]
    suf = text[b : b + 6 * max_suffix]
    hole_ids = tok.encode(hole)[: max_hole + 1]  # one past the window: the canvas knows whether it goes on
    p_ids = trim_start(tok, pre, tok.encode(pre)[-max_prefix:])
    s_ids = trim_end(tok, suf, tok.encode(suf)[:max_suffix])
    return Example(p_ids, hole_ids, s_ids, kind)


def canvas_size(rng: random.Random, max_canvas: int = MAX_HOLE) -> int:
    """A canvas size drawn from ``CANVAS_SIZES`` (at most ``max_canvas``), independent of the hole."""
    sizes = [c for c in CANVAS_SIZES if c <= max_canvas] or [min(CANVAS_SIZES)]
    return rng.choices(sizes, weights=[CANVAS_SIZES[c] for c in sizes])[0]


def canvas_targets(hole: list[int], c: int, pad_id: int) -> list[int]:
    """The c canvas targets of a hole: its first c tokens, then pads if it is shorter."""
    body = hole[:c]
    return body + [pad_id] * (c - len(body))


@dataclass
class Batch:
    tokens: torch.Tensor  # (B, T) inputs with masks on the canvas
    kind: torch.Tensor  # (B, T) int8 layout kinds
    targets: torch.Tensor  # (B, T) target ids; -100 where there is no canvas target
    weights: torch.Tensor  # (B, T) fp32 loss weight of each canvas target (1/t on masked slots)
    ar_targets: torch.Tensor  # (B, T) next-token targets for prefix rows; -100 elsewhere
    n_canvas: int  # canvas slots present in the batch (the loss normaliser)
    # Several holes per row (``windows.collate_windows``): each token's hole (0 = the shared prefix), each
    # canvas slot's prefix limit (a tensor index), and the positions; None for the single-hole layout.
    seg: torch.Tensor | None = None
    limit: torch.Tensor | None = None
    pos: torch.Tensor | None = None


def _empty(B: int, T: int, pad_id: int) -> tuple[torch.Tensor, ...]:
    """A batch's tensors before any example is laid in: pad tokens, absent kinds, no targets."""
    return (torch.full((B, T), pad_id, dtype=torch.long), torch.full((B, T), ABSENT, dtype=torch.int8),
            torch.full((B, T), -100, dtype=torch.long), torch.zeros(B, T), torch.full((B, T), -100, dtype=torch.long))


def collate(
    examples: list[Example], tok: Tokenizer, rng: random.Random, t_min: float = 0.05, max_canvas: int = MAX_HOLE,
) -> Batch:
    """Lay out examples and draw the diffusion time t ~ U(t_min, 1] per example (MDLM / LLaDA objective).
    Canvas sizes are drawn from ``CANVAS_SIZES`` (``canvas_size``)."""
    sizes = [canvas_size(rng, max_canvas) for _ in examples]
    pl = max(len(e.prefix) for e in examples)
    sl = max(len(e.suffix) for e in examples)
    cl = max(sizes)
    B, T = len(examples), pl + sl + cl
    tokens, kind, targets, weights, ar = _empty(B, T, tok.pad_id)
    n_canvas = 0
    for r, (e, c) in enumerate(zip(examples, sizes, strict=True)):
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
        lay_canvas(tokens, kind, targets, weights, r, pl + sl, e.hole, c, tok, rng, t_min)
        n_canvas += c
    return Batch(tokens, kind, targets, weights, ar, n_canvas)


def lay_canvas(tokens: torch.Tensor, kind: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor, r: int,
               o: int, hole: list[int], c: int, tok: Tokenizer, rng: random.Random, t_min: float) -> None:
    """Write one hole's c-slot canvas into row r at column o: draw t ~ U(t_min, 1], mask each slot with
    probability t (at least one), and set the masked slots' targets with weight 1/t (MDLM / LLaDA); visible slots
    show their true token and have no target."""
    ct = torch.tensor(canvas_targets(hole, c, tok.pad_id))
    t = rng.uniform(t_min, 1.0)
    m = torch.rand(c) < t
    if not bool(m.any()):
        m[rng.randrange(c)] = True
    kind[r, o : o + c] = CANVAS
    tokens[r, o : o + c] = torch.where(m, torch.full_like(ct, tok.mask_id), ct)
    targets[r, o : o + c] = torch.where(m, ct, torch.full_like(ct, -100))
    weights[r, o : o + c] = m.float() / t


def collate_ar(examples: list[Example], tok: Tokenizer, max_middle: int = MAX_HOLE) -> Batch:
    """The autoregressive baseline's batch: prefix-suffix-middle sequences (``edit_engine.decoding.ar.psm_prompt``), all
    causal (kind PREFIX), left-padded. ``targets``/``weights`` hold the next-token targets of the middle (its
    tokens, then eos; a middle cut at ``max_middle`` has no eos, like a full canvas), ``ar_targets`` those of
    the prefix and suffix (the auxiliary loss, as the diffusion model's prefix loss)."""
    from edit_engine.decoding.ar import psm_prompt

    seqs: list[tuple[list[int], int]] = []  # (sequence, index of the <fim_middle> token)
    for e in examples:
        prompt = psm_prompt(tok, e.prefix, e.suffix)
        middle = e.hole[:max_middle] + ([tok.eos_id] if len(e.hole) <= max_middle else [])
        seqs.append((prompt + middle, len(prompt) - 1))
    T = max(len(q) for q, _ in seqs)
    B = len(examples)
    tokens, kind, targets, weights, ar = _empty(B, T, tok.pad_id)
    n_mid = 0
    for r, (q, mid) in enumerate(seqs):
        o = T - len(q)
        tokens[r, o:] = torch.tensor(q)
        kind[r, o:] = PREFIX
        nxt = torch.tensor(q[1:] + [-100])
        is_mid = torch.arange(len(q)) >= mid  # rows that predict the middle (and its eos)
        targets[r, o:] = torch.where(is_mid, nxt, torch.full_like(nxt, -100))
        ar[r, o:] = torch.where(is_mid, torch.full_like(nxt, -100), nxt)
        weights[r, o:] = (is_mid & (nxt != -100)).float()
        n_mid += int((is_mid & (nxt != -100)).sum())
    return Batch(tokens, kind, targets, weights, ar, max(1, n_mid))
