"""The VS Code extension in examples/vscode builds (``npm ci && npm run compile`` in a copy of it), and its
manifest, its source and the language server agree on settings, commands and method names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

EXT = Path(__file__).resolve().parents[1] / "examples" / "vscode"


@pytest.mark.slow
def test_vscode_extension_builds(tmp_path: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed; the VS Code extension build was not checked")
    work = tmp_path / "vscode"
    work.mkdir()
    for name in ("package.json", "package-lock.json", "tsconfig.json"):
        shutil.copy2(EXT / name, work / name)
    shutil.copytree(EXT / "src", work / "src")
    for cmd in ([npm, "ci", "--no-audit", "--no-fund"], [npm, "run", "compile"]):
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    js = (work / "out" / "extension.js").read_text()
    assert "registerInlineCompletionItemProvider" in js and "editEngine/pass" in js
    assert "registerCodeActionsProvider" in js and '"editEngine/nextEdit"' in js


def test_every_command_of_the_manifest_is_registered_and_bound_keys_name_them() -> None:
    """Next edit: the commands the manifest declares (palette, key bindings) are the ones the extension
    registers; the request it sends is the server's; the code action runs the command the server declares."""
    import json
    import re

    from edit_engine import protocol

    manifest = json.loads((EXT / "package.json").read_text())["contributes"]
    source = (EXT / "src" / "extension.ts").read_text()
    declared = {c["command"] for c in manifest["commands"]}
    registered = set(re.findall(r'registerCommand\(\s*"([^"]+)"', source))
    assert declared <= registered, declared - registered
    assert {"editEngine.nextEdit", "editEngine.acceptNextEdit", "editEngine.dismissNextEdit"} <= declared
    assert {k["command"] for k in manifest["keybindings"]} <= declared
    assert f'const NEXT_EDIT = "{protocol.NEXT_EDIT}";' in source
    # The accept key is bound only while a next edit is shown (the context key the extension sets).
    (tab,) = [k for k in manifest["keybindings"] if k["command"] == "editEngine.acceptNextEdit"]
    context = re.search(r'const SHOWN_CONTEXT = "([^"]+)";', source)
    assert context is not None and context.group(1) in tab["when"]


def test_the_extension_settings_are_the_servers_own() -> None:
    """The manifest's sampler settings are generated from the one definition of each setting
    (``python -m edit_engine.lsp.settings examples/vscode/package.json`` rewrites them), and every key the
    extension sends is one the language server accepts."""
    import json

    from edit_engine.lsp import settings

    props = json.loads((EXT / "package.json").read_text())["contributes"]["configuration"]["properties"]
    for key, prop in settings.vscode_properties().items():
        assert props.get(key) == prop, f"{key} drifted from sampler.SETTINGS; regenerate the manifest"
    sent = {k.removeprefix("editEngine.") for k in props} - {"serverCommand"}
    assert sent == set(settings._KEYS), sent ^ set(settings._KEYS)
