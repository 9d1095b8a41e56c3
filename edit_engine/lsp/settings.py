"""The language server's settings: one typed, defaulted dataclass.

Values come from ``initializationOptions`` (at ``initialize``) and from ``workspace/didChangeConfiguration``
(either the settings object itself or nested under ``"editEngine"``). Keys are camelCase on the wire. A value
of the wrong type or out of range is replaced by its default and reported as a warning (the server sends it
with ``window/logMessage``); unknown keys are reported too, so a typo does not pass silently.
"""

from __future__ import annotations

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
    # Sampler settings (``SAMPLER_KEYS``; meaning and range: ``sampler_settings.SETTINGS``); None = the model's sampler.json.
    threshold: float | None = None
    min_commit: int | None = None
    spread: int | None = None
    floor_ramp: int | None = None
    stream_passes: bool = False  # send editEngine/pass notifications while denoising
    # Start a document's fill on the keystroke (its didChange), once the client has asked that document for an
    # inline completion: the request that follows (after the editor's debounce) finds it running or done, and is
    # sent its passes so far and the rest as they come (``handlers.start_early``). Measured with a 50 ms debounce:
    # a model-run answer's first pass 2.8 ms after the request instead of 21 (docs/results-archive-2026-12-05.md).
    start_on_keystroke: bool = True
    # Repair rounds for the fills asked while typing (automatic inline completions, fills started on the
    # keystroke): the fill is still checked and cut to its longest prefix that parses. Explicit requests run the
    # engine's full repair. 0: measured as fast and as right while typing (docs/results-archive-2026-12-05.md).
    typing_repair_rounds: int = 0
    # The show gate's threshold for suggestions asked while typing (automatic inline completions, fills started
    # on the keystroke): below it the answer is no suggestion (``engine.gate``). None: the engine's fitted one.
    # Explicit requests (invoked inline completion, editEngine/infill) show every answer.
    show_threshold: float | None = None
    # Drafts from the memory of code (``engine.drafts``); false: the model and copies only (the engine reloads);
    # None: as ``EDIT_ENGINE_MEMORY`` says (on unless it says off).
    memory: bool | None = None
    # The memory's workspace tier: the workspace folders' source files, nearest the open documents first, counted
    # on a background thread and cached on disk (``memory.indexer``); a saved file is counted again.
    workspace_index: bool = True
    # The memory's packages tier: the files of the packages the workspace imports (its virtual environments,
    # node_modules, the server's Python path with the standard library). Off: on the typing replay's Python dev
    # split it lowered the share of characters typed by accepts from 26.1% to 24.4% (docs/results.md).
    installed_packages: bool = False

    def overrides(self) -> dict[str, Any]:
        """Sampler overrides for ``Engine.stream_complete`` (only the ones that are set)."""
        return {n: getattr(self, n) for n in SAMPLER_KEYS if getattr(self, n) is not None}


# The sampler settings an editor may set: checked and named (camelCase) by their one definition.
SAMPLER_KEYS = ("threshold", "min_commit", "spread", "floor_ramp")


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


def _rounds(v: Any) -> int:
    from edit_engine.syntax.repair import MAX_ROUNDS

    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_ROUNDS:
        raise ValueError(f"expected an integer from 0 to {MAX_ROUNDS}")
    return v


def _threshold(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
        raise ValueError("expected a number from 0 to 1, or null for the engine's own")
    return float(v)


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("expected true or false")
    return v


def _optional(name: str) -> Callable[[Any], Any]:
    """A sampler setting's check (``sampler_settings.SETTINGS``), with None for "the model's own"."""
    from edit_engine.decoding.sampler_settings import SETTINGS

    def check(v: Any) -> Any:
        return None if v is None else SETTINGS[name].check(v)

    return check


def _keys() -> dict[str, tuple[str, Callable[[Any], Any]]]:
    from edit_engine.decoding.sampler_settings import SETTINGS

    keys: dict[str, tuple[str, Callable[[Any], Any]]] = {
        "modelPath": ("model_path", _model_path),
        "maxTokens": ("max_tokens", _max_tokens),
        "streamPasses": ("stream_passes", _bool),
        "startOnKeystroke": ("start_on_keystroke", _bool),
        "typingRepairRounds": ("typing_repair_rounds", _rounds),
        "showThreshold": ("show_threshold", _threshold),
        "memory": ("memory", lambda v: None if v is None else _bool(v)),
        "workspaceIndex": ("workspace_index", _bool),
        "installedPackages": ("installed_packages", _bool),
    }
    keys.update({SETTINGS[n].key: (n, _optional(n)) for n in SAMPLER_KEYS})
    return keys


_KEYS = _keys()
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


def vscode_properties() -> dict[str, dict[str, Any]]:
    """The VS Code extension's sampler settings (``contributes.configuration.properties`` entries), made from
    the one definition of each setting. ``python -m edit_engine.lsp.settings PACKAGE_JSON`` writes them into the
    extension's manifest; a test fails when the manifest drifts from this."""
    from edit_engine.decoding.sampler_settings import SETTINGS

    out: dict[str, dict[str, Any]] = {}
    for n in SAMPLER_KEYS:
        s = SETTINGS[n]
        prop: dict[str, Any] = {"type": ["integer" if s.kind is int else "number", "null"], "default": None}
        if s.lo is not None:
            prop["minimum"] = s.lo if s.kind is float else int(s.lo)
        if s.hi is not None:
            prop["exclusiveMaximum" if s.hi_open else "maximum"] = s.hi if s.kind is float else int(s.hi)
        prop["description"] = f"{s.help[0].upper()}{s.help[1:]} (null: the model's own setting)."
        out[f"{SECTION}.{s.key}"] = prop
    return out


def write_vscode_manifest(path: str | Path) -> None:
    """Replace the sampler settings in a VS Code ``package.json`` by ``vscode_properties()`` (others kept, in
    their order; the sampler ones after ``maxTokens``)."""
    import json

    p = Path(path)
    manifest = json.loads(p.read_text(encoding="utf-8"))
    props = manifest["contributes"]["configuration"]["properties"]
    generated = vscode_properties()
    sampler_like = {k for k in props if k not in generated and k.removeprefix(f"{SECTION}.") not in _KEYS
                    and k != f"{SECTION}.serverCommand"}  # settings that no longer exist (removed from the sampler)
    keep = {k: v for k, v in props.items() if k not in generated and k not in sampler_like}
    merged: dict[str, Any] = {}
    for k, v in keep.items():
        merged[k] = v
        if k == f"{SECTION}.maxTokens":
            merged.update(generated)
    manifest["contributes"]["configuration"]["properties"] = merged
    p.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    import sys

    write_vscode_manifest(sys.argv[1])
