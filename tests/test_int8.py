"""Int8 serving (kernels/int8.py, ``DiffusionLM.quantize_int8``, ``--dtype int8``): the int8 GEMM against its twin,
the twin against float32 within the quantization bound, and the model served in int8."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels
from edit_engine import Engine, checkpoint
from edit_engine.checkpoint import DTYPE_ENV
from edit_engine.model import DiffusionLM
from kernels.int8 import QMAX, quantize_rows

PREFIX = "def area(radius):\n    \"\"\"The area of a circle.\"\"\"\n    return "
SUFFIX = "\n\n\nprint(area(2.0))\n"


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
    q, s = kernels.quantize_weight(w)
    fast, ref = kernels.int8_linear(x, q, s), kernels.int8_linear_ref(x, q, s)
    assert fast.shape == ref.shape == (m, n) and fast.dtype == torch.float32
    assert torch.equal(fast, ref)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 20), k=st.integers(1, 300), n=st.integers(1, 60), seed=st.integers(0, 2**16),
       zero_row=st.booleans())
def test_twin_is_within_the_rounding_bound_of_float(m: int, k: int, n: int, seed: int, zero_row: bool) -> None:
    """|x w - qx sx qw sw| <= sum_k (|x| dw + |w| dx + dx dw), with dx <= sx/2 and dw <= sw/2 per element."""
    x, w = _case(m, k, n, seed, zero_row)
    q, s = kernels.quantize_weight(w)
    assert ((q.float() * s[:, None] - w).abs() <= s[:, None] / 2 + 1e-7).all()  # one weight off by half a step
    assert q.abs().max() <= QMAX
    _, sx = quantize_rows(x)
    dx, dw = sx / 2, s[None, :] / 2  # (m, 1), (1, n)
    bound = x.abs().sum(-1, keepdim=True) * dw + dx * w.abs().sum(-1)[None, :] + k * dx * dw
    err = (kernels.int8_linear_ref(x, q, s).double() - x.double() @ w.double().t()).abs()
    assert (err <= bound * 1.001 + 1e-5).all()
    if zero_row:
        assert (kernels.int8_linear(x, q, s)[0] == 0).all()


def test_leading_shapes_and_the_module() -> None:
    x, w = _case(6, 32, 24, 0, False)
    lin = kernels.Int8Linear(w)
    y = lin(x.reshape(2, 3, 32))
    assert y.shape == (2, 3, 24) and torch.equal(y.reshape(6, 24), kernels.int8_linear_ref(x, lin.qweight, lin.scale))
    assert lin.qweight.dtype == torch.int8 and (lin.in_features, lin.out_features) == (32, 24)
    assert "int8" in repr(lin)


def test_quantized_model_tracks_float_and_stays_quantized(tiny_model: DiffusionLM) -> None:
    import copy

    m32 = copy.deepcopy(tiny_model).eval()
    m8 = copy.deepcopy(tiny_model).eval().quantize_int8()
    assert m8.int8 and not m32.int8 and m8.quantize_int8() is m8
    assert all(isinstance(getattr(b, n), kernels.Int8Linear) for b in m8.blocks for n in ("wqkv", "wo", "w13", "w2"))
    cache32, cache8 = m32.encode_context([[5, 6, 7, 8]], [[9, 10]], 8), m8.encode_context([[5, 6, 7, 8]], [[9, 10]], 8)
    canvas = torch.full((1, 8), 1)
    a, b = m32.canvas_logits(canvas, cache32), m8.canvas_logits(canvas, cache8)
    assert a.shape == b.shape and not torch.equal(a, b)  # the int8 path really ran
    assert (a - b).abs().max() < 0.1 * a.abs().max()


def test_engine_and_checkpoint_in_int8(tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
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


@pytest.mark.slow
def test_packaged_model_in_int8_tracks_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """First-pass logits on a sample hole stay close to float32's and pick the same token in nearly every slot,
    and a whole fill comes back (MODEL.md, "Serving in int8", has the benchmark comparison)."""
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    e32, e8 = Engine.load(), Engine.load(dtype="int8")
    tok = e32.tokenizer
    p, s = e32._context(PREFIX, SUFFIX)
    canvas = torch.full((1, 16), tok.mask_id)
    out = []
    for e in (e32, e8):
        cache = e.model.encode_context([p], [s], 16)
        out.append(e.model.canvas_logits(canvas, cache)[0].float())
    a, b = out
    assert (a - b).abs().max() < 0.1 * a.abs().max()
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.8
    r = e8.infill(PREFIX, SUFFIX, line_stop=True)
    assert r.text.strip() and r.nfe >= 1


def test_the_benchmark_prints_a_table_and_writes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from kernels import bench_int8

    monkeypatch.setattr(bench_int8, "ROWS", (4,))
    monkeypatch.setattr(bench_int8, "FEATURES", [(64, 96)])
    monkeypatch.setattr(bench_int8, "_median_us", lambda fn, budget_s=0.3: (fn(), 1.0)[1])
    out = tmp_path / "b.json"
    rows = bench_int8.main(["--json", str(out)])
    assert "speed-up" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["rows"] == rows and rows[0]["rows"] == 4 and 0 < rows[0]["rel_err"] < 0.05


def test_without_vnni_the_weights_use_the_range_that_sums_exactly() -> None:
    """oneDNN's int8 GEMM without VNNI saturates int16 pair sums: capped at AVX2, full-range weights gave sums
    15-20% off on this project's CPU. The probe must pick a range that sums exactly, so the fast path still
    equals its twin bit for bit and stays within quantization error of float32 (a real child process, since the
    ISA cap is read once at start-up)."""
    import os
    import subprocess
    import sys

    code = (
        "import torch, kernels\n"
        "from kernels.int8 import weight_qmax\n"
        "g = torch.Generator().manual_seed(1)\n"
        "x = torch.randn(8, 256, generator=g) * 3; w = torch.randn(512, 256, generator=g) * 0.05\n"
        "q, s = kernels.quantize_weight(w)\n"
        "fast, ref = kernels.int8_linear(x, q, s), kernels.int8_linear_ref(x, q, s)\n"
        "f = x @ w.t()\n"
        "print(weight_qmax(), int(q.abs().max()), torch.equal(fast, ref), float((fast - f).abs().max() / f.abs().max()))\n"
    )
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    qmax, top, equal, err = out.stdout.split()
    assert int(top) <= int(qmax) and int(qmax) in (64, 127)
    assert equal == "True" and float(err) < 0.05


def test_where_no_range_sums_exactly_the_twin_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernels import int8

    def broken(*a: object) -> torch.Tensor:
        raise AssertionError("the int8 GEMM must not run")

    monkeypatch.setattr(int8, "weight_qmax", lambda: 0)
    monkeypatch.setattr(torch, "_int_mm", broken)
    x, w = _case(5, 40, 12, 3, False)
    q, s = kernels.quantize_weight(w)
    assert q.abs().max() <= int8.QMAX_SAFE
    assert torch.equal(kernels.int8_linear(x, q, s), kernels.int8_linear_ref(x, q, s))
    with pytest.raises(ValueError, match="qmax=0"):
        kernels.quantize_weight(w, 0)
