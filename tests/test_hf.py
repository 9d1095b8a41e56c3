"""Open checkpoints (edit_engine/hf): parity with ``transformers`` on tiny random Qwen2/LLaMA models saved into a
tmp folder (no download), the approximate cache, the engine and the CLI end to end, and the loader's errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tokenizers import Tokenizer as HFTok  # noqa: E402

from edit_engine.decoding.sampler import SamplerConfig, commit_pass, decide_length, denoise  # noqa: E402
from edit_engine.engine import Engine  # noqa: E402
from edit_engine.model import checkpoint, hf  # noqa: E402
from edit_engine.model.hf.cache import CachePolicy  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXTRA_ROWS = 8  # model rows past the tokenizer's vocabulary (Dream pads its head to 152064 rows)
ATOL = 2e-5  # fp32


# ---------------------------------------------------------------------------------------------------- fixtures
def _randomize(model: Any) -> None:
    """Biases and norm weights away from their 0/1 init, so a swapped or missing one shows in the logits."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.3)
            elif "norm" in name:
                p.normal_(1.0, 0.2)


def _reference(arch: str, tok: HFTok, seed: int, **dims: Any) -> Any:
    """A tiny random ``transformers`` ``{arch}ForCausalLM`` (fp32, eval) with EXTRA_ROWS head rows past ``tok``'s
    vocabulary and its biases and norms randomized."""
    torch.manual_seed(seed)
    cfg = getattr(transformers, f"{arch}Config")(vocab_size=tok.get_vocab_size() + EXTRA_ROWS,
                                                 max_position_embeddings=512, tie_word_embeddings=False, **dims)
    ref = getattr(transformers, f"{arch}ForCausalLM")(cfg).eval()
    _randomize(ref)
    return ref


def _write_tokenizer(d: Path, tok: HFTok, mask: str) -> None:
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": mask, "add_bos_token": False}))


@pytest.fixture(scope="module")
def tokenizer(hf_tokenizer: Callable[..., HFTok]) -> Callable[[str], HFTok]:
    """This module's tokenizers: trained on json.decoder and textwrap, with ``mask`` as the second special token."""
    return lambda mask: hf_tokenizer(mask, (json.decoder, textwrap))


@pytest.fixture(scope="module")
def dream_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Callable[[str], HFTok]) -> tuple[Path, Any]:
    """A Dream-layout folder: Qwen2 weights (sharded), config rewritten to model_type 'Dream' + mask_token_id."""
    d = tmp_path_factory.mktemp("dream")
    tok = tokenizer("<|mask|>")
    ref = _reference("Qwen2", tok, 0, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, rope_theta=1000.0, rms_norm_eps=1e-6)
    ref.save_pretrained(d, max_shard_size="100KB")
    raw = json.loads((d / "config.json").read_text())
    raw.update(model_type="Dream", architectures=["DreamModel"], mask_token_id=tok.token_to_id("<|mask|>"),
               pad_token_id=tok.token_to_id("<|endoftext|>"), eos_token_id=tok.token_to_id("<|endoftext|>"))
    (d / "config.json").write_text(json.dumps(raw))
    _write_tokenizer(d, tok, "<|mask|>")
    assert (d / "model.safetensors.index.json").is_file()  # the sharded path is exercised
    return d, ref


@pytest.fixture(scope="module")
def llama_dirs(tmp_path_factory: pytest.TempPathFactory, tokenizer: Callable[[str], HFTok],
               write_llada_folder: Callable[[Path, Any, HFTok], Path]) -> tuple[Path, Path, Any]:
    """The same tiny LLaMA twice: Hugging Face layout (model_type 'llama' + mask token) and LLaDA's native layout
    (model_type 'llada', OLMo-style config and weight names, mask found as the added token '<|mdm_mask|>')."""
    tok = tokenizer("<|mdm_mask|>")
    ref = _reference("Llama", tok, 1, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                     num_attention_heads=6, num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5)
    eos = tok.token_to_id("<|endoftext|>")
    d1 = tmp_path_factory.mktemp("llama")
    ref.save_pretrained(d1)
    raw = json.loads((d1 / "config.json").read_text())
    raw.update(mask_token_id=tok.token_to_id("<|mdm_mask|>"), eos_token_id=eos, pad_token_id=eos)
    (d1 / "config.json").write_text(json.dumps(raw))
    _write_tokenizer(d1, tok, "<|mdm_mask|>")
    d2 = write_llada_folder(tmp_path_factory.mktemp("llada"), ref, tok)
    return d1, d2, ref


def _hf_bidir(ref: Any, ids: torch.Tensor) -> torch.Tensor:
    """transformers logits with full bidirectional attention: a 4D additive mask of zeros (all allowed)."""
    t = ids.shape[1]
    with torch.no_grad():
        return ref(ids, attention_mask=torch.zeros(ids.shape[0], 1, t, t)).logits


def _load(d: Path, mode: str = "none", refresh: int = 4) -> tuple[hf.FullAttnLM, hf.OpenTokenizer]:
    model, tok, _, _ = hf.load_model(d, "cpu", None, CachePolicy(mode, refresh))  # the default: float32 on a CPU
    return model, tok


# ---------------------------------------------------------------------------------------------------- parity
@pytest.mark.parametrize("which", ["dream", "llama", "llada"])
def test_forward_matches_transformers_bidirectional(which: str, dream_dir: Any, llama_dirs: Any) -> None:
    d, ref = dream_dir if which == "dream" else (llama_dirs[0] if which == "llama" else llama_dirs[1],
                                                 llama_dirs[2])
    model, tok = _load(d)
    ids = torch.randint(0, tok.vocab_size, (2, 37), generator=torch.Generator().manual_seed(3))
    ours = model.forward(ids)
    theirs = _hf_bidir(ref, ids)
    n = tok.vocab_size
    torch.testing.assert_close(ours[..., :n], theirs[..., :n], atol=ATOL, rtol=1e-4, msg=f"{which} logits")
    assert torch.isneginf(ours[..., n:]).all(), "rows past the tokenizer's vocabulary must be -inf"
    causal = ref(ids).logits
    assert (causal[:, 0] - theirs[:, 0]).abs().max() > 1e-3, "the reference must really be bidirectional"


@pytest.mark.parametrize("which", ["dream", "llada"])
def test_canvas_logits_match_full_sequence_with_shift(which: str, dream_dir: Any, llama_dirs: Any) -> None:
    """Batch of two rows with different prefix/suffix lengths (padding) against one HF pass per row over
    [prefix | canvas | suffix]; Dream reads position i from output i-1, LLaDA does not shift."""
    d, ref = dream_dir if which == "dream" else (llama_dirs[1], llama_dirs[2])
    model, tok = _load(d)
    g = torch.Generator().manual_seed(4)
    pre = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (9, 4)]
    suf = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (3, 7)]
    canvas = torch.randint(0, 300, (2, 6), generator=g)
    canvas[:, ::2] = tok.mask_id
    cache = model.encode_context(pre, suf, capacity=8)
    got = model.canvas_logits(canvas, cache)
    for r in range(2):
        seq = torch.tensor([pre[r] + canvas[r].tolist() + suf[r]])
        full = _hf_bidir(ref, seq)[0]
        p = len(pre[r])
        rows = torch.arange(p, p + 6) - (1 if model.cfg.shift_logits else 0)
        n = tok.vocab_size
        torch.testing.assert_close(got[r, :, :n], full[rows, :n], atol=ATOL, rtol=1e-4, msg=f"row {r}")


def test_shift_without_prefix_reads_slot_zero_from_itself(dream_dir: Any) -> None:
    d, ref = dream_dir
    model, tok = _load(d)
    canvas = torch.tensor([[tok.mask_id, 17, tok.mask_id]])
    got = model.canvas_logits(canvas, model.encode_context([[]], [[5, 6]], capacity=4))
    full = _hf_bidir(ref, torch.tensor([[tok.mask_id, 17, tok.mask_id, 5, 6]]))[0]
    n = tok.vocab_size
    torch.testing.assert_close(got[0, :, :n], full[[0, 0, 1], :n], atol=ATOL, rtol=1e-4)


# ---------------------------------------------------------------------------------------------------- cache
@pytest.mark.parametrize("mode", ["prefix", "dual"])
@pytest.mark.parametrize("which", ["dream", "llada"])
def test_cached_pass_is_exact_when_canvas_unchanged(mode: str, which: str, dream_dir: Any,
                                                    llama_dirs: Any) -> None:
    """Right after a full pass the cached K/V are exact, so a cached pass over the same canvas must give the
    full pass's logits: checks the window, the K/V writes and the logit-row gather."""
    d = dream_dir[0] if which == "dream" else llama_dirs[1]
    model, tok = _load(d, mode, refresh=0)
    cache = model.encode_context([[1, 2, 3, 4, 5], [9, 8]], [[7, 7, 7], [6]], capacity=8)
    canvas = torch.full((2, 5), tok.mask_id)
    canvas[:, 1] = 42
    first = model.canvas_logits(canvas, cache)
    second = model.canvas_logits(canvas, cache)
    assert (cache.stats.full_passes, cache.stats.cached_passes) == (1, 1)
    torch.testing.assert_close(second, first, atol=ATOL, rtol=1e-4)
    width = 5 + (1 if model.cfg.shift_logits else 0) + (1 if mode == "prefix" else 0) * 3
    assert cache.stats.rows == (5 + 5 + 3) + width


@pytest.mark.parametrize("which", ["dream", "llada"])
def test_padding_the_context_changes_no_logit(which: str, dream_dir: Any, llama_dirs: Any) -> None:
    """``at_least`` pads prefixes and suffixes past the longest (a server keeps its shapes to a few sizes):
    the padding is masked out, so every real slot's logits are what they were."""
    d = dream_dir[0] if which == "dream" else llama_dirs[1]
    model, tok = _load(d, "dual", refresh=0)
    canvas = torch.full((2, 5), tok.mask_id)
    canvas[:, 1] = 42
    pre, suf = [[1, 2, 3, 4, 5], [9, 8]], [[7, 7, 7], [6]]
    want = model.canvas_logits(canvas, model.encode_context(pre, suf, capacity=8))
    got = model.canvas_logits(canvas, model.encode_context(pre, suf, capacity=8, at_least=(16, 9)))
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-4)


def test_refresh_schedule_and_nfe_accounting(dream_dir: Any) -> None:
    model, tok = _load(dream_dir[0], "dual", refresh=3)
    cache = model.encode_context([[1, 2, 3]], [[4, 5]], capacity=16)
    fulls = []
    for c in (4, 4, 4, 4, 4, 8, 8, 8, 8):
        _, _, full = cache.begin_pass(torch.full((1, c), tok.mask_id))
        fulls.append(full)
    # full on the first pass, every 3 passes, and when the canvas grows (a block boundary)
    assert fulls == [True, False, False, True, False, True, False, False, True]
    assert cache.stats.nfe == 9 and cache.stats.full_passes == 4


def _fill(model: hf.FullAttnLM, tok: hf.OpenTokenizer, pre: list[int], suf: list[int], cfg: SamplerConfig,
          policy: CachePolicy) -> tuple[list[int], int, hf.CacheStats]:
    cache = model.encode_context([pre], [suf], cfg.max_tokens, policy)
    last = deque(denoise(model, cache, cfg, tok.pad_id, tok.mask_id), maxlen=1)[0]  # type: ignore[arg-type]
    return last.tokens.tolist(), last.nfe, cache.stats


def _oracle_fill(ref: Any, tok: hf.OpenTokenizer, pre: list[int], suf: list[int], cfg: SamplerConfig,
                 shift: bool) -> list[int]:
    """No cache at all: transformers runs the whole sequence every pass; same commit rule and growth."""
    size = cfg.initial_canvas
    canvas = torch.full((1, size), tok.mask_id)
    masked = canvas == tok.mask_id
    length_ban = torch.zeros_like(masked)
    open_from: int | None = 0 if cfg.pad_threshold > 0 else None  # the sampler's length rule, as in denoise
    while True:
        seq = torch.cat([torch.tensor([pre]), canvas, torch.tensor([suf], dtype=torch.long)], 1)
        logits = _hf_bidir(ref, seq)
        if shift:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], 1)
        lg = logits[:, len(pre) : len(pre) + size].clone()
        lg[..., tok.vocab_size :] = float("-inf")
        if open_from is not None:
            decide_length(lg, canvas, masked, length_ban, open_from, cfg, tok.pad_id, tok.mask_id)
            open_from = None
        commit_pass(lg, canvas, masked, cfg, tok.pad_id, tok.mask_id, None, length_ban)
        if bool(masked.any()):
            continue
        if (canvas == tok.pad_id).any() or size >= cfg.max_tokens:
            return canvas[0].tolist()
        new = min(cfg.max_tokens, size * 2)
        canvas = torch.cat([canvas, torch.full((1, new - size), tok.mask_id)], 1)
        masked = torch.cat([masked, torch.ones(1, new - size, dtype=torch.bool)], 1)
        length_ban = torch.cat([length_ban, torch.zeros(1, new - size, dtype=torch.bool)], 1)
        if cfg.pad_threshold > 0:
            open_from = size
        size = new


@pytest.mark.parametrize("which", ["dream", "llada"])
def test_cache_off_equals_uncached_oracle(which: str, dream_dir: Any, llama_dirs: Any) -> None:
    d, ref = dream_dir if which == "dream" else (llama_dirs[1], llama_dirs[2])
    model, tok = _load(d)
    cfg = SamplerConfig(threshold=0.05, initial_canvas=4, max_tokens=12)
    g = torch.Generator().manual_seed(11)
    for _ in range(3):
        pre = torch.randint(0, 300, (int(torch.randint(1, 12, (1,), generator=g)),), generator=g).tolist()
        suf = torch.randint(0, 300, (int(torch.randint(0, 6, (1,), generator=g)),), generator=g).tolist()
        got, nfe, stats = _fill(model, tok, pre, suf, cfg, CachePolicy("none"))
        assert got == _oracle_fill(ref, tok, pre, suf, cfg, model.cfg.shift_logits)
        assert stats.full_passes == nfe and stats.cached_passes == 0
        # refreshing every pass is the same computation as no cache
        for mode in ("prefix", "dual"):
            again, nfe2, _ = _fill(model, tok, pre, suf, cfg, CachePolicy(mode, refresh_every=1))
            assert (again, nfe2) == (got, nfe)


def test_cache_on_runs_fewer_rows(dream_dir: Any) -> None:
    model, tok = _load(dream_dir[0])
    cfg = SamplerConfig(threshold=2.0, initial_canvas=8, max_tokens=8)  # one token per pass: 8 passes
    pre, suf = list(range(10, 60)), list(range(60, 90))
    _, nfe_none, s_none = _fill(model, tok, pre, suf, cfg, CachePolicy("none"))
    _, nfe_dual, s_dual = _fill(model, tok, pre, suf, cfg, CachePolicy("dual", 4))
    assert nfe_none == nfe_dual == 8 == s_dual.nfe
    assert s_dual.full_passes == 2 and s_none.rows == 8 * (50 + 8 + 30)
    assert s_dual.rows == 2 * (50 + 8 + 30) + 6 * (8 + 1)


# ---------------------------------------------------------------------------------------------------- end to end
def test_engine_load_and_infill(dream_dir: Any) -> None:
    eng = Engine.load(dream_dir[0])
    assert isinstance(eng.model, hf.FullAttnLM) and eng.record["family"] == "dream"
    assert eng.record["cache_mode"] in hf.CACHE_MODES
    r = eng.infill("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", max_tokens=8)
    assert isinstance(r.text, str) and r.nfe >= 1 and r.stop_reason in ("complete", "length", "line")
    assert "<|mask|>" not in r.text and "<|endoftext|>" not in r.text


def test_cli_infill_json(llama_dirs: Any, tmp_path: Path) -> None:
    src = tmp_path / "a.py"
    src.write_text("import os\n\ndef f(x):\n    return x\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "edit_engine.cli.main", "infill", str(src), "--line", "4", "--col", "12", "--model",
         str(llama_dirs[1]), "--max-tokens", "6", "--json", "--no-memory"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["nfe"] >= 1 and isinstance(res["text"], str) and res["stop_reason"] in ("complete", "length", "line")


# ---------------------------------------------------------------------------------------------------- errors, tokens
def test_hub_id_gives_download_instructions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.load("Dream-org/Dream-Coder-v0-Instruct-7B")
    msg = str(e.value)
    assert "huggingface-cli download Dream-org/Dream-Coder-v0-Instruct-7B --local-dir" in msg
    assert "never downloads" in msg


def test_hub_id_found_in_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llama_dirs: Any) -> None:
    snap = tmp_path / "hub" / "models--GSAI-ML--LLaDA-tiny" / "snapshots" / "abc123"
    snap.parent.mkdir(parents=True)
    snap.symlink_to(llama_dirs[1], target_is_directory=True)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    ck = checkpoint.load("GSAI-ML/LLaDA-tiny")
    assert ck.record["family"] == "llada" and ck.path == snap


def _folder_with_config(tmp_path: Path, raw: dict[str, Any], src: Path) -> Path:
    d = tmp_path / "ck"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(raw))
    for f in ("tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        if (src / f).exists():
            (d / f).symlink_to(src / f)
    return d


def test_unsupported_family_names_the_supported_ones(tmp_path: Path, llama_dirs: Any) -> None:
    d = _folder_with_config(tmp_path, {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, llama_dirs[0])
    with pytest.raises(checkpoint.CheckpointError, match="unsupported checkpoint.*gpt2.*supported: Dream"):
        checkpoint.load(d)


def test_family_is_read_from_config_not_folder_name(tmp_path: Path, llama_dirs: Any) -> None:
    raw = json.loads((llama_dirs[1] / "config.json").read_text())
    d = tmp_path / "Dream-Coder-v0-Instruct-7B"
    d.mkdir()
    for f in ("tokenizer.json", "model.safetensors"):
        (d / f).symlink_to(llama_dirs[1] / f)
    (d / "config.json").write_text(json.dumps(raw))
    assert checkpoint.load(d).record["family"] == "llada"


def test_autoregressive_checkpoint_without_mask_token_is_refused(tmp_path: Path, llama_dirs: Any,
                                                                 tokenizer: Callable[[str], HFTok]) -> None:
    raw = json.loads((llama_dirs[0] / "config.json").read_text())
    raw.pop("mask_token_id")
    d = _folder_with_config(tmp_path, raw, llama_dirs[0])
    (d / "tokenizer_config.json").unlink()
    (d / "tokenizer.json").unlink()
    tok = tokenizer("<|pad|>")  # no mask spelling at all
    tok.save(str(d / "tokenizer.json"))
    with pytest.raises(checkpoint.CheckpointError, match="no mask token"):
        checkpoint.load(d)


def test_unsupported_options_are_refused() -> None:
    base = {"model_type": "qwen2", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
            "intermediate_size": 8, "vocab_size": 10}
    assert hf.parse_config(base).family == "qwen2" and hf.parse_config(base).shift_logits
    with pytest.raises(hf.UnsupportedCheckpoint, match="rotary scaling 'yarn'"):
        hf.parse_config({**base, "rope_scaling": {"type": "yarn", "factor": 4.0}})
    with pytest.raises(hf.UnsupportedCheckpoint, match="alibi"):
        hf.parse_config({"model_type": "llada", "d_model": 8, "n_heads": 2, "n_layers": 1, "vocab_size": 10,
                         "alibi": True})
    assert hf.parse_config({**base, "rope_parameters": {"rope_type": "default", "rope_theta": 77.0}}).rope_theta == 77


def test_tokenizer_ids_come_from_the_checkpoint(dream_dir: Any, llama_dirs: Any) -> None:
    _, tok = _load(dream_dir[0])
    raw = json.loads((dream_dir[0] / "config.json").read_text())
    assert tok.mask_id == raw["mask_token_id"] and tok.pad_id == raw["pad_token_id"]
    _, tok2 = _load(llama_dirs[1])  # LLaDA folder: no mask id in config, found as '<|mdm_mask|>'
    assert tok2.mask_id == tok2.hf.token_to_id("<|mdm_mask|>")
    ids = tok.encode("x = '<|mask|>'")
    assert tok.mask_id not in ids, "literal mask text in a document must stay text"
    assert tok.decode(ids + [tok.mask_id, tok.pad_id]) == "x = '<|mask|>'"


def test_bad_cache_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="cache_mode"):
        CachePolicy("sometimes")


def test_own_checkpoints_are_not_routed_here(tiny_checkpoint: Path) -> None:
    from edit_engine.model.network import DiffusionLM

    assert not hf.is_open_checkpoint(tiny_checkpoint) and not hf.is_open_checkpoint(None)
    assert isinstance(checkpoint.load(tiny_checkpoint).model, DiffusionLM)


def test_bf16_weights_track_fp32(dream_dir: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDIT_ENGINE_HF_DTYPE", "bf16")
    m16, tok = _load(dream_dir[0])
    monkeypatch.delenv("EDIT_ENGINE_HF_DTYPE")
    m32, _ = _load(dream_dir[0])
    assert m16.dtype == torch.bfloat16 and m32.dtype == torch.float32
    canvas = torch.tensor([[tok.mask_id] * 6])
    a = m16.canvas_logits(canvas, m16.encode_context([[3, 4, 5, 6]], [[7, 8]], 8)).float()
    b = m32.canvas_logits(canvas, m32.encode_context([[3, 4, 5, 6]], [[7, 8]], 8))
    n = tok.vocab_size
    torch.testing.assert_close(a[..., :n], b[..., :n], atol=0.05, rtol=0.05, msg="bf16 vs fp32 logits")


def test_int8_is_refused_for_open_models(dream_dir: Any) -> None:
    """int8 serving is ours only: an open model asked for it gets a clear error, not a half-quantized model."""
    with pytest.raises(checkpoint.CheckpointError, match="int8 serving is for edit-engine checkpoints"):
        checkpoint.load(dream_dir[0], dtype="int8")


def test_a_shard_index_naming_a_file_outside_the_folder_is_refused(dream_dir: Any, tmp_path: Path) -> None:
    """The index may only name files of the model folder: ``../x.safetensors`` or an absolute path is a clear
    error, and nothing outside the folder is opened."""
    import shutil

    d = tmp_path / "m"
    shutil.copytree(dream_dir[0], d)
    outside = tmp_path / "elsewhere.safetensors"
    index = json.loads((d / "model.safetensors.index.json").read_text())
    name = next(iter(index["weight_map"]))
    shutil.copy(d / index["weight_map"][name], outside)
    for target in ("../elsewhere.safetensors", str(outside)):
        index["weight_map"][name] = target
        (d / "model.safetensors.index.json").write_text(json.dumps(index))
        with pytest.raises(checkpoint.CheckpointError, match="outside the model folder"):
            checkpoint.load(d)


def test_open_models_verify_copy_proposals(dream_dir: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An open model scores the best copy in one batched pass over its own context layout; accepted, the copy is
    the answer with one forward pass; vetoed, the model denoises as usual. Open models know every language."""
    from edit_engine import Engine
    from edit_engine.engine import proposals

    eng = Engine.load(dream_dir[0])
    assert eng.rt.languages is None and eng.rt.knows("rust")
    doc = ("def a(values):\n    result = compute(values, scale=2.0)\n    log.info('done %s', result)\n"
           "    return result\n\n\ndef b(values):\n    result = compute(values, scale=2.0)\n    \n    return result\n")
    at = doc.rindex("    \n") + 4
    monkeypatch.setattr(proposals, "ACCEPT", proposals.Accept(match=10, mean=-1e9))
    c = eng.complete(doc, at)
    assert (c.source, c.text, c.nfe) == ("copy", "log.info('done %s', result)", 1) and "verify" in c.timings
    monkeypatch.setattr(proposals, "ACCEPT", proposals.Accept(match=10, mean=1.0))  # nothing passes
    c = eng.complete(doc, at)
    assert c.source == "model" and c.nfe > 1
