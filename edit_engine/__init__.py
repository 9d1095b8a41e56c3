"""edit-engine: low-latency code infilling with a small masked diffusion language model.

    from edit_engine import Engine
    engine = Engine.load()                       # the packaged default model
    r = engine.infill(prefix, suffix, language="python")
    for p in engine.stream(prefix, suffix):      # every refinement pass
        print(p.index, p.masked, p.text)

``edit_engine.infill(prefix, suffix, **kw)`` uses a lazily loaded default engine.
"""

from __future__ import annotations

import threading
from typing import Any

from .engine import Completion, Engine, InfillResult, Pass
from .sampler import SamplerConfig

__all__ = ["Completion", "Engine", "InfillResult", "Pass", "SamplerConfig", "default_engine", "infill"]
__version__ = "0.1.0"

_default: Engine | None = None
_default_lock = threading.Lock()


def default_engine() -> Engine:
    """The packaged model, loaded once on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Engine.load()
        return _default


def infill(prefix: str, suffix: str = "", **kw: Any) -> InfillResult:
    """Fill the hole between ``prefix`` and ``suffix`` with the packaged model."""
    return default_engine().infill(prefix, suffix, **kw)
