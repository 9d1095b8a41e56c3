"""The bias-free projection ``x @ weight.T`` (every block's projections and the tied head).

On the CPU in float32, a pass over a canvas of a few rows reads every weight once and does little arithmetic with
it. ``F.linear`` hands the weight to the BLAS as the transposed right operand, which it packs again on every call.
Here each weight is packed once into oneDNN's blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, what
PyTorch's own compiler uses for frozen CPU weights) and every later product reads the packed copy. Measured on a
2-core AVX2 EPYC, the packaged model's 17 products cycled as a pass cycles them (two threads, two runs): at 8 to
128 rows 0.4-0.8x the time of the weight streamed as the left operand (``weight @ x.T``), at 1-2 rows 0.5-0.9x,
at 4 rows 1.1-1.2x; 0.3-0.85x ``F.linear`` at every row count up to a 1,024-row context. A keystroke's whole fill,
side by side in one process: first pass 0.94x (docs/results-archive-2026-12-05.md).

A packed copy is kept per weight tensor (the size of the weight: 21 MB more for the packaged
model), dropped when the weight is freed, and made again when the weight changes (its storage or its version
counter: an optimiser step, ``load_state_dict``), so training between two passes never reads a stale copy.
``linear_ref`` (``F.linear``) is the twin and the path everywhere else: GPUs, other dtypes, autograd, a compiled
graph (the compiler packs frozen weights itself), and a torch built without oneDNN (or one whose packed product
disagrees with the twin on a first probe).
"""

from __future__ import annotations

import functools
import threading
import weakref

import torch
import torch.nn.functional as F

# id(weight) -> (weak reference to it, its storage address, its version, the packed copy)
_packed: dict[int, tuple[weakref.ref[torch.Tensor], int, int, torch.Tensor]] = {}
_lock = threading.RLock()  # re-entrant: a collection inside the locked block may run ``_forget`` on this thread


def linear_ref(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """PyTorch twin: x (..., K), weight (N, K) -> (..., N)."""
    return F.linear(x, weight)


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (..., K), weight (N, K) -> (..., N), contiguous. The packed weight (module doc) for float32 on the CPU
    without autograd; ``linear_ref`` otherwise."""
    if (x.device.type != "cpu" or x.dtype != torch.float32 or weight.dtype != torch.float32
            or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
            or torch.compiler.is_compiling() or not packing_works()):
        return linear_ref(x, weight)
    return _packed_linear(x, packed(weight))


def _packed_linear(x: torch.Tensor, packed_weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed_weight, None, "none", [], "")  # type: ignore[no-any-return]


def _pack(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())  # type: ignore[no-any-return]


def packed(weight: torch.Tensor) -> torch.Tensor:
    """The packed copy of a float32 CPU weight (N, K), made on first use and again whenever the weight changed."""
    key, ptr, version = id(weight), weight.data_ptr(), weight._version
    entry = _packed.get(key)
    if entry is not None and entry[0]() is weight and entry[1] == ptr and entry[2] == version:
        return entry[3]
    copy = _pack(weight)
    with _lock:
        _packed[key] = (weakref.ref(weight, functools.partial(_forget, key)), ptr, version, copy)
    return copy


def _forget(key: int, ref: weakref.ref[torch.Tensor]) -> None:
    """A weight was freed: drop its packed copy (unless the id already names a newer weight's)."""
    with _lock:
        entry = _packed.get(key)
        if entry is not None and entry[0] is ref:
            del _packed[key]


@functools.lru_cache(maxsize=1)
def packing_works() -> bool:
    """True when this torch packs weights for oneDNN and the packed product agrees with ``F.linear`` (checked once,
    on a probe with an odd number of rows and widths that are not multiples of a vector)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        g = torch.Generator().manual_seed(0)
        x, w = torch.randn(2, 5, 37, generator=g), torch.randn(23, 37, generator=g)
        with torch.no_grad():
            out = _packed_linear(x, _pack(w))
        return bool(out.shape == (2, 5, 23) and torch.allclose(out, F.linear(x, w), rtol=1e-4, atol=1e-4))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
