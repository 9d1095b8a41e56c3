"""Byte-level BPE tokenizer trained by the project on code.

Special tokens (fixed ids, the same in every checkpoint of our own family):

- ``<|pad|>`` (id 0): an *empty* canvas position. The model predicts it for canvas slots past the end of the
  fill; the sampler drops it from the output. This is how the model chooses a fill shorter than its canvas.
- ``<|mask|>`` (id 1): a canvas position still to be decided.
- ``<|eos|>`` (id 2): reserved (end of text); never produced by our sampler.

Encoding never turns literal text such as ``"<|mask|>"`` in a user's file into a special token
(``encode_special_tokens``), so a document cannot inject masks into the model's input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from edit_engine.model.interfaces import TextTokenizer

PAD = "<|pad|>"
MASK = "<|mask|>"
EOS = "<|eos|>"
SPECIAL_TOKENS = (PAD, MASK, EOS)
RELEASE_LOCK_CHARS = 8192  # texts longer than this are encoded with the interpreter lock released


class TokenCodec:
    """Encoding and decoding over a ``tokenizers`` tokenizer ``hf``, dropping ``special_ids`` from decoded text:
    shared by our tokenizer and the open models' (``hf.OpenTokenizer``)."""

    hf: _HFTokenizer
    special_ids: frozenset[int]

    def encode(self, text: str) -> list[int]:
        """Token ids for ``text`` (no special tokens added). A long text goes through ``encode_batch``, which
        releases the interpreter lock while it works (``encode`` holds it: 0.9 s for 500 k characters, during
        which no other thread of a server runs)."""
        if len(text) > RELEASE_LOCK_CHARS:
            return list(self.hf.encode_batch([text], add_special_tokens=False)[0].ids)
        return list(self.hf.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(e.ids) for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; special tokens (pad, mask, eos, and the model's other specials) are dropped."""
        keep = [int(i) for i in ids if int(i) not in self.special_ids]
        return str(self.hf.decode(keep, skip_special_tokens=False)) if keep else ""


class Tokenizer(TokenCodec):
    """Thin typed wrapper over a ``tokenizers`` byte-level BPE with our special tokens."""

    def __init__(self, hf: _HFTokenizer) -> None:
        self.hf = hf
        # Literal "<|mask|>" in a document is text, not a control token.
        self.hf.encode_special_tokens = True
        pad, mask, eos = (hf.token_to_id(t) for t in SPECIAL_TOKENS)
        if pad is None or mask is None or eos is None:
            raise ValueError(f"tokenizer lacks the special tokens {SPECIAL_TOKENS}")
        self.pad_id: int = pad
        self.mask_id: int = mask
        self.eos_id: int = eos
        self.special_ids = frozenset((pad, mask, eos))

    @property
    def vocab_size(self) -> int:
        return int(self.hf.get_vocab_size())

    # ------------------------------------------------------------------ persistence
    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        return cls(_HFTokenizer.from_file(str(path)))

    def save(self, path: str | Path) -> None:
        self.hf.save(str(path))

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8192) -> Tokenizer:
        """Train a byte-level BPE on ``texts`` (an iterator of documents)."""
        hf = _HFTokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        hf.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            min_frequency=2,
            show_progress=False,
        )
        hf.train_from_iterator(texts, trainer=trainer)
        return cls(hf)


def trim_start(tok: TextTokenizer, text: str, ids: list[int]) -> list[int]:
    """Drop leading tokens until ``ids`` decode to the end of ``text`` (a token budget can cut a character)."""
    while ids and not text.endswith(tok.decode(ids)):
        ids = ids[1:]
    return ids


def trim_end(tok: TextTokenizer, text: str, ids: list[int]) -> list[int]:
    """Drop trailing tokens until ``ids`` decode to the start of ``text``."""
    while ids and not text.startswith(tok.decode(ids)):
        ids = ids[:-1]
    return ids

