"""Choose between a Triton kernel and its PyTorch twin.

``EDIT_ENGINE_KERNELS`` selects the backend: ``auto`` (default: Triton on CUDA tensors when Triton imports,
the PyTorch twin everywhere else), ``torch`` (always the twin) or ``triton`` (always Triton; on CPU tensors
this needs ``TRITON_INTERPRET=1``). Triton is imported lazily so the CPU install never needs it.
"""

from __future__ import annotations

import functools
import os

import torch

_VALID = ("auto", "torch", "triton")


def backend() -> str:
    value = os.environ.get("EDIT_ENGINE_KERNELS", "auto").strip().lower()
    if value not in _VALID:
        raise ValueError(f"EDIT_ENGINE_KERNELS={value!r}; expected one of {_VALID}")
    return value


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:
        return False
    return True


def needs_grad(*ts: torch.Tensor) -> bool:
    """True when autograd records an op on these tensors (training): the Triton kernels are inference-only
    (forward only, outputs written in place with no ``grad_fn``), so such ops must run the PyTorch twin."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def use_triton(t: torch.Tensor, *more: torch.Tensor) -> bool:
    """True when the op on tensor ``t`` (and the other inputs ``more``) should run the Triton kernel. Never
    when autograd needs the op's gradient (``needs_grad``), whatever the backend: the twin is differentiable."""
    choice = backend()
    if choice == "torch" or needs_grad(t, *more):
        return False
    if choice == "triton":
        if not triton_available():
            raise RuntimeError("EDIT_ENGINE_KERNELS=triton but triton is not installed (pip install triton)")
        if not t.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("EDIT_ENGINE_KERNELS=triton on CPU tensors needs TRITON_INTERPRET=1")
        return True
    return t.is_cuda and triton_available()
