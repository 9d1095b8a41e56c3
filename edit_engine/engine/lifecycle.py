"""An engine's lifecycle beyond requests: warming up the lazy parts before the first request, and compiling the
per-pass step."""

from __future__ import annotations

import time
from typing import Any

import torch

Engine = Any  # an ``engine.facade.Engine`` (not imported: the facade imports this module)


def warm_up(engine: Engine) -> float:
    """Run a few small fills (planner, sampler, every canvas size up to 64, repair check) so that the first
    user request does not pay for lazy initialisation (allocator, kernels, tree-sitter, thread pools).
    Returns the milliseconds it took."""
    t = time.perf_counter()
    doc = "def add(a, b):\n    return a + b\n\n\nresult = add(1, \n"
    for n in (8, 16, 32, 64):
        engine.infill(doc[:-2], "\n", max_tokens=n, initial_canvas=min(16, n), min_tokens=n)
    engine.complete(doc, len(doc) - 2, language="python", max_tokens=16, show_threshold=0.0)
    return (time.perf_counter() - t) * 1e3


def compile_pass(engine: Engine) -> float:
    """``torch.compile`` the per-pass step (``DiffusionLM.canvas_hidden``) with dynamic shapes, then warm it up
    with one row and with two (the batched server): other contexts, canvases and batches do not recompile.
    Returns the seconds it took (about 30 s on a 2-core CPU; the pass is about 1.4x faster, docs/bench.md).
    Results match the eager pass to float rounding, not bit for bit. Raises RuntimeError (and keeps the eager
    step) when compiling fails, e.g. without a C++ compiler."""
    if not engine.batchable:
        raise RuntimeError("compile: only edit-engine diffusion checkpoints have a compiled pass")
    model = engine.model
    eager = model.canvas_hidden
    t = time.perf_counter()
    model.canvas_hidden = torch.compile(eager, dynamic=True)
    try:
        warm_up(engine)
        # A batch of one is compiled as a constant: run two rows too, so that the server's first batched
        # pass does not stop every client for a recompile.
        tok = engine.tokenizer
        two = model.encode_context([tok.encode("x = 1\n"), tok.encode("def f(a):\n    ")],
                                   [tok.encode("\n"), tok.encode("\nprint(f)\n")], 16)
        for c in (8, 16):
            model.canvas_hidden(torch.full((2, c), tok.mask_id, device=model.device), two)
    except Exception as e:  # the compiler runs lazily, at the first call
        model.canvas_hidden = eager
        raise RuntimeError(f"torch.compile failed ({type(e).__name__}: {e}); running eager") from e
    return time.perf_counter() - t
