"""Tables over the vocabulary that the sampler takes: which tokens hold a newline (the line stop), which start a
block header (slot 0 of a header), which start a partial word (token healing), and the novel-name penalty.
Each is made once per engine (decoding the whole vocabulary) and kept on the model's device."""

from __future__ import annotations

import bisect
import threading

import torch

from edit_engine.decoding.sampler import SamplerConfig, keyword_tokens, newline_tokens
from edit_engine.model.interfaces import CanvasModel, TextTokenizer
from edit_engine.syntax import trees as syntax

# Token healing backs off at most this many characters of the word at the cursor.
HEAL_CHARS = 32
# Words whose tokens ``novelty_bias`` keeps for its ``extra_words``; past this the store starts again.
MAX_EXTRA_WORDS = 50_000


class TokenTables:
    """The vocabulary tables of one model and tokenizer. Thread-safe."""

    def __init__(self, model: CanvasModel, tokenizer: TextTokenizer) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self._lock = threading.Lock()
        self._line_end: torch.Tensor | None = None
        self._keyword_tables: dict[str, torch.Tensor | None] = {}  # by grammar name (``keywords``)
        self._sorted_vocab: list[tuple[str, int]] | None = None  # (text, id) in text order (``starting_with``)
        self._names: tuple[torch.Tensor, list[str]] | None = None  # name tokens' words (``_name_table``)
        self._common: dict[str, torch.Tensor] = {}  # by grammar name: which words are common (``novelty_bias``)
        self._word_ids: dict[str, list[int]] = {}  # token ids of " word" (``novelty_bias``'s ``extra_words``)

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

    def keywords(self, g: syntax.Grammar) -> torch.Tensor | None:
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
                     cfg: SamplerConfig, extra_words: frozenset[str] | None = None) -> torch.Tensor | None:
        """The sampler's novel-name penalty for a request whose model context is ``p_ids`` + ``s_ids`` (sampler
        module doc, "Novel names"): a (V,) float logit bias, minus ``cfg.novel_penalty`` on every name token
        whose word is neither in the context (as any of its tokens: ``" n"`` and ``"n"`` are one word) nor one
        of the grammar's ``common_words``. ``extra_words`` (e.g. the names a static analyser knows at the
        cursor, ``analysis.known_words``) count as if they were in the context: the words of the tokens of each
        one written after a space. None when the penalty is off or the grammar lists no common words.
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
        ids = p_ids + s_ids + (self._word_tokens(extra_words) if extra_words else [])
        ctx = torch.tensor(ids, dtype=torch.long, device=group.device)
        known[group[ctx.clamp(0, group.numel() - 1)]] = True  # -1 (not a name) indexes the last entry
        novel = ~known[group]
        return novel.to(torch.float32) * -cfg.novel_penalty

    def _word_tokens(self, words: frozenset[str]) -> list[int]:
        """The token ids of each of ``words`` written after a space, kept per word: an analyser names mostly the
        same words request after request (186 of them: 1.8 ms to encode, 0.1 ms to look up)."""
        with self._lock:
            found = {w: self._word_ids.get(w) for w in words}
        new = [w for w, i in found.items() if i is None]
        if new:
            encoded = dict(zip(new, self.tokenizer.encode_batch([" " + w for w in new]), strict=True))
            found.update(encoded)
            with self._lock:
                if len(self._word_ids) + len(new) > MAX_EXTRA_WORDS:
                    self._word_ids.clear()
                self._word_ids.update(encoded)
        return [i for ids in found.values() if ids is not None for i in ids]

    def line_end_for(self, cfg: SamplerConfig) -> torch.Tensor | None:
        """The newline table when ``cfg`` asks for the line stop, else None (what the samplers take)."""
        return self.line_end if cfg.line_stop else None


    def healing_at(self, text: str, offset: int) -> tuple[str, torch.Tensor | None]:
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
        table = self.starting_with(heal)
        return (heal, table) if table is not None else ("", None)

    def starting_with(self, text: str) -> torch.Tensor | None:
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
