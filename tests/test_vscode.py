"""VS Code for real: the extension built from ``examples/vscode`` runs in code-server (VS Code served to a browser),
driven in headless Chromium as a person uses it.

The language server behind it is scripted (``scripted_lsp.py``): its answers are the test's, so what is checked is
the extension and VS Code: the inline suggestion drawn as ghost text by VS Code's inline completion provider,
Tab accepting it, Escape dismissing it, ``ctrl+right`` accepting a word, and a next edit shown with its key
(``ctrl+alt+.``) and applied with Tab. Screenshots go to ``$EDIT_ENGINE_ARTIFACTS/vscode`` (else the test's
temporary folder).

Needs ``code-server`` (``$EDIT_ENGINE_CODE_SERVER``, else on ``PATH``), Node 24 for it (``$EDIT_ENGINE_NODE24_BIN``,
a folder put first on ``PATH``), the packaged extension (``$EDIT_ENGINE_VSIX``), chromium, chromedriver and
selenium; ``.ci/run`` installs them all (``.ci/vscode``). Elsewhere the test is skipped and says which is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTED = Path(__file__).with_name("scripted_lsp.py")
TIMEOUT = 60.0
FIB = "def fib(n):\n    if n < 2:\n        return n\n    \n"
SUGGESTION = "otal = fib(n - 1) + fib(n - 2)"  # after the "t" the test types

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - the skip below says so
    webdriver = None  # type: ignore[assignment]

CODE_SERVER = os.environ.get("EDIT_ENGINE_CODE_SERVER") or shutil.which("code-server")
VSIX = os.environ.get("EDIT_ENGINE_VSIX")
NODE24 = os.environ.get("EDIT_ENGINE_NODE24_BIN")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

# The editor's text without VS Code's ghost text (which it draws inside the same line elements).
LINES_JS = """
return Array.from(document.querySelectorAll('.monaco-editor .view-lines .view-line'))
  .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
  .map(line => {
    const copy = line.cloneNode(true);
    copy.querySelectorAll('[class*="ghost-text"]').forEach(g => g.remove());
    return copy.textContent.replace(/\\u00a0/g, ' ');
  });
"""
# Records every text the extension draws for a pass (a decoration's ::after content), in order, as it changes.
WATCH_PASSES_JS = """
window.__passes = [];
const root = document.querySelector('.monaco-editor .view-lines');
const look = () => {
  const now = [];
  for (const s of root.querySelectorAll('span')) {
    const c = getComputedStyle(s, '::after').content;
    if (c && c !== 'none' && c !== 'normal' && c !== '""') now.push(c);
  }
  const key = now.join('|');
  if (key && window.__passes[window.__passes.length - 1] !== key) window.__passes.push(key);
};
new MutationObserver(look).observe(root, {subtree: true, childList: true, attributes: true, characterData: true});
"""
GHOST_JS = """
return Array.from(document.querySelectorAll('.monaco-editor [class*="ghost-text"]'))
  .map(g => g.textContent.replace(/\\u00a0/g, ' ')).join('');
"""


def _missing() -> str | None:
    if webdriver is None:
        return "selenium is not installed"
    for name, value in (("code-server", CODE_SERVER), ("the extension's .vsix ($EDIT_ENGINE_VSIX)", VSIX),
                        ("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)):
        if not value:
            return f"{name} not found (.ci/vscode installs code-server and builds the extension)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VSCode:
    """code-server with the extension and a scripted language server, and a headless Chromium on it."""

    def __init__(self, tmp: Path, inline: list[str], edits: list[dict[str, Any]] | None = None,
                 server: list[str] | None = None, settings: dict[str, Any] | None = None) -> None:
        self.tmp = tmp
        self.shots = Path(os.environ.get("EDIT_ENGINE_ARTIFACTS") or tmp) / "vscode"
        self.shots.mkdir(parents=True, exist_ok=True)
        ws, data, ext = tmp / "ws", tmp / "data", tmp / "ext"
        ws.mkdir(parents=True)
        (tmp / "answers.json").write_text(json.dumps({"inline": inline, "nextEdit": edits}))
        (data / "User").mkdir(parents=True)
        (data / "User" / "settings.json").write_text(json.dumps({
            "editEngine.serverCommand": server or [sys.executable, str(SCRIPTED), str(tmp / "answers.json")],
            **(settings or {}),
            "workbench.startupEditor": "none", "security.workspace.trust.enabled": False,
            "editor.inlineSuggest.enabled": True, "telemetry.telemetryLevel": "off",
            "extensions.autoCheckUpdates": False, "extensions.autoUpdate": False, "update.mode": "none",
            "chat.disableAIFeatures": True, "workbench.secondarySideBar.defaultVisibility": "hidden"}))
        self.env = {**os.environ, "PATH": os.pathsep.join(filter(None, [NODE24, os.environ.get("PATH", "")]))}
        assert CODE_SERVER and VSIX
        subprocess.run([CODE_SERVER, "--install-extension", VSIX, "--extensions-dir", str(ext), "--user-data-dir",
                        str(data)], env=self.env, check=True, capture_output=True, timeout=TIMEOUT)
        self.ws = ws
        port = _free_port()
        self.log = open(tmp / "code-server.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [CODE_SERVER, "--auth", "none", "--bind-addr", f"127.0.0.1:{port}", "--user-data-dir", str(data),
             "--extensions-dir", str(ext), "--disable-telemetry", "--disable-workspace-trust",
             "--disable-update-check", str(ws)], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        listening = threading.Event()

        def copy_log() -> None:  # code-server's output to its log file; "listening" once it takes connections
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log.write(line)
                self.log.flush()
                if "HTTP server listening on" in line:
                    listening.set()

        threading.Thread(target=copy_log, daemon=True).start()
        assert listening.wait(TIMEOUT), "code-server did not start: " + (tmp / "code-server.log").read_text()
        self.url = f"http://127.0.0.1:{port}/?folder={ws}"
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--window-size=1400,900", "--lang=en-US"):
            options.add_argument(arg)
        self.d = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))

    def wait(self, what: str, cond: Any, timeout: float = TIMEOUT) -> Any:
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.05).until(lambda d: cond())
        except Exception as e:
            self.shot(f"failed-{what.replace(' ', '-')}")
            raise AssertionError(f"VS Code never showed {what}; code-server log: "
                                 f"{(self.tmp / 'code-server.log').read_text()[-2000:]}") from e

    def keys(self, *keys: str) -> None:
        ActionChains(self.d).send_keys(*keys).perform()

    def chord(self, *mods_and_key: str) -> None:
        *mods, key = mods_and_key
        a = ActionChains(self.d)
        for m in mods:
            a = a.key_down(m)
        a = a.send_keys(key)
        for m in reversed(mods):
            a = a.key_up(m)
        a.perform()

    def lines(self) -> list[str]:
        return list(self.d.execute_script(LINES_JS))

    def ghost(self) -> str:
        return str(self.d.execute_script(GHOST_JS))

    def until(self, what: str, cond: Any, again: Any) -> None:
        """Wait until ``cond()``. A request made before the extension's language client is up gets nothing (VS
        Code then shows nothing until asked again), so while ``cond()`` is false ``again()`` asks again every
        two seconds (typing the last character again, pressing the key again)."""
        import time

        asked = [time.monotonic()]

        def seen() -> bool:
            if cond():
                return True
            if time.monotonic() - asked[0] > 2.0:
                again()
                asked[0] = time.monotonic()
            return False

        self.wait(what, seen)

    def shows(self, text: str, last: str) -> None:
        """Wait until the ghost text is ``text`` (``last``: the character typed last, typed again to ask again)."""
        self.until(f"the ghost text {text!r}", lambda: self.ghost() == text,
                   lambda: self.ghost() or self.keys(Keys.BACKSPACE, last))

    def after_texts(self) -> list[str]:
        """What decorations draw after text in the editor's visible lines (``::after`` contents)."""
        return list(self.d.execute_script(
            "return Array.from(document.querySelectorAll('.monaco-editor .view-lines span'))"
            ".map(s => getComputedStyle(s, '::after').content).filter(c => c && c !== 'none' && c !== 'normal')"))

    def ask_until_hint(self, hint: str) -> None:
        """Ask for the next edit (ctrl+alt+.) until a decoration after the text shows ``hint``."""
        self.chord(Keys.CONTROL, Keys.ALT, ".")
        self.until(f"the hint {hint!r}", lambda: any(hint in t for t in self.after_texts()),
                   lambda: self.chord(Keys.CONTROL, Keys.ALT, "."))

    def struck_through(self) -> bool:
        return bool(self.d.execute_script(
            "return Array.from(document.querySelectorAll('.monaco-editor .view-lines span'))"
            ".some(s => getComputedStyle(s).textDecorationLine.includes('line-through'))"))

    def shot(self, name: str) -> None:
        self.d.save_screenshot(str(self.shots / f"{name}.png"))

    def open(self, name: str, text: str) -> None:
        (self.ws / name).write_text(text)
        self.d.get(self.url)
        self.wait("the workbench", lambda: self.d.find_elements(By.CSS_SELECTOR, ".monaco-workbench .explorer-folders-view"))
        self.wait(f"{name} in the explorer", lambda: self.d.find_elements(
            By.XPATH, f"//div[contains(@class, 'explorer-item')]//span[text()='{name}']"))
        self.d.find_element(By.XPATH, f"//div[contains(@class, 'explorer-item')]//span[text()='{name}']").click()
        want = text.splitlines()

        def shown() -> bool:  # the lines on screen (all of a short file) are the file's first lines
            got = self.lines()[: len(want)]
            return bool(got) and got == want[: len(got)]

        self.wait(f"{name} in an editor", shown)

    def go_to_end_of(self, line: int) -> None:
        self.chord(Keys.CONTROL, "g")
        self.wait("the go-to-line box", lambda: self.d.find_elements(By.CSS_SELECTOR, ".quick-input-widget input"))
        self.keys(str(line), Keys.ENTER, Keys.END)

    def close(self) -> None:
        try:
            self.d.quit()
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=TIMEOUT)
            self.log.close()


@pytest.fixture()
def vscode(tmp_path: Path) -> Iterator[Any]:
    why = _missing()
    if why:
        pytest.skip(why)
    started: list[VSCode] = []

    def start(inline: list[str], edits: list[dict[str, Any]] | None = None, **kw: Any) -> VSCode:
        v = VSCode(tmp_path / f"s{len(started)}", inline, edits, **kw)
        started.append(v)
        return v

    yield start
    for v in started:
        v.close()


@pytest.mark.slow
def test_ghost_text_tab_escape_and_accept_word(vscode: Any) -> None:
    v = vscode([SUGGESTION])
    v.open("fib.py", FIB)
    v.go_to_end_of(4)
    v.keys("t")
    v.shows(SUGGESTION, "t")
    v.shot("1-ghost")
    v.keys(Keys.ESCAPE)
    v.wait("the ghost text dismissed", lambda: v.ghost() == "")
    assert v.lines()[3] == "    t"
    v.keys(Keys.BACKSPACE, "t")  # typing asks again
    v.shows(SUGGESTION, "t")
    v.chord(Keys.CONTROL, Keys.ARROW_RIGHT)  # accept the next word
    v.wait("one word accepted", lambda: v.lines()[3] == "    total")
    v.shot("2-accept-word")
    v.wait("the rest of the suggestion", lambda: v.ghost() == SUGGESTION[len("otal"):])
    v.keys(Keys.TAB)
    v.wait("the suggestion accepted", lambda: v.lines()[3] == "    t" + SUGGESTION)
    v.shot("3-accepted")


@pytest.mark.slow
def test_next_edit_with_its_key_and_tab_and_as_a_code_action(vscode: Any) -> None:
    def edit(k: int) -> dict[str, Any]:
        return {"range": {"start": {"line": 2, "character": 0}, "end": {"line": 3, "character": 0}},
                "newText": f"        return n * {k}\n"}

    v = vscode([""], [edit(1)])  # every request gets this one (asking again while the client starts is allowed)
    v.open("fib.py", FIB)
    v.go_to_end_of(4)
    v.chord(Keys.CONTROL, Keys.ALT, ".")
    v.until("the next edit (the text it replaces struck through)", v.struck_through,
            lambda: v.chord(Keys.CONTROL, Keys.ALT, "."))
    v.shot("4-next-edit")
    v.keys(Keys.TAB)
    v.wait("the next edit applied", lambda: v.lines()[2] == "        return n * 1")
    v.shot("5-next-edit-applied")
    # The same through the code action (the refactor menu, ctrl+shift+r), which runs the server's command: first
    # undo the edit (one undo step), then apply it from the menu.
    v.keys(Keys.ESCAPE)
    v.chord(Keys.CONTROL, "z")
    v.wait("the edit undone", lambda: v.lines()[2] == "        return n")
    v.go_to_end_of(3)
    v.chord(Keys.CONTROL, Keys.SHIFT, "r")
    v.until("the code action", lambda: bool(v.d.find_elements(
        By.XPATH, "//*[contains(text(), 'Apply next edit (edit-engine)')]")),
        lambda: (v.keys(Keys.ESCAPE), v.chord(Keys.CONTROL, Keys.SHIFT, "r")))
    v.shot("6-code-action")
    v.d.find_element(By.XPATH, "//*[contains(text(), 'Apply next edit (edit-engine)')]").click()
    v.wait("the code action applied", lambda: v.lines()[2] == "        return n * 1")
    v.shot("7-code-action-applied")


@pytest.mark.slow
def test_a_next_edit_off_screen_is_a_hint_tab_goes_there_then_applies(vscode: Any) -> None:
    far = "".join(f"x_{i} = {i}\n" for i in range(120))
    edit = {"range": {"start": {"line": 109, "character": 0}, "end": {"line": 110, "character": 0}},
            "newText": "x_109 = 1090\n"}
    v = vscode([""], [edit])
    v.open("far.py", far)
    v.go_to_end_of(2)
    v.ask_until_hint("next edit at line 110: Tab goes there")
    v.shot("8-next-edit-hint")
    assert not v.struck_through() and "x_109 = 109" not in v.lines()  # off screen, not drawn
    v.keys(Keys.TAB)  # goes there: on screen, drawn, nothing applied
    v.wait("the edit drawn where it is", lambda: v.struck_through() and "x_109 = 109" in v.lines())
    v.shot("9-next-edit-there")
    v.keys(Keys.TAB)
    v.wait("the edit applied", lambda: "x_109 = 1090" in v.lines())


@pytest.mark.slow
def test_a_next_edit_in_another_document_is_a_hint_tab_opens_it_then_applies(vscode: Any, tmp_path: Path) -> None:
    """The answer names another document (``textDocument``): a hint at the cursor's line names it and nothing is
    applied; the first Tab opens it and draws the edit there; the second applies it in that document only."""
    other = tmp_path / "s0" / "ws" / "app.py"  # the workspace of the first VS Code the fixture starts
    edit = {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 27}},
            "newText": "from lib import read_config", "textDocument": {"uri": other.as_uri(), "version": 1}}
    v = vscode([""], [edit])
    other.write_text("from lib import load_config\n\n\ncfg = load_config('a.toml')\n")
    v.open("lib.py", "def read_config(path):\n    return open(path).read()\n")
    v.go_to_end_of(2)
    v.ask_until_hint("next edit in app.py at line 1: Tab goes there")
    v.shot("10-next-edit-other-document")
    assert not v.struck_through() and v.lines()[0] == "def read_config(path):"
    v.keys(Keys.TAB)  # opens app.py and draws the edit there: nothing applied
    v.wait("app.py open with the edit drawn", lambda: v.struck_through() and
           v.lines()[:1] == ["from lib import load_config"])
    v.shot("11-next-edit-other-document-there")
    v.keys(Keys.TAB)
    v.wait("the edit applied in app.py", lambda: v.lines()[:1] == ["from lib import read_config"])
    v.chord(Keys.CONTROL, "s")
    v.wait("app.py saved", lambda: other.read_text().startswith("from lib import read_config\n"))


@pytest.mark.slow
def test_the_real_language_server_behind_the_extension(vscode: Any, tiny_checkpoint: Path, tmp_path: Path) -> None:
    """The extension started on ``edit-engine lsp`` (the tiny test checkpoint: random weights, a fill every time;
    every answer shown): typing gets a ghost from the real server (its passes drawn as they come, then VS Code's
    own ghost text), and Tab writes exactly the ghost's text."""
    log = tmp_path / "lsp.log"
    v = vscode([], server=[sys.executable, "-m", "edit_engine.lsp", "--threads", "1", "--log-file", str(log)],
               settings={"editEngine.modelPath": str(tiny_checkpoint), "editEngine.showThreshold": 0,
                         "editEngine.streamPasses": True, "editEngine.memory": False, "editEngine.threshold": 2.0,
                         "editEngine.minCommit": 1, "editEngine.maxTokens": 12})
    v.open("fib.py", FIB)
    v.go_to_end_of(4)
    v.d.execute_script(WATCH_PASSES_JS)
    v.keys("x")

    def drawn() -> list[str]:
        return [str(t) for t in v.d.execute_script("return window.__passes")]

    # VS Code paints decorations once a frame: passes that reach the extension host in one burst (the first
    # request can, while the host is still busy starting) are painted as one, or not at all when the answer comes
    # in the same frame. So the character is typed again until a request's passes were painted in turn.
    v.until("passes drawn in turn, then a ghost from the server", lambda: len(drawn()) >= 2 and v.ghost() != "",
            lambda: v.keys(Keys.ESCAPE, Keys.BACKSPACE, "x"))
    v.shot("8-real-server-ghost")
    ghost = v.ghost()  # VS Code's own ghost text: the server's answer (its passes are decorations before it)
    # Every pass drawn in place of the last: one decoration at a time, several in turn, before the answer.
    assert not any("\u2591" in t for t in drawn()), drawn()  # and no placeholder among them
    v.keys(Keys.TAB)
    v.wait("the real server's suggestion accepted", lambda: v.lines()[3].startswith("    x" + ghost.split("\n")[0]))
    assert "passes" in log.read_text()  # the fill ran on the real server
