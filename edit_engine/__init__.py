"""edit-engine: low-latency code infilling with a small masked diffusion language model.

    from edit_engine import Engine
    engine = Engine.load()                       # the packaged default model
    r = engine.infill(prefix, suffix, language="python")
    for p in engine.stream(prefix, suffix):      # every refinement pass
        print(p.index, p.masked, p.text)

``edit_engine.infill(prefix, suffix, **kw)`` uses a lazily loaded default engine.
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edit_engine.decoding.sampler import SamplerConfig
    from edit_engine.engine import Completion, Engine, InfillResult, Pass

# The public names are imported on first use (PEP 562): the command's modules live in this package, and
# ``edit-engine --help`` or a usage error should not wait for torch.
_LAZY = {"Completion": ".engine", "Engine": ".engine", "InfillResult": ".engine", "Pass": ".engine",
         "SamplerConfig": ".decoding.sampler"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Completion", "Engine", "InfillResult", "Pass", "SamplerConfig", "default_engine", "infill"]
__version__ = "0.1.0"

_default: Engine | None = None
_default_lock = threading.Lock()


def default_engine() -> Engine:
    """The packaged model, loaded once on first use."""
    from edit_engine.engine import Engine

    global _default
    with _default_lock:
        if _default is None:
            _default = Engine.load()
        return _default


def infill(prefix: str, suffix: str = "", **kw: Any) -> InfillResult:
    """Fill the hole between ``prefix`` and ``suffix`` with the packaged model."""
    return default_engine().infill(prefix, suffix, **kw)
