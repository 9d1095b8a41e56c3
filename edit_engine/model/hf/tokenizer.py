"""The tokenizer of an open checkpoint (``tokenizer.json`` + ``tokenizer_config.json``), with the interface the
engine uses: ``encode``, ``decode`` (dropping special tokens), ``pad_id``, ``mask_id``, ``vocab_size``,
``special_ids``.

Special ids come from the checkpoint, never from constants: the mask token from ``config.json``'s
``mask_token_id``, else ``tokenizer_config.json``'s ``mask_token``, else an added token spelled ``<|mask|>``
(Dream), ``<|mdm_mask|>`` (LLaDA), ``[MASK]`` or ``<mask>``. ``pad_id``, the token whose prediction ends a fill,
is the config's ``pad_token_id``, else the tokenizer's ``pad_token``, else the end-of-text token.
Like our own tokenizer, encoding never turns literal text such as ``<|mask|>`` in a document into a control token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _HFTokenizer

from edit_engine.model.hf.config import ArchConfig, UnsupportedCheckpoint
from edit_engine.model.tokenizer import TokenCodec

MASK_SPELLINGS = ("<|mask|>", "<|mdm_mask|>", "[MASK]", "<mask>")
EOS_SPELLINGS = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<|eos|>")


def _token_text(value: Any) -> str | None:
    """tokenizer_config.json spells a special token as a string or as {"content": ...}."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


class OpenTokenizer(TokenCodec):
    """A ``tokenizers`` tokenizer plus the special ids resolved from the checkpoint."""

    def __init__(self, hf: _HFTokenizer, mask_id: int, pad_id: int, eos_id: int, bos_id: int | None,
                 add_bos: bool, special_ids: frozenset[int]) -> None:
        self.hf = hf
        self.hf.encode_special_tokens = True  # literal "<|mask|>" in a document stays text
        self.mask_id = mask_id
        self.pad_id = pad_id
        self.eos_id = eos_id
        self.bos_id = bos_id
        self.add_bos = add_bos  # prepend bos to every prefix (tokenizer_config.json add_bos_token)
        self.special_ids = special_ids | {mask_id, pad_id, eos_id} | ({bos_id} if bos_id is not None else frozenset())

    @property
    def vocab_size(self) -> int:
        return int(self.hf.get_vocab_size(with_added_tokens=True))

    @classmethod
    def from_folder(cls, d: Path, arch: ArchConfig) -> OpenTokenizer:
        """Read ``tokenizer.json`` (required) and ``tokenizer_config.json`` (optional) from ``d``."""
        if not (d / "tokenizer.json").is_file():
            raise UnsupportedCheckpoint(
                f"{str(d)!r} has no tokenizer.json (a fast tokenizer is required; slow-only tokenizers "
                "such as a bare vocab.json/merges.txt are not read)")
        hf = _HFTokenizer.from_file(str(d / "tokenizer.json"))
        tcfg: dict[str, Any] = {}
        if (d / "tokenizer_config.json").is_file():
            tcfg = json.loads((d / "tokenizer_config.json").read_text())
        added = json.loads((d / "tokenizer.json").read_text()).get("added_tokens", [])
        specials = frozenset(int(t["id"]) for t in added if t.get("special"))

        def by_name(key: str, spellings: Sequence[str]) -> int | None:
            name = _token_text(tcfg.get(key))
            for s in ([name] if name else []) + list(spellings):
                tid = hf.token_to_id(s)
                if tid is not None:
                    return int(tid)
            return None

        mask = arch.mask_token_id if arch.mask_token_id is not None else by_name("mask_token", MASK_SPELLINGS)
        if mask is None:
            raise UnsupportedCheckpoint(
                f"no mask token: config.json has no mask_token_id and the tokenizer has none of {MASK_SPELLINGS} "
                f"(a {arch.family} checkpoint without one is autoregressive, not a diffusion model)")
        eos = arch.eos_token_id if arch.eos_token_id is not None else by_name("eos_token", EOS_SPELLINGS)
        pad = arch.pad_token_id if arch.pad_token_id is not None else by_name("pad_token", ())
        if pad is None or pad == mask:
            pad = eos
        if pad is None or eos is None:
            raise UnsupportedCheckpoint("no pad / end-of-text token in config.json or the tokenizer")
        bos = arch.bos_token_id if arch.bos_token_id is not None else by_name("bos_token", ())
        add_bos = bool(tcfg.get("add_bos_token", False)) and bos is not None
        for name, tid in (("mask", mask), ("pad", pad), ("eos", eos)):
            if not 0 <= tid < arch.vocab_size:
                raise UnsupportedCheckpoint(f"{name} token id {tid} is outside the model's {arch.vocab_size} rows")
        return cls(hf, mask, pad, eos, bos, add_bos, specials)
