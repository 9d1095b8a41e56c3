"""``kernels.linear``: the projection streamed as ``weight @ x.T`` on the CPU, against its twin ``F.linear``."""

from __future__ import annotations

import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edit_engine import kernels
from edit_engine.model import DiffusionLM

matmul = importlib.import_module("edit_engine.kernels.matmul")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=0, max_size=2), st.integers(1, 40), st.integers(1, 70),
       st.integers(1, 90), st.integers(0, 2**31 - 1))
def test_linear_equals_its_twin(lead: list[int], rows: int, k: int, n: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, rows, k, generator=g)
    w = torch.randn(n, k, generator=g)
    with torch.no_grad():
        out = kernels.linear(x, w)
    assert out.shape == (*lead, rows, n) and out.is_contiguous()
    torch.testing.assert_close(out, kernels.linear_ref(x, w), rtol=1e-5, atol=1e-5)


def test_linear_takes_its_twin_for_autograd_other_dtypes_and_many_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []
    twin = matmul.linear_ref
    monkeypatch.setattr(matmul, "linear_ref", lambda x, w: calls.append(tuple(x.shape)) or twin(x, w))
    w = torch.randn(8, 4, requires_grad=True)
    kernels.linear(torch.randn(3, 4), w).sum().backward()  # autograd: the twin, and gradients reach w
    assert calls == [(3, 4)] and w.grad is not None
    with torch.no_grad():
        kernels.linear(torch.randn(3, 4, dtype=torch.bfloat16), w.detach().bfloat16())
        kernels.linear(torch.randn(matmul.MAX_ROWS + 1, 4), w)
        kernels.linear(torch.randn(matmul.MAX_ROWS, 4), w)  # streamed
    assert calls == [(3, 4), (3, 4), (matmul.MAX_ROWS + 1, 4)]


def test_the_models_pass_is_the_same_streamed(tiny_model: DiffusionLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """A canvas pass (projections and head) with the streamed form and with ``F.linear`` everywhere."""
    with torch.no_grad():
        cache = tiny_model.encode_context([[5, 6, 7, 8]], [[9, 10]], 8)
        canvas = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10]])
        streamed = tiny_model.canvas_logits(canvas, cache)
        monkeypatch.setattr(matmul, "MAX_ROWS", 0)
        plain = tiny_model.canvas_logits(canvas, cache)
    torch.testing.assert_close(streamed, plain, rtol=1e-4, atol=1e-4)
