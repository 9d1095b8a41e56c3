"""The engine: ``Engine`` (``facade``) and the parts it is made of. Front ends import from here.

The names are imported on first use (PEP 562): ``edits/`` runs on the fill's runtime and imports modules of
this package, so importing an edits module first must not pull the facade (which imports ``edits/``) through
this file half-way.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edit_engine.edits.apply import ApplyResult, Placement, guess_language
    from edit_engine.edits.next_edit import MAX_OTHERS, NO_EDIT, NextEdit, default_region
    from edit_engine.engine.contexts import (
        CONTEXT_STEP_CHARS,
        CONTEXT_STEP_TOKENS,
        ContextCacheConfig,
        ContextCacheStats,
        ContextStore,
    )
    from edit_engine.engine.document import DocumentPlan
    from edit_engine.engine.facade import Engine
    from edit_engine.engine.holes import Prepared
    from edit_engine.engine.results import (
        LANGUAGES_BY_SUFFIX,
        MAX_DOCUMENT_CHARS,
        PLACEHOLDER,
        Completion,
        InfillResult,
        Pass,
        decode_preview,
        language_for_path,
        unheal,
    )

_WHERE = {
    "edit_engine.edits.apply": ("ApplyResult", "Placement", "guess_language"),
    "edit_engine.edits.next_edit": ("MAX_OTHERS", "NO_EDIT", "NextEdit", "default_region"),
    "edit_engine.engine.contexts": ("CONTEXT_STEP_CHARS", "CONTEXT_STEP_TOKENS", "ContextCacheConfig",
                                    "ContextCacheStats", "ContextStore"),
    "edit_engine.engine.document": ("DocumentPlan",),
    "edit_engine.engine.facade": ("Engine",),
    "edit_engine.engine.holes": ("Prepared",),
    "edit_engine.engine.results": ("LANGUAGES_BY_SUFFIX", "MAX_DOCUMENT_CHARS", "PLACEHOLDER", "Completion",
                                   "InfillResult", "Pass", "decode_preview", "language_for_path", "unheal"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
__all__ = [
    "CONTEXT_STEP_CHARS", "CONTEXT_STEP_TOKENS", "LANGUAGES_BY_SUFFIX", "MAX_DOCUMENT_CHARS", "MAX_OTHERS", "NO_EDIT",
    "PLACEHOLDER",
    "ApplyResult", "Completion", "ContextCacheConfig", "ContextCacheStats", "ContextStore", "DocumentPlan", "Engine",
    "InfillResult", "NextEdit", "Pass", "Placement", "Prepared", "decode_preview", "default_region",
    "guess_language", "language_for_path", "unheal",
]
assert sorted(__all__) == sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
