"""Int8 serving (kernels/int8.py, ``DiffusionLM.quantize_int8``, ``--dtype int8``): the int8 GEMM against its twin,
the twin against float32 within the quantization bound, and the model served in int8."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine import Engine, kernels
from edit_engine.kernels.int8 import QMAX, QMAX_SAFE, default_qmax, quantize_rows, weight_qmax
from edit_engine.model import checkpoint
from edit_engine.model.checkpoint import DTYPE_ENV
from edit_engine.model.network import DiffusionLM


def _case(m: int, k: int, n: int, seed: int, zero_row: bool) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.rand(m, 1, generator=g) * 10
    w = torch.randn(n, k, generator=g) * 0.05
    if zero_row and m:
        x[0] = 0.0
    return x, w


@settings(max_examples=60, deadline=None)
@given(m=st.integers(0, 40), k=st.integers(1, 300), n=st.integers(1, 90), seed=st.integers(0, 2**16),
       zero_row=st.booleans())
def test_int8_gemm_equals_its_twin_bit_for_bit(m: int, k: int, n: int, seed: int, zero_row: bool) -> None:
    x, w = _case(m, k, n, seed, zero_row)
    lin = kernels.Int8Linear(w)
    assert lin.gemm == (weight_qmax() > 0)
    fast, ref = lin(x), kernels.int8_linear_ref(x, lin.qweight, lin.scale)
    assert fast.shape == ref.shape == (m, n) and fast.dtype == torch.float32
    assert torch.equal(fast, ref)


@pytest.mark.parametrize(("m", "k", "n"), [(8, 256, 768), (8, 704, 256), (32, 256, 8192), (1024, 256, 1408),
                                           (16, 2048, 64), (4, 5000, 32)])
def test_bit_for_bit_at_the_model_shapes_and_past_float32_exact_sums(m: int, k: int, n: int) -> None:
    """Past K = 1040 the integer sums exceed 2^24 and round on their way to float32: both paths round the same
    integer once (int32 -> float32, float64 -> float32), so they still agree. Full-range inputs make the sums
    large."""
    g = torch.Generator().manual_seed(k)
    x = torch.randn(m, k, generator=g).sign() * 5 + torch.randn(m, k, generator=g) * 0.01
    w = torch.randn(n, k, generator=g).sign() * 0.1
    lin = kernels.Int8Linear(w)
    if not lin.gemm:
        pytest.skip("no int8 GEMM range sums exactly on this CPU")
    assert torch.equal(lin(x), kernels.int8_linear_ref(x, lin.qweight, lin.scale))


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 20), k=st.integers(1, 300), n=st.integers(1, 60), seed=st.integers(0, 2**16),
       zero_row=st.booleans())
def test_twin_is_within_the_rounding_bound_of_float(m: int, k: int, n: int, seed: int, zero_row: bool) -> None:
    """|x w - qx sx qw sw| <= sum_k (|x| dw + |w| dx + dx dw), with dx <= sx/2 and dw <= sw/2 per element."""
    x, w = _case(m, k, n, seed, zero_row)
    q, s = kernels.quantize_weight(w)
    assert ((q.float() * s[:, None] - w).abs() <= s[:, None] / 2 + 1e-7).all()  # one weight off by half a step
    assert q.abs().max() <= default_qmax()
    _, sx = quantize_rows(x)
    dx, dw = sx / 2, s[None, :] / 2  # (m, 1), (1, n)
    bound = x.abs().sum(-1, keepdim=True) * dw + dx * w.abs().sum(-1)[None, :] + k * dx * dw
    err = (kernels.int8_linear_ref(x, q, s).double() - x.double() @ w.double().t()).abs()
    assert (err <= bound * 1.001 + 1e-5).all()
    if zero_row:
        assert (kernels.int8_linear(x, q, s, gemm=kernels.gemm_ok(default_qmax()))[0] == 0).all()


def test_leading_shapes_and_the_module() -> None:
    x, w = _case(6, 32, 24, 0, False)
    lin = kernels.Int8Linear(w)
    y = lin(x.reshape(2, 3, 32))
    assert y.shape == (2, 3, 24)
    assert torch.equal(y.reshape(6, 24), kernels.int8_linear_ref(x, lin.qweight, lin.scale))
    assert lin.qweight.dtype == torch.int8 and (lin.in_features, lin.out_features) == (32, 24)
    assert "int8" in repr(lin)


def test_quantized_model_tracks_float_and_stays_quantized(tiny_model: DiffusionLM) -> None:
    import copy

    m32 = copy.deepcopy(tiny_model).eval()
    m8 = copy.deepcopy(tiny_model).eval().quantize_int8()
    assert m8.int8 and not m32.int8 and m8.quantize_int8() is m8
    assert m8.num_parameters() == m32.num_parameters()
    names = ("wqkv", "wo", "w13", "w2")
    assert all(isinstance(getattr(b, n), kernels.Int8Linear) for b in m8.blocks for n in names)
    cache32 = m32.encode_context([[5, 6, 7, 8]], [[9, 10]], 8)
    cache8 = m8.encode_context([[5, 6, 7, 8]], [[9, 10]], 8)
    canvas = torch.full((1, 8), 1)
    a, b = m32.canvas_logits(canvas, cache32), m8.canvas_logits(canvas, cache8)
    assert a.shape == b.shape and not torch.equal(a, b)  # the int8 path really ran
    assert (a - b).abs().max() < 0.1 * a.abs().max()


def test_engine_and_checkpoint_in_int8(tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path, int8_serving: None) -> None:
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    eng = Engine.load(tiny_checkpoint, dtype="int8")
    assert eng.dtype == "int8" and eng.model.int8
    r = eng.infill("def f(x):\n    return ", "\n", max_tokens=8)
    assert r.nfe >= 1 and r.tokens >= 1
    c = eng.complete("def f(x):\n    return \n", len("def f(x):\n    return "), max_tokens=8)
    assert c.nfe >= 1
    monkeypatch.setenv(DTYPE_ENV, "int8")
    assert Engine.load(tiny_checkpoint).dtype == "int8"
    with pytest.raises(ValueError, match="int8-quantized model is for serving"):
        checkpoint.save(tmp_path / "out", eng.model, eng.tokenizer)
    with pytest.raises(checkpoint.CheckpointError, match="int8 serving runs on the CPU"):
        checkpoint.load(tiny_checkpoint, device="meta", dtype="int8")


def test_the_benchmark_prints_a_table_and_writes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from edit_engine.kernels import bench_int8

    monkeypatch.setattr(bench_int8, "ROWS", (4,))
    monkeypatch.setattr(bench_int8, "FEATURES", [(64, 96)])
    monkeypatch.setattr(bench_int8, "_median_us", lambda fn, budget_s=0.3: (fn(), 1.0)[1])
    out = tmp_path / "b.json"
    rows = bench_int8.main(["--json", str(out)])
    assert "speed-up" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["rows"] == rows and rows[0]["rows"] == 4 and 0 < rows[0]["rel_err"] < 0.05


@pytest.mark.skipif(__import__("platform").machine().lower() not in ("x86_64", "amd64"), reason="an x86 ISA cap")
def test_without_vnni_the_weights_use_the_range_that_sums_exactly() -> None:
    """oneDNN's int8 GEMM without VNNI may saturate int16 pair sums: capped at AVX2, full-range weights gave
    errors of 7-20% on an AVX-512 EPYC. Under that cap the probe must find a range that sums exactly and the
    layer must still take the GEMM and equal its twin bit for bit, within quantization error of float32 (a real child process, since the ISA
    cap is read once at start-up)."""
    import os
    import subprocess
    import sys

    code = (
        "import torch\nfrom edit_engine import kernels\n"
        "from edit_engine.kernels.int8 import weight_qmax\n"
        "g = torch.Generator().manual_seed(1)\n"
        "x = torch.randn(8, 256, generator=g) * 3; w = torch.randn(512, 256, generator=g) * 0.05\n"
        "lin = kernels.Int8Linear(w)\n"
        "fast, ref = lin(x), kernels.int8_linear_ref(x, lin.qweight, lin.scale)\n"
        "f = x @ w.t()\n"
        "print(weight_qmax(), lin.gemm, int(lin.qweight.abs().max()), torch.equal(fast, ref),\n"
        "      float((fast - f).abs().max() / f.abs().max()))\n"
    )
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    qmax, gemm, top, equal, err = out.stdout.split()
    # The probe finds the widest range this CPU sums exactly under the cap (64 where oneDNN saturates int16 pair
    # sums; 127 where it widens first, as on some AVX2-only CPUs); the layer stays within it and equals its twin.
    assert qmax in ("64", "127") and (gemm, equal) == ("True", "True") and int(top) <= int(qmax)
    assert float(err) < 0.05


def _saturating_int_mm(limit: int | None) -> object:
    """A fake ``torch._int_mm`` that sums exactly while every weight is within ``limit`` (None: never) and is
    off by one otherwise, as a CPU without VNNI is."""
    def fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        exact = (a.long() @ b.long()).int()
        if limit is not None and int(b.abs().max()) <= limit:
            return exact
        return exact + 1
    return fake


@pytest.mark.parametrize(("limit", "want"), [(QMAX, QMAX), (QMAX_SAFE, QMAX_SAFE), (None, 0)])
def test_the_probe_picks_the_widest_exact_range(monkeypatch: pytest.MonkeyPatch, limit: int | None,
                                                want: int) -> None:
    from edit_engine.kernels import int8

    monkeypatch.setattr(torch, "_int_mm", _saturating_int_mm(limit))
    int8.weight_qmax.cache_clear()
    try:
        assert int8.weight_qmax() == want
        x, w = _case(5, 40, 12, 3, False)
        lin = kernels.Int8Linear(w)
        assert lin.qmax == (want or QMAX_SAFE) and lin.gemm == (want > 0)
        assert int(lin.qweight.abs().max()) <= lin.qmax
        # Whatever the probe found, the layer's output is exact: the GEMM only runs on a range it sums exactly.
        assert torch.equal(lin(x), kernels.int8_linear_ref(x, lin.qweight, lin.scale))
        wide = kernels.Int8Linear(w, qmax=QMAX)  # asked for full range on a CPU that cannot sum it
        assert wide.gemm == (want == QMAX)
        assert torch.equal(wide(x), kernels.int8_linear_ref(x, wide.qweight, wide.scale))
    finally:
        int8.weight_qmax.cache_clear()
    with pytest.raises(ValueError, match="qmax=0"):
        kernels.quantize_weight(w, 0)


def test_a_compiled_int8_pass_has_no_graph_break(tiny_model: DiffusionLM) -> None:
    """``Engine.compile`` compiles ``canvas_hidden``: the int8 layers must not split it (the GEMM decision is a
    Python bool fixed at construction, never a probe inside the traced code)."""
    import copy

    import torch._dynamo

    m8 = copy.deepcopy(tiny_model).eval().quantize_int8()
    cache = m8.encode_context([[5, 6, 7, 8]], [[9, 10]], 8)
    canvas = torch.full((1, 8), 1)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(m8.canvas_hidden)(canvas, cache)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
