"""A person's session in real Neovim: type a small program with natural pauses and record what is on screen.

Runs headless Neovim (``nvim --embed``, 0.11+) with the plugin in ``examples/nvim`` (``auto = true``: it asks while
you type, after the plugin's debounce) and the real language server, and types a program into a new file one
key at a time (``--interval-ms`` apart) over Neovim's RPC, as a terminal would send them. It pauses where people pause: at the start of each
new line (after the indentation is typed) and after ``(``, ``.``, ``= `` and ``: ``. At a pause it waits up to
``--pause-ms`` for a suggestion and records the ghost text (the final one, when the server's answer arrives in
time), the time from the last key to the first ghost, and whether it is right: all of it is what the person is
about to type. A right suggestion is accepted with the accept key (``<C-l>``) and typing goes on after it; a
wrong one is typed over. Keystrokes after which a ghost is on screen between pauses are counted too.

Prints a table of the pauses and a summary (pauses, ghosts shown at them, right, wrong, nothing; characters
accepted; median time to first ghost); ``--json PATH`` writes everything.

    python benchmarks/nvim_session.py --json runs/nvim_session.json
    python benchmarks/nvim_session.py --file prog.py --pause-ms 800     # type your own program
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "nvim"

PROGRAM = '''import csv
from pathlib import Path


def average_price(path: Path) -> float:
    total = 0.0
    count = 0
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            total += float(row["price"])
            count += 1
    return total / count if count else 0.0


def main() -> None:
    path = Path("prices.csv")
    print(average_price(path))


if __name__ == "__main__":
    main()
'''

SETUP = r"""
local cfg = ...
vim.opt.runtimepath:prepend(cfg.plugin)
vim.o.swapfile, vim.o.autoindent, vim.o.smartindent = false, false, false
vim.cmd("filetype indent off")  -- the program is typed with its own indentation
require("edit_engine").setup({ auto = true })
vim.lsp.config("edit_engine", { cmd = cfg.cmd, cmd_env = cfg.env, init_options = cfg.init_options,
                                root_markers = { ".edit-engine-session-root" } })
vim.lsp.enable("edit_engine")
"""

# At a pause: wait (up to the pause) for a final suggestion; the time to the first ghost; what is on screen.
PAUSE = r"""
local ms = ...
local ee = require("edit_engine")
local buf = vim.api.nvim_get_current_buf()
local t0, first = vim.uv.hrtime(), nil
local function ghost()
  local st = ee.state[buf]
  return st and st.shown and st.ghost or nil, st
end
local final = vim.wait(ms, function()
  local g, st = ghost()
  if g and not first then first = (vim.uv.hrtime() - t0) / 1e6 end
  return g ~= nil and st.final == true
end, 5)
return { ghost = ghost(), ms = first, final = final }
"""


class Nvim:
    """Neovim over msgpack-RPC on its stdin/stdout (``nvim --embed``): keys in, state out."""

    def __init__(self, nvim: str, cwd: Path, env: dict[str, str]) -> None:
        import msgpack

        self.proc = subprocess.Popen([nvim, "--clean", "--embed", "--headless", "-n"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self.packb = msgpack.packb
        self.next_id = 0
        self.sync = 0

    def request(self, method: str, *args: object) -> object:
        self.next_id += 1
        rid = self.next_id
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(self.packb([0, rid, method, list(args)]))
        self.proc.stdin.flush()
        while True:
            for msg in self.unpacker:
                if msg[0] == 1 and msg[1] == rid:
                    if msg[2]:
                        raise RuntimeError(f"{method}: {msg[2]}")
                    return msg[3]
            data = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not data:
                raise RuntimeError("nvim exited")
            self.unpacker.feed(data)

    def lua(self, code: str, *args: object) -> object:
        return self.request("nvim_exec_lua", code, list(args))

    def keys(self, keys: str) -> None:
        """Type ``keys`` and return once Neovim has handled them."""
        self.sync += 1
        self.request("nvim_input", f"{keys}<Cmd>let g:ee_sync = {self.sync}<CR>")
        self.lua("local n = ...; return vim.wait(10000, function() return vim.g.ee_sync == n end, 1)", self.sync)

    def close(self) -> None:
        try:
            self.request("nvim_command", "qa!")
        except (RuntimeError, OSError):
            pass
        self.proc.kill()
        self.proc.wait()


def _key(c: str) -> str:
    return {"\n": "<CR>", "<": "<lt>", " ": "<Space>", "\\": "<Bslash>", "|": "<Bar>"}.get(c, c)


def _pauses_after(text: str, i: int) -> bool:
    """A person pauses with ``text[:i]`` typed: at a new line's first character (indentation typed), and after
    ``(``, ``.``, ``= `` and ``: ``."""
    if i >= len(text):
        return False
    c = text[i - 1]
    line = text[text.rfind("\n", 0, i) + 1 : i]
    if line.strip() == "" and text[i] not in " \n" and i > 0:
        return True
    return c in "(." or (c == " " and i >= 2 and text[i - 2] in "=:")


def run_session(program: str, nvim: str, interval_ms: float, pause_ms: float, timeout_s: float,
                threads: int, model: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / ".edit-engine-session-root").write_text("")
        init: dict[str, object] = {"streamPasses": True}
        if model:
            init["modelPath"] = model
        cmd = [sys.executable, "-m", "edit_engine.lsp", "--threads", str(threads), "--log-file", str(t / "lsp.log")]
        env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads), "XDG_CACHE_HOME": str(t / "cache")}
        xdg = {k: str(t / k.lower()) for k in ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME")}
        nv = Nvim(nvim, t, {**os.environ, **xdg})
        out: dict = {"pauses": [], "shown_between_pauses": 0}
        try:
            nv.lua(SETUP, {"plugin": str(PLUGIN), "cmd": cmd, "env": env, "init_options": init})
            nv.request("nvim_command", f"edit {t / 'prices.py'}")
            attached = nv.lua("return vim.wait(..., function() return #vim.lsp.get_clients({ bufnr = 0, "
                              "name = 'edit_engine' }) > 0 end, 20)", int(timeout_s * 1000))
            if not attached:
                raise SystemExit("the language server never attached")
            nv.keys("i")
            i = 0
            while i < len(program):
                nv.keys(_key(program[i]))
                i += 1
                nv.lua("vim.wait(...)", int(interval_ms))  # the typist's pace
                if nv.lua("local s = require('edit_engine').state[0] or "
                          "require('edit_engine').state[vim.api.nvim_get_current_buf()]; "
                          "return s ~= nil and s.shown == true"):
                    out["shown_between_pauses"] += 1
                if not _pauses_after(program, i):
                    continue
                seen = nv.lua(PAUSE, int(pause_ms))
                assert isinstance(seen, dict)
                g = seen.get("ghost") or ""
                line = program.count("\n", 0, i) + 1
                rec = {"at": i, "line": line, "before": program[max(0, i - 24) : i], "ghost": g or None,
                       "ms_to_ghost": seen.get("ms"), "final": seen.get("final")}
                if g:
                    rec["right"] = program.startswith(g, i)
                    if rec["right"]:
                        nv.keys("<C-l>")
                        i += len(g)
                        rec["accepted"] = len(g)
                out["pauses"].append(rec)
            nv.keys("<Esc>")
            lines = nv.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
            assert isinstance(lines, list)
            out["final_text"] = "\n".join(lines) + "\n"
        except (RuntimeError, AssertionError) as e:
            out["error"] = str(e)
        finally:
            nv.close()
        return out


def summarise(res: dict, program: str) -> dict:
    pauses = res.get("pauses", [])
    shown = [p for p in pauses if p.get("ghost")]
    times = [p["ms_to_ghost"] for p in shown if p.get("ms_to_ghost") is not None]
    return {"pauses": len(pauses), "shown": len(shown), "right": sum(1 for p in shown if p.get("right")),
            "wrong": sum(1 for p in shown if p.get("right") is False), "nothing": len(pauses) - len(shown),
            "chars_accepted": sum(p.get("accepted", 0) for p in pauses), "program_chars": len(program),
            "ms_to_first_ghost_p50": round(statistics.median(times), 1) if times else None,
            "final_text_matches": (res.get("final_text") or "").rstrip("\n") == program.rstrip("\n"),
            "error": res.get("error")}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--file", help="the program to type (default: a small CSV reader)")
    ap.add_argument("--interval-ms", type=float, default=60.0, help="between keys (default 60)")
    ap.add_argument("--pause-ms", type=float, default=600.0, help="the longest wait at a pause (default 600)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds for the server to attach")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    ap.add_argument("--nvim", default=shutil.which("nvim") or "nvim")
    ap.add_argument("--json", help="write the pauses and the summary here")
    a = ap.parse_args()
    program = Path(a.file).read_text(encoding="utf-8") if a.file else PROGRAM
    res = run_session(program, a.nvim, a.interval_ms, a.pause_ms, a.timeout, a.threads, a.model)
    s = summarise(res, program)
    print(f"{'line':>4}  {'typed so far':>24}  {'on screen':<40}  {'ms':>6}  verdict")
    for p in res.get("pauses", []):
        g = p.get("ghost")
        verdict = "right, accepted" if p.get("right") else ("wrong" if g else "nothing")
        ms = p.get("ms_to_ghost")
        print(f"{p['line']:>4}  {p['before'][-24:]!r:>24}  {(g or '')[:40]!r:<40}  "
              f"{'' if ms is None else f'{ms:.0f}':>6}  {verdict}")
    print(json.dumps(s))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"summary": s, **res}, indent=1))
    return 1 if s["error"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
