"""The :class:`Memory`: nested n-gram caches (document, open documents, workspace, installed packages) over a
background.

The background models ship in ``models/<language>.npz`` and load on first use of a language.  The caches
are count tables kept in step with the texts the editor reports; they are bounded by a byte budget,
evicting the least recently reported package files first, then workspace files, then open documents.
Thread-safe: a background indexer (``indexer``) may report files while a request drafts.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path

from .draft import Draft, DraftRule, draft_tokens
from .lexer import canonical_language
from .ngram import DynamicNgrams, NgramCounts, StaticNgrams
from .tiers import DocumentCounts

__all__ = ["Memory", "MODELS_DIR", "FILE_TIERS"]

MODELS_DIR = Path(__file__).with_name("models")
# Rough resident size of one cached token: one dictionary entry per order plus the token list slot.
_BYTES_PER_TOKEN_PER_ORDER = 90
_SCRATCH = "\x00scratch"
FILE_TIERS = ("workspace", "packages")  # tiers of files on disk, most local first (evicted last first)


class Memory:
    """Count-based memory of code, queried for left-to-right drafts at the cursor."""

    def __init__(
        self,
        models_dir: str | Path | None = MODELS_DIR,
        order: int = 4,
        max_bytes: int = 256 << 20,
        max_documents: int = 64,
        order_weight: float = 1.0,
        cache_order: int = 8,
    ) -> None:
        self.models_dir = Path(models_dir) if models_dir is not None else None
        self.order = order
        self.max_bytes = max_bytes
        self.max_documents = max_documents
        self.order_weight = order_weight
        # The caches (document, open documents, workspace) count longer contexts than the background: they are
        # small, and a local file repeats whole phrases (typing replay, Python dev split, memory alone: order 4
        # wrote 19.7% of the characters, order 6 22.6%; with drafts from the caches first, order 6 24.4% at
        # 36.8% acceptance, order 8 26.1% at 33.3%, orders 10 and 12 25.5% at 30%).
        self.cache_order = cache_order
        self._background: dict[str, StaticNgrams | None] = {}
        self._open: dict[str, DynamicNgrams] = {}
        self._tables: dict[str, dict[str, DynamicNgrams]] = {t: {} for t in FILE_TIERS}  # tier -> language -> counts
        self._docs: OrderedDict[str, tuple[DocumentCounts, DynamicNgrams]] = OrderedDict()
        self._files: dict[str, OrderedDict[str, DocumentCounts]] = {t: OrderedDict() for t in FILE_TIERS}
        # Tokens the caches count, kept as texts change (``cache_bytes``): an open document's twice (its own
        # model and the open tier's), a file's once.
        self._tokens = 0
        self.load_seconds: dict[str, float] = {}
        self._lock = threading.RLock()

    @classmethod
    def load(cls, models_dir: str | Path | None = MODELS_DIR, **kwargs: object) -> Memory:
        """A memory backed by the shipped background models (each loaded lazily, on first use)."""
        return cls(models_dir, **kwargs)  # type: ignore[arg-type]

    # -- tiers -------------------------------------------------------------------------------------
    def background(self, language: str) -> StaticNgrams | None:
        """The background model of ``language`` (loaded on first call), or ``None`` if none ships."""
        lang = canonical_language(language)
        if lang not in self._background:
            model = None
            path = self.models_dir / f"{lang}.npz" if self.models_dir is not None else None
            if path is not None and path.is_file():
                t0 = time.perf_counter()
                model = StaticNgrams.load(path)
                self.load_seconds[lang] = time.perf_counter() - t0
            self._background[lang] = model
        return self._background[lang]

    def _order_for(self, lang: str) -> int:
        bg = self.background(lang)
        return max(bg.order if bg is not None else self.order, self.cache_order)

    def _shared(self, table: dict[str, DynamicNgrams], lang: str) -> DynamicNgrams:
        if lang not in table:
            table[lang] = DynamicNgrams(self._order_for(lang))
        return table[lang]

    def observe(self, uri: str, text: str, language: str) -> None:
        """Report an open document's current text (cheap when only a few lines changed)."""
        with self._lock:
            self._observe(uri, text, language)

    def _observe(self, uri: str, text: str, language: str) -> None:
        lang = canonical_language(language)
        entry = self._docs.get(uri)
        if entry is not None and entry[0].language != lang:
            self.close(uri)
            entry = None
        if entry is None:
            own = DynamicNgrams(self._order_for(lang))
            entry = (DocumentCounts(lang, [own, self._shared(self._open, lang)]), own)
            self._docs[uri] = entry
        self._docs.move_to_end(uri)
        self._set_text(entry[0], text, 2)
        self._enforce_budget()

    def _set_text(self, doc: DocumentCounts, text: str, weight: int) -> None:
        before = len(doc.tokens)
        doc.set_text(text)
        self._tokens += weight * (len(doc.tokens) - before)

    def _clear(self, doc: DocumentCounts, weight: int) -> None:
        self._tokens -= weight * len(doc.tokens)
        doc.clear()

    def close(self, uri: str) -> None:
        """Forget an open document."""
        with self._lock:
            entry = self._docs.pop(uri, None)
            if entry is not None:
                self._clear(entry[0], 2)

    def add_workspace(self, path: str, text: str, language: str, tier: str = "workspace") -> None:
        """Report a workspace file (``tier="workspace"``) or an installed package's (``"packages"``); replaces
        an earlier text of the same path (re-counting only the lines that changed)."""
        lang = canonical_language(language)
        with self._lock:
            files = self._files[tier]
            doc = files.get(path)
            if doc is not None and doc.language != lang:
                self._clear(doc, 1)
                doc = None
            if doc is None:
                for other in FILE_TIERS:  # a path lives in one tier
                    if other != tier and path in self._files[other]:
                        self._clear(self._files[other].pop(path), 1)
                doc = DocumentCounts(lang, [self._shared(self._tables[tier], lang)])
                files[path] = doc
            files.move_to_end(path)
            self._set_text(doc, text, 1)
            self._enforce_budget()

    def remove_workspace(self, path: str) -> None:
        """Forget a workspace or package file (deleted, or the workspace closed)."""
        with self._lock:
            for files in self._files.values():
                doc = files.pop(path, None)
                if doc is not None:
                    self._clear(doc, 1)

    def workspace_paths(self, tier: str = "workspace") -> list[str]:
        """The files held in ``tier``, least recently reported first."""
        with self._lock:
            return list(self._files[tier])

    def cache_bytes(self) -> int:
        """Estimated bytes held by the caches (a running count of their tokens: O(1))."""
        return self._tokens * max(self.order, self.cache_order) * _BYTES_PER_TOKEN_PER_ORDER

    def _count_tokens(self) -> int:
        """The tokens the caches count, summed over every text held (``_tokens`` keeps this sum)."""
        toks = sum(len(d.tokens) * 2 for d, _ in self._docs.values())  # own model + open tier
        return toks + sum(len(d.tokens) for files in self._files.values() for d in files.values())

    def _enforce_budget(self) -> None:
        while len(self._docs) > self.max_documents:
            self.close(next(iter(self._docs)))
        while self.cache_bytes() > self.max_bytes:
            victim = next((files for t in reversed(FILE_TIERS) if (files := self._files[t])), None)
            if victim is not None:
                self._clear(victim.popitem(last=False)[1], 1)
            elif len(self._docs) > 1:
                self.close(next(iter(self._docs)))
            else:
                break

    def state(self) -> dict[str, object]:
        """The file tiers' counts and files, for a cache on disk (``indexer``); ``restore`` takes it back."""
        with self._lock:
            return {"order": self._order_key(), "tables": self._tables, "files": self._files}

    def restore(self, state: dict[str, object]) -> bool:
        """Take back a ``state`` when it was made with the same orders and no file has been reported since;
        returns whether it was taken."""
        with self._lock:
            if state.get("order") != self._order_key() or any(self._files.values()):
                return False
            self._tables = state["tables"]  # type: ignore[assignment]
            self._files = state["files"]  # type: ignore[assignment]
            self._tokens = self._count_tokens()
            self._enforce_budget()
            return True

    def _order_key(self) -> tuple[int, int]:
        return (self.order, self.cache_order)

    def tiers(self, language: str, uri: str | None) -> list[tuple[str, NgramCounts]]:
        """The tiers to consult for a draft, most local first."""
        lang = canonical_language(language)
        out: list[tuple[str, NgramCounts]] = []
        entry = self._docs.get(uri) if uri is not None else None
        if entry is not None:
            out.append(("document", entry[1]))
        if lang in self._open and self._open[lang].n_tokens:
            out.append(("open", self._open[lang]))
        for tier in FILE_TIERS:
            table = self._tables[tier].get(lang)
            if table is not None and table.n_tokens:
                out.append((tier, table))
        bg = self.background(lang)
        if bg is not None:
            out.append(("background", bg))
        return out

    # -- drafting ----------------------------------------------------------------------------------
    def draft(
        self,
        prefix: str,
        suffix: str,
        language: str,
        uri: str | None = None,
        max_tokens: int = 24,
        min_prob: float = 0.5,
        local_prob: float | None = None,
        rule: DraftRule | None = None,
    ) -> Draft | None:
        """Draft the rest of the line at the cursor under ``rule`` (None: every token needs ``local_prob`` from
        the caches or ``min_prob`` from all tiers, ``DraftRule.uniform``); ``None`` when nothing is confident enough.

        Without a ``uri`` (or for a document never observed) the text around the cursor is taken as the
        document, cached incrementally in a scratch slot so repeated calls stay cheap.
        """
        with self._lock:
            if uri is None or uri not in self._docs:
                # The cursor's own line is left out so a half-typed word does not count as evidence for itself.
                uri = _SCRATCH
                head = prefix[: prefix.rfind("\n") + 1]
                nl = suffix.find("\n")
                self._observe(uri, head + (suffix[nl + 1 :] if nl >= 0 else ""), language)
            return draft_tokens(self.tiers(language, uri), prefix, suffix, language, max_tokens=max_tokens,
                                rule=rule or DraftRule.uniform(min_prob, local_prob), order_weight=self.order_weight)
