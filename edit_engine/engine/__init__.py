"""The engine: ``Engine`` (``facade``) and the parts it is made of. Front ends import from here."""

from .contexts import (
    CONTEXT_STEP_CHARS,
    CONTEXT_STEP_TOKENS,
    ContextCacheConfig,
    ContextCacheStats,
    ContextStore,
)
from .document import DocumentPlan
from .facade import Engine, Prepared
from .results import (
    LANGUAGES_BY_SUFFIX,
    MAX_DOCUMENT_CHARS,
    Completion,
    InfillResult,
    Pass,
    language_for_path,
    unheal,
)

__all__ = [
    "CONTEXT_STEP_CHARS",
    "CONTEXT_STEP_TOKENS",
    "LANGUAGES_BY_SUFFIX",
    "MAX_DOCUMENT_CHARS",
    "Completion",
    "ContextCacheConfig",
    "ContextCacheStats",
    "ContextStore",
    "DocumentPlan",
    "Engine",
    "InfillResult",
    "Pass",
    "Prepared",
    "language_for_path",
    "unheal",
]
