"""What the engine returns: a streamed ``Pass``, an ``InfillResult``, a ``Completion`` (an edit), and the small
helpers every front end shares (languages by file suffix, the document size limit)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edit_engine.syntax import positions

LANGUAGES_BY_SUFFIX = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".jsx": "javascript", ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".rs": "rust", ".go": "go", ".java": "java", ".c": "c", ".h": "c", ".cpp": "cpp", ".rb": "ruby",
}
MAX_DOCUMENT_CHARS = 5_000_000


def unheal(text: str, healed: str) -> str:
    """A healed fill's text without the partial word the prefix already holds (``Engine.healing``); text
    that does not start with it (slot 0 still masked) is left as it is."""
    return text[len(healed) :] if healed and text.startswith(healed) else text


TYPED_THROUGH = "typed through"  # the reason of an answer kept from the last one: the typing agrees with it
PLACEHOLDER = "\u2591"  # "░": one per undecided slot in a pass's ``preview``


def decode_preview(tok: Any, ids: list[int]) -> str:
    """The canvas ``ids`` as text with ``PLACEHOLDER`` where each masked slot sits, for showing a pass while
    it resolves ("" when nothing is masked: the pass's text says it all). Each run of committed tokens is
    decoded on its own, so a character split across a masked slot shows as U+FFFD until the slot is decided."""
    mask = tok.mask_id
    if mask not in ids:
        return ""
    out: list[str] = []
    run: list[int] = []
    for i in ids:
        if i == mask:
            if run:
                out.append(tok.decode(run))
                run = []
            out.append(PLACEHOLDER)
        else:
            run.append(i)
    if run:
        out.append(tok.decode(run))
    return "".join(out)


def language_for_path(path: str | Path) -> str:
    return LANGUAGES_BY_SUFFIX.get(Path(path).suffix.lower(), "plaintext")


@dataclass(frozen=True)
class Pass:
    """One refinement pass of a stream."""

    index: int  # 0-based
    text: str  # the whole span as it stands (committed tokens only)
    masked: int  # undecided slots (masked, or not yet opened by growth); within a repair round it rises only by remasking
    final: bool
    nfe: int  # forward passes so far
    start: int = 0  # character offsets of the span in the document (complete/stream_complete)
    end: int = 0
    stop_reason: str = ""  # on the final pass: complete | length | line
    # The span as ``text`` is made, with a ``PLACEHOLDER`` where each masked slot of the canvas sits ("" when
    # none is: then ``text`` is the whole story). For display only: a split character shows as U+FFFD.
    preview: str = ""
    source: str = "model"  # on the final pass: who wrote the fill (``Completion.source``)
    reason: str = ""  # on the final pass of no fill: why (``Completion.reason``)
    # On the final pass of a document request: milliseconds per stage (``Completion.timings``), else empty.
    timings: dict[str, float] = field(default_factory=dict)
    score: float = 0.0  # on the final pass: the source's own score (a draft's probability, a copy's match)
    estimate: float | None = None  # on the final pass: the show gate's estimate that it is accepted (``gate``)


@dataclass(frozen=True)
class InfillResult:
    text: str
    passes: int  # refinement passes streamed
    nfe: int  # forward passes of the denoiser
    elapsed_ms: float
    stop_reason: str  # complete (the model ended the fill) | length (max_tokens reached) | line (line stop:
    # the first line of a single-line fill is decided) | cancelled
    tokens: int = 0  # real tokens in the fill
    timings: dict[str, float] = field(default_factory=dict)  # ms per stage


@dataclass(frozen=True)
class Completion(InfillResult):
    start: int = 0  # character offsets: ``text`` replaces document[start:end]
    end: int = 0
    kind: str = ""  # the planner's span kind
    source: str = "model"  # who wrote the fill: model | copy (a verified copy proposal) | memory (a draft from the
    # memory of code) | none (no fill given)
    reason: str = ""  # why there is no fill (source "none"), e.g. a language the model was not trained on
    score: float = 0.0  # the source's own score (``Pass.score``)
    estimate: float | None = None  # the show gate's estimate that it is accepted (None: not gated)

    def to_json(self, document: str) -> dict[str, Any]:
        sl, sc = positions.line_col_of_offset(document, self.start)
        el, ec = positions.line_col_of_offset(document, self.end)
        return {
            "text": self.text, "start": {"line": sl, "col": sc}, "end": {"line": el, "col": ec},
            "kind": self.kind, "passes": self.passes, "nfe": self.nfe, "elapsed_ms": round(self.elapsed_ms, 2),
            "stop_reason": self.stop_reason, "tokens": self.tokens, "source": self.source,
            **({"reason": self.reason} if self.reason else {}),
            **({"estimate": round(self.estimate, 3)} if self.estimate is not None else {}),
            "timings": {k: round(v, 2) for k, v in self.timings.items()},
        }

