"""The autoregressive baseline: the same network trained as a plain causal LM on prefix-suffix-middle (PSM)
sequences, decoded greedily one token per forward pass with a key/value cache.

Sequence format (fill-in-the-middle, Bavarian et al. 2022, "PSM" order), shared with the training side::

    prefix_ids + [mask_id] + suffix_ids + [pad_id] + middle_ids + [eos_id]

Our tokenizer has no FIM tokens, so its reserved ids play them: ``<|mask|>`` is ``<fim_suffix>`` (the suffix
follows), ``<|pad|>`` is ``<fim_middle>`` (the middle follows) and ``<|eos|>`` ends the middle. Every
token is of kind PREFIX (causal attention, rotary positions 0..n-1), so the model's ``forward`` with
all-PREFIX kinds is the training forward, and the whole prompt is a *prefix* to ``DiffusionLM.edit_context``:
decoding appends each new token to the cache (``KVCache``) and computes only its row. Forward passes are counted (nfe): the
prefill produces the first token, and each appended token one more.

``reference_generate`` is the oracle: the same greedy rule with a full recompute per token (tested equal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from edit_engine import kernels
from edit_engine.decoding.sampler import Step
from edit_engine.model.network import PREFIX, ContextCache, DiffusionLM
from edit_engine.model.tokenizer import Tokenizer


def fim_suffix_id(tok: Tokenizer) -> int:
    """The id that announces the suffix (PSM's ``<fim_suffix>``): the mask id."""
    return tok.mask_id


def fim_middle_id(tok: Tokenizer) -> int:
    """The id that announces the middle (PSM's ``<fim_middle>``): the pad id."""
    return tok.pad_id


def psm_prompt(tok: Tokenizer, prefix_ids: list[int], suffix_ids: list[int]) -> list[int]:
    """The prompt the model continues with the middle: prefix, <fim_suffix>, suffix, <fim_middle>."""
    return [*prefix_ids, fim_suffix_id(tok), *suffix_ids, fim_middle_id(tok)]


def psm_sequence(tok: Tokenizer, prefix_ids: list[int], suffix_ids: list[int],
                 middle_ids: list[int]) -> list[int]:
    """A whole training sequence: the prompt, the middle, <|eos|>. The loss covers the middle and eos."""
    return [*psm_prompt(tok, prefix_ids, suffix_ids), *middle_ids, tok.eos_id]


@dataclass
class KVCache:
    """A causal key/value cache (the prefix rows of a ``ContextCache``) and the token ids it holds."""

    cache: ContextCache
    ids: list[int]

    @classmethod
    def empty(cls, model: DiffusionLM) -> KVCache:
        return cls(model.encode_context([[]], [[]], capacity=0), [])

    def feed(self, model: DiffusionLM, ids: list[int]) -> torch.Tensor:
        """Make the cache hold ``ids`` (non-empty): keep the longest common prefix with what it holds, but not
        the last of ``ids`` (its hidden state is wanted), and encode the rest in one forward pass.
        Returns the last token's final hidden state, (1, D)."""
        if not ids:
            raise ValueError("feed needs at least one token")
        n = min(len(self.ids), len(ids) - 1)
        keep = next((i for i in range(n) if self.ids[i] != ids[i]), n)
        h = model.edit_context(self.cache, keep, ids[keep:])
        self.ids = list(ids)
        return h[:, -1]


def next_token(model: DiffusionLM, tok: Tokenizer, h: torch.Tensor, allow_eos: bool,
                bias: torch.Tensor | None = None) -> int:
    """Greedy choice from a final hidden state (1, D); the mask and pad ids (FIM markers) are never output.
    ``bias`` (V,): added to the logits first (the novel-name penalty, as the diffusion sampler adds it)."""
    logits = kernels.add_logit_bias(model.head(h).float(), bias)  # (1, V)
    logits[:, [tok.mask_id, tok.pad_id]] = float("-inf")
    if not allow_eos:
        logits[:, tok.eos_id] = float("-inf")
    return int(logits.argmax(-1))  # the one host read per token


def _step(index: int, out: list[int], nfe: int, max_tokens: int, stop: str) -> Step:
    remaining = 0 if stop else max_tokens - len(out)
    return Step(index, torch.tensor(out, dtype=torch.long), remaining, nfe, bool(stop), stop)


def ar_generate(
    model: DiffusionLM,
    tok: Tokenizer,
    prefix_ids: list[int],
    suffix_ids: list[int],
    max_tokens: int,
    should_stop: Callable[[], bool] | None = None,
    *,
    min_tokens: int = 0,
    kv: KVCache | None = None,
    line_end: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> Iterator[Step]:
    """Greedy PSM decoding with a key/value cache: yields a ``Step`` per generated token (``tokens``: the
    middle so far, eos excluded; ``masked``: tokens still allowed; ``nfe``: forward passes so far). Stops at
    eos (``stop_reason="complete"``) or after ``max_tokens`` tokens (``"length"``); eos is not allowed before
    ``min_tokens`` tokens. ``kv`` (updated in place) reuses a cache holding an earlier prompt: its longest
    common prefix with this prompt is kept. ``should_stop()`` is checked before every forward pass.
    ``line_end`` (V,) bool (the diffusion sampler's line stop): stop after the first token that holds a newline
    (``stop_reason="line"``): a single-line fill is decided. ``bias`` (V,) float: added to every step's logits
    (the sampler's novel-name penalty, ``Engine.novelty_bias``), so the baseline gets the same prior.
    """
    if max_tokens < 1 or not 0 <= min_tokens <= max_tokens:
        raise ValueError(f"need 1 <= max_tokens, 0 <= min_tokens <= max_tokens: {max_tokens}, {min_tokens}")
    kv = kv if kv is not None else KVCache.empty(model)
    out: list[int] = []
    nfe = 0
    if should_stop is not None and should_stop():
        return
    h = kv.feed(model, psm_prompt(tok, prefix_ids, suffix_ids))  # prefill
    while True:
        nfe += 1
        t = next_token(model, tok, h, allow_eos=len(out) >= min_tokens, bias=bias)
        stop = "complete" if t == tok.eos_id else ""
        if not stop:
            out.append(t)
            if line_end is not None and bool(line_end[t]):
                stop = "line"
            elif len(out) >= max_tokens:
                stop = "length"
        yield _step(nfe - 1, out, nfe, max_tokens, stop)
        if stop or (should_stop is not None and should_stop()):
            return
        h = model.extend_prefix(kv.cache, [t])[:, -1]
        kv.ids.append(t)


@torch.no_grad()
def reference_generate(model: DiffusionLM, tok: Tokenizer, prefix_ids: list[int], suffix_ids: list[int],
                       max_tokens: int, min_tokens: int = 0, bias: torch.Tensor | None = None) -> list[int]:
    """The oracle: the same greedy rule, recomputing the whole sequence for every token (no cache)."""
    seq = psm_prompt(tok, prefix_ids, suffix_ids)
    out: list[int] = []
    dev = model.device
    while len(out) < max_tokens:
        ids = seq + out
        kind = torch.full((1, len(ids)), PREFIX, dtype=torch.int8, device=dev)
        h = model(torch.tensor([ids], device=dev), kind)
        t = next_token(model, tok, h[:, -1], allow_eos=len(out) >= min_tokens, bias=bias)
        if t == tok.eos_id:
            break
        out.append(t)
    return out
