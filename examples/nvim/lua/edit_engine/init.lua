-- edit-engine for Neovim 0.11+: inline completions as virtual text, refined live by editEngine/pass.
--
--   require("edit_engine").setup({ auto = true })   -- keymaps + autocommands + highlight groups
--   vim.lsp.enable("edit_engine")                    -- the server config is lsp/edit_engine.lua
--
-- A request is textDocument/inlineCompletion. While the server denoises it sends editEngine/pass
-- notifications ({requestId, uri, version, passIndex, final, range, text, masked, preview?}); each one
-- updates the suggestion in place (a snapshot of the whole span; slots still masked show as placeholders:
-- where `preview` puts them when the server sends it, else `masked` of them after the text).
--
-- What the user sees and can do:
--   * the suggestion is virtual text at the cursor (EditEngineGhost; placeholders EditEngineMask), the first
--     line inline and the rest as virtual lines; the window scrolls so that those lines are on screen;
--   * the accept / accept-line / accept-word / dismiss keys are mapped only while a suggestion is shown (and
--     yield to the popup menu), so they keep their built-in meaning otherwise; accepting is its own undo step;
--     after a partial accept the rest stays shown (the server keeps it too: typing it asks for nothing new);
--   * typing the suggestion's next characters keeps it (the rest stays shown, nothing is asked again);
--     any other edit, or moving the cursor, cancels the request ($/cancelRequest) and clears it.
--
-- Next edit (editEngine/nextEdit: the change that follows the recent edits, anywhere near the cursor):
--   * <C-g>n in insert mode, or :EditEngineNextEdit, asks; the text it would replace is highlighted
--     (EditEngineNextEditOld) and the rows as they would read after it are shown below as virtual lines
--     (EditEngineNextEdit);
--   * <Tab> (insert or normal mode, mapped only while one is shown) accepts it as one undo step, then asks for
--     the next one and moves the cursor to it; <Esc> in normal mode, leaving insert mode, moving the cursor
--     or editing dismisses it;
--   * an edit whose first row is off screen is not drawn there: a hint at the end of the cursor's line says
--     where it is (EditEngineNextEditJump); the first <Tab> moves the cursor to it and draws it, the second
--     applies it. An edit in another open buffer (`next_edit_other_documents`) is a hint that names it; the
--     first <Tab> opens that buffer in the window and draws the edit there, the second applies it. Nothing is
--     ever applied that was not drawn on screen. With `next_edit_auto`, it is asked for after each edit in
--     normal mode and on leaving insert mode.

local M = {}
local api = vim.api

M.ns = api.nvim_create_namespace("edit_engine")

M.config = {
  accept_key = "<C-l>", -- insert mode, while a suggestion is shown: accept it
  accept_line_key = "<C-j>", -- ... accept up to the end of its first non-blank line (a partial accept)
  accept_word_key = "<M-Right>", -- ... accept its next word (blanks before it included; a partial accept)
  dismiss_key = "<C-e>", -- ... cancel and clear
  trigger_key = "<C-g><C-g>", -- insert mode: ask now (leaves <C-g>u, <C-g>j, <C-g>k alone)
  auto = false, -- ask after every change in insert mode (debounced)
  debounce_ms = 50,
  hl_group = "EditEngineGhost", -- the suggestion's text
  mask_hl_group = "EditEngineMask", -- placeholders for slots still masked
  mask_char = "░", -- a placeholder
  -- At most this many placeholders for a run of masked slots while an asked-for suggestion streams its passes;
  -- 0 (the default): none, only the text committed so far is drawn (16 shows the slots filling in).
  max_placeholders = 0,
  next_edit_key = "<C-g>n", -- insert mode: ask for the next edit (also :EditEngineNextEdit)
  next_edit_accept_key = "<Tab>", -- insert and normal mode, while a next edit is shown: apply it, ask again
  next_edit_dismiss_key = "<Esc>", -- normal mode, while a next edit is shown: clear it
  next_edit_auto = false, -- ask after each edit made in normal mode and on leaving insert mode (debounced)
  next_edit_other_documents = true, -- let the server propose an edit in another open buffer (a hint, then Tab)
  next_edit_debounce_ms = 150,
  next_edit_hl_group = "EditEngineNextEdit", -- the rows as they would read after the edit
  next_edit_old_hl_group = "EditEngineNextEditOld", -- the text the edit replaces
  next_edit_jump_hl_group = "EditEngineNextEditJump", -- the hint to an edit off screen
}

M.edit_ns = api.nvim_create_namespace("edit_engine_next_edit")

-- Per buffer, while a request runs or a suggestion is shown:
--   client_id, request_id (nil once answered), version, passes, masked, final, done, error,
--   text, range          the server's answer (LSP range of document version `version`)
--   pass_preview         the last pass's `preview` (its span with a placeholder per masked slot), if sent
--   kind                 "insert" (ghost shown after existing text) or "rewrite" (the span is replaced)
--   row, col, ghost      where the suggestion is shown (0-based row, byte column) and what is shown there
--   preview              ghost with its masked slots (from pass_preview), while they are masked
--   shown, extmark       whether it is drawn (the keys are mapped), and the extmark drawing it
--   tick, cursor         changedtick and cursor (0-based row, byte column) it belongs to
--   before, after, nlines  the anchor line around the anchor, and the line count (to recognise typing)
--   detached             true once typing or a partial accept moved it away from the server's range
M.state = {}

-- Per buffer, while a next edit is asked for or shown:
--   client_id, request_id (nil once answered), version, tick, cursor (what it was asked for)
--   edit        the answer: { range, newText, version, ... } (LSP range of version `version`)
--   jump        move the cursor to the edit when it arrives (after accepting the previous one)
--   shown       whether it is drawn (and its keys are mapped)
M.edit_state = {}

local attached = {}
local timers = {}
local edit_timers = {}
local keymaps = {} -- bufnr -> the mappings we installed (and the buffer-local ones they hid)
local edit_keymaps = {} -- the same for the next-edit keys

-- ------------------------------------------------------------------------------------------ highlights
-- Default colours: linked to a standard group where the colour scheme gives that group a terminal colour;
-- otherwise (the default scheme defines Comment for the GUI only) the group's GUI colour plus an explicit
-- 16/256-colour fallback, so ghost text never looks like typed code with 'notermguicolors'. `default = true`:
-- a colour scheme or user that defines these groups wins.
local HIGHLIGHTS = {
  EditEngineGhost = { base = "Comment", cterm = { ctermfg = 8, cterm = { italic = true } }, italic = true },
  EditEngineMask = { base = "NonText", cterm = { ctermfg = 8 } },
  EditEngineNextEdit = { base = "DiffAdd", cterm = { ctermfg = 2 } },
  EditEngineNextEditOld = { base = "DiffDelete", cterm = { ctermfg = 1, cterm = { strikethrough = true } } },
  EditEngineNextEditJump = { base = "Comment", cterm = { ctermfg = 8, cterm = { italic = true } }, italic = true },
}

local function define_highlights()
  for name, spec in pairs(HIGHLIGHTS) do
    local base = api.nvim_get_hl(0, { name = spec.base, link = false })
    if base.ctermfg or base.ctermbg then
      api.nvim_set_hl(0, name, { link = spec.base, default = true })
    else
      api.nvim_set_hl(0, name, {
        default = true,
        fg = base.fg,
        bg = base.bg,
        italic = spec.italic or base.italic,
        ctermfg = spec.cterm.ctermfg,
        cterm = spec.cterm.cterm,
      })
    end
  end
end

-- ------------------------------------------------------------------------------------------ helpers
local function client_for(bufnr)
  return vim.lsp.get_clients({ bufnr = bufnr, name = "edit_engine" })[1]
end

local function resolve(bufnr)
  return (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
end

-- (line, character in the client's encoding) -> 0-based byte column
local function byte_col(bufnr, line, character, encoding)
  local text = api.nvim_buf_get_lines(bufnr, line, line + 1, false)[1] or ""
  return vim.str_byteindex(text, encoding, character, false)
end

-- An LSP range as 0-based rows and byte columns: start row, start column, end row, end column.
local function byte_range(bufnr, range, encoding)
  local sr, er = range.start.line, range["end"].line
  return sr, byte_col(bufnr, sr, range.start.character, encoding), er,
    byte_col(bufnr, er, range["end"].character, encoding)
end

-- A server's range checked against the buffer before anything is drawn or applied: its rows and byte columns,
-- and the text to put there; nil when it does not fit the buffer (rows past the end, an end before its start).
-- The end of the document may be given as the start of the row after the last one ({line = #rows,
-- character = 0}): it becomes the end of the last row, and the text's final line break, which that position
-- counted, is dropped with it (a buffer keeps its last line break).
local function checked_range(bufnr, range, encoding, text)
  local n = api.nvim_buf_line_count(bufnr)
  local s, e = range and range.start, range and range["end"]
  if type(s) ~= "table" or type(e) ~= "table" or type(s.line) ~= "number" or type(e.line) ~= "number" then
    return nil
  end
  if e.line == n and e.character == 0 and s.line < n then
    local last = api.nvim_buf_get_lines(bufnr, n - 1, n, false)[1] or ""
    local sc = byte_col(bufnr, s.line, s.character, encoding)
    return s.line, sc, n - 1, #last, text:sub(-1) == "\n" and text:sub(1, -2) or text
  end
  if s.line < 0 or e.line >= n or s.line > e.line or (s.line == e.line and s.character > e.character) then
    return nil
  end
  local lines = api.nvim_buf_get_lines(bufnr, s.line, e.line + 1, false)
  local sc = byte_col(bufnr, s.line, s.character, encoding)
  local ec = byte_col(bufnr, e.line, e.character, encoding)
  if sc > #lines[1] or ec > #lines[#lines] then
    return nil
  end
  return s.line, sc, e.line, ec, text
end

-- The cursor (0-based row, byte column) if the buffer is in the current window.
local function cursor_of(bufnr)
  if api.nvim_get_current_buf() ~= bufnr then
    return nil
  end
  local c = api.nvim_win_get_cursor(0)
  return { c[1] - 1, c[2] }
end

local function same_pos(a, b)
  return a ~= nil and b ~= nil and a[1] == b[1] and a[2] == b[2]
end

-- Record what the buffer looks like around the suggestion, to tell typing it from other edits later.
local function snapshot(bufnr, st)
  st.tick = api.nvim_buf_get_changedtick(bufnr)
  st.nlines = api.nvim_buf_line_count(bufnr)
  if st.row then
    local line = api.nvim_buf_get_lines(bufnr, st.row, st.row + 1, false)[1] or ""
    st.before, st.after = line:sub(1, st.col), line:sub(st.col + 1)
  end
end

-- Up to the end of the first line that is not blank: "\n    x = 1\n    y" -> "\n    x = 1".
-- The next word of a suggestion, as Vim's `w` sees words: blanks, then a run of letters, digits and "_", or
-- a run of other non-blank characters (or the blanks alone, or a newline, when nothing follows them on the line).
local function first_word(text)
  return text:match("^[ \t]*[%w_\128-\255]+") or text:match("^[ \t]*[^%w_\128-\255%s]+")
    or text:match("^[ \t]*\n") or text:match("^%s+") or text
end

local function first_line(text)
  local s = text:find("%S")
  if not s then
    return text
  end
  local e = text:find("\n", s, true)
  return e and text:sub(1, e - 1) or text
end

-- Undo: make what follows its own undo step (like i_CTRL-G_u, also outside insert mode).
local function break_undo()
  vim.o.undolevels = vim.o.undolevels
end

-- ------------------------------------------------------------------------------------------ keys
local function shown(st)
  return st ~= nil and st.shown == true
end

-- Buffer-local mappings that exist only while something is shown. Each hides a buffer-local mapping of the
-- same key, which is put back when they go. `specs`: { mode, key, rhs (an expr function), desc }.
local function map_while_shown(bufnr, store, specs)
  if store[bufnr] then
    return
  end
  local saved = {}
  for _, spec in ipairs(specs) do
    if spec.key and spec.key ~= "" then
      local old = api.nvim_buf_call(bufnr, function()
        return vim.fn.maparg(spec.key, spec.mode, false, true)
      end)
      saved[#saved + 1] = { mode = spec.mode, key = spec.key, old = (old.buffer == 1) and old or nil }
      vim.keymap.set(spec.mode, spec.key, spec.rhs, { buffer = bufnr, expr = true, desc = spec.desc })
    end
  end
  store[bufnr] = saved
end

local function unmap(bufnr, store)
  local saved = store[bufnr]
  store[bufnr] = nil
  if not saved or not api.nvim_buf_is_valid(bufnr) then
    return
  end
  for _, s in ipairs(saved) do
    pcall(vim.keymap.del, s.mode, s.key, { buffer = bufnr })
    if s.old then
      api.nvim_buf_call(bufnr, function()
        vim.fn.mapset(s.mode, false, s.old)
      end)
    end
  end
end

local function remove_keys(bufnr)
  unmap(bufnr, keymaps)
end

-- Mapped only while a suggestion is shown; when the popup menu is open (or the suggestion went away in the
-- meantime) each key does what it does without the plugin.
local function install_keys(bufnr)
  local specs = {}
  for _, spec in ipairs({
    { M.config.accept_key, "accept" },
    { M.config.accept_line_key, "accept_line" },
    { M.config.accept_word_key, "accept_word" },
    { M.config.dismiss_key, "dismiss" },
  }) do
    local key, action = spec[1], spec[2]
    specs[#specs + 1] = {
      mode = "i",
      key = key,
      desc = "edit-engine: " .. action,
      rhs = function()
        return M._key(bufnr, action, key)
      end,
    }
  end
  map_while_shown(bufnr, keymaps, specs)
end

--- The expression behind a mapped key: the action (accepting wrapped in <C-g>u, so it is one undo step),
--- or the key itself when nothing is shown or the popup menu is open.
function M._key(bufnr, action, key)
  if vim.fn.pumvisible() == 1 or not shown(M.state[bufnr]) then
    return key
  end
  local cmd = ("<Cmd>lua require('edit_engine')._act(%d, %q)<CR>"):format(bufnr, action)
  if action == "dismiss" then
    return cmd
  end
  return "<C-g>u" .. cmd .. "<C-g>u"
end

function M._act(bufnr, action)
  if action == "accept" then
    M.accept(bufnr)
  elseif action == "accept_line" then
    M.accept(bufnr, true)
  elseif action == "accept_word" then
    M.accept(bufnr, "word")
  else
    M.cancel(bufnr)
  end
end

-- ------------------------------------------------------------------------------------------ display
local function clear(bufnr)
  remove_keys(bufnr)
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

-- Scroll the current window (if it shows the buffer) so that `nvirt` virtual lines below `row` are on screen.
local function ensure_visible(bufnr, row, nvirt)
  local win = api.nvim_get_current_win()
  if nvirt == 0 or api.nvim_win_get_buf(win) ~= bufnr then
    return
  end
  local height = api.nvim_win_get_height(win)
  local top = api.nvim_win_call(win, vim.fn.winsaveview).topline -- 1-based
  local function rows(t)
    return api.nvim_win_text_height(win, { start_row = t - 1, end_row = row }).all
  end
  if row + 1 < top or rows(top) > height then
    return -- the suggestion's line itself is not on screen
  end
  local new = top
  while new < row + 1 and rows(new) + nvirt > height do
    new = new + 1
  end
  if new ~= top then
    api.nvim_win_call(win, function()
      vim.fn.winrestview({ topline = new, topfill = 0 })
    end)
  end
end

local PLACEHOLDER = "░" -- what a pass's `preview` holds where a slot is still masked

-- Rows of virtual-text chunks for `text`; with `masks`, runs of PLACEHOLDER in it are masked slots (each run
-- drawn as at most max_placeholders mask characters).
local function to_rows(text, masks)
  local hl, mask_hl = M.config.hl_group, M.config.mask_hl_group
  local rows = { {} }
  local function add(piece)
    for k, line in ipairs(vim.split(piece, "\n", { plain = true })) do
      if k > 1 then
        rows[#rows + 1] = {}
      end
      if line ~= "" then
        table.insert(rows[#rows], { line, hl })
      end
    end
  end
  local i = 1
  while i <= #text do
    local j = masks and text:find(PLACEHOLDER, i, true) or nil
    add(text:sub(i, (j or #text + 1) - 1))
    if not j then
      break
    end
    local run = 0
    while text:sub(j, j + #PLACEHOLDER - 1) == PLACEHOLDER do
      run, j = run + 1, j + #PLACEHOLDER
    end
    local shown = math.min(run, M.config.max_placeholders)
    table.insert(rows[#rows], { string.rep(M.config.mask_char, shown), mask_hl })
    i = j
  end
  for k, row in ipairs(rows) do
    if #row == 0 then
      rows[k] = { { "", hl } }
    end
  end
  return rows
end

local function render(bufnr, st)
  if not api.nvim_buf_is_valid(bufnr) or not st.row then
    return
  end
  local edit = M.edit_state[bufnr]
  if edit and edit.shown then -- one suggestion on screen at a time: a next edit shown wins
    st.shown = false
    clear(bufnr)
    return
  end
  -- What to draw: the text so far, with its masked slots as placeholders where the pass says they are
  -- (`preview`), else after the text (a pass without `preview` only counts them: `masked`).
  local text, masks = st.ghost or "", false
  if not st.final and st.preview then
    text, masks = st.preview, true
  elseif not st.final and (st.masked or 0) > 0 then
    text, masks = text .. string.rep(PLACEHOLDER, math.min(st.masked, M.config.max_placeholders)), true
  end
  text = text:gsub("\t", string.rep(" ", vim.bo[bufnr].tabstop))
  if text == "" then
    st.shown = false
    clear(bufnr)
    return
  end
  local rows = to_rows(text, masks)
  if st.kind == "rewrite" then
    table.insert(rows[1], 1, { "⟶ ", M.config.hl_group }) -- a rewrite: the replacement, after the span
  end
  local virt_lines = { unpack(rows, 2) }
  st.extmark = api.nvim_buf_set_extmark(bufnr, M.ns, st.row, st.col, {
    id = st.extmark, -- the same mark every pass: updated in place
    virt_text = rows[1],
    virt_text_pos = "inline",
    virt_lines = #virt_lines > 0 and virt_lines or nil,
  })
  st.shown = true
  install_keys(bufnr)
  ensure_visible(bufnr, st.row, #virt_lines)
end

-- Where and what to show for the server's text and range (which refer to the current buffer).
local function show_answer(bufnr, st)
  local client = vim.lsp.get_client_by_id(st.client_id)
  if not client or not st.range then
    return
  end
  local sr, sc, er, ec = byte_range(bufnr, st.range, client.offset_encoding)
  local existing = table.concat(api.nvim_buf_get_text(bufnr, sr, sc, er, ec, {}), "\n")
  local text = st.text or ""
  st.preview = nil
  local preview = st.pass_preview
  if st.final or type(preview) ~= "string" or preview == "" then
    preview = nil
  end
  if existing == "" or vim.startswith(text, existing) then
    st.kind, st.ghost = "insert", text:sub(#existing + 1) -- the span extends what is typed: show the rest
    if preview and vim.startswith(preview, existing) then
      st.preview = preview:sub(#existing + 1)
    end
  else
    st.kind, st.ghost, st.preview = "rewrite", text, preview or nil
  end
  st.row, st.col = er, ec
  snapshot(bufnr, st)
  render(bufnr, st)
end

-- ------------------------------------------------------------------------------------------ requests
-- Cancel a state's request in flight, if it has one.
local function cancel_request(st)
  if st and st.request_id then
    local client = vim.lsp.get_client_by_id(st.client_id)
    if client then
      client:cancel_request(st.request_id)
    end
  end
end

-- Ask for something at the cursor: `reset(bufnr)` drops what was asked or shown for the buffer before, then
-- `ask(bufnr, client, params)` runs with the buffer (resolved), its client and the cursor's position params.
-- Returns what `ask` returns (the request id), or nil if no client serves the buffer.
local function ask_at_cursor(bufnr, reset, ask)
  bufnr = resolve(bufnr)
  local client = client_for(bufnr)
  if not client then
    return nil
  end
  reset(bufnr)
  return ask(bufnr, client, vim.lsp.util.make_position_params(0, client.offset_encoding))
end

-- Send `method` for the buffer's request state `st`, kept in `store[bufnr]` while it is in flight. `on_result`
-- runs with the answer only while `st` is still the buffer's state there (not superseded or cancelled).
-- Returns the request id, or nil (and forgets `st`) if the request could not be sent.
local function send_request(client, bufnr, store, st, method, params, on_result)
  store[bufnr] = st
  local ok, id = client:request(method, params, function(err, result)
    if store[bufnr] ~= st then
      return -- superseded or cancelled
    end
    st.request_id = nil
    on_result(err, result)
  end, bufnr)
  if not ok then
    store[bufnr] = nil
    return nil
  end
  st.request_id = id
  return id
end

-- Forget the buffer's request state in `store`, clear what it shows with `clear_shown(bufnr)` and cancel its
-- request in flight (if any).
local function drop_request(bufnr, store, clear_shown)
  bufnr = resolve(bufnr)
  local st = store[bufnr]
  store[bufnr] = nil
  clear_shown(bufnr)
  cancel_request(st)
end

--- Cancel the request in flight for the buffer (if any) and clear its suggestion.
function M.cancel(bufnr)
  drop_request(bufnr, M.state, clear)
end

-- The buffer changed after the suggestion was shown: was it the user typing the suggestion's next
-- characters at its place (and nothing else)? Then keep the rest shown there and return true.
local function type_through(bufnr, st, cur)
  if st.kind ~= "insert" or not st.final or not st.ghost or not st.row or not cur then
    return false
  end
  if not same_pos(st.cursor, { st.row, st.col }) then
    return false -- the suggestion was not at the cursor
  end
  local r, c = cur[1], cur[2]
  if r < st.row or (r == st.row and c <= st.col) then
    return false
  end
  local typed = table.concat(api.nvim_buf_get_text(bufnr, st.row, st.col, r, c, {}), "\n")
  if not vim.startswith(st.ghost, typed) then
    return false
  end
  local _, newlines = typed:gsub("\n", "")
  if api.nvim_buf_line_count(bufnr) ~= st.nlines + newlines then
    return false
  end
  local first = api.nvim_buf_get_lines(bufnr, st.row, st.row + 1, false)[1] or ""
  local last = api.nvim_buf_get_lines(bufnr, r, r + 1, false)[1] or ""
  if first:sub(1, st.col) ~= st.before or last:sub(c + 1) ~= st.after then
    return false
  end
  st.ghost = st.ghost:sub(#typed + 1)
  st.row, st.col, st.cursor, st.detached = r, c, cur, true
  snapshot(bufnr, st)
  if st.ghost == "" then
    M.cancel(bufnr) -- typed all of it
  else
    render(bufnr, st)
  end
  return true
end

-- Bring the suggestion up to date with the buffer and the cursor: keep it if nothing it depends on
-- changed or the user typed its next characters, cancel it otherwise. Returns the state if it is kept.
local function reconcile(bufnr)
  local st = M.state[bufnr]
  if not st or not api.nvim_buf_is_valid(bufnr) then
    return nil
  end
  local cur = cursor_of(bufnr)
  if api.nvim_buf_get_changedtick(bufnr) == st.tick then
    if cur and st.cursor and not same_pos(cur, st.cursor) then
      M.cancel(bufnr) -- the cursor moved away from the suggestion
      return nil
    end
    return st
  end
  if type_through(bufnr, st, cur) then
    return M.state[bufnr]
  end
  M.cancel(bufnr)
  return nil
end

--- Ask the server for an inline completion at the cursor. `automatic`: asked while typing (the auto mode), not
--- by the user; the server may then answer faster with fewer repair rounds. Returns the request id, or nil.
function M.trigger(bufnr, automatic)
  local cur = automatic and cursor_of(resolve(bufnr))
  if cur then -- while typing, nothing is asked with a word right after the cursor (a rename in progress)
    local line = api.nvim_buf_get_lines(resolve(bufnr), cur[1], cur[1] + 1, false)[1] or ""
    if line:sub(cur[2] + 1):match("^[%w_]") then
      M.cancel(bufnr)
      return nil
    end
  end
  return ask_at_cursor(bufnr, M.cancel, function(bufnr, client, params)
    params.context = { triggerKind = automatic and 2 or 1 } -- Automatic or Invoked
    local st = { client_id = client.id, version = vim.lsp.util.buf_versions[bufnr], passes = 0, masked = 0 }
    st.cursor = cursor_of(bufnr)
    snapshot(bufnr, st)
    return send_request(client, bufnr, M.state, st, "textDocument/inlineCompletion", params, function(err, result)
      st.done = true
      if st.detached or reconcile(bufnr) ~= st then
        return -- typed through (the answer is already shown) or no longer valid
      end
      if err then
        st.error = err
        st.ghost = nil
        clear(bufnr)
        return
      end
      local item = result and (result.items or result)[1]
      if not item then
        st.text, st.ghost, st.shown = nil, nil, false
        clear(bufnr)
        return
      end
      local text = item.insertText
      st.text = type(text) == "table" and text.value or text
      st.range, st.final, st.masked, st.pass_preview = item.range, true, 0, nil
      show_answer(bufnr, st)
    end)
  end)
end

--- Handler for editEngine/pass: update the suggestion in place with the pass's snapshot.
function M.on_pass(_, p, ctx)
  if not p then
    return
  end
  for bufnr, st in pairs(M.state) do
    if st.request_id == p.requestId and st.client_id == ctx.client_id and not st.detached then
      if p.version == vim.lsp.util.buf_versions[bufnr] and reconcile(bufnr) == st then
        st.passes = st.passes + 1
        st.text, st.range, st.final, st.masked = p.text, p.range, p.final, p.masked or 0
        st.pass_preview = p.preview
        show_answer(bufnr, st)
      end
    end
  end
end

-- Replace `range` (LSP positions) with `text`; returns the row and byte column where the new text ends.
local function apply_range_edit(bufnr, client, range, text)
  vim.lsp.util.apply_text_edits({ { range = range, newText = text } }, bufnr, client.offset_encoding)
  local lines = vim.split(text, "\n", { plain = true })
  local row = range.start.line + #lines - 1
  local col = #lines[#lines]
  if #lines == 1 then
    col = col + byte_col(bufnr, range.start.line, range.start.character, client.offset_encoding)
  end
  return row, col
end

-- After an accept: move the cursor to (row, col), where the inserted text ends, if the buffer is the current
-- one, and tell the server what was accepted (`report`: the editEngine/accepted params but the uri).
local function report_accepted(bufnr, client, row, col, report)
  if api.nvim_get_current_buf() == bufnr then
    pcall(api.nvim_win_set_cursor, 0, { row + 1, col })
  end
  report.uri = vim.uri_from_bufnr(bufnr)
  client:notify("editEngine/accepted", report)
end

--- Apply the suggestion (or, with `part` true, up to the end of its first non-blank line; with "word", its
--- next word) as an edit, as its own undo step. After a partial accept the rest stays shown. Returns true if
--- something was inserted.
function M.accept(bufnr, part_of)
  bufnr = resolve(bufnr)
  local st = reconcile(bufnr)
  local has_text = st and st.ghost and st.ghost ~= "" and st.row
  local client = has_text and vim.lsp.get_client_by_id(st.client_id)
  if not client then
    return false -- nothing shown, or its client is gone
  end
  local ghost = st.ghost
  local part = ghost
  if part_of and st.kind == "insert" then
    part = part_of == "word" and first_word(ghost) or first_line(ghost)
  end
  local rest = ghost:sub(#part + 1)
  local keep = rest ~= "" and st.final
  M.state[bufnr] = nil -- before editing, so the change is not taken for typing
  clear(bufnr)
  if st.request_id and not keep then
    client:cancel_request(st.request_id) -- accepted a pass before the last one
    st.request_id = nil
  end
  break_undo()
  local row, col
  if st.kind == "insert" then
    local lines = vim.split(part, "\n", { plain = true })
    api.nvim_buf_set_text(bufnr, st.row, st.col, st.row, st.col, lines)
    row = st.row + #lines - 1
    col = (#lines == 1 and st.col or 0) + #lines[#lines]
  else
    row, col = apply_range_edit(bufnr, client, st.range, part)
  end
  report_accepted(bufnr, client, row, col, {
    kind = rest ~= "" and "partial" or "accept",
    acceptedChars = vim.fn.strchars(part),
    totalChars = vim.fn.strchars(ghost),
    final = st.final == true or st.done == true,
  })
  if keep then -- the rest of the suggestion stays, after what was inserted
    st.ghost, st.row, st.col, st.detached = rest, row, col, true
    st.cursor = cursor_of(bufnr) or { row, col }
    st.extmark = nil
    snapshot(bufnr, st)
    M.state[bufnr] = st
    render(bufnr, st)
  end
  return true
end

-- ------------------------------------------------------------------------------------------ next edit
local function clear_edit(bufnr)
  unmap(bufnr, edit_keymaps)
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, M.edit_ns, 0, -1)
  end
end

--- Cancel the next-edit request in flight for the buffer (if any) and clear the edit shown.
function M.dismiss_edit(bufnr)
  drop_request(bufnr, M.edit_state, clear_edit)
end

-- Is the next edit still for the buffer and the cursor it was asked for (or shown at)?
local function edit_current(bufnr, st)
  if M.edit_state[bufnr] ~= st or not api.nvim_buf_is_valid(bufnr) then
    return false
  end
  if api.nvim_buf_get_changedtick(bufnr) ~= st.tick then
    return false
  end
  local cur = cursor_of(bufnr)
  return cur == nil or st.cursor == nil or same_pos(cur, st.cursor)
end

-- Keep the edit if nothing it depends on changed, dismiss it otherwise.
local function reconcile_edit(bufnr)
  local st = M.edit_state[bufnr]
  if st and not edit_current(bufnr, st) then
    M.dismiss_edit(bufnr)
  end
end

local function map_edit_keys(bufnr)
  map_while_shown(bufnr, edit_keymaps, {
    { mode = "i", key = M.config.next_edit_accept_key, desc = "edit-engine: apply the next edit",
      rhs = function()
        return M._edit_key(bufnr, "accept", M.config.next_edit_accept_key, true)
      end },
    { mode = "n", key = M.config.next_edit_accept_key, desc = "edit-engine: apply the next edit",
      rhs = function()
        return M._edit_key(bufnr, "accept", M.config.next_edit_accept_key, false)
      end },
    { mode = "n", key = M.config.next_edit_dismiss_key, desc = "edit-engine: dismiss the next edit",
      rhs = function()
        return M._edit_key(bufnr, "dismiss", M.config.next_edit_dismiss_key, false)
      end },
  })
end

-- Is buffer row `row` (0-based) on the screen of the current window, which shows `bufnr`?
local function on_screen(bufnr, row)
  local win = api.nvim_get_current_win()
  if api.nvim_win_get_buf(win) ~= bufnr then
    return false
  end
  local top, bottom = vim.fn.line("w0", win), vim.fn.line("w$", win)
  return row + 1 >= top and row + 1 <= bottom
end

-- The edit's first row is off screen: only a hint at the end of the cursor's line says where it is; <Tab>
-- moves there (`accept_edit`).
local function show_jump(bufnr, st, sr)
  local row = st.cursor and st.cursor[1] or api.nvim_win_get_cursor(0)[1] - 1
  local arrow = sr < row and "↑" or "↓"
  local hint = ("  %s next edit at line %d: %s goes there"):format(arrow, sr + 1, M.config.next_edit_accept_key)
  api.nvim_buf_set_extmark(bufnr, M.edit_ns, row, 0, {
    virt_text = { { hint, M.config.next_edit_jump_hl_group } },
    virt_text_pos = "eol",
  })
  st.shown, st.far = true, true
  map_edit_keys(bufnr)
end

-- The edit is in another open buffer: a hint at the end of the cursor's line names it; <Tab> opens it there and
-- draws the edit (`accept_edit`), a second <Tab> applies it. An answer for a buffer that is not loaded, or not at
-- the version the server read, is dropped.
local function show_elsewhere(bufnr, st, doc)
  local target = type(doc.uri) == "string" and vim.uri_to_bufnr(doc.uri) or -1
  if target < 0 or not api.nvim_buf_is_loaded(target) or vim.lsp.util.buf_versions[target] ~= doc.version then
    M.edit_state[bufnr] = nil -- not open here, or changed since: nothing to show
    api.nvim_echo({ { "edit-engine: no next edit", "Comment" } }, false, {})
    return
  end
  M.cancel(bufnr)
  local row = st.cursor and st.cursor[1] or api.nvim_win_get_cursor(0)[1] - 1
  local line = (st.edit.range and st.edit.range.start and st.edit.range.start.line or 0) + 1
  local name = vim.fn.fnamemodify(api.nvim_buf_get_name(target), ":t")
  local hint = ("  → next edit in %s at line %d: %s goes there"):format(name, line, M.config.next_edit_accept_key)
  api.nvim_buf_set_extmark(bufnr, M.edit_ns, row, 0, {
    virt_text = { { hint, M.config.next_edit_jump_hl_group } },
    virt_text_pos = "eol",
  })
  st.shown, st.far, st.target = true, true, target
  map_edit_keys(bufnr)
end

local function show_edit(bufnr, st)
  local client = vim.lsp.get_client_by_id(st.client_id)
  local e = st.edit
  if not client then
    return
  end
  local sr, sc, er, ec, new_text = checked_range(bufnr, e.range, client.offset_encoding, e.newText or "")
  if not sr then -- nothing is drawn, so nothing can be applied
    M.edit_state[bufnr] = nil
    vim.notify("edit-engine: the next edit's range does not fit the buffer; ignored", vim.log.levels.WARN)
    return
  end
  st.rows = { sr, sc, er, ec, new_text } -- what is drawn is exactly what Tab applies
  M.cancel(bufnr) -- one suggestion on screen at a time: the next edit hides the inline one
  if st.far == nil and not on_screen(bufnr, sr) then
    show_jump(bufnr, st, sr)
    return
  end
  if st.jump and api.nvim_get_current_buf() == bufnr then
    pcall(api.nvim_win_set_cursor, 0, { sr + 1, sc })
    st.cursor = cursor_of(bufnr)
  end
  -- The rows the edit touches, as they would read after it.
  local first = api.nvim_buf_get_lines(bufnr, sr, sr + 1, false)[1] or ""
  local last = api.nvim_buf_get_lines(bufnr, er, er + 1, false)[1] or ""
  local after = first:sub(1, sc) .. new_text .. last:sub(ec + 1)
  local spaces = string.rep(" ", vim.bo[bufnr].tabstop)
  local virt_lines = {}
  for _, line in ipairs(vim.split(after, "\n", { plain = true })) do
    virt_lines[#virt_lines + 1] = { { (line:gsub("\t", spaces)), M.config.next_edit_hl_group } }
  end
  if sc ~= ec or sr ~= er then
    api.nvim_buf_set_extmark(bufnr, M.edit_ns, sr, sc, {
      end_row = er,
      end_col = ec,
      hl_group = M.config.next_edit_old_hl_group,
      priority = 200,
    })
  end
  api.nvim_buf_set_extmark(bufnr, M.edit_ns, er, 0, { virt_lines = virt_lines })
  st.shown, st.far = true, false
  map_edit_keys(bufnr)
  ensure_visible(bufnr, er, #virt_lines)
end

--- The expression behind a next-edit key: the action (accepting wrapped in <C-g>u in insert mode, so it is
--- one undo step), or the key itself when nothing is shown or the popup menu is open.
function M._edit_key(bufnr, action, key, insert)
  local st = M.edit_state[bufnr]
  if (insert and vim.fn.pumvisible() == 1) or not (st and st.shown) then
    return key
  end
  local cmd = ("<Cmd>lua require('edit_engine')._edit_act(%d, %q)<CR>"):format(bufnr, action)
  return (insert and action == "accept") and ("<C-g>u" .. cmd .. "<C-g>u") or cmd
end

function M._edit_act(bufnr, action)
  if action == "accept" then
    M.accept_edit(bufnr)
  else
    M.dismiss_edit(bufnr)
  end
end

--- Ask the server for the next edit at the cursor (opts.jump: move the cursor to it when it comes).
--- Returns the request id, or nil.
function M.next_edit(bufnr, opts)
  return ask_at_cursor(bufnr, M.dismiss_edit, function(bufnr, client, params)
    local st = { client_id = client.id, jump = opts and opts.jump, cursor = cursor_of(bufnr) }
    st.tick = api.nvim_buf_get_changedtick(bufnr)
    params.otherDocuments = M.config.next_edit_other_documents == true
    local id = send_request(client, bufnr, M.edit_state, st, "editEngine/nextEdit", params, function(err, result)
      if not edit_current(bufnr, st) then
        M.dismiss_edit(bufnr)
        return
      end
      if err or type(result) ~= "table" or result.version ~= vim.lsp.util.buf_versions[bufnr] then
        M.edit_state[bufnr] = nil
        if err and err.code ~= -32800 and err.code ~= -32801 then
          vim.notify("edit-engine: " .. (err.message or "next edit failed"), vim.log.levels.WARN)
        elseif not err then
          api.nvim_echo({ { "edit-engine: no next edit", "Comment" } }, false, {})
        end
        return
      end
      st.edit = result
      local doc = result.textDocument
      if type(doc) == "table" and doc.uri ~= vim.uri_from_bufnr(bufnr) then
        show_elsewhere(bufnr, st, doc)
        return
      end
      show_edit(bufnr, st)
    end)
    if id then
      st.version = vim.lsp.util.buf_versions[bufnr] -- read after the request flushed the pending changes
    end
    return id
  end)
end

--- Apply the next edit shown (one undo step), then ask for the one after it and move to it; an edit off
--- screen (only its hint shown) is not applied: the cursor moves to it and it is drawn. Returns true if an
--- edit was applied.
function M.accept_edit(bufnr)
  bufnr = resolve(bufnr)
  local st = M.edit_state[bufnr]
  if not st or not st.edit or not st.shown or not (st.rows or st.target) or not edit_current(bufnr, st) then
    M.dismiss_edit(bufnr) -- never apply what was not drawn
    return false
  end
  if st.target then -- in another buffer: open it in this window and draw the edit there
    local target, edit = st.target, st.edit
    M.dismiss_edit(bufnr)
    if not api.nvim_buf_is_loaded(target) or vim.lsp.util.buf_versions[target] ~= edit.textDocument.version then
      vim.notify("edit-engine: the next edit's buffer changed; ask again", vim.log.levels.INFO)
      return false
    end
    local ok, err = pcall(api.nvim_win_set_buf, 0, target)
    if not ok then
      vim.notify("edit-engine: cannot open the next edit's buffer: " .. tostring(err), vim.log.levels.WARN)
      return false
    end
    M.dismiss_edit(target) -- what that buffer had asked for or shown gives way to this edit
    local ts = { client_id = st.client_id, edit = edit, jump = true, far = false }
    ts.tick = api.nvim_buf_get_changedtick(target)
    M.edit_state[target] = ts
    show_edit(target, ts)
    return false
  end
  if st.far then
    clear_edit(bufnr)
    st.jump = true
    show_edit(bufnr, st)
    return false
  end
  local client = vim.lsp.get_client_by_id(st.client_id)
  if not client then
    return false
  end
  local sr, sc, er, ec, new_text = unpack(st.rows)
  M.dismiss_edit(bufnr)
  break_undo()
  local lines = vim.split(new_text, "\n", { plain = true })
  api.nvim_buf_set_text(bufnr, sr, sc, er, ec, lines)
  local row, col = sr + #lines - 1, (#lines == 1 and sc or 0) + #lines[#lines]
  report_accepted(bufnr, client, row, col, {
    kind = "nextEdit",
    acceptedChars = vim.fn.strchars(new_text),
    totalChars = vim.fn.strchars(new_text),
    final = true,
  })
  M.next_edit(bufnr, { jump = true })
  return true
end

-- ------------------------------------------------------------------------------------------ setup
-- Run `fn` (in the main loop) once `ms` have passed with no newer call for the buffer; `store` keeps the
-- buffer's timer between calls.
local function debounce(store, bufnr, ms, fn)
  local t = store[bufnr]
  if t then
    t:stop()
  else
    t = vim.uv.new_timer()
    store[bufnr] = t
  end
  t:start(ms, 0, vim.schedule_wrap(fn))
end

local function on_attach(bufnr)
  if attached[bufnr] then
    return
  end
  attached[bufnr] = true
  -- Any change to the buffer (typing, or an edit from elsewhere) is checked against the suggestion.
  api.nvim_buf_attach(bufnr, false, {
    on_lines = function()
      if M.state[bufnr] then
        vim.schedule(function()
          reconcile(bufnr)
        end)
      end
    end,
    on_detach = function()
      attached[bufnr] = nil
      M.state[bufnr] = nil
      M.edit_state[bufnr] = nil
      vim.schedule(function()
        remove_keys(bufnr)
        unmap(bufnr, edit_keymaps)
      end)
    end,
  })
  if M.config.trigger_key and M.config.trigger_key ~= "" then
    vim.keymap.set("i", M.config.trigger_key, function()
      M.trigger(bufnr)
    end, { buffer = bufnr, desc = "edit-engine: ask for a suggestion" })
  end
  if M.config.next_edit_key and M.config.next_edit_key ~= "" then
    vim.keymap.set("i", M.config.next_edit_key, function()
      M.next_edit(bufnr)
    end, { buffer = bufnr, desc = "edit-engine: ask for the next edit" })
  end
  local group = api.nvim_create_augroup("edit_engine_buf_" .. bufnr, { clear = true })
  -- A next edit holds while the buffer and the cursor stay as they were; with next_edit_auto, one is asked
  -- for after an edit in normal mode and on leaving insert mode.
  api.nvim_create_autocmd({ "CursorMoved", "CursorMovedI", "TextChanged", "TextChangedI", "TextChangedP" }, {
    group = group,
    buffer = bufnr,
    callback = function(args)
      reconcile_edit(bufnr)
      if M.config.next_edit_auto and args.event == "TextChanged" then
        M._auto_edit(bufnr)
      end
    end,
  })
  api.nvim_create_autocmd("InsertLeave", {
    group = group,
    buffer = bufnr,
    callback = function()
      M.dismiss_edit(bufnr)
      if M.config.next_edit_auto then
        M._auto_edit(bufnr)
      end
    end,
  })
  api.nvim_create_autocmd({ "CursorMovedI", "TextChangedP" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      reconcile(bufnr)
    end,
  })
  api.nvim_create_autocmd("TextChangedI", {
    group = group,
    buffer = bufnr,
    callback = function()
      local kept = reconcile(bufnr)
      if not M.config.auto or (kept and kept.tick == api.nvim_buf_get_changedtick(bufnr)) then
        return -- the suggestion still stands (typed through): nothing to ask
      end
      debounce(timers, bufnr, M.config.debounce_ms, function()
        if api.nvim_get_current_buf() ~= bufnr or vim.fn.mode() ~= "i" then
          return
        end
        local st = M.state[bufnr]
        if st and st.tick == api.nvim_buf_get_changedtick(bufnr) then
          return -- already asked (or shown) for this text
        end
        M.trigger(bufnr, true)
      end)
    end,
  })
  api.nvim_create_autocmd({ "InsertLeave", "BufLeave" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      M.cancel(bufnr)
    end,
  })
end

-- next_edit_auto: ask once the buffer has been still for next_edit_debounce_ms (in normal mode).
function M._auto_edit(bufnr)
  debounce(edit_timers, bufnr, M.config.next_edit_debounce_ms, function()
    if api.nvim_get_current_buf() == bufnr and vim.fn.mode() == "n" and not M.edit_state[bufnr] then
      M.next_edit(bufnr)
    end
  end)
end

-- The server says once per document why its language gets no suggestions: told once per buffer, quietly (an
-- INFO notice, which `:messages` keeps), so that silence in a .js or .go buffer is not a mystery.
M.told = {}
function M.on_silent(_, p)
  local bufnr = p and p.uri and vim.uri_to_bufnr(p.uri)
  if not bufnr or M.told[bufnr] then
    return
  end
  M.told[bufnr] = true
  vim.notify("edit-engine: no suggestions in this buffer: " .. tostring(p.reason), vim.log.levels.INFO)
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", M.config, opts or {})
  api.nvim_create_user_command("EditEngineNextEdit", function()
    M.next_edit(0)
  end, { desc = "edit-engine: show the next edit (<Tab> applies it)", force = true })
  vim.lsp.handlers["editEngine/pass"] = M.on_pass
  vim.lsp.handlers["editEngine/silent"] = M.on_silent
  local group = api.nvim_create_augroup("edit_engine", { clear = true })
  define_highlights()
  api.nvim_create_autocmd("ColorScheme", { group = group, callback = define_highlights })
  api.nvim_create_autocmd("LspAttach", {
    group = group,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == "edit_engine" then
        on_attach(args.buf)
      end
    end,
  })
end

return M
