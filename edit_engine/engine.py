"""The one engine API every front end calls: ``Engine.load``, ``infill``, ``stream``, ``complete``,
``stream_complete``.

``infill``/``stream`` take the text before and after a hole. ``complete``/``stream_complete`` take a whole
document and a cursor or selection, let the planner choose the span, and return an edit (range + text).
Streams yield a ``Pass`` after every denoising pass: the whole span as it stands (committed tokens; slots still
masked are left out), so a front end can show it and replace it with the next one. The last pass has
``final=True`` and equals the result. Closing a stream (or ``should_stop()`` returning True) stops the work
before the next forward pass. ``plan_document`` plans a document request without running it and
``finish_document`` runs its check and repair rounds after a first round run elsewhere: the server batches that
round across clients (``edit_engine/serve``).

Per-document context cache (issue #6): the encoded context of each document (keyed by ``uri``, or by its
first prefix tokens when there is none) is kept between requests, least recently used first out under a byte
budget (``ContextCacheConfig``). A new request keeps the cached prefix up to the first token that differs
(re-tokenizing after a keystroke can change the last token or two, BPE merges) and encodes only the rest; an
unchanged suffix is moved, a changed one re-encoded (``DiffusionLM.edit_context``). A request owns the entry
while it runs, so the canvas rows it writes past the context are its own; ``contexts.stats`` counts hits.

An autoregressive checkpoint (``model.cfg.objective == "ar"``, ``edit_engine/ar.py``) takes the same calls:
one pass per generated token, the same result fields; its key/value cache is kept per document the same way.

No model math here: tokens in, sampler, tokens out.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import ar, checkpoint, planner, positions, postprocess, repair, syntax
from .model import ContextCache, DiffusionLM
from .sampler import SamplerConfig, Step, denoise, keyword_tokens, newline_tokens
from .tokenizer import Tokenizer, trim_end, trim_start

LANGUAGES_BY_SUFFIX = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".jsx": "javascript", ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".rs": "rust", ".go": "go", ".java": "java", ".c": "c", ".h": "c", ".cpp": "cpp", ".rb": "ruby",
}
MAX_DOCUMENT_CHARS = 5_000_000
# A context longer than the model's budget is cut at its start, and the cut moves in steps of this many
# characters and tokens, so typing at the cursor leaves the kept context's start (and its cache) in place:
# one full re-encode per 64 tokens typed instead of one per keystroke. The model sees 0-63 fewer tokens.
# Token healing (``Engine._healing``) backs off at most this many characters of the word at the cursor.
HEAL_CHARS = 32
CONTEXT_STEP_CHARS = 512
CONTEXT_STEP_TOKENS = 64


def unheal(text: str, healed: str) -> str:
    """A healed fill's text without the partial word the prefix already holds (``Engine.healing``); text
    that does not start with it (slot 0 still masked) is left as it is."""
    return text[len(healed) :] if healed and text.startswith(healed) else text


def language_for_path(path: str | Path) -> str:
    return LANGUAGES_BY_SUFFIX.get(Path(path).suffix.lower(), "plaintext")


@dataclass(frozen=True)
class Pass:
    """One refinement pass of a stream."""

    index: int  # 0-based
    text: str  # the whole span as it stands (committed tokens only)
    masked: int  # undecided slots (masked, or not yet opened by growth); within a repair round it rises only by remasking
    final: bool
    nfe: int  # forward passes so far
    start: int = 0  # character offsets of the span in the document (complete/stream_complete)
    end: int = 0
    stop_reason: str = ""  # on the final pass: complete | length | line


@dataclass(frozen=True)
class InfillResult:
    text: str
    passes: int  # refinement passes streamed
    nfe: int  # forward passes of the denoiser
    elapsed_ms: float
    stop_reason: str  # complete (the model ended the fill) | length (max_tokens reached) | line (line stop:
    # the first line of a single-line fill is decided) | cancelled
    tokens: int = 0  # real tokens in the fill
    timings: dict[str, float] = field(default_factory=dict)  # ms per stage


@dataclass(frozen=True)
class Completion(InfillResult):
    start: int = 0  # character offsets: ``text`` replaces document[start:end]
    end: int = 0
    kind: str = ""  # the planner's span kind

    def to_json(self, document: str) -> dict[str, Any]:
        sl, sc = positions.line_col_of_offset(document, self.start)
        el, ec = positions.line_col_of_offset(document, self.end)
        return {
            "text": self.text, "start": {"line": sl, "col": sc}, "end": {"line": el, "col": ec},
            "kind": self.kind, "passes": self.passes, "nfe": self.nfe, "elapsed_ms": round(self.elapsed_ms, 2),
            "stop_reason": self.stop_reason, "tokens": self.tokens,
            "timings": {k: round(v, 2) for k, v in self.timings.items()},
        }


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
    timings: dict[str, float] = field(default_factory=dict)  # ms: parse, plan
    first: torch.Tensor | None = None  # (V,) bool: the only tokens slot 0 may take (a header's keyword)
    nfe: int = 0  # forward passes spent planning (the model's choice among ``plan.indents``)
    heal: str = ""  # the partial word before the cursor, which the model writes again (token healing)
    bias: torch.Tensor | None = None  # (V,) float: the novel-name penalty for this context (``Engine.novelty_bias``)
    ids: tuple[list[int], list[int]] | None = None  # the model's context tokens, when planning made them already

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


@dataclass
class _Rounds:
    """A document request's counters across its denoising rounds (the first, then repairs)."""

    index: int = 0  # the next pass's index
    nfe: int = 0  # forward passes so far
    rounds: int = 0  # repair rounds started
    stop_reason: str = "complete"
    best: tuple[str, int] | None = None  # the fill with the fewest new parse errors, and their count

    def final(self, pl: planner.Plan) -> Pass:
        assert self.best is not None
        return Pass(self.index, self.best[0], 0, True, self.nfe, pl.start, pl.end, self.stop_reason)


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


class Engine:
    """A loaded model plus its sampler settings. Thread-safe: each request has its own state."""

    def __init__(self, model: DiffusionLM, tokenizer: Tokenizer, sampler: SamplerConfig | None = None,
                 path: Path | None = None, record: dict[str, Any] | None = None,
                 context_cache: ContextCacheConfig | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.sampler = sampler or SamplerConfig()
        self.path = path
        self.record = record or {}
        self._lock = threading.Lock()
        self.contexts = ContextStore(context_cache)
        self._line_end: torch.Tensor | None = None
        self._keyword_tables: dict[str, torch.Tensor | None] = {}  # by grammar name (``_keywords``)
        self._sorted_vocab: list[tuple[str, int]] | None = None  # (text, id) in text order (``_starting_with``)
        self._names: tuple[torch.Tensor, list[str]] | None = None  # name tokens' words (``_name_table``)
        self._common: dict[str, torch.Tensor] = {}  # by grammar name: which words are common (``novelty_bias``)

    def _vocab_table(self, table: torch.Tensor) -> torch.Tensor:
        """A (V',) bool table over the tokenizer's ids as a (V,) table over the model's vocabulary (ids the
        tokenizer lacks are False), on the model's device."""
        v = self.model.cfg.vocab_size
        table = torch.cat([table[:v], torch.zeros(max(0, v - len(table)), dtype=torch.bool)])
        return table.to(self.model.device)

    @property
    def _n_tokens(self) -> int:
        """Token ids both the tokenizer and the model know."""
        return min(self.model.cfg.vocab_size, self.tokenizer.vocab_size)

    @property
    def line_end(self) -> torch.Tensor:
        """(V,) bool on the model's device: token ids whose text holds a newline (the sampler's line stop)."""
        if self._line_end is None:
            self._line_end = self._vocab_table(newline_tokens(self.tokenizer.decode, self._n_tokens))
        return self._line_end

    def _keywords(self, g: syntax.Grammar) -> torch.Tensor | None:
        """The tokens that start a block header in ``g`` (``sampler.keyword_tokens`` of its
        ``header_keywords``), made once per grammar; None when the grammar names none or no token is one."""
        with self._lock:
            if g.name not in self._keyword_tables:
                t = keyword_tokens(self.tokenizer.decode, self._n_tokens, g.header_keywords)
                self._keyword_tables[g.name] = self._vocab_table(t) if bool(t.any()) else None
            return self._keyword_tables[g.name]

    def _name_table(self) -> tuple[torch.Tensor, list[str]]:
        """(V,) long over the model's vocabulary: for a name token (blanks, then one word: ``" numbers"``,
        ``"numbers"``, ``"_id"``) the index of its word in the returned list of words, else -1. Made
        once (it decodes the whole vocabulary)."""
        with self._lock:
            if self._names is None:
                decode = self.tokenizer.decode
                words: dict[str, int] = {}
                group = torch.full((self.model.cfg.vocab_size,), -1, dtype=torch.long)
                for i in range(self._n_tokens):
                    w = decode([i]).lstrip(" \t")
                    if w.isidentifier():
                        group[i] = words.setdefault(w, len(words))
                self._names = group.to(self.model.device), list(words)
            return self._names

    def novelty_bias(self, p_ids: list[int], s_ids: list[int], language: str,
                     cfg: SamplerConfig) -> torch.Tensor | None:
        """The sampler's novel-name penalty for a request whose model context is ``p_ids`` + ``s_ids`` (sampler
        module doc, "Novel names"): a (V,) float logit bias, minus ``cfg.novel_penalty`` on every name token
        whose word is neither in the context (as any of its tokens: ``" n"`` and ``"n"`` are one word) nor one
        of the grammar's ``common_words``. None when the penalty is off or the grammar lists no common words.
        The autoregressive baseline takes it too (``ar.ar_generate``'s ``bias``)."""
        if cfg.novel_penalty <= 0:
            return None
        g = syntax.load(language)
        if not g.common_words:
            return None
        group, words = self._name_table()
        with self._lock:
            if g.name not in self._common:
                self._common[g.name] = torch.tensor([w in g.common_words for w in words] + [True],
                                                    dtype=torch.bool, device=group.device)
            known = self._common[g.name].clone()  # (W + 1,): the last entry stands for "not a name"
        ctx = torch.tensor(p_ids + s_ids, dtype=torch.long, device=group.device)
        known[group[ctx.clamp(0, group.numel() - 1)]] = True  # -1 (not a name) indexes the last entry
        novel = ~known[group]
        return novel.to(torch.float32) * -cfg.novel_penalty

    def _line_end_for(self, cfg: SamplerConfig) -> torch.Tensor | None:
        """The newline table when ``cfg`` asks for the line stop, else None (what the samplers take)."""
        return self.line_end if cfg.line_stop else None

    @classmethod
    def load(cls, path: str | Path | None = None, *, device: str | None = None, threads: int | None = None,
             sampler: SamplerConfig | None = None, context_cache: ContextCacheConfig | None = None,
             dtype: torch.dtype | str | None = None) -> Engine:
        """Load a checkpoint directory (default: the model packaged with edit-engine). ``dtype`` (a dtype or its
        name, ``checkpoint.DTYPES``): what the model computes in; default ``EDIT_ENGINE_DTYPE``, else the checkpoint
        family's (float32 for ours, bf16 for open models on CUDA)."""
        if threads:
            torch.set_num_threads(threads)
        ck = checkpoint.load(path, device=device or "cpu", dtype=dtype)
        if sampler is None:  # the model's measured commit policy, if it has one
            try:
                sampler = SamplerConfig.for_checkpoint(ck.path)
            except (ValueError, TypeError) as e:  # JSONDecodeError is a ValueError
                raise checkpoint.CheckpointError(f"{ck.path}/sampler.json: {e}") from e
        return cls(ck.model, ck.tokenizer, sampler, ck.path, ck.record, context_cache)

    @property
    def is_ar(self) -> bool:
        """An autoregressive checkpoint (the baseline), decoded token by token (``edit_engine/ar.py``)."""
        return getattr(self.model.cfg, "objective", "diffusion") == "ar"

    @property
    def dtype(self) -> str:
        """What the model computes in, by name (``float32``, ``bfloat16``, ``int8``): ``Engine.load``'s ``dtype``."""
        if getattr(self.model, "int8", False):
            return "int8"
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    @property
    def name(self) -> str:
        return self.path.name if self.path else "edit-engine"

    # ------------------------------------------------------------------ hole in, text out
    def sampler_for(self, overrides: dict[str, Any]) -> SamplerConfig:
        """The sampler settings a call with these overrides runs with (the checkpoint's, overridden)."""
        return self._config(None, overrides)

    def _config(self, max_tokens: int | None, overrides: dict[str, Any]) -> SamplerConfig:
        if "max_commit" in overrides and "min_commit" not in overrides and overrides["max_commit"]:
            # A ceiling below the checkpoint's floor (sampler.json) lowers the floor with it.
            overrides = {**overrides, "min_commit": min(self.sampler.min_commit, int(overrides["max_commit"]))}
        cfg = self.sampler.with_(**overrides) if overrides else self.sampler
        if max_tokens is not None:
            if max_tokens < 1:
                raise ValueError("max_tokens must be >= 1")
            cfg = cfg.with_(max_tokens=min(max_tokens, self.model.cfg.max_canvas),
                            initial_canvas=min(cfg.initial_canvas, max_tokens))
        elif cfg.max_tokens > self.model.cfg.max_canvas:
            cfg = cfg.with_(max_tokens=self.model.cfg.max_canvas)
        return cfg

    def _context(self, prefix: str, suffix: str) -> tuple[list[int], list[int]]:
        """Token ids of the nearest context: the end of the prefix, the start of the suffix.

        A long prefix is cut at its start in steps (``CONTEXT_STEP_CHARS``, ``CONTEXT_STEP_TOKENS``), so that
        text typed at the cursor only appends tokens and the per-document cache keeps the rest.
        """
        mc = self.model.cfg
        # Cut in characters first (a token is at least one character), then in tokens. Rounding the character
        # cut down keeps at least 8 * max_prefix characters.
        over = len(prefix) - 8 * mc.max_prefix
        cut = over - over % CONTEXT_STEP_CHARS if over > 0 else 0
        pre, suf = prefix[cut:], suffix[: 8 * mc.max_suffix]
        tok = self.tokenizer
        ids = tok.encode(pre)
        drop = len(ids) - mc.max_prefix
        if drop > 0:
            ids = ids[drop + (-drop % CONTEXT_STEP_TOKENS) :]
        # Same trimming as training (a token budget must not cut a character in two).
        p = trim_start(tok, pre, ids)
        s = trim_end(tok, suf, tok.encode(suf)[: mc.max_suffix])
        return p, s

    # ------------------------------------------------------------------ per-document context cache
    def _doc_key(self, uri: str | None, p_ids: list[int], s_ids: list[int]) -> Hashable:
        """A document's cache key: its uri, else its first prefix tokens (what any reuse needs to share)."""
        if uri:
            return ("uri", uri)
        return ("prefix", tuple(p_ids[:32])) if p_ids else ("suffix", tuple(s_ids[:32]))

    def _cacheable(self) -> bool:
        return self.contexts.enabled and isinstance(self.model, DiffusionLM)

    @contextlib.contextmanager
    def _encoded(self, key: Hashable, p_ids: list[int], s_ids: list[int], capacity: int,
                 ) -> Iterator[ContextCache]:
        """The encoded context of a request, from the document's cache entry when one is kept; the request
        owns it until the ``with`` block ends, then it goes back to the store."""
        if not self._cacheable():
            yield self.model.encode_context([p_ids], [s_ids], capacity=capacity)
            return
        entry = self.contexts.take(key)
        keep, same_suffix = 0, False
        if entry is not None:
            keep = positions.common_prefix(entry.prefix_ids, p_ids)
            same_suffix = entry.suffix_ids == s_ids
        if entry is not None and (keep or (same_suffix and s_ids)):
            hit = keep == len(entry.prefix_ids) == len(p_ids) and same_suffix
            self.model.edit_context(entry.cache, keep, p_ids[keep:], None if same_suffix else s_ids, capacity)
            entry.prefix_ids, entry.suffix_ids = list(p_ids), list(s_ids)
            reused = keep + (len(s_ids) if same_suffix else 0)
            self.contexts.count("hits" if hit else "partial", reused, len(p_ids) + len(s_ids) - reused)
        else:  # nothing to keep
            entry = CachedContext(self.model.encode_context([p_ids], [s_ids], capacity=capacity), list(p_ids),
                                  list(s_ids))
            self.contexts.count("misses", 0, len(p_ids) + len(s_ids))
        try:
            yield entry.cache
        finally:  # only canvas rows (scratch) were written while the request ran
            self.contexts.put(key, entry)

    @contextlib.contextmanager
    def _kv(self, key: Hashable, prompt: list[int]) -> Iterator[ar.KVCache]:
        """An AR request's key/value cache: the document's kept one (``ar.ar_generate`` keeps its longest
        common prefix with the new prompt) or an empty one; back to the store when the ``with`` block ends."""
        entry = self.contexts.take(key) if self._cacheable() else None
        kv = ar.KVCache.empty(self.model) if entry is None else ar.KVCache(entry.cache, entry.prefix_ids)
        keep = min(positions.common_prefix(kv.ids, prompt), len(prompt) - 1)  # what ar.ar_generate will keep
        # A hit keeps all but the last prompt token (whose hidden state gives the first token).
        outcome = "hits" if entry is not None and keep == len(prompt) - 1 else "partial" if keep else "misses"
        self.contexts.count(outcome, keep, len(prompt) - keep)
        done = False
        try:
            yield kv
            done = True
        except GeneratorExit:  # the request was closed between two tokens: the cache is consistent
            done = True
            raise
        finally:  # an error inside a forward pass may have left rows half written: drop the cache then
            if done and self._cacheable():
                self.contexts.put(key, CachedContext(kv.cache, kv.ids, []))

    def _text(self, step: Step) -> str:
        return self.tokenizer.decode(step.tokens.tolist())

    def stream(self, prefix: str, suffix: str = "", language: str = "python", max_tokens: int | None = None,
               seed: int = 0, should_stop: Callable[[], bool] | None = None, uri: str | None = None,
               heal: bool = True, **overrides: Any) -> Iterator[Pass]:
        """Yield every pass of filling the hole between ``prefix`` and ``suffix``. ``uri`` names the document
        for the context cache (without one, the first prefix tokens do). ``heal``: token healing when the
        prefix ends inside a word (``healing``); the text is then what follows the prefix, as without it."""
        for p, _ in self._run(prefix, suffix, max_tokens, seed, should_stop, overrides, single_line=False,
                              uri=uri, heal=heal, language=language):
            yield p

    def infill(self, prefix: str, suffix: str = "", language: str = "python", max_tokens: int | None = None,
               seed: int = 0, uri: str | None = None, heal: bool = True, **overrides: Any) -> InfillResult:
        """Fill the hole between ``prefix`` and ``suffix``; returns the final text and counters (``heal``: as
        ``stream``)."""
        runs = deque(self._run(prefix, suffix, max_tokens, seed, None, overrides, single_line=False, uri=uri,
                               heal=heal, language=language), maxlen=1)
        p, t = runs[0]
        return InfillResult(p.text, p.index + 1, p.nfe, t["total"], p.stop_reason,
                            self._count(p.text), t)

    def _count(self, text: str) -> int:
        return len(self.tokenizer.encode(text)) if text else 0

    def _run(self, prefix: str, suffix: str, max_tokens: int | None, seed: int,
             should_stop: Callable[[], bool] | None, overrides: dict[str, Any], single_line: bool,
             initial_canvas: int | None = None, start: int = 0, end: int = 0, uri: str | None = None,
             heal: bool = False, language: str = "python") -> Iterator[tuple[Pass, dict[str, float]]]:
        if len(prefix) + len(suffix) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"document too large ({len(prefix) + len(suffix):,} > {MAX_DOCUMENT_CHARS:,} chars)")
        t0 = time.perf_counter()
        cfg = self._config(max_tokens, overrides)
        if initial_canvas is not None:
            cfg = cfg.with_(initial_canvas=max(1, min(initial_canvas, cfg.max_tokens)))
        healed, first = self.healing(prefix, suffix) if heal else ("", None)
        p_ids, s_ids = self._context(prefix[: len(prefix) - len(healed)], suffix)
        t1 = time.perf_counter()
        tok = self.tokenizer
        key = self._doc_key(uri, p_ids, s_ids)
        with contextlib.ExitStack() as stack:
            if self.is_ar:  # the prompt is encoded by the first step (prefill)
                kv = stack.enter_context(self._kv(key, ar.psm_prompt(tok, p_ids, s_ids)))
                steps = ar.ar_generate(self.model, tok, p_ids, s_ids, cfg.max_tokens, should_stop,
                                       min_tokens=cfg.min_tokens, kv=kv,
                                       line_end=self._line_end_for(cfg),
                                       bias=self.novelty_bias(p_ids, s_ids, language, cfg))
            else:
                cache = stack.enter_context(self._encoded(key, p_ids, s_ids, cfg.max_tokens))
                steps = denoise(self.model, cache, cfg, tok.pad_id, tok.mask_id, seed, should_stop,
                                line_end=self._line_end_for(cfg), first=first,
                                bias=self.novelty_bias(p_ids, s_ids, language, cfg))
            t2 = time.perf_counter()
            timings = {"tokenize": (t1 - t0) * 1e3, "context": (t2 - t1) * 1e3}
            for step in steps:
                text = unheal(self._text(step), healed)
                nl = text.find("\n") if single_line or cfg.line_stop else -1
                if nl >= 0:  # a completion drops the newline; a line-stopped infill keeps it
                    text = text[:nl] if single_line else text[: nl + 1]
                now = time.perf_counter()
                timings["denoise"] = (now - t2) * 1e3
                timings["total"] = (now - t0) * 1e3
                yield Pass(step.index, text, step.masked, step.final, step.nfe, start, end,
                           step.stop_reason), timings

    # ------------------------------------------------------------------ document + cursor in, edit out
    def stream_complete(self, text: str, offset: int, language: str = "python",
                        selection: tuple[int, int] | None = None, max_tokens: int | None = None, seed: int = 0,
                        should_stop: Callable[[], bool] | None = None, mode: str = "insert", repair: bool = True,
                        uri: str | None = None, **overrides: Any) -> Iterator[Pass]:
        """Plan the span at ``offset`` (or rewrite ``selection``) and yield every pass as an edit.

        ``mode="rewrite"`` (with a selection) starts from the selection's tokens and re-denoises the least likely
        ones. ``repair`` re-masks what a fill broke in the parse and runs more passes (streamed too). ``uri`` keeps
        the document's syntax tree between requests so it is re-parsed incrementally.
        """
        for p, _ in self._complete_passes(text, offset, language, selection, max_tokens, seed, should_stop,
                                          overrides, mode, repair, uri):
            yield p

    def complete(self, text: str, offset: int, language: str = "python",
                 selection: tuple[int, int] | None = None, max_tokens: int | None = None, seed: int = 0,
                 mode: str = "insert", repair: bool = True, uri: str | None = None, **overrides: Any) -> Completion:
        """The edit for a cursor (or a selection): ``text`` replaces ``document[start:end]``."""
        last = None
        for item in self._complete_passes(text, offset, language, selection, max_tokens, seed, None, overrides,
                                          mode, repair, uri, stream=False):
            last = item
        assert last is not None
        p, (pl, t) = last
        return Completion(p.text, p.index + 1, p.nfe, t["total"], p.stop_reason, self._count(p.text), t,
                          pl.start, pl.end, pl.kind)

    def plan_document(self, text: str, offset: int, language: str = "python",
                      selection: tuple[int, int] | None = None, max_tokens: int | None = None, mode: str = "insert",
                      repair: bool = True, uri: str | None = None, **overrides: Any) -> DocumentPlan:
        """Plan a document request without running it: parse, choose the span, set the sampler (the arguments
        of ``stream_complete``). Raises ValueError (bad mode, document too large, max_tokens < 1).

        ``stream_complete`` runs such a plan; a server may instead run its first denoising round itself (the
        hole between ``model_prefix`` and ``model_suffix`` under ``cfg``, each pass's text through ``finish``)
        and hand the last canvas to ``finish_document`` (see ``DocumentPlan``). With several candidate
        indentations (``Plan.indents``) planning runs one forward pass: the model chooses (``DocumentPlan.nfe``).
        """
        if mode not in ("insert", "rewrite"):
            raise ValueError(f"mode={mode!r}; expected 'insert' or 'rewrite'")
        t0 = time.perf_counter()
        doc = self._document(text, language, uri)
        t1 = time.perf_counter()
        pl, plan_ms = self._plan(text, offset, selection, max_tokens, language, doc)
        cfg = self._config(pl.max_tokens, overrides)
        # A single-line span's fill is cut at its first newline: stop denoising once that line is decided.
        line_stop = overrides.get("line_stop", pl.single_line and mode == "insert")
        cfg = cfg.with_(initial_canvas=max(1, min(pl.initial_canvas, cfg.max_tokens)), line_stop=line_stop)
        first = self._keywords(doc.grammar) if pl.kind == "header" and not self.is_ar else None
        heal = ""
        if first is None and mode == "insert" and pl.code and pl.start == pl.end and not self.is_ar:
            heal, first = self._healing(text, pl.start)
        timings = {"parse": (t1 - t0) * 1e3, "plan": plan_ms}
        nfe = 0
        if len(pl.indents) > 1 and isinstance(self.model, DiffusionLM) and not self.is_ar:
            t2 = time.perf_counter()
            indent = self._choose_indent(text[: pl.start], text[pl.end :], pl.indents, uri)
            pl = dataclasses.replace(pl, indent=indent, lead=indent if pl.lead else "")
            timings["indent"] = (time.perf_counter() - t2) * 1e3
            nfe = 1
        dp = DocumentPlan(text, doc, pl, text[: pl.start], text[pl.end :], cfg, mode, repair, uri, timings,
                          first, nfe, heal)
        if cfg.novel_penalty > 0 and pl.code:
            ids = self._context(dp.model_prefix, dp.model_suffix)
            dp = dataclasses.replace(dp, bias=self.novelty_bias(*ids, language, cfg), ids=ids)
        return dp

    def healing(self, prefix: str, suffix: str = "") -> tuple[str, torch.Tensor | None]:
        """Token healing for a ``{prefix, suffix}`` request (``_healing`` at the end of ``prefix``): the text
        the model writes again and slot 0's tokens, or ("", None). None for the autoregressive baseline."""
        if self.is_ar:
            return "", None
        return self._healing(prefix + suffix[:1], len(prefix))

    def _healing(self, text: str, offset: int) -> tuple[str, torch.Tensor | None]:
        """Token healing for a cursor right after a partial word (``result = sor|``): the word's letters and
        digits, with the space before them, are left out of the model's prefix, and slot 0 may only hold a
        token that starts with them (`` sorted``), so the word is continued as the tokenizer would split it
        whole, not from the unnatural boundary the cursor cut. ("", None) when the cursor does not end a
        partial word, ends a word that goes on after it, or no token starts with that text."""
        i = offset
        while i > 0 and offset - i < HEAL_CHARS and text[i - 1].isalnum():
            i -= 1
        if i == offset or (offset < len(text) and (text[offset].isalnum() or text[offset] == "_")):
            return "", None
        if i > 0 and text[i - 1] == " ":
            i -= 1
        heal = text[i:offset]
        table = self._starting_with(heal)
        return (heal, table) if table is not None else ("", None)

    def _starting_with(self, text: str) -> torch.Tensor | None:
        """(V,) bool on the model's device: the tokens whose text starts with ``text``; None if there are none."""
        with self._lock:
            if self._sorted_vocab is None:
                decode = self.tokenizer.decode
                self._sorted_vocab = sorted((decode([i]), i) for i in range(self._n_tokens))
            vocab = self._sorted_vocab
        ids = []
        for word, i in vocab[bisect.bisect_left(vocab, (text, -1)) :]:
            if not word.startswith(text):
                break
            ids.append(i)
        if not ids:
            return None
        table = torch.zeros(self._n_tokens, dtype=torch.bool)
        table[ids] = True
        return self._vocab_table(table)

    def _choose_indent(self, prefix: str, suffix: str, indents: tuple[str, ...], uri: str | None) -> str:
        """The model's choice among a blank line's possible indentations (``Plan.indents``): one pass over a
        small canvas after the bare line start, as a whole-line hole is laid out in training; the indentation
        whose token (a run of blanks, the last one left to the next word: ``"   "`` for four spaces) is most
        likely in slot 0 wins. Ties and indentations without such a token keep the planner's order."""
        tok = self.tokenizer
        ids = []
        for ind in indents:
            t = tok.encode(ind + "x")  # "    x" -> "   " + " x": the indentation's own token comes first
            ids.append(t[0] if len(t) > 1 and not tok.decode([t[0]]).strip() else -1)
        if all(i < 0 for i in ids):
            return indents[0]
        p_ids, s_ids = self._context(prefix, suffix)
        size = 8
        with self._encoded(self._doc_key(uri, p_ids, s_ids), p_ids, s_ids, size) as cache:
            canvas = torch.full((1, size), tok.mask_id, dtype=torch.long, device=self.model.device)
            with torch.no_grad():
                logits = self.model.canvas_logits(canvas, cache)[0, 0].float()
        scores = [float(logits[i]) if i >= 0 else float("-inf") for i in ids]
        return indents[max(range(len(indents)), key=lambda j: (scores[j], -j))]

    def finish_document(self, dp: DocumentPlan, tokens: torch.Tensor, index: int, nfe: int, stop_reason: str,
                        seed: int = 0, should_stop: Callable[[], bool] | None = None,
                        context: Callable[[], ContextCache] | None = None) -> Iterator[Pass]:
        """The rest of an insert-mode document request whose first denoising round ran elsewhere (the server's
        batched scheduler), as ``stream_complete`` would run it: check the fill and, when it broke the parse,
        run the repair rounds.

        ``tokens`` (C,): that round's last canvas, whose pass ``index`` has not been shown yet; ``nfe``: forward
        passes so far; ``stop_reason``: that round's. ``context`` makes the request's encoded context (room for
        ``dp.cfg.max_tokens`` canvas slots; the caller's, e.g. the batch's) when a repair round needs it;
        without it the context is encoded here, through the per-document cache. Yields the passes from
        ``index`` on; the last is final.
        """
        if dp.rewrite or self.is_ar:
            raise ValueError("finish_document continues an insert-mode diffusion request only")
        pl = dp.plan
        fill = dp.finish(self.tokenizer.decode(tokens.tolist()))
        st = _Rounds(index=index, nfe=nfe)
        timings: dict[str, float] = {"parse": 0.0, "repair": 0.0}
        found = self._judge(dp, st, fill, stop_reason, should_stop, timings)
        if found is None:
            yield self._final(dp, st, timings)
            return
        yield Pass(st.index, fill, 0, False, st.nfe, pl.start, pl.end)
        st.index += 1
        with contextlib.ExitStack() as stack:
            if context is not None:
                cache = context()
            else:
                p_ids, s_ids = dp.ids or self._context(dp.model_prefix, dp.model_suffix)
                key = self._doc_key(dp.uri, p_ids, s_ids)
                cache = stack.enter_context(self._encoded(key, p_ids, s_ids, dp.cfg.max_tokens))
            init = self._remask(dp, cache, tokens, fill, found, st)
            yield from self._rounds(dp, cache, init, st, seed, should_stop, timings)

    def warm_up(self) -> float:
        """Run a few small fills (planner, sampler, every canvas size up to 64, repair check) so that the first
        user request does not pay for lazy initialisation (allocator, kernels, tree-sitter, thread pools).
        Returns the milliseconds it took. Front ends call it at start-up."""
        t = time.perf_counter()
        doc = "def add(a, b):\n    return a + b\n\n\nresult = add(1, \n"
        for n in (8, 16, 32, 64):
            self.infill(doc[:-2], "\n", max_tokens=n, initial_canvas=min(16, n), min_tokens=n)
        self.complete(doc, len(doc) - 2, language="python", max_tokens=16)
        return (time.perf_counter() - t) * 1e3

    def compile(self) -> float:
        """``torch.compile`` the per-pass step (``DiffusionLM.canvas_hidden``) with dynamic shapes, so any context
        length, canvas size and batch runs without recompiling, then warm it up. Every engine sharing this model
        uses the compiled step; it is warmed up with one row and with two (the batched server), after which
        other sizes do not recompile. Returns the seconds it took (about 30 s on this project's CPU; the pass is
        about 1.4x faster, BENCHMARKS.md). Results match the eager pass to float rounding, not bit for bit. Raises
        RuntimeError (and keeps the eager step) when compiling fails, e.g. without a C++ compiler."""
        if not isinstance(self.model, DiffusionLM) or self.is_ar:
            raise RuntimeError("compile: only edit-engine diffusion checkpoints have a compiled pass")
        model = self.model
        eager = model.canvas_hidden
        t = time.perf_counter()
        model.canvas_hidden = torch.compile(eager, dynamic=True)  # type: ignore[method-assign]
        try:
            self.warm_up()
            # A batch of one is compiled as a constant: run two rows too, so that the server's first batched
            # pass does not stop every client for a recompile.
            tok = self.tokenizer
            two = model.encode_context([tok.encode("x = 1\n"), tok.encode("def f(a):\n    ")],
                                       [tok.encode("\n"), tok.encode("\nprint(f)\n")], 16)
            for c in (8, 16):
                model.canvas_hidden(torch.full((2, c), tok.mask_id, device=model.device), two)
        except Exception as e:  # the compiler runs lazily, at the first call
            model.canvas_hidden = eager  # type: ignore[method-assign]
            raise RuntimeError(f"torch.compile failed ({type(e).__name__}: {e}); running eager") from e
        return time.perf_counter() - t

    def close_document(self, uri: str) -> None:
        """Forget what is cached for ``uri``: its syntax tree and its encoded context (an editor closed it)."""
        self.syntax_cache.close(uri)
        self.contexts.take(("uri", uri))

    @property
    def syntax_cache(self) -> syntax.SyntaxCache:
        """Syntax trees of the documents seen with a ``uri`` (front ends may also ``edit``/``close`` them)."""
        with self._lock:
            cache = getattr(self, "_syntax", None)
            if cache is None:
                cache = self._syntax = syntax.SyntaxCache()
            return cache

    def _document(self, text: str, language: str, uri: str | None) -> syntax.Document:
        if len(text) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"document too large ({len(text):,} > {MAX_DOCUMENT_CHARS:,} chars)")
        return self.syntax_cache.get(uri, text, language) if uri else syntax.Document.parse(text, language)

    def _plan(self, text: str, offset: int, selection: tuple[int, int] | None,
              max_tokens: int | None, language: str = "plaintext",
              doc: syntax.Document | None = None) -> tuple[planner.Plan, float]:
        if len(text) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"document too large ({len(text):,} > {MAX_DOCUMENT_CHARS:,} chars)")
        t0 = time.perf_counter()
        pl = planner.plan(text, offset, selection, max_tokens, language, doc)
        return pl, (time.perf_counter() - t0) * 1e3

    def _scores(self, canvas: torch.Tensor, cache: ContextCache) -> torch.Tensor:
        """One scoring pass: the model's probability of each slot's current token. canvas (C,) -> (C,)."""
        logits = self.model.canvas_logits(canvas.reshape(1, -1), cache)[0].float()  # (C, V)
        return torch.softmax(logits, -1).gather(-1, canvas.reshape(-1, 1)).squeeze(-1)

    def _complete_passes(self, text: str, offset: int, language: str, selection: tuple[int, int] | None,
                         max_tokens: int | None, seed: int, should_stop: Callable[[], bool] | None,
                         overrides: dict[str, Any], mode: str, do_repair: bool, uri: str | None,
                         stream: bool = True) -> Iterator[tuple[Pass, tuple[planner.Plan, dict[str, float]]]]:
        """Plan, denoise, post-process, check and repair; yields every pass with (plan, timings so far).
        ``stream=False``: only the passes that end a round (the caller wants the last one)."""
        t0 = time.perf_counter()
        dp = self.plan_document(text, offset, language, selection, max_tokens, mode, do_repair, uri, **overrides)
        timings = {**dp.timings, "repair": 0.0}
        for p in self._document_passes(dp, seed, should_stop, timings, stream):
            timings["total"] = (time.perf_counter() - t0) * 1e3
            yield p, (dp.plan, dict(timings))

    def _document_passes(self, dp: DocumentPlan, seed: int, should_stop: Callable[[], bool] | None,
                         timings: dict[str, float], stream: bool = True) -> Iterator[Pass]:
        """Run a planned document request; adds to ``timings`` (ms) as it goes. ``stream=False`` skips the
        post-processing and the yield of every pass but those that end a round (same results, less work)."""
        tok, pl, cfg = self.tokenizer, dp.plan, dp.cfg
        t2 = time.perf_counter()
        p_ids, s_ids = dp.ids or self._context(dp.model_prefix, dp.model_suffix)
        t3 = time.perf_counter()
        doc_key = self._doc_key(dp.uri, p_ids, s_ids)
        if self.is_ar:  # one pass per token; no rewrite scoring and no repair rounds (they re-mask a canvas)
            with self._kv(doc_key, ar.psm_prompt(tok, p_ids, s_ids)) as kv:
                timings.update(tokenize=(t3 - t2) * 1e3, context=0.0)
                t4 = time.perf_counter()
                prev: Step | None = None
                fill = ""
                for step in ar.ar_generate(self.model, tok, p_ids, s_ids, cfg.max_tokens, should_stop,
                                           min_tokens=cfg.min_tokens, kv=kv,
                                           line_end=self._line_end_for(cfg), bias=dp.bias):
                    if prev is not None and stream:
                        yield Pass(prev.index, fill, prev.masked, False, prev.nfe, pl.start, pl.end)
                    prev = step
                    if stream:
                        fill = dp.finish(self._text(step))
                if prev is None or not prev.final:  # cancelled
                    return
                if not stream:
                    fill = dp.finish(self._text(prev))
                timings["denoise"] = (time.perf_counter() - t4) * 1e3
                yield Pass(prev.index, fill, 0, True, prev.nfe, pl.start, pl.end, prev.stop_reason)
            return
        with self._encoded(doc_key, p_ids, s_ids, cfg.max_tokens) as cache:
            t4 = time.perf_counter()
            timings.update(tokenize=(t3 - t2) * 1e3, context=(t4 - t3) * 1e3)
            st = _Rounds(nfe=dp.nfe)  # the planning pass, when the model chose the indentation
            init = self._rewrite_canvas(dp, cache, st) if dp.rewrite else None
            yield from self._rounds(dp, cache, init, st, seed, should_stop, timings, stream)

    def _rewrite_canvas(self, dp: DocumentPlan, cache: ContextCache, st: _Rounds) -> torch.Tensor | None:
        """Rewrite mode's first canvas: the selection's tokens, the least likely of them masked (one scoring
        pass), and a few masked slots to grow or end early. None (start from an empty canvas) when the
        selection is empty or does not fit."""
        tok, cfg = self.tokenizer, dp.cfg
        ids = tok.encode(dp.text[dp.start : dp.end])
        if not 0 < len(ids) < cfg.max_tokens:
            return None
        extra = min(cfg.max_tokens - len(ids), max(2, len(ids) // 8))  # room to grow or end early
        canvas = torch.tensor(ids + [tok.mask_id] * extra, device=self.model.device)
        conf = self._scores(torch.tensor(ids, device=self.model.device), cache)
        st.nfe += 1
        redo = repair.least_likely(conf, torch.ones_like(conf, dtype=torch.bool), REWRITE_SHARE)
        canvas[: len(ids)][redo] = tok.mask_id
        return canvas

    def _rounds(self, dp: DocumentPlan, cache: ContextCache, init: torch.Tensor | None, st: _Rounds, seed: int,
                should_stop: Callable[[], bool] | None, timings: dict[str, float],
                stream: bool = True) -> Iterator[Pass]:
        """Denoising rounds from ``init`` (None: an empty canvas) until the fill checks out or the repair rounds
        run out; then the final pass (the best fill). Returns without one when cancelled. ``stream=False``:
        only a round's last pass is post-processed and the in-between passes are not yielded."""
        tok, pl = self.tokenizer, dp.plan
        t_round = time.perf_counter()
        while True:
            last: Step | None = None
            fill = ""
            for step in denoise(self.model, cache, dp.cfg, tok.pad_id, tok.mask_id, seed, should_stop, init,
                                line_end=self._line_end_for(dp.cfg), first=dp.first, bias=dp.bias):
                if last is not None:  # hold each pass back one step: only the very last one is final
                    if stream:
                        yield Pass(st.index, fill, last.masked, False, st.nfe + last.nfe, pl.start, pl.end)
                    st.index += 1
                last = step
                if stream:
                    fill = dp.finish(self._text(step))
            if last is None or not last.final:  # cancelled
                return
            if not stream:
                fill = dp.finish(self._text(last))
            st.nfe += last.nfe
            key = "denoise" if st.rounds == 0 else "repair"
            timings[key] = timings.get(key, 0.0) + (time.perf_counter() - t_round) * 1e3
            found = self._judge(dp, st, fill, last.stop_reason, should_stop, timings)
            if found is None:
                break
            yield Pass(st.index, fill, 0, False, st.nfe, pl.start, pl.end)
            st.index += 1
            t_round = time.perf_counter()
            init = self._remask(dp, cache, last.tokens, fill, found, st)
        yield self._final(dp, st, timings)

    def _final(self, dp: DocumentPlan, st: _Rounds, timings: dict[str, float]) -> Pass:
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

    def _judge(self, dp: DocumentPlan, st: _Rounds, fill: str, stop_reason: str,
               should_stop: Callable[[], bool] | None, timings: dict[str, float]) -> repair.Check | None:
        """After a round: check its fill and keep the best one so far. Returns the check when another (repair)
        round should run, else None."""
        st.stop_reason = stop_reason or st.stop_reason
        tp = time.perf_counter()
        found = dp.check(fill)
        timings["parse"] = timings.get("parse", 0.0) + (time.perf_counter() - tp) * 1e3
        if st.best is None or found is not None and found.errors < st.best[1]:
            st.best = (fill, found.errors if found is not None else 0)
        if found is None or found.errors == 0 or st.rounds >= repair.MAX_ROUNDS \
                or (should_stop is not None and should_stop()):
            return None
        return found

    def _remask(self, dp: DocumentPlan, cache: ContextCache, canvas: torch.Tensor, fill: str,
                found: repair.Check, st: _Rounds) -> torch.Tensor:
        """The next repair round's canvas: one scoring pass, then the slots behind what broke re-masked."""
        tok = self.tokenizer
        real = (canvas != tok.pad_id) & (canvas != tok.mask_id)
        conf = self._scores(canvas, cache)
        st.nfe += 1
        pieces = [tok.decode([int(t)]) if bool(r) else ""
                  for t, r in zip(canvas.tolist(), real.tolist(), strict=True)]
        raw = tok.decode(canvas.tolist())
        spans = (repair.slot_spans(pieces) if "".join(pieces) == raw
                 else _prefix_spans(tok, canvas, real))
        st.rounds += 1
        return repair.remask(canvas, conf, spans, repair.to_raw(found.ranges, raw, fill), found.elsewhere, real,
                             tok.mask_id)


REWRITE_SHARE = 0.25  # rewrite mode re-masks this share of the selection's tokens (the least likely)


def _prefix_spans(tok: Tokenizer, canvas: torch.Tensor, real: torch.Tensor) -> list[tuple[int, int]]:
    """Character range of each slot in the decoded canvas, by decoding growing prefixes (a token may hold part
    of a multi-byte character, so decoding tokens one by one does not add up)."""
    ids = canvas.tolist()
    spans, prev = [], 0
    for j in range(len(ids)):
        n = len(tok.decode(ids[: j + 1])) if bool(real[j]) else prev
        spans.append((prev, n))
        prev = n
    return spans
