"""Count-based n-gram models with Witten-Bell interpolation.

Two storages share one query interface (:class:`NgramCounts`):

* :class:`StaticNgrams` — the shipped background model: for every context length ``m`` (0 .. order-1)
  a sorted array of 64-bit context hashes with CSR offsets into parallel arrays of next-token ids and
  counts (entries of a context sorted by token id).  Singletons and other rare n-grams are pruned at
  build time, but each context keeps its unpruned total and type count, so the pruned mass goes to the
  lower orders instead of inflating the survivors.
* :class:`DynamicNgrams` — plain dictionaries for the document, open-file and workspace caches, which
  change on every edit and hold far fewer n-grams.

Witten-Bell smoothing: ``P_m(w|h) = (c(h,w) + T(h) * P_{m-1}(w)) / (c(h) + T(h))`` where ``T(h)`` is the
number of distinct tokens seen after ``h``.  It needs no discount tuning, behaves well on tiny caches
(where Kneser-Ney's discounts are ill-estimated) and its interpolation weight ``c(h) / (c(h) + T(h))``
doubles as a confidence for mixing tiers.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "NgramCounts", "StaticNgrams", "DynamicNgrams", "ContextStats", "token_hash", "context_hash",
    "witten_bell", "build_static",
]

_MASK = (1 << 64) - 1
_MUL = 0x9E3779B97F4A7C15
_SEED = 0x243F6A8885A308D3
FORMAT_VERSION = 1


@lru_cache(maxsize=1 << 16)
def token_hash(token: str) -> int:
    """A stable 64-bit hash of a token (independent of ``PYTHONHASHSEED``)."""
    data = token.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def context_hash(tokens: Sequence[str]) -> int:
    """Hash of a context, folded oldest token first; must match :func:`_context_hashes_np`."""
    h = _SEED
    for tok in tokens:
        h = ((h ^ token_hash(tok)) * _MUL) & _MASK
    return h


def _context_hashes_np(tok_hashes: npt.NDArray[np.uint64], m: int) -> npt.NDArray[np.uint64]:
    """Context hashes of length ``m`` for every position ``i >= m`` (the context is ``i-m .. i-1``)."""
    n = len(tok_hashes)
    h = np.full(n - m, _SEED, dtype=np.uint64)
    mul = np.uint64(_MUL)
    with np.errstate(over="ignore"):
        for j in range(m):
            h ^= tok_hashes[j : n - m + j]
            h *= mul
    return h


@dataclass(frozen=True)
class ContextStats:
    """Unpruned occurrence count ``total`` and distinct-follower count ``types`` of a context."""

    total: int
    types: int


class NgramCounts(Protocol):
    """What the smoothing and the drafter need from a count store."""

    order: int

    def stats(self, context: tuple[str, ...]) -> ContextStats | None:
        """Statistics of ``context`` (any length < order), or ``None`` if never seen."""
        ...

    def counts(self, context: tuple[str, ...], tokens: Sequence[str]) -> list[int]:
        """Counts of each of ``tokens`` right after ``context``."""
        ...

    def top(self, context: tuple[str, ...], k: int, prefix: str = "") -> list[tuple[str, int]]:
        """The ``k`` most frequent tokens after ``context`` that start with ``prefix``."""
        ...


def witten_bell(
    model: NgramCounts, context: Sequence[str], tokens: Sequence[str]
) -> tuple[list[float], int, float]:
    """Witten-Bell probabilities of ``tokens`` after ``context``.

    Also returns the longest matched context length and that context's Witten-Bell weight
    ``c(h) / (c(h) + T(h))`` (how much the model trusts what it saw after ``h``).  The unigram level is
    add-one-half smoothed so unseen tokens keep a small mass.
    """
    ctx = tuple(context[max(len(context) - model.order + 1, 0) :]) if model.order > 1 else ()
    probs: list[float] = []
    best_m, conf = -1, 0.0
    for m in range(0, len(ctx) + 1):
        h = ctx[len(ctx) - m :] if m else ()
        st = model.stats(h)
        if st is None or st.total == 0:
            break
        c = model.counts(h, tokens)
        if m == 0:
            denom = st.total + st.types + 1
            probs = [(ci + 0.5) / denom for ci in c]
        else:
            denom = st.total + st.types
            probs = [(ci + st.types * p) / denom for ci, p in zip(c, probs, strict=False)]
        best_m, conf = m, st.total / (st.total + st.types)
    if not probs:
        probs = [0.0] * len(tokens)
    return probs, best_m, conf


class StaticNgrams:
    """Read-only pruned counts in numpy arrays (see the module docstring for the layout)."""

    def __init__(self, order: int, vocab: list[str], arrays: dict[str, npt.NDArray[np.generic]]) -> None:
        self.order = order
        self.vocab = vocab
        self._ids = {t: i for i, t in enumerate(vocab)}
        self._keys = [arrays[f"keys{m}"] for m in range(order)]
        self._off = [arrays[f"off{m}"] for m in range(order)]
        self._tot = [arrays[f"tot{m}"] for m in range(order)]
        self._typ = [arrays[f"typ{m}"] for m in range(order)]
        self._nxt = [arrays[f"nxt{m}"] for m in range(order)]
        self._cnt = [arrays[f"cnt{m}"] for m in range(order)]
        self._keys_list: list[dict[int, int] | None] = [None] * order
        # Sorted vocabulary for prefix queries (a partially typed word), built on first need.
        self._sorted: list[str] | None = None
        self._rank: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._rows: dict[tuple[str, ...], int] = {}  # recent context lookups (drafting repeats them)

    # -- storage -----------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> StaticNgrams:
        """Load a model written by :meth:`save` (memory-light: one ``.npz`` read)."""
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        order = int(arrays.pop("order")[0])
        vocab_blob = arrays.pop("vocab").tobytes().decode("utf-8", "surrogatepass")
        vocab = vocab_blob.split("\x00")
        return cls(order, vocab, arrays)

    def save(self, path: str | Path) -> None:
        """Write the model as one uncompressed ``.npz`` (hashes do not compress; loading stays fast)."""
        arrays: dict[str, npt.NDArray[np.generic]] = {"order": np.array([self.order], dtype=np.int32)}
        blob = "\x00".join(self.vocab).encode("utf-8", "surrogatepass")
        arrays["vocab"] = np.frombuffer(blob, dtype=np.uint8)
        for m in range(self.order):
            arrays[f"keys{m}"] = self._keys[m]
            arrays[f"off{m}"] = self._off[m]
            arrays[f"tot{m}"] = self._tot[m]
            arrays[f"typ{m}"] = self._typ[m]
            arrays[f"nxt{m}"] = self._nxt[m]
            arrays[f"cnt{m}"] = self._cnt[m]
        np.savez(path, **arrays)  # type: ignore[arg-type]

    def min_counts(self) -> list[int]:
        """The smallest count kept for each context length (0 where none is kept): the pruning it went through."""
        return [int(c.min()) if len(c) else 0 for c in self._cnt]

    def nbytes(self) -> int:
        """Bytes held by the count arrays."""
        arrs = self._keys + self._off + self._tot + self._typ + self._nxt + self._cnt
        return int(sum(a.nbytes for a in arrs))

    # -- queries -----------------------------------------------------------------------------------
    def _row(self, context: tuple[str, ...]) -> int:
        r = self._rows.get(context)
        if r is not None:
            return r
        m = len(context)
        r = -1
        if m < self.order:
            keys = self._keys[m]
            h = np.uint64(context_hash(context))
            i = int(np.searchsorted(keys, h))
            if i < len(keys) and keys[i] == h:
                r = i
        if len(self._rows) > 4096:
            self._rows.clear()
        self._rows[context] = r
        return r

    def stats(self, context: tuple[str, ...]) -> ContextStats | None:
        r = self._row(context)
        if r < 0:
            return None
        m = len(context)
        return ContextStats(int(self._tot[m][r]), int(self._typ[m][r]))

    def counts(self, context: tuple[str, ...], tokens: Sequence[str]) -> list[int]:
        r = self._row(context)
        if r < 0:
            return [0] * len(tokens)
        m = len(context)
        lo, hi = int(self._off[m][r]), int(self._off[m][r + 1])
        nxt = self._nxt[m][lo:hi]
        tids = np.array([self._ids.get(t, -1) for t in tokens], dtype=np.int64)
        j = np.minimum(np.searchsorted(nxt, tids), max(len(nxt) - 1, 0))
        if len(nxt) == 0:
            return [0] * len(tokens)
        hit = nxt[j] == tids
        return [int(c) for c in np.where(hit, self._cnt[m][lo + j], 0)]

    def _prefix_mask(self, nxt: npt.NDArray[np.generic], prefix: str) -> npt.NDArray[np.bool_]:
        """Which of the token ids ``nxt`` start with ``prefix`` (via the rank in sorted vocabulary order)."""
        if self._sorted is None:
            order = sorted(range(len(self.vocab)), key=self.vocab.__getitem__)
            self._sorted = [self.vocab[i] for i in order]
            rank = np.empty(len(order), dtype=np.int64)
            rank[np.array(order, dtype=np.int64)] = np.arange(len(order))
            self._rank = rank
        lo = bisect.bisect_left(self._sorted, prefix)
        hi = bisect.bisect_left(self._sorted, prefix + "\U0010ffff")
        r = self._rank[nxt]
        return (r >= lo) & (r < hi)

    def top(self, context: tuple[str, ...], k: int, prefix: str = "") -> list[tuple[str, int]]:
        r = self._row(context)
        if r < 0:
            return []
        m = len(context)
        lo, hi = int(self._off[m][r]), int(self._off[m][r + 1])
        cnt = self._cnt[m][lo:hi].astype(np.int64)
        nxt = self._nxt[m][lo:hi]
        if prefix:
            sel = np.flatnonzero(self._prefix_mask(nxt, prefix))
            cnt, nxt = cnt[sel], nxt[sel]
        kk = min(k, len(cnt))
        if kk == 0:
            return []
        part = np.argpartition(-cnt, kk - 1)[:kk] if kk < len(cnt) else np.arange(len(cnt))
        best = part[np.argsort(-cnt[part], kind="stable")]
        return [(self.vocab[int(nxt[j])], int(cnt[j])) for j in best]


class DynamicNgrams:
    """Mutable n-gram counts in dictionaries, for caches that change with every edit.

    Compact for code, where most long contexts are seen once: a context is keyed by its tuple's hash (an int,
    not the tuple), and a context followed by one token once holds that token itself (a shared string) instead
    of a dictionary of counts; a total is kept only for contexts with a dictionary. About 3x less memory than
    tuples and dictionaries throughout. Two contexts whose hashes collide (64 bits) would share counts.
    """

    def __init__(self, order: int) -> None:
        self.order = order
        self._follow: dict[int, str | dict[str, int]] = {}
        self._total: dict[int, int] = {}
        self.n_tokens = 0

    def update(self, tokens: Sequence[str], start: int, stop: int, sign: int) -> None:
        """Add (``sign=1``) or remove (``sign=-1``) the n-grams predicting ``tokens[start:stop]``.

        Contexts reach back into ``tokens[:start]`` so a caller can re-count a changed window exactly.
        """
        follow, total = self._follow, self._total
        for i in range(max(start, 0), stop):
            tok = tokens[i]
            for m in range(0, min(i, self.order - 1) + 1):
                h = hash(tuple(tokens[i - m : i]))
                v = follow.get(h)
                if sign > 0:
                    if v is None:
                        follow[h] = tok
                    elif type(v) is str:
                        follow[h] = {v: 2} if v == tok else {v: 1, tok: 1}
                        total[h] = 2
                    else:
                        v[tok] = v.get(tok, 0) + 1  # type: ignore[index,union-attr]
                        total[h] += 1
                elif v is None:
                    continue
                elif type(v) is str:
                    if v == tok:
                        del follow[h]
                else:
                    d: dict[str, int] = v  # type: ignore[assignment]
                    c = d.get(tok, 0) - 1
                    if c < 0:
                        continue
                    if c:
                        d[tok] = c
                    else:
                        del d[tok]
                    t = total[h] - 1
                    if t == 1:  # one token seen once: back to the compact form
                        follow[h] = next(iter(d))
                        del total[h]
                    elif t == 0:
                        del follow[h], total[h]
                    else:
                        total[h] = t
        self.n_tokens += sign * max(stop - max(start, 0), 0)

    def stats(self, context: tuple[str, ...]) -> ContextStats | None:
        h = hash(context)
        v = self._follow.get(h)
        if v is None:
            return None
        if type(v) is str:
            return ContextStats(1, 1)
        return ContextStats(self._total[h], len(v))

    def counts(self, context: tuple[str, ...], tokens: Sequence[str]) -> list[int]:
        v = self._follow.get(hash(context))
        if not v:
            return [0] * len(tokens)
        if type(v) is str:
            return [int(t == v) for t in tokens]
        return [v.get(t, 0) for t in tokens]  # type: ignore[union-attr]

    def top(self, context: tuple[str, ...], k: int, prefix: str = "") -> list[tuple[str, int]]:
        v = self._follow.get(hash(context))
        if not v:
            return []
        if type(v) is str:
            return [(v, 1)] if v.startswith(prefix) else []
        d: dict[str, int] = v  # type: ignore[assignment]
        items = [(t, c) for t, c in d.items() if t.startswith(prefix)] if prefix else list(d.items())
        items.sort(key=lambda tc: -tc[1])
        return items[:k]


def build_static(
    streams: Iterable[Sequence[str]], order: int, min_count: Sequence[int], max_bytes: int | None = None
) -> StaticNgrams:
    """Count n-grams over token streams (one per file) and prune them into a :class:`StaticNgrams`.

    ``min_count[m]`` is the smallest count kept for contexts of length ``m``; when ``max_bytes`` is given
    the threshold of the longest contexts is raised to the smallest value that fits (ValueError when none does).
    """
    ids: dict[str, int] = {}
    chunks: list[npt.NDArray[np.int32]] = []
    sep = ids.setdefault("\n", 0)
    for toks in streams:
        arr = np.fromiter((ids.setdefault(t, len(ids)) for t in toks), dtype=np.int32, count=len(toks))
        chunks.append(np.array([sep], dtype=np.int32))
        chunks.append(arr)
    seq = np.concatenate(chunks) if chunks else np.zeros(1, dtype=np.int32)
    vocab_all = [""] * len(ids)
    for t, i in ids.items():
        vocab_all[i] = t
    th = np.array([token_hash(t) for t in vocab_all], dtype=np.uint64)
    tok_h = th[seq]
    per_m: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32], npt.NDArray[np.int64]]] = []
    mul2 = np.uint64(0xC2B2AE3D27D4EB4F)
    for m in range(order):
        ctx = _context_hashes_np(tok_h, m)
        nxt = seq[m:]
        with np.errstate(over="ignore"):
            full = (ctx ^ tok_h[m:]) * mul2
        _, first, cnt = np.unique(full, return_index=True, return_counts=True)
        per_m.append((ctx[first], nxt[first], cnt.astype(np.int64)))
        del ctx, full
    mins = list(min_count)
    model, _ = _prune(per_m, order, mins, vocab_all)
    if max_bytes is None or model.nbytes() <= max_bytes:
        return model
    # The smallest threshold of the longest contexts (they are the bulk) that fits: the size only falls as it
    # rises, so a doubling search then a bisection finds it in a few prunings.
    top = order - 1

    def fits(threshold: int) -> StaticNgrams | None:
        trial, _ = _prune(per_m, order, [*mins[:top], threshold], vocab_all)
        return trial if trial.nbytes() <= max_bytes else None

    lo, step = mins[top], 1  # lo does not fit; hi fits
    hi: int | None = None
    best: StaticNgrams | None = None
    ceiling = int(per_m[top][2].max(initial=0)) + 1  # above every count: the longest contexts all go
    while hi is None:
        at = min(lo + step, ceiling)
        best = fits(at)
        if best is not None:
            hi = at
        elif at == ceiling:
            raise ValueError(f"the counts do not fit {max_bytes} bytes even without the longest contexts: "
                             "raise the thresholds of the shorter ones (min_count)")
        else:
            lo, step = at, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        trial = fits(mid)
        if trial is not None:
            hi, best = mid, trial
        else:
            lo = mid
    assert best is not None  # the model at ``hi``
    return best


def _prune(
    per_m: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32], npt.NDArray[np.int64]]],
    order: int,
    mins: Sequence[int],
    vocab_all: list[str],
) -> tuple[StaticNgrams, npt.NDArray[np.bool_]]:
    used = np.zeros(len(vocab_all), dtype=bool)
    kept: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64], npt.NDArray[np.int64],
                     npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int64]]] = []
    for m in range(order):
        ctx, nxt, cnt = per_m[m]
        o = np.lexsort((nxt, ctx))
        ctx, nxt, cnt = ctx[o], nxt[o], cnt[o]
        starts = np.flatnonzero(np.r_[True, ctx[1:] != ctx[:-1]])
        tot = np.add.reduceat(cnt, starts)
        typ = np.diff(np.r_[starts, len(ctx)])
        keep = cnt >= mins[m]
        group = np.cumsum(np.r_[True, ctx[1:] != ctx[:-1]]) - 1
        kept_per_group = np.bincount(group[keep], minlength=len(starts))
        has = kept_per_group > 0
        off = np.r_[0, np.cumsum(kept_per_group[has])]
        used[nxt[keep]] = True
        kept.append((ctx[starts][has], off, tot[has], typ[has], nxt[keep], cnt[keep]))
    remap = np.cumsum(used) - 1
    vocab = [t for t, u in zip(vocab_all, used, strict=False) if u]
    arrays: dict[str, npt.NDArray[np.generic]] = {}
    for m, (keys, off, tot, typ, nxt, cnt) in enumerate(kept):
        arrays[f"keys{m}"] = keys
        arrays[f"off{m}"] = off.astype(np.uint32)
        arrays[f"tot{m}"] = np.minimum(tot, 2**32 - 1).astype(np.uint32)
        arrays[f"typ{m}"] = np.minimum(typ, 2**32 - 1).astype(np.uint32)
        arrays[f"nxt{m}"] = remap[nxt].astype(np.uint32)
        arrays[f"cnt{m}"] = np.minimum(cnt, 2**16 - 1).astype(np.uint16)
    return StaticNgrams(order, vocab, arrays), used
