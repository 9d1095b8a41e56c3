"""The sampler's settings: each one's type, range and meaning, defined once (``SETTINGS``).

Kept apart from the sampler, with no heavy import, so that the command line builds its flags and rejects a bad
value before torch is imported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MAX_SPREAD = 8  # the Triton commit kernel unrolls one neighbour test per unit of radius


@dataclass(frozen=True)
class Setting:
    """One sampler setting: its type, range and meaning. The one definition the rest derives from: the
    ``SamplerConfig`` check, the CLI flags (``flag``), the language server's and VS Code's keys (``key``) and
    the server's request fields all check and describe a setting through it."""

    name: str
    kind: type  # int, float or bool
    lo: float | None = None  # smallest value allowed
    hi: float | None = None  # largest value allowed (``hi_open``: the bound itself is not)
    hi_open: bool = False
    help: str = ""
    metavar: str = "N"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        """The camelCase key of editor settings and JSON requests."""
        head, *rest = self.name.split("_")
        return head + "".join(w.title() for w in rest)

    def want(self) -> str:
        """What the setting takes, in words (error messages)."""
        if self.kind is bool:
            return "true or false"
        what = "an integer" if self.kind is int else "a number"
        if self.lo is not None and self.hi is not None:
            return f"{what} from {self.lo:g} to {self.hi:g}" + (" (exclusive)" if self.hi_open else "")
        return f"{what} >= {self.lo:g}" if self.lo is not None else what

    def check(self, value: Any) -> Any:
        """``value`` as this setting holds it, or ValueError naming the setting and what it takes. ``spread``
        also takes true (1) / false (0)."""
        if self.name == "spread" and isinstance(value, bool):
            return int(value)
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{self.name} must be {self.want()}; got {value!r}")
            return value
        ok = not isinstance(value, bool) and isinstance(value, (int, float) if self.kind is float else int)
        if ok and self.kind is float:
            value = float(value)
            ok = math.isfinite(value)
        if ok and self.lo is not None and value < self.lo:
            ok = False
        if ok and self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi):
            ok = False
        if not ok:
            raise ValueError(f"{self.name} must be {self.want()}; got {value!r}")
        return value

    def parse(self, text: str) -> Any:
        """A command-line value: ``text`` converted and checked (ValueError with what it takes)."""
        try:
            value = self.kind(text) if self.kind is not bool else text.strip().lower() in ("1", "true", "yes")
        except ValueError:
            raise ValueError(f"expected {self.want()}, got {text!r}") from None
        return self.check(value)


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("threshold", float, 0.0, help="commit every masked slot whose confidence is at least this (above 1: "
            "only the floor)", metavar="P"),
    Setting("min_commit", int, 1, help="floor: slots committed per pass even if none clears the threshold"),
    Setting("spread", int, 0, MAX_SPREAD, help="no two slots the floor commits in one pass lie within this many "
            "slots of each other (0 = off)", metavar="R"),
    Setting("max_commit", int, 0, help="ceiling: slots committed per pass at most (0 = no ceiling)"),
    Setting("floor_ramp", int, 0, help="the floor ramps up over a fresh canvas's first passes: R slots, then 2R, "
            "4R, ... up to min_commit (0 = off)", metavar="R"),
    Setting("temperature", float, 0.0, 2.0, help="0 = greedy; above 0 samples each slot's token from "
            "softmax(logits / T)", metavar="T"),
    Setting("initial_canvas", int, 1, help="slots of the first canvas"),
    Setting("max_tokens", int, 1, help="the canvas never grows past this many slots"),
    Setting("min_tokens", int, 0, help="the fill has at least this many real tokens"),
    Setting("pad_threshold", float, 0.0, 1.0, help="length rule: the fill ends at the first slot whose pad "
            "probability reaches this (0 = pads slot by slot)", metavar="P"),
    Setting("line_stop", bool, help="single-line fills: stop once the first line is decided"),
    Setting("novel_penalty", float, 0.0, 100.0, help="taken off the logit of every name that occurs nowhere in "
            "the context and is not a common word of the language (0 = off)", metavar="P"),
)}
