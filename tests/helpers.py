"""Plain helpers shared by test modules (imported as ``helpers``: pytest puts this folder on ``sys.path``)."""

from __future__ import annotations

from typing import Any


def plain(obj: Any) -> Any:
    """pygls hands a client the results of custom methods as namedtuples; turn them back into JSON values."""
    if hasattr(obj, "_asdict"):
        return {k: plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj
