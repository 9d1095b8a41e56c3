"""Next edit in the Neovim client (examples/nvim), in real Neovim 0.11 with a UI attached and the real language
server with the packaged model, driven as in ``test_nvim_client`` (whose ``Nvim`` and fixture this reuses).

A variable is renamed where it is defined; asking for the next edit shows, on screen, the use it would change
(highlighted as replaced) and the rows as they would read after it (virtual lines); <Tab> applies it as one undo
step, asks again and moves to the next use; the last one leaves nothing to propose. The proposals come from the
engine's rename propagation, which is deterministic.
"""

from __future__ import annotations

from typing import Any

import pytest
import test_nvim_client
from test_nvim_client import LINES, Nvim

nvim_session = test_nvim_client.nvim_session  # the fixture: one embedded Neovim per call, closed at the end

NEW, OLD, JUMP = "EditEngineNextEdit", "EditEngineNextEditOld", "EditEngineNextEditJump"
EDIT = "require('edit_engine').edit_state[vim.api.nvim_get_current_buf()]"
SHOWN = f"(function() local s = {EDIT}; return s ~= nil and s.shown == true end)()"
DOC = """def total(items):
    count = 0
    for item in items:
        count += item.price

    print(count)
    return count


print(total([]))
"""
WIDTH = 80

COUNT_ANSWERS = r"""
_G.ee_edits = 0
vim.api.nvim_create_autocmd("LspRequest", {
  callback = function(args)
    local r = args.data.request
    if r.type == "complete" and r.method == "editEngine/nextEdit" then
      _G.ee_edits = _G.ee_edits + 1
    end
  end,
})
"""


def at_definition(nvim_session: Any) -> Nvim:
    """A Neovim with ``DOC`` open, counting the answers to editEngine/nextEdit (``answered``), with the cursor
    on ``count`` where it is defined (row 2), ready to rename it."""
    nv: Nvim = nvim_session(width=WIDTH, height=20)
    nv.lua(COUNT_ANSWERS)
    nv.open("total.py", DOC)
    nv.lua("vim.api.nvim_win_set_cursor(0, { 2, 4 })")
    return nv


def answered(nv: Nvim, n: int) -> None:
    nv.wait(f"_G.ee_edits >= {n}", f"answer {n} to editEngine/nextEdit")


def row_text(nv: Nvim, row: int) -> str:
    return nv.screen.text(nv.screen.frames[-1], row).rstrip()


def names_of(nv: Nvim, group: str) -> set[str]:
    """``group`` and the groups it links to (a UI is told the group a link ends at)."""
    out = {group}
    while link := nv.lua("return vim.api.nvim_get_hl(0, { name = ... }).link", group):
        out.add(group := link)
    return out


def drawn_with(nv: Nvim, row: list[Any], group: str) -> str:
    """The text of the cells of a screen row drawn with ``group``."""
    names = names_of(nv, group)
    return "".join(c.text for c in row if names & set(nv.screen.names(c)))


def cells_with(nv: Nvim, row: int, group: str) -> str:
    return drawn_with(nv, nv.screen.frames[-1][row], group)


def nothing_drawn_with(nv: Nvim, group: str) -> Any:
    return lambda f: not any(drawn_with(nv, row, group) for row in f)


def lines(text: str) -> list[str]:
    return text.split("\n")[:-1]


@pytest.mark.slow
def test_a_rename_is_carried_to_each_use_on_screen_one_tab_at_a_time(nvim_session: Any) -> None:
    nv = at_definition(nvim_session)
    nv.keys("cwsubtotal")  # insert mode, after "subtotal"
    nv.keys("<C-g>n")
    nv.wait(SHOWN, "the next edit")
    # On screen: row 3 is marked as replaced, and below it the row as it would read, as a virtual line.
    nv.wait_screen(lambda f: nv.screen.text(f, 4).rstrip() == "        subtotal += item.price", "the new row")
    assert [row_text(nv, r) for r in range(4)] == lines(DOC)[:1] + ["    subtotal = 0"] + lines(DOC)[2:4]
    assert cells_with(nv, 3, OLD) == "        count += item.price"
    assert cells_with(nv, 4, NEW).rstrip() == "        subtotal += item.price"
    assert row_text(nv, 5) == ""  # the blank row 4 of the buffer follows
    # Told apart from code without GUI colours: both have terminal colours ('notermguicolors').
    frame = nv.screen.frames[-1]
    for row, col in ((3, 8), (4, 8)):
        attrs = nv.screen.cterm(frame[row][col])
        assert attrs.get("foreground") is not None or attrs.get("background") is not None, attrs

    # <Tab> applies it, asks again and moves to the next use (rows 5-6), shown the same way.
    asked = nv.lua("return _G.ee_edits")
    nv.keys("<Tab>")
    assert nv.lua(f"return {LINES}")[3] == "        subtotal += item.price"
    answered(nv, asked + 1)
    nv.wait(SHOWN, "the second next edit")
    assert nv.lua("return vim.api.nvim_win_get_cursor(0)") == [6, 0]
    nv.wait_screen(lambda f: drawn_with(nv, f[7], NEW).rstrip() == "    print(subtotal)", "the second edit")
    assert cells_with(nv, 5, OLD) == "    print(count)" and cells_with(nv, 6, OLD) == "    return count"
    assert row_text(nv, 8) == "    return subtotal"
    nv.keys("<Tab>")
    answered(nv, asked + 2)
    assert "\n".join(nv.lua(f"return {LINES}")) + "\n" == DOC.replace("count", "subtotal")
    assert nv.lua(f"return {EDIT}") is None  # nothing left to propose
    nv.wait_screen(nothing_drawn_with(nv, NEW), "no next edit")

    # Each accepted edit is its own undo step; the typing before them is another.
    nv.keys("<Esc>u")
    assert nv.lua(f"return {LINES}")[5:7] == ["    print(count)", "    return count"]
    assert nv.lua(f"return {LINES}")[3] == "        subtotal += item.price"
    nv.keys("u")
    assert nv.lua(f"return {LINES}")[1:4] == ["    subtotal = 0", "    for item in items:",
                                              "        count += item.price"]


@pytest.mark.slow
def test_moving_or_escape_dismisses_and_tab_keeps_its_meaning_otherwise(nvim_session: Any) -> None:
    nv = at_definition(nvim_session)
    nv.keys("cwsubtotal<Esc>")
    nv.request("nvim_command", "EditEngineNextEdit")  # from normal mode
    nv.wait(SHOWN, "the next edit")
    nv.keys("<Esc>")
    assert nv.lua(f"return {EDIT}") is None
    assert nv.lua("return #vim.api.nvim_buf_get_extmarks(0, require('edit_engine').edit_ns, 0, -1, {})") == 0
    nv.request("nvim_command", "EditEngineNextEdit")
    nv.wait(SHOWN, "the next edit again")
    nv.keys("j")
    assert nv.lua(f"return {EDIT}") is None
    nv.wait_screen(nothing_drawn_with(nv, NEW), "the edit cleared")
    # Nothing shown: <Tab> in insert mode inserts a tab (or its spaces), nothing is applied.
    nv.keys("A<Tab><Esc>")
    buf = nv.lua(f"return {LINES}")
    assert buf[2] != "    for item in items:" and buf[2].startswith("    for item in items:")
    assert buf[3] == "        count += item.price"


FAR = "def total(items):\n    count = 0\n" + "".join(f"    step_{i} = len(items) + {i}\n" for i in range(40)) + \
    "    return count\n\n\nprint(total([]))\n"


@pytest.mark.slow
def test_an_edit_off_screen_is_a_hint_the_first_tab_goes_there_the_second_applies(nvim_session: Any) -> None:
    """The only other use of the renamed variable is 40 rows below, off a 20-row screen: nothing is drawn
    there and nothing is applied until the cursor has been taken to it and it is drawn."""
    nv: Nvim = nvim_session(width=WIDTH, height=20)
    nv.lua(COUNT_ANSWERS)
    nv.open("far.py", FAR)
    nv.lua("vim.api.nvim_win_set_cursor(0, { 2, 4 })")
    nv.keys("cwsubtotal")
    nv.keys("<C-g>n")
    nv.wait(SHOWN, "the hint")
    far_row = 42  # 0-based: `    return count`
    assert nv.lua(f"return {EDIT}.far") is True
    nv.wait_screen(lambda f: "next edit at line 43: <Tab> goes there" in drawn_with(nv, f[1], JUMP), "the hint")
    nv.wait_screen(nothing_drawn_with(nv, NEW), "no edit drawn")
    assert nv.lua("return vim.api.nvim_win_get_cursor(0)") == [2, 12]
    # The first <Tab> only moves: the buffer is as it was, the edit drawn where the cursor now is.
    nv.keys("<Tab>")
    assert nv.lua("return vim.api.nvim_win_get_cursor(0)")[0] == far_row + 1
    assert nv.lua(f"return {LINES}")[far_row] == "    return count"
    nv.wait(f"{SHOWN} and not {EDIT}.far", "the edit drawn")
    nv.wait_screen(lambda f: any(drawn_with(nv, row, NEW).rstrip() == "    return subtotal" for row in f),
                   "the edit on screen")
    nv.keys("<Tab>")  # the second applies it
    assert nv.lua(f"return {LINES}")[far_row] == "    return subtotal"
    assert "\n".join(nv.lua(f"return {LINES}")) + "\n" == FAR.replace("count", "subtotal")


LIB = 'def load_config(path):\n    return open(path).read()\n\n\ndef main():\n    return load_config("app.toml")\n'
APP = "from lib import load_config\n\n\ndef run(path):\n    cfg = load_config(path)\n    return cfg\n"
BUFFER = "vim.api.nvim_buf_get_name(0):match('[^/]*$')"


@pytest.mark.slow
def test_an_edit_in_another_buffer_is_a_hint_the_first_tab_opens_it_the_second_applies(nvim_session: Any) -> None:
    """A function renamed where it is defined and used: nothing is left in its file, and the next edit is in the
    other open file that imports it. A hint names that file; nothing changes until the first <Tab> has opened it
    and drawn the edit there; the second applies it, and the file's other use follows."""
    nv: Nvim = nvim_session(width=WIDTH, height=20)
    nv.lua(COUNT_ANSWERS)
    nv.open("app.py", APP)
    nv.open("lib.py", LIB)
    nv.keys("1G^wcwread_config<Esc>6G^wcwread_config<Esc>")
    assert nv.lua(f"return {LINES}")[5] == '    return read_config("app.toml")'
    nv.request("nvim_command", "EditEngineNextEdit")
    nv.wait(SHOWN, "the hint")
    assert nv.lua(f"return {EDIT}.target ~= nil") is True
    nv.wait_screen(lambda f: "→ next edit in app.py at line 1: <Tab> goes" in drawn_with(nv, f[5], JUMP),
                   "the hint on the cursor's row (cut at the window's edge)")
    nv.wait_screen(nothing_drawn_with(nv, NEW), "no edit drawn")
    assert nv.lua(f"return {BUFFER}") == "lib.py"
    nv.keys("<Tab>")  # opens app.py here and draws the edit; nothing applied yet
    assert nv.lua(f"return {BUFFER}") == "app.py"
    assert nv.lua(f"return {LINES}")[0] == "from lib import load_config"
    nv.wait(f"{SHOWN} and not {EDIT}.far", "the edit drawn in app.py")
    nv.wait_screen(lambda f: any(drawn_with(nv, row, NEW).rstrip() == "from lib import read_config" for row in f),
                   "the edit on screen")
    assert nv.lua("return vim.api.nvim_win_get_cursor(0)") == [1, 0]
    asked = nv.lua("return _G.ee_edits")
    nv.keys("<Tab>")  # applies it, and asks again in app.py: its other use
    assert nv.lua(f"return {LINES}")[0] == "from lib import read_config"
    answered(nv, asked + 1)
    nv.wait(SHOWN, "the next use")
    nv.keys("<Tab>")
    answered(nv, asked + 2)
    assert "\n".join(nv.lua(f"return {LINES}")) + "\n" == APP.replace("load_config", "read_config")


@pytest.mark.slow
def test_in_a_file_not_changed_yet_the_rename_made_in_another_is_proposed(nvim_session: Any) -> None:
    """The function renamed in lib.py; the user opens app.py, which imports it, and asks there: the import row is
    proposed in app.py itself, and <Tab> applies it."""
    nv: Nvim = nvim_session(width=WIDTH, height=20)
    nv.lua(COUNT_ANSWERS)
    nv.open("lib.py", LIB)
    nv.keys("1G^wcwread_config<Esc>6G^wcwread_config<Esc>")
    nv.open("app.py", APP)
    nv.request("nvim_command", "EditEngineNextEdit")
    nv.wait(SHOWN, "the next edit in app.py")
    assert nv.lua(f"return {EDIT}.target") is None  # in this buffer: drawn here
    nv.wait_screen(lambda f: any(drawn_with(nv, row, NEW).rstrip() == "from lib import read_config" for row in f),
                   "the edit on screen")
    nv.keys("<Tab>")
    assert nv.lua(f"return {LINES}")[0] == "from lib import read_config"


SHIFTED = "def load(path):\n    data = read(path)\n    if not data:\n        raise ValueError()\n    return data\n"


@pytest.mark.slow
def test_rows_shifted_and_back_then_a_rename_tab_carries_the_rename_only(nvim_session: Any) -> None:
    """``3G>>``, ``4G>>``, ``3G<<``, then a rename: each proposal Tab applies renames, none repeats a shift, and
    the buffer parses after each (a proposal once re-applied the shifts with the rename and broke the file)."""
    import ast

    nv: Nvim = nvim_session(width=WIDTH, height=20)
    nv.lua(COUNT_ANSWERS)
    nv.open("load.py", SHIFTED)
    nv.keys("3G>>4G>>3G<lt><lt>2G^cwcontent<Esc>")
    want = SHIFTED.replace("        raise", "            raise").replace("data", "content")
    for n in range(1, 4):
        nv.request("nvim_command", "EditEngineNextEdit")
        answered(nv, n)
        if nv.lua(f"return {EDIT}") is None:
            break
        nv.wait(SHOWN, "the next edit")
        nv.keys("<Tab>")
        answered(nv, n + 1)  # Tab asks for the one after it
        buf = "\n".join(nv.lua(f"return {LINES}")) + "\n"
        ast.parse(buf)
        nv.keys("<Esc>")
        if buf == want:
            break
    assert "\n".join(nv.lua(f"return {LINES}")) + "\n" == want


@pytest.mark.slow
def test_next_edit_highlights_default_to_terminal_colours(nvim_session: Any) -> None:
    nv: Nvim = nvim_session(server=False)
    get = "vim.api.nvim_get_hl(0, { name = ..., link = false })"
    for name in (NEW, OLD, JUMP):
        hl = nv.lua(f"return {get}", name)
        assert hl.get("ctermfg") is not None or hl.get("ctermbg") is not None, (name, hl)
    # A scheme without terminal colours for the diff groups: the fallbacks.
    nv.request("nvim_command", "highlight clear DiffAdd | highlight clear DiffDelete")
    nv.request("nvim_command", f"highlight clear {NEW} | highlight clear {OLD}")
    nv.lua("require('edit_engine').setup({})")
    assert nv.lua(f"return {get}", NEW).get("ctermfg") == 2
    old = nv.lua(f"return {get}", OLD)
    assert old.get("ctermfg") == 1 and old.get("cterm", {}).get("strikethrough"), old


CALLS = ("def f(a, b):\n"
         "    result = compute_total(first_argument_value, second_argument_value, third_argument_value)\n"
         "    return result\n\n\n"
         "def g(a, b):\n"
         "    other = compute_total(first_argument_value, second_argument_value, third_argument_value_x)\n"
         "    return other\n")


def edit_and_ask(nv: Nvim, name: str, text: str, rows: tuple[int, int], new: list[str],
                 cursor: tuple[int, int]) -> None:
    """Open ``text`` as ``name``, replace its rows ``[a, b)`` by ``new`` as an edit of the user's, put the cursor
    at ``cursor`` (row from 1, column from 0), ask for the next edit and wait until it is shown."""
    nv.lua(COUNT_ANSWERS)
    nv.open(name, text)
    nv.lua(f"vim.api.nvim_buf_set_lines(0, {rows[0]}, {rows[1]}, true, ...)", new)
    nv.lua(f"vim.api.nvim_win_set_cursor(0, {{ {cursor[0]}, {cursor[1]} }})")
    nv.request("nvim_command", "EditEngineNextEdit")
    nv.wait(SHOWN, "the next edit")


@pytest.mark.slow
def test_a_call_wrapped_as_black_does_then_tab_wraps_the_next_one_alike(nvim_session: Any) -> None:
    """The user wraps a long call the way black writes it (its arguments on a row of their own, the bracket
    closing on the next): the next edit proposes black's wrap of the next long call, and <Tab> applies it."""
    import ast

    nv: Nvim = nvim_session(width=110, height=20)
    wrapped = ["    result = compute_total(",
               "        first_argument_value, second_argument_value, third_argument_value", "    )"]
    edit_and_ask(nv, "calls.py", CALLS, (1, 2), wrapped, (4, 4))
    nv.wait_screen(lambda f: any(drawn_with(nv, row, NEW).rstrip() == "    other = compute_total(" for row in f),
                   "the wrap on screen")
    nv.keys("<Tab>")
    want = CALLS.replace("compute_total(first_argument_value, second_argument_value, third_argument_value)",
                         "compute_total(\n        first_argument_value, second_argument_value, third_argument_value\n    )")
    want = want.replace("compute_total(first_argument_value, second_argument_value, third_argument_value_x)",
                        "compute_total(\n        first_argument_value, second_argument_value, third_argument_value_x"
                        "\n    )")
    buf = "\n".join(nv.lua(f"return {LINES}")) + "\n"
    assert buf == want
    ast.parse(buf)


TYPED = ("from typing import Any\n"
         "from typing import (\n"
         "    Callable,\n"
         "    Sequence,\n"
         ")\n\n\n"
         "def first(items: Sequence[Any], key: Callable[[Any], int]) -> Any:\n"
         "    return min(items, key=key)\n")


@pytest.mark.slow
def test_a_name_imported_from_another_module_leaves_the_older_import_on_tab(nvim_session: Any) -> None:
    """The user imports ``Sequence`` from ``collections.abc`` while ``typing`` still gives it: the next edit shows
    the older import's row of that name as the one to go, and <Tab> deletes it, leaving the file parsing with
    each name imported once."""
    import ast

    nv: Nvim = nvim_session(width=WIDTH, height=20)
    edit_and_ask(nv, "first.py", TYPED, (0, 0), ["from collections.abc import Sequence"], (1, 0))
    nv.wait_screen(lambda f: any(drawn_with(nv, row, OLD).strip() == "Sequence," for row in f),
                   "the older import's row shown going")
    nv.keys("<Tab>")
    buf = "\n".join(nv.lua(f"return {LINES}")) + "\n"
    assert buf == "from collections.abc import Sequence\n" + TYPED.replace("    Sequence,\n", "")
    ast.parse(buf)
