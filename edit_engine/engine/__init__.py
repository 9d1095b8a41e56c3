"""The engine: ``Engine`` (``facade``) and the parts it is made of. Front ends import from here."""

from edit_engine.edits.apply import ApplyResult, Placement, guess_language
from edit_engine.edits.next_edit import NO_EDIT, NextEdit, default_region
from edit_engine.engine.contexts import (
    CONTEXT_STEP_CHARS,
    CONTEXT_STEP_TOKENS,
    ContextCacheConfig,
    ContextCacheStats,
    ContextStore,
)
from edit_engine.engine.document import DocumentPlan
from edit_engine.engine.facade import Engine, Prepared
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

__all__ = [
    "CONTEXT_STEP_CHARS",
    "CONTEXT_STEP_TOKENS",
    "LANGUAGES_BY_SUFFIX",
    "MAX_DOCUMENT_CHARS",
    "NO_EDIT",
    "ApplyResult",
    "PLACEHOLDER",
    "Completion",
    "ContextCacheConfig",
    "ContextCacheStats",
    "ContextStore",
    "DocumentPlan",
    "Engine",
    "InfillResult",
    "NextEdit",
    "Pass",
    "Placement",
    "Prepared",
    "decode_preview",
    "default_region",
    "guess_language",
    "language_for_path",
    "unheal",
]
