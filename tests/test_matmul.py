"""``kernels.linear``: the projection with its weight packed once for oneDNN on the CPU, against its twin
``F.linear``."""

from __future__ import annotations

import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine import kernels
from edit_engine.model.network import DiffusionLM

matmul = importlib.import_module("edit_engine.kernels.matmul")

needs_packing = pytest.mark.skipif(not matmul.packing_works(), reason="this torch packs no oneDNN weights")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=0, max_size=2), st.integers(1, 70), st.integers(1, 70),
       st.integers(1, 90), st.integers(0, 2**31 - 1))
def test_linear_equals_its_twin(lead: list[int], rows: int, k: int, n: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, rows, k, generator=g)
    w = torch.randn(n, k, generator=g)
    with torch.no_grad():
        out = kernels.linear(x, w)
    assert out.shape == (*lead, rows, n) and out.is_contiguous()
    torch.testing.assert_close(out, kernels.linear_ref(x, w), rtol=1e-5, atol=1e-5)


def test_linear_takes_its_twin_for_autograd_and_other_dtypes(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    twin = matmul.linear_ref
    monkeypatch.setattr(matmul, "linear_ref", lambda x, w: calls.append(tuple(x.shape)) or twin(x, w))
    w = torch.randn(8, 4, requires_grad=True)
    kernels.linear(torch.randn(3, 4), w).sum().backward()  # autograd: the twin, and gradients reach w
    assert calls == [(3, 4)] and w.grad is not None
    with torch.no_grad():
        kernels.linear(torch.randn(3, 4, dtype=torch.bfloat16), w.detach().bfloat16())
        kernels.linear(torch.randn(300, 4), w)  # packed (when this torch packs), at any row count
    expected = [(3, 4), (3, 4)] + ([] if matmul.packing_works() else [(300, 4)])
    assert calls == expected
    monkeypatch.setattr(matmul, "packing_works", lambda: False)  # a torch without oneDNN: the twin
    with torch.no_grad():
        kernels.linear(torch.randn(2, 4), w)
    assert calls[-1] == (2, 4)


@needs_packing
def test_a_changed_weight_is_packed_again() -> None:
    """An optimiser step (in place), a load (``copy_``) or new storage (``.data =``) between two products: the
    second reads the weight as it is now, never a stale packed copy."""
    x = torch.randn(3, 6)
    w = torch.nn.Parameter(torch.randn(5, 6))
    with torch.no_grad():
        kernels.linear(x, w)
        w.add_(1.0)
        torch.testing.assert_close(kernels.linear(x, w), x @ w.T, rtol=1e-5, atol=1e-5)
        w.copy_(torch.randn(5, 6))
        torch.testing.assert_close(kernels.linear(x, w), x @ w.T, rtol=1e-5, atol=1e-5)
    w.data = torch.randn(5, 6)
    with torch.no_grad():
        torch.testing.assert_close(kernels.linear(x, w), x @ w.T, rtol=1e-5, atol=1e-5)


@needs_packing
def test_a_freed_weight_drops_its_packed_copy() -> None:
    w = torch.randn(7, 3)
    with torch.no_grad():
        kernels.linear(torch.randn(2, 3), w)
    key = id(w)
    assert key in matmul._packed
    del w
    assert key not in matmul._packed


def test_the_models_pass_is_the_same_packed(tiny_model: DiffusionLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """A canvas pass (projections and head) with packed weights and with ``F.linear`` everywhere."""
    with torch.no_grad():
        cache = tiny_model.encode_context([[5, 6, 7, 8]], [[9, 10]], 8)
        canvas = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10]])
        packed = tiny_model.canvas_logits(canvas, cache)
        monkeypatch.setattr(matmul, "packing_works", lambda: False)
        plain = tiny_model.canvas_logits(canvas, cache)
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)
