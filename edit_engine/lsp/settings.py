"""The language server's settings: one typed, defaulted dataclass.

Values come from ``initializationOptions`` (at ``initialize``) and from ``workspace/didChangeConfiguration``
(either the settings object itself or nested under ``"editEngine"``). Keys are camelCase on the wire. A value
of the wrong type or out of range is replaced by its default and reported as a warning (the server sends it
with ``window/logMessage``); unknown keys are reported too, so a typo does not pass silently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

SECTION = "editEngine"  # didChangeConfiguration may nest the settings under this key


@dataclass(frozen=True)
class Settings:
    """What a client may set. Defaults are what the server uses when nothing is sent."""

    model_path: str | None = None  # checkpoint directory; None = the packaged model
    max_tokens: int | None = None  # longest fill in tokens; None = the engine's default (capped by the model)
    threshold: float | None = None  # confidence to commit a token in parallel; None = the sampler's default
    min_commit: int | None = None  # tokens committed per pass at least; None = the model's sampler.json (or 1)
    spread: int | None = None  # no two floor picks within this many slots (0 = off); None = sampler.json
    remask: float | None = None  # self-correction bar (SamplerConfig.remask; 0 = off); None = sampler.json
    floor_ramp: int | None = None  # first-pass floor, doubling up to min_commit (0 = off); None = sampler.json
    stream_passes: bool = False  # send editEngine/pass notifications while denoising

    def overrides(self) -> dict[str, Any]:
        """Sampler overrides for ``Engine.stream_complete`` (only the ones that are set)."""
        from edit_engine.sampler import set_overrides

        return set_overrides(threshold=self.threshold, min_commit=self.min_commit, spread=self.spread,
                             remask=self.remask, floor_ramp=self.floor_ramp)


# camelCase wire key -> (field name, validator). A validator returns the value or raises ValueError.
def _model_path(v: Any) -> str | None:
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise ValueError("expected a string (a checkpoint directory)")
    if not Path(v).expanduser().is_dir():
        raise ValueError(f"{v!r} is not a directory")
    return str(Path(v).expanduser())


def _max_tokens(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError("expected an integer >= 1")
    return v


def _threshold(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError("expected a number >= 0 (above 1 commits only minCommit tokens per pass)")
    return float(v)


def _spread(v: Any) -> int | None:
    from edit_engine.sampler import spread_radius

    return None if v is None else spread_radius(v)


def _remask(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v < 1:
        raise ValueError("expected a probability, 0 <= remask < 1 (0 = off)")
    return float(v)


def _floor_ramp(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError("expected an integer >= 0 (0 = off)")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("expected true or false")
    return v


_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "modelPath": ("model_path", _model_path),
    "maxTokens": ("max_tokens", _max_tokens),
    "threshold": ("threshold", _threshold),
    "minCommit": ("min_commit", _max_tokens),
    "spread": ("spread", _spread),
    "remask": ("remask", _remask),
    "floorRamp": ("floor_ramp", _floor_ramp),
    "streamPasses": ("stream_passes", _bool),
}
_DEFAULTS = {f.name: f.default for f in fields(Settings)}


def parse(options: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Settings from a client's options object, on top of ``base``; returns them and the warnings.

    A key that is absent keeps its value from ``base``; a key with an invalid value gets the default.
    """
    base = base or Settings()
    warnings: list[str] = []
    if options is None:
        return base, warnings
    if not isinstance(options, Mapping):
        return base, [f"editEngine settings must be an object, got {type(options).__name__}; ignored"]
    if isinstance(options.get(SECTION), Mapping):
        options = options[SECTION]
    changes: dict[str, Any] = {}
    for key, value in options.items():
        if key not in _KEYS:
            warnings.append(f"unknown editEngine setting {key!r} ignored")
            continue
        name, check = _KEYS[key]
        try:
            changes[name] = check(value)
        except ValueError as e:
            changes[name] = _DEFAULTS[name]
            warnings.append(f"invalid editEngine setting {key}={value!r}: {e}; using the default "
                            f"{_DEFAULTS[name]!r}")
    return replace(base, **changes), warnings
