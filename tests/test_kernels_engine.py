"""The engine gives the same fills with the Triton kernels (interpreted on the CPU) as with the PyTorch twins."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported anywhere

import pytest  # noqa: E402

from edit_engine.engine import Engine  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton); kernel tests need it")

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("the Triton path on CPU tensors needs TRITON_INTERPRET=1", allow_module_level=True)

PREFIX = "def mean(values):\n    total = 0\n    for v in values:\n        "
SUFFIX = "\n    return total / len(values)\n"


# The confidence scores of different slots differ by far more than the kernels' rounding (kernel and twin sum
# in different orders), so the slots ranked first are the same on both paths.
@pytest.mark.parametrize(("overrides", "has_text"), [
    ({}, False),  # the default sampler: greedy, confidence threshold, pad rules (this fill ends at once with a pad)
    ({"min_tokens": 6, "threshold": 0.001}, True),  # a fill of real tokens only
    ({"min_tokens": 6, "temperature": 0.7, "max_commit": 2}, False),  # sampled choice: the kernel gets `choice`
])
def test_fills_equal_with_kernels_on_and_off(tiny_engine: Engine, monkeypatch: pytest.MonkeyPatch,
                                            overrides: dict[str, object], has_text: bool) -> None:
    fills = {}
    for backend in ("torch", "triton"):
        monkeypatch.setenv("EDIT_ENGINE_KERNELS", backend)
        r = tiny_engine.infill(PREFIX, SUFFIX, max_tokens=6, seed=3, **overrides)
        fills[backend] = (r.text, r.nfe, r.stop_reason)
    assert fills["triton"] == fills["torch"]
    if has_text:
        assert fills["torch"][0], "the fill is empty: the comparison would show little"


def test_training_gets_the_twins_gradients_with_kernels_forced(tiny_engine: Engine,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The Triton kernels are forward-only: under autograd every op runs its twin, so a training step's loss
    and gradients are the same with the kernels forced on as off (before this, a CUDA training run would have
    cut the graph at the first normalisation and trained only the embedding)."""
    import torch

    model = tiny_engine.model
    torch.manual_seed(0)
    tokens = torch.randint(4, model.cfg.vocab_size, (2, 12))
    kind = torch.tensor([[1] * 6 + [2] * 2 + [3] * 4] * 2)  # prefix, suffix, canvas rows (model.KIND_*)
    grads = {}
    for backend in ("torch", "triton"):
        monkeypatch.setenv("EDIT_ENGINE_KERNELS", backend)
        model.zero_grad(set_to_none=True)
        model(tokens, kind).float().pow(2).mean().backward()
        grads[backend] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    assert set(grads["triton"]) == {n for n, _ in model.named_parameters()}, "a parameter got no gradient"
    for n, g in grads["torch"].items():
        torch.testing.assert_close(grads["triton"][n], g, rtol=0, atol=0, msg=n)


def test_denoise_reaches_the_head_and_commit_kernels(tiny_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The greedy pass's head and commit run as Triton kernels when the backend says so, also for a model whose
    parameters ask for gradients (the head's weight is one): before, autograd sent both to the twins on a GPU."""
    from edit_engine.kernels import _triton_commit as tcommit

    calls: list[str] = []

    def spy(name: str, label: str) -> None:
        real = getattr(tcommit, name)

        def wrapped(*a: object, **k: object) -> object:
            calls.append(label)
            return real(*a, **k)

        monkeypatch.setattr(tcommit, name, wrapped)

    # A pass commits through the whole step (from logits) or its second half (from the head's statistics).
    spy("token_stats_triton", "stats")
    spy("commit_from_stats_triton", "commit")
    spy("commit_step_triton", "commit")
    monkeypatch.setenv("EDIT_ENGINE_KERNELS", "triton")
    assert any(p.requires_grad for p in tiny_engine.model.parameters())
    r = tiny_engine.infill(PREFIX, SUFFIX, max_tokens=4, min_tokens=4, threshold=2.0)
    assert r.nfe >= 1
    assert calls.count("commit") == r.nfe and "stats" in calls
