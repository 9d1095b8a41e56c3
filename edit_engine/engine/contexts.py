"""The model's context for a hole, and the per-document store of encoded contexts.

``context_ids``: the token ids the model is shown, the end of the prefix and the start of the suffix. A context
longer than the model's budget is cut at its start, and the cut moves in steps of ``CONTEXT_STEP_CHARS``
characters and ``CONTEXT_STEP_TOKENS`` tokens, so typing at the cursor leaves the kept context's start (and its
cache) in place: one full re-encode per 64 tokens typed instead of one per keystroke. The model sees 0-63 fewer
tokens.

``ContextStore``: the encoded context of each document (keyed by ``uri``, or by its first prefix tokens when
there is none) is kept between requests, least recently used first out under a byte budget
(``ContextCacheConfig``). A new request keeps the cached prefix up to the first token that differs
(re-tokenizing after a keystroke can change the last token or two, BPE merges) and encodes only the rest; an
unchanged suffix is moved, a changed one re-encoded (``DiffusionLM.edit_context``). A request owns the entry
while it runs, so the canvas rows it writes past the context are its own; ``stats`` counts hits. An
autoregressive checkpoint's key/value cache is kept per document the same way (``kv``).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from edit_engine.decoding import ar
from edit_engine.model.interfaces import TextTokenizer
from edit_engine.model.network import ContextCache
from edit_engine.model.tokenizer import trim_end, trim_start
from edit_engine.syntax import positions

CONTEXT_STEP_CHARS = 512
CONTEXT_STEP_TOKENS = 64


def context_ids(tok: TextTokenizer, max_prefix: int, max_suffix: int, prefix: str,
                suffix: str) -> tuple[list[int], list[int]]:
    """Token ids of the nearest context: the end of the prefix (at most ``max_prefix`` tokens, cut in steps,
    module doc), the start of the suffix (at most ``max_suffix``)."""
    # Cut in characters first (a token is at least one character), then in tokens. Rounding the character
    # cut down keeps at least 8 * max_prefix characters.
    over = len(prefix) - 8 * max_prefix
    cut = over - over % CONTEXT_STEP_CHARS if over > 0 else 0
    pre, suf = prefix[cut:], suffix[: 8 * max_suffix]
    ids = tok.encode(pre)
    drop = len(ids) - max_prefix
    if drop > 0:
        ids = ids[drop + (-drop % CONTEXT_STEP_TOKENS) :]
    # Same trimming as training (a token budget must not cut a character in two).
    p = trim_start(tok, pre, ids)  # type: ignore[arg-type]
    s = trim_end(tok, suf, tok.encode(suf)[:max_suffix])  # type: ignore[arg-type]
    return p, s


def doc_key(uri: str | None, p_ids: list[int], s_ids: list[int]) -> Hashable:
    """A document's cache key: its uri, else its first prefix tokens (what any reuse needs to share)."""
    if uri:
        return ("uri", uri)
    return ("prefix", tuple(p_ids[:32])) if p_ids else ("suffix", tuple(s_ids[:32]))


@dataclass(frozen=True)
class ContextCacheConfig:
    """The per-document context cache. The packaged model's context (1,280 tokens, fp32, canvas room of 128)
    takes about 12 MB, so the default budget keeps some 20 documents; a GPU model in bf16 at 2,560 tokens
    (the ``base`` preset) about 45 MB."""

    budget_bytes: int = 256 << 20  # keys and values of all kept documents; 0 turns the cache off


@dataclass
class ContextCacheStats:
    """Counters since the engine was made (read by ``edit-engine bench``)."""

    hits: int = 0  # prefix and suffix tokens unchanged: nothing encoded
    partial: int = 0  # some cached rows kept, the rest encoded (the suffix moved or re-encoded)
    misses: int = 0  # nothing to keep (no entry, or neither a common first token nor the same suffix)
    evictions: int = 0  # documents dropped to stay within the budget
    tokens_reused: int = 0  # context tokens kept from the cache
    tokens_encoded: int = 0  # context tokens run through the model


@dataclass
class CachedContext:
    """One document's encoded context and the token ids in it (an AR cache: the prompt and the generated
    tokens, all in its prefix rows)."""

    cache: ContextCache
    prefix_ids: list[int]
    suffix_ids: list[int]


class ContextStore:
    """Encoded contexts by document, least recently used first out under a byte budget. Thread-safe.

    ``take`` removes an entry (the request owns it while it runs: its canvas rows are scratch); ``put`` gives
    it back as the most recent. Two requests for one document at once: the second misses, and whichever puts
    back last is kept; both are valid, since every reuse compares token ids first.
    """

    def __init__(self, cfg: ContextCacheConfig | None = None) -> None:
        self.cfg = cfg or ContextCacheConfig()
        self.stats = ContextCacheStats()
        self._lru: OrderedDict[Hashable, CachedContext] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.cfg.budget_bytes > 0

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._lru

    def take(self, key: Hashable) -> CachedContext | None:
        with self._lock:
            entry = self._lru.pop(key, None)
            if entry is not None:
                self._bytes -= entry.cache.nbytes
            return entry

    def put(self, key: Hashable, entry: CachedContext) -> None:
        n = entry.cache.nbytes
        with self._lock:
            old = self._lru.pop(key, None)
            if old is not None:
                self._bytes -= old.cache.nbytes
            if n > self.cfg.budget_bytes:
                self.stats.evictions += 1
                return
            self._lru[key] = entry
            self._bytes += n
            while self._bytes > self.cfg.budget_bytes:
                _, dropped = self._lru.popitem(last=False)
                self._bytes -= dropped.cache.nbytes
                self.stats.evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()
            self._bytes = 0

    def count(self, outcome: str, reused: int, encoded: int) -> None:
        """Record one request: ``outcome`` is hits, partial or misses; context tokens reused and encoded."""
        with self._lock:
            setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)
            self.stats.tokens_reused += reused
            self.stats.tokens_encoded += encoded


    # ------------------------------------------------------------------ a request's context
    def usable(self, model: Any) -> bool:
        """Whether ``model``'s contexts may be kept: the store is on and the model's cache is exact."""
        return self.enabled and bool(getattr(model, "exact_context_cache", False))

    @contextlib.contextmanager
    def encoded(self, model: Any, key: Hashable, p_ids: list[int], s_ids: list[int],
                capacity: int, defer: bool = False) -> Iterator[ContextCache]:
        """The encoded context of a request, from the document's entry when one is kept; the request owns it
        until the ``with`` block ends, then it goes back to the store. ``defer``: new prefix tokens of a kept
        entry are left for the first canvas pass to compute (``DiffusionLM.edit_context``); only for callers
        whose every use of the cache is a canvas pass."""
        if not self.usable(model):
            yield model.encode_context([p_ids], [s_ids], capacity=capacity)
            return
        entry = self.take(key)
        keep, same_suffix = 0, False
        if entry is not None:
            keep = positions.common_prefix(entry.prefix_ids, p_ids)
            same_suffix = entry.suffix_ids == s_ids
        if entry is not None and (keep or (same_suffix and s_ids)):
            hit = keep == len(entry.prefix_ids) == len(p_ids) and same_suffix
            model.edit_context(entry.cache, keep, p_ids[keep:], None if same_suffix else s_ids, capacity, defer)
            entry.prefix_ids, entry.suffix_ids = list(p_ids), list(s_ids)
            reused = keep + (len(s_ids) if same_suffix else 0)
            self.count("hits" if hit else "partial", reused, len(p_ids) + len(s_ids) - reused)
        else:  # nothing to keep
            entry = CachedContext(model.encode_context([p_ids], [s_ids], capacity=capacity), list(p_ids),
                                  list(s_ids))
            self.count("misses", 0, len(p_ids) + len(s_ids))
        try:
            yield entry.cache
        finally:  # only canvas rows (scratch) were written while the request ran
            self.put(key, entry)

    @contextlib.contextmanager
    def kv(self, model: Any, key: Hashable, prompt: list[int]) -> Iterator[ar.KVCache]:
        """An autoregressive request's key/value cache: the document's kept one (``ar.ar_generate`` keeps its
        longest common prefix with the new prompt) or an empty one; back to the store when the block ends."""
        entry = self.take(key) if self.usable(model) else None
        kv = ar.KVCache.empty(model) if entry is None else ar.KVCache(entry.cache, entry.prefix_ids)
        keep = min(positions.common_prefix(kv.ids, prompt), len(prompt) - 1)  # what ar.ar_generate will keep
        # A hit keeps all but the last prompt token (whose hidden state gives the first token).
        outcome = "hits" if entry is not None and keep == len(prompt) - 1 else "partial" if keep else "misses"
        self.count(outcome, keep, len(prompt) - keep)
        done = False
        try:
            yield kv
            done = True
        except GeneratorExit:  # the request was closed between two tokens: the cache is consistent
            done = True
            raise
        finally:  # an error inside a forward pass may have left rows half written: drop the cache then
            if done and self.usable(model):
                self.put(key, CachedContext(kv.cache, kv.ids, []))
