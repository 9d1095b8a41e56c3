"""A count-based memory of real code: n-gram models with nested caches for drafting at the cursor.

``Memory`` holds the tiers (the document, the open documents, the workspace, a shipped background model
per language) and drafts the rest of the line left to right while the next token is likely enough.
The package is self-contained: it needs only numpy.
"""

from .draft import Draft, DraftRule, Thresholds
from .memory import Memory

__all__ = ["Memory", "Draft", "DraftRule", "Thresholds"]
