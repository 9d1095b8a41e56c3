"""Shared fixtures: a tiny random model for unit tests, the packaged model for end-to-end tests, and the pieces
that build tiny open-checkpoint folders (Hugging Face / LLaDA layouts) for tests/test_hf*.py."""

from __future__ import annotations

import inspect
import json
import os
import random
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

# Tests share two cores with whatever else runs; one thread keeps them predictable.
torch.set_num_threads(int(os.environ.get("EDIT_ENGINE_TEST_THREADS", "1")))

# Every test sees the same CPU, whatever this machine has: an AVX2 one with no native bf16 and no int8 unit, so
# ``auto`` serves float32 here and in every process a test starts. Tests of the other branches set the flags
# they need (``cpu_profile``).
os.environ["EDIT_ENGINE_CPU_FLAGS"] = "avx2 fma"
# Engines load without the memory of code unless a test asks for it: a test of the model's path is about the
# model. The memory's own tests, and the engine's drafts and show gate (test_show.py), turn it on.
os.environ["EDIT_ENGINE_MEMORY"] = "off"

from edit_engine.engine import Engine  # noqa: E402
from edit_engine.model import checkpoint  # noqa: E402
from edit_engine.model.network import PRESETS, DiffusionLM  # noqa: E402
from edit_engine.model.tokenizer import Tokenizer  # noqa: E402

# CI sets EDIT_ENGINE_REQUIRE_TOOLS=1: there a test that skips (a tool, a package or the benchmark data missing)
# fails instead, so a missing install step cannot turn into a green run that never opened the browser or editor.
REQUIRE_TOOLS = os.environ.get("EDIT_ENGINE_REQUIRE_TOOLS") == "1"


def _refuse_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if REQUIRE_TOOLS and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where every tool is required (EDIT_ENGINE_REQUIRE_TOOLS=1): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    _refuse_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # type: ignore[no-untyped-def]
    outcome = yield
    _refuse_skip(outcome.get_result())


@pytest.fixture(scope="session")
def tiny_tokenizer() -> Tokenizer:
    texts = [inspect.getsource(m) for m in (random, json.decoder, textwrap)]
    return Tokenizer.train(texts, vocab_size=PRESETS["tiny"].vocab_size)


@pytest.fixture(scope="session")
def tiny_model() -> DiffusionLM:
    torch.manual_seed(0)
    return DiffusionLM(PRESETS["tiny"]).eval()


@pytest.fixture()
def tiny_engine(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> Engine:
    return Engine(tiny_model, tiny_tokenizer)


@pytest.fixture(scope="session")
def save_tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory,
                         tiny_tokenizer: Tokenizer) -> Callable[[str, DiffusionLM, str], Path]:
    """Saves a model with the tiny tokenizer (fp32) into a new tmp folder named after ``name``; returns it."""
    def save(name: str, model: DiffusionLM, note: str) -> Path:
        d = tmp_path_factory.mktemp(name)
        checkpoint.save(d, model, tiny_tokenizer, {"note": note}, dtype=torch.float32)
        return d
    return save


@pytest.fixture(scope="session")
def tiny_checkpoint(save_tiny_checkpoint: Callable[[str, DiffusionLM, str], Path], tiny_model: DiffusionLM) -> Path:
    return save_tiny_checkpoint("tiny-ckpt", tiny_model, "random weights, tests only")


@pytest.fixture()
def tiny_train_argv(tmp_path: Path, tiny_tokenizer: Tokenizer) -> list[str]:
    """``edit-engine train`` arguments for a tiny run (``--out tmp_path/run``) on a four-file corpus with one
    validation file, with the tiny tokenizer; tests add ``--steps`` and what they test."""
    from edit_engine.train import corpus

    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    names = [f"part{k}.py" for k in range(10_000)]
    val = [n for n in names if corpus.CorpusFile(Path(n), n, 0, "").split == "val"][:1]
    train = [n for n in names if n not in val][:3]
    for name, m in zip(val + train, (random, json.decoder, json.encoder, inspect), strict=True):
        (corpus_dir / name).write_text(inspect.getsource(m)[:20_000])
    tiny_tokenizer.save(tmp_path / "tokenizer.json")
    return ["train", "--out", str(tmp_path / "run"), "--corpus", str(corpus_dir), "--preset", "tiny",
            "--batch-size", "2", "--train-prefix", "48", "--train-suffix", "24", "--threads", "1",
            "--warmup-steps", "2", "--tokenizer", str(tmp_path / "tokenizer.json")]


@pytest.fixture(scope="session")
def packaged_engine() -> Engine:
    return Engine.load()


@pytest.fixture()
def cpu_profile(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Pretend this CPU has the given flags (space-separated, ``none`` for none) for the rest of the test."""
    from edit_engine.kernels.cpu import CPU_FLAGS_ENV

    return lambda flags: monkeypatch.setenv(CPU_FLAGS_ENV, flags)


@pytest.fixture()
def int8_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """Int8 serving allowed whatever this CPU has: the int8 path's arithmetic is tested on every CPU (its GEMM
    runs only on a range the CPU sums exactly), while ``--dtype int8`` declines where it would be slow."""
    from edit_engine.kernels import int8

    monkeypatch.setattr(int8, "int8_serving_reason", lambda: "")


# ---------------------------------------------------------------------------------------------------- open folders
@pytest.fixture(scope="session")
def hf_tokenizer() -> Callable[..., Any]:
    """Makes a ``tokenizers`` byte-level BPE (384 tokens; special tokens '<|endoftext|>' and ``mask``) trained on
    the source of ``modules``, the kind of tokenizer.json an open checkpoint ships."""
    from tokenizers import Tokenizer as HFTok
    from tokenizers import decoders, models, pre_tokenizers, trainers

    def make(mask: str, modules: Sequence[ModuleType] = (textwrap,)) -> HFTok:
        tok = HFTok(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=["<|endoftext|>", mask], min_frequency=2,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator([inspect.getsource(m) for m in modules], trainer=trainer)
        return tok
    return make


_LLADA_NAMES = {"self_attn.q_proj": "q_proj", "self_attn.k_proj": "k_proj", "self_attn.v_proj": "v_proj",
                "self_attn.o_proj": "attn_out", "input_layernorm": "attn_norm", "post_attention_layernorm": "ff_norm",
                "mlp.gate_proj": "ff_proj", "mlp.up_proj": "up_proj", "mlp.down_proj": "ff_out"}
_LLADA_TOP = {"model.embed_tokens.weight": "model.transformer.wte.weight",
              "model.norm.weight": "model.transformer.ln_f.weight", "lm_head.weight": "model.transformer.ff_out.weight"}


def _to_llada(name: str) -> str:
    """A ``transformers`` LLaMA weight name under LLaDA's OLMo-style naming."""
    if name in _LLADA_TOP:
        return _LLADA_TOP[name]
    _, _, i, rest = name.split(".", 3)
    for src, dst in _LLADA_NAMES.items():
        if rest.startswith(src + "."):
            return f"model.transformer.blocks.{i}.{dst}{rest[len(src):]}"
    raise KeyError(name)


@pytest.fixture(scope="session")
def write_llada_folder() -> Callable[[Path, Any, Any], Path]:
    """Writes a ``transformers`` LLaMA ``ref`` into folder ``d`` in LLaDA's native layout: weights under OLMo-style
    names, an OLMo-style config.json read off ``ref.config``, and ``tok`` as tokenizer.json only (no
    tokenizer_config.json: the mask is found by its spelling '<|mdm_mask|>'). Returns ``d``."""
    from safetensors.torch import save_file

    def write(d: Path, ref: Any, tok: Any) -> Path:
        cfg = ref.config
        rope_theta = getattr(cfg, "rope_theta", None) or cfg.rope_parameters["rope_theta"]
        save_file({_to_llada(k): t.contiguous() for k, t in ref.state_dict().items()}, str(d / "model.safetensors"))
        eos = tok.token_to_id("<|endoftext|>")
        (d / "config.json").write_text(json.dumps({
            "architectures": ["LLaDAModelLM"], "model_type": "llada", "d_model": cfg.hidden_size,
            "n_heads": cfg.num_attention_heads, "n_kv_heads": cfg.num_key_value_heads,
            "n_layers": cfg.num_hidden_layers, "mlp_hidden_size": cfg.intermediate_size, "mlp_ratio": 4,
            "rope_theta": rope_theta, "rms_norm_eps": cfg.rms_norm_eps, "vocab_size": cfg.vocab_size,
            "embedding_size": cfg.vocab_size, "max_sequence_length": cfg.max_position_embeddings,
            "eos_token_id": eos, "pad_token_id": eos, "weight_tying": False, "block_type": "llama",
            "layer_norm_type": "rms", "activation_type": "silu", "include_bias": False, "rope": True,
            "alibi": False}))
        tok.save(str(d / "tokenizer.json"))
        return d
    return write


@pytest.fixture(scope="module")
def slow_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_tokenizer: Tokenizer) -> Path:
    """A tiny model whose fills run for up to 256 one-token passes (with threshold > 1): a request on it runs
    long enough to be cancelled after its first pass (the language server tests)."""
    from dataclasses import replace

    torch.manual_seed(1)
    model = DiffusionLM(replace(PRESETS["tiny"], max_canvas=256)).eval()
    d = tmp_path_factory.mktemp("slow-ckpt")
    checkpoint.save(d, model, tiny_tokenizer, {"note": "random weights, long fills"}, dtype=torch.float32)
    return d
