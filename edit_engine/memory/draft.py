"""Left-to-right drafting from a stack of n-gram tiers.

At each step the candidates are the most frequent followers of the longest matching contexts in every
tier.  Each tier scores them with Witten-Bell smoothing, and the tiers are mixed as nested caches, most
local first: ``p = l_doc * p_doc + (1 - l_doc) * (l_open * p_open + (1 - l_open) * (... p_background))``.
A tier's weight ``l`` is its Witten-Bell confidence in the longest context it matched, scaled by how long
that context is, so a document that has seen the last three tokens before outvotes a background that
has seen them a million times only when its own evidence is consistent, and a cache that matched only
the last token barely speaks.  Drafting stops at the end of the line, at the text that already follows
the cursor, or where the best token falls below the thresholds of a :class:`DraftRule`: the first token's depend
on where the cursor is (a line's start, after a member access, elsewhere), and a draft grows past its first
token only while the product of its tokens' probabilities stays above ``keep``: short drafts that are right
beat long ones whose tail is a guess, since a person takes a suggestion only when all of it is right.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .lexer import tokenize
from .ngram import NgramCounts, witten_bell

__all__ = ["Draft", "DraftRule", "Thresholds", "draft_tokens", "split_partial", "TOP_K"]

TOP_K = 6
GLOBAL_TIERS = ("packages", "background")  # what the code at hand did not write: never "local"
_WORDISH = re.compile(r" ?\w+\Z|[ \t]+\Z")
MEMBER_ACCESS = frozenset({".", "?.", "::"})  # a token after which a member's name comes


@dataclass(frozen=True)
class Thresholds:
    """A token is taken when the caches alone (every tier but the background) give it at least ``local``
    (None: they are not asked apart), else when all tiers mixed give it at least ``full``."""

    local: float | None
    full: float


@dataclass(frozen=True)
class DraftRule:
    """When a draft takes its next token. The first token's thresholds depend on the cursor's place:
    ``line_start`` (nothing but blanks before it on its line: a new statement, the least predictable place),
    ``member`` (right after a member access such as ``.`` or ``::``: the names that follow an object recur) and
    ``first`` (anywhere else); every later token needs ``then`` and keeps the draft's probability (the product
    of its tokens') at least ``keep``. ``uniform`` gives every token the same thresholds."""

    line_start: Thresholds = Thresholds(0.6, 0.7)
    member: Thresholds = Thresholds(0.3, 0.4)
    first: Thresholds = Thresholds(0.35, 0.4)
    then: Thresholds = Thresholds(0.6, 0.7)
    keep: float = 0.6

    @classmethod
    def uniform(cls, full: float, local: float | None = None) -> DraftRule:
        t = Thresholds(local, full)
        return cls(t, t, t, t, 0.0)

    def opening(self, context: Sequence[str], prefix: str) -> Thresholds:
        """The first token's thresholds at a cursor after ``prefix`` (lexed: ``context``)."""
        if not prefix[prefix.rfind("\n") + 1 :].strip():
            return self.line_start
        return self.member if context and context[-1] in MEMBER_ACCESS else self.first


@dataclass
class Draft:
    """A drafted continuation of the text before the cursor.

    ``text`` is what to insert; ``tokens``/``probs``/``tiers`` describe it token by token (the first
    token may complete a partial word, in which case only its missing tail is in ``text``); ``score`` is
    the product of the probabilities, the chance the whole draft is right under the model.
    """

    text: str
    probs: list[float] = field(default_factory=list)
    tiers: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    score: float = 1.0

    @property
    def min_prob(self) -> float:
        """The weakest token's probability (1.0 for an empty draft)."""
        return min(self.probs, default=1.0)


def split_partial(tokens: list[str], prefix: str) -> tuple[list[str], str]:
    """Split off a partially typed last token (a word or trailing blanks) that the draft must extend."""
    if tokens and prefix and _WORDISH.fullmatch(tokens[-1]) and not prefix.endswith("\n"):
        return tokens[:-1], tokens[-1]
    return tokens, ""


def _mix(
    tiers: Sequence[tuple[str, NgramCounts]], context: Sequence[str], partial: str, order_weight: float
) -> list[tuple[str, float, str]]:
    """Candidates with mixed probabilities and the tier contributing most to each, best first."""
    cands: dict[str, None] = {}
    for _name, model in tiers:
        n = min(len(context), model.order - 1)
        found = 0
        for m in range(n, -1, -1):
            h = tuple(context[len(context) - m :]) if m else ()
            top = model.top(h, TOP_K, partial)
            for tok, _c in top:
                cands.setdefault(tok, None)
            if top:
                found += 1
                if found == 2:
                    break
    if not cands:
        return []
    toks = list(cands)
    mixed = [0.0] * len(toks)
    share: list[list[float]] = [[] for _ in toks]
    remaining = 1.0
    for ti, (_name, model) in enumerate(tiers):
        probs, best_m, conf = witten_bell(model, context, toks)
        if partial:
            z = sum(probs)
            probs = [p / z for p in probs] if z > 0 else probs
        last = ti == len(tiers) - 1
        if last:
            lam = 1.0
        elif best_m <= 0:
            lam = 0.0
        else:
            lam = conf * (best_m / max(model.order - 1, 1)) ** order_weight
        w = remaining * lam
        for i, p in enumerate(probs):
            mixed[i] += w * p
            share[i].append(w * p)
        remaining *= 1.0 - lam
        if remaining <= 1e-9:
            break
    out = []
    for i, tok in enumerate(toks):
        best_tier = max(range(len(share[i])), key=share[i].__getitem__)
        out.append((tok, mixed[i], tiers[best_tier][0]))
    out.sort(key=lambda x: -x[1])
    return out


def draft_tokens(
    tiers: Sequence[tuple[str, NgramCounts]],
    prefix: str,
    suffix: str,
    language: str,
    max_tokens: int = 24,
    rule: DraftRule = DraftRule(),
    order_weight: float = 1.0,
) -> Draft | None:
    """Draft the rest of the line after ``prefix`` under ``rule``; ``None`` when not even one token is taken.

    A token may come from the caches alone (every tier but the background), tried first: the background is
    the best guess where the text at hand says nothing, but mixed in everywhere it dilutes what the file
    itself repeats."""
    if not tiers:
        return None
    local = [t for t in tiers if t[0] not in GLOBAL_TIERS]
    # Lex only the tail: tokens never cross a line start, so cutting at a newline is exact.
    cut = prefix.rfind("\n", 0, max(len(prefix) - 400, 0))
    tokens = tokenize(prefix[cut if cut > 0 else 0 :], language)
    context, partial = split_partial(tokens, prefix)
    line_rest = suffix.split("\n", 1)[0]
    stop_tok = tokenize(line_rest.lstrip(" \t"), language)[:1] if line_rest.strip() else []
    limits = rule.opening(context, prefix)
    d = Draft(text="")
    logp = 0.0
    while len(d.tokens) < max_tokens:
        ranked = _mix(local, context, partial, order_weight) if local and limits.local is not None else []
        if not (ranked and limits.local is not None and ranked[0][1] >= limits.local):
            ranked = _mix(tiers, context, partial, order_weight)
            if not ranked or ranked[0][1] < limits.full:
                break
        tok, p, tier = ranked[0]
        if "\n" in tok or (stop_tok and tok.strip() == stop_tok[0].strip()):
            break
        if partial and not tok.startswith(partial):
            break
        if d.tokens and math.exp(logp) * p < rule.keep:
            break
        d.text += tok[len(partial) :]
        d.tokens.append(tok)
        d.probs.append(p)
        d.tiers.append(tier)
        logp += math.log(max(p, 1e-300))
        context = [*context, tok]
        partial = ""
        limits = rule.then
    if not d.text:
        return None
    d.score = math.exp(logp)
    return d
