"""The show gate: an estimate that a suggestion will be accepted, and the threshold below which nothing is shown.

A suggestion that is likely wrong is worse than none: it costs the reader a glance and, accepted by habit, an
undo. So each final answer gets ``ShowGate.estimate``: a logistic model per source (who wrote it: ``copy``,
``memory``, ``model``) over a few things known at the time — its length in non-blank characters, whether it
spans lines, whether it is a single word, and the source's own score (a draft's probability under the memory,
a copy's context match). The weights are fitted on the development split of the typing replay
(``python -m edit_engine.eval.gate_fit``, which prints the fit and writes ``gate.json``); the threshold is the
estimate below which the answer is replaced by no suggestion, with the reason. A request can ask for more
(``threshold=0``: an explicit request in an editor).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

FEATURES = ("bias", "log_chars", "multi_line", "one_word", "score", "prose", "line_start", "in_prose")
GATE_FILE = Path(__file__).with_name("gate.json")
_ONE_WORD = re.compile(r"\s*\w+[.(:]?\s*\Z")
_PROSE = re.compile(r"[A-Za-z]{2,} [A-Za-z]{2,}")  # two words with a blank between them: text, not code
_OPEN_PROSE = re.compile(r"#|\"\"\"|\'\'\'|//|/\*")


def features(text: str, score: float, line_before: str = "") -> list[float]:
    """The gate's inputs for a suggestion ``text`` whose source scored it ``score`` (0 when it has none), at a
    cursor whose line so far is ``line_before``: its size and shape, whether it reads as prose, whether the
    cursor starts a line (a new statement, the least predictable place) or sits after a comment or docstring
    opener on its line."""
    chars = sum(not c.isspace() for c in text)
    return [1.0, math.log1p(chars), float("\n" in text.strip("\n")), float(bool(_ONE_WORD.match(text))),
            float(score), float(bool(_PROSE.search(text))), float(not line_before.strip()),
            float(bool(_OPEN_PROSE.search(line_before)))]


@dataclass(frozen=True)
class ShowGate:
    """Per-source logistic weights over ``FEATURES`` and the threshold on the estimate. A source without
    weights gets ``default`` (an estimate every threshold above it hides). ``min_chars``: the fewest characters
    that are not blank a suggestion the gate may hide must write (the key that takes ``:`` or ``.`` saves
    nothing, and such a ghost after every word is noise); an explicit request (threshold 0) is not held to it."""

    weights: dict[str, tuple[float, ...]] = field(default_factory=dict)
    threshold: float = 0.0
    default: float = 0.5
    min_chars: int = 0

    def estimate(self, text: str, source: str, score: float = 0.0, line_before: str = "") -> float:
        """The chance that a person accepts ``text`` (whole or its first line), as fitted; 0 for no text."""
        if not text.strip():
            return 0.0
        w = self.weights.get(source)
        if w is None:
            return self.default
        z = sum(a * b for a, b in zip(w, features(text, score, line_before), strict=True))
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    def shows(self, text: str, source: str, score: float = 0.0, line_before: str = "",
              threshold: float | None = None) -> tuple[bool, float]:
        """(whether it is shown, the estimate) under ``threshold`` (None: the gate's own)."""
        est = self.estimate(text, source, score, line_before)
        bar = self.threshold if threshold is None else threshold
        if bar > 0 or threshold is None:
            if sum(not c.isspace() for c in text) < self.min_chars:
                return False, est
        return est >= bar, est

    @classmethod
    def load(cls, path: Path = GATE_FILE) -> ShowGate:
        """The fitted gate shipped with the package (``gate.json``); an open gate (shows everything) without it."""
        if not path.is_file():
            return cls()
        raw = json.loads(path.read_text(encoding="utf-8"))
        if list(raw.get("features", [])) != list(FEATURES):
            raise ValueError(f"{path}: features {raw.get('features')} are not {list(FEATURES)}")
        return cls({k: tuple(v) for k, v in raw["weights"].items()}, float(raw["threshold"]),
                   min_chars=int(raw.get("min_chars", 0)))
