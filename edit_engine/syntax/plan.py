"""What the planner decides for a cursor or selection (``planner.plan``): the span, the canvas sizes, and how
the fill is finished (``postprocess.finish``) and checked (``repair``). The span kinds are described in
``planner``'s module doc."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    start: int  # character offset where the replaced span starts
    end: int  # character offset where it ends (== start for an insertion)
    kind: str  # see module doc
    initial_canvas: int  # canvas slots to start with
    max_tokens: int  # the canvas never grows past this
    single_line: bool  # cut the fill at its first newline
    language: str = "plaintext"  # the grammar used (plaintext: line-based rules only)
    indent: str = ""  # indentation of the line the fill starts on (as it is in the document)
    unit: str = ""  # the document's indentation unit ("\t" or spaces); "" = the grammar's default
    lead: str = ""  # the fill starts with this (a block body: newline + indentation)
    trail: str = ""  # the fill ends with this (newline + header indentation before an auto-closed "}")
    stop: str = ""  # cut the fill where this text first appears (closing quote, "*/")
    code: bool = True  # False for comments and strings: no bracket or indentation processing, no parse check
    check: bool = False  # parse prefix + fill + suffix and repair new errors (a grammar is installed)
    close: str = ""  # the fill ends with this, and the model sees it before the suffix (a header's ":")
    # A blank line at column 0 after a deeper block than the next line's: every indentation from the next code
    # line's up to the previous one's could continue there (``candidate_indents``); the engine lets the model
    # choose among them (``Engine.plan_document``). () when the indentation is not in doubt.
    indents: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"bad span [{self.start}, {self.end})")

    @property
    def on_blank_line(self) -> bool:
        """The fill starts a blank line (``statement``, ``header``)."""
        return self.kind in ("statement", "header")

    @property
    def shows_lead(self) -> bool:
        """The model is shown the fill's first-line indentation (a blank line's, or a block body's ``lead``:
        line break and indentation), so the fill's first line gets exactly that indentation, whatever blanks
        the model wrote before its first word."""
        return self.on_blank_line or self.kind == "block_body"
