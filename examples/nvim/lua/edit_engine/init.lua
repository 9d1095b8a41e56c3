-- edit-engine for Neovim 0.11+: inline completions as virtual text, refined live by editEngine/pass.
--
--   require("edit_engine").setup({ auto = true })   -- keymaps + autocommands
--   vim.lsp.enable("edit_engine")                    -- the server config is lsp/edit_engine.lua
--
-- A request is textDocument/inlineCompletion. While the server denoises it sends editEngine/pass
-- notifications ({requestId, uri, version, passIndex, final, range, text, masked}); each one replaces the
-- virtual text (a snapshot of the whole span). Typing cancels the request ($/cancelRequest) and clears it;
-- the accept key applies the span as a text edit and reports editEngine/accepted.

local M = {}

M.ns = vim.api.nvim_create_namespace("edit_engine")

M.config = {
  accept_key = "<C-l>", -- insert mode: accept the whole suggestion
  accept_line_key = "<C-j>", -- insert mode: accept its first line (a partial accept)
  trigger_key = "<C-g>", -- insert mode: ask now
  dismiss_key = "<C-e>", -- insert mode: cancel and clear
  auto = false, -- ask after every change in insert mode (debounced)
  debounce_ms = 50,
  hl_group = "Comment",
}

-- Per buffer: { client_id, request_id, version, range, text, final, passes, done, error }
M.state = {}

local attached = {}
local timers = {}

local function client_for(bufnr)
  return vim.lsp.get_clients({ bufnr = bufnr, name = "edit_engine" })[1]
end

local function clear(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

-- (line, character in the client's encoding) -> 0-based byte column
local function byte_col(bufnr, line, character, encoding)
  local text = vim.api.nvim_buf_get_lines(bufnr, line, line + 1, false)[1] or ""
  return vim.str_byteindex(text, encoding, character, false)
end

local function render(bufnr, st)
  clear(bufnr)
  if not st.text or st.text == "" or not st.range then
    return
  end
  local client = vim.lsp.get_client_by_id(st.client_id)
  if not client then
    return
  end
  local enc = client.offset_encoding
  local sr, er = st.range.start.line, st.range["end"].line
  local sc = byte_col(bufnr, sr, st.range.start.character, enc)
  local ec = byte_col(bufnr, er, st.range["end"].character, enc)
  local existing = table.concat(vim.api.nvim_buf_get_text(bufnr, sr, sc, er, ec, {}), "\n")
  local ghost, row, col = st.text, sr, sc
  if existing ~= "" and vim.startswith(st.text, existing) then
    ghost, row, col = st.text:sub(#existing + 1), er, ec -- the span extends what is typed: show the rest
  elseif existing ~= "" then
    ghost = "⟶ " .. st.text -- a rewrite: show the replacement below the span
    row, col = er, ec
  end
  if ghost == "" then
    return
  end
  local lines = vim.split(ghost, "\n", { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { lines[i], M.config.hl_group } }
  end
  st.extmark = vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, {
    virt_text = { { lines[1], M.config.hl_group } },
    virt_text_pos = "inline",
    virt_lines = #virt_lines > 0 and virt_lines or nil,
  })
end

--- Cancel the request in flight for the buffer (if any) and clear its suggestion.
function M.cancel(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local st = M.state[bufnr]
  M.state[bufnr] = nil
  clear(bufnr)
  if st and st.request_id then
    local client = vim.lsp.get_client_by_id(st.client_id)
    if client then
      client:cancel_request(st.request_id)
    end
  end
end

--- Ask the server for an inline completion at the cursor. Returns the request id, or nil.
function M.trigger(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local client = client_for(bufnr)
  if not client then
    return nil
  end
  M.cancel(bufnr)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = 1 } -- Invoked
  local st = { client_id = client.id, version = vim.lsp.util.buf_versions[bufnr], passes = 0 }
  M.state[bufnr] = st
  local ok, id = client:request("textDocument/inlineCompletion", params, function(err, result)
    if M.state[bufnr] ~= st then
      return -- superseded or cancelled
    end
    st.request_id = nil
    st.done = true
    if err then
      st.error = err
      clear(bufnr)
      return
    end
    local item = result and result.items and result.items[1]
    if not item then
      st.text = nil
      clear(bufnr)
      return
    end
    st.text, st.range = item.insertText, item.range
    render(bufnr, st)
  end, bufnr)
  if not ok then
    M.state[bufnr] = nil
    return nil
  end
  st.request_id = id
  return id
end

--- Handler for editEngine/pass: replace the suggestion with the pass's snapshot.
function M.on_pass(_, p, ctx)
  if not p then
    return
  end
  for bufnr, st in pairs(M.state) do
    if st.request_id == p.requestId and st.client_id == ctx.client_id then
      if p.version == vim.lsp.util.buf_versions[bufnr] then
        st.passes = st.passes + 1
        st.text, st.range, st.final = p.text, p.range, p.final
        render(bufnr, st)
      end
    end
  end
end

--- Apply the suggestion (or its first line) as a text edit. Returns true if something was inserted.
function M.accept(bufnr, first_line_only)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local st = M.state[bufnr]
  if not st or not st.text or st.text == "" or not st.range then
    return false
  end
  local client = vim.lsp.get_client_by_id(st.client_id)
  if not client then
    return false
  end
  M.state[bufnr] = nil -- before editing, so the change is not taken for typing
  clear(bufnr)
  if st.request_id then
    client:cancel_request(st.request_id) -- accepted a pass before the last one
  end
  local text = st.text
  if first_line_only then
    text = vim.split(text, "\n", { plain = true })[1]
  end
  local edit = { range = st.range, newText = text }
  vim.lsp.util.apply_text_edits({ edit }, bufnr, client.offset_encoding)
  -- Put the cursor at the end of the inserted text.
  local lines = vim.split(text, "\n", { plain = true })
  local row = st.range.start.line + #lines - 1
  local col = #lines[#lines]
  if #lines == 1 then
    col = col + byte_col(bufnr, st.range.start.line, st.range.start.character, client.offset_encoding)
  end
  if vim.api.nvim_get_current_buf() == bufnr then
    pcall(vim.api.nvim_win_set_cursor, 0, { row + 1, col })
  end
  client:notify("editEngine/accepted", {
    uri = vim.uri_from_bufnr(bufnr),
    kind = (first_line_only and text ~= st.text) and "partial" or "accept",
    acceptedChars = vim.fn.strchars(text),
    totalChars = vim.fn.strchars(st.text),
    final = st.final == true or st.done == true,
  })
  return true
end

local function on_attach(bufnr)
  if attached[bufnr] then
    return
  end
  attached[bufnr] = true
  -- Any change to the buffer (typing) cancels the request in flight and clears the suggestion.
  vim.api.nvim_buf_attach(bufnr, false, {
    on_lines = function()
      if M.state[bufnr] then
        vim.schedule(function()
          M.cancel(bufnr)
        end)
      end
    end,
    on_detach = function()
      attached[bufnr] = nil
      M.state[bufnr] = nil
    end,
  })
  local function map(key, fn)
    if key then
      vim.keymap.set("i", key, fn, { buffer = bufnr, desc = "edit-engine" })
    end
  end
  map(M.config.accept_key, function()
    M.accept(bufnr)
  end)
  map(M.config.accept_line_key, function()
    M.accept(bufnr, true)
  end)
  map(M.config.trigger_key, function()
    M.trigger(bufnr)
  end)
  map(M.config.dismiss_key, function()
    M.cancel(bufnr)
  end)
  if M.config.auto then
    vim.api.nvim_create_autocmd("TextChangedI", {
      buffer = bufnr,
      callback = function()
        local t = timers[bufnr]
        if t then
          t:stop()
        else
          t = vim.uv.new_timer()
          timers[bufnr] = t
        end
        t:start(M.config.debounce_ms, 0, vim.schedule_wrap(function()
          if vim.api.nvim_get_current_buf() == bufnr and vim.fn.mode() == "i" then
            M.trigger(bufnr)
          end
        end))
      end,
    })
  end
  vim.api.nvim_create_autocmd({ "InsertLeave", "BufLeave" }, {
    buffer = bufnr,
    callback = function()
      M.cancel(bufnr)
    end,
  })
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", M.config, opts or {})
  vim.lsp.handlers["editEngine/pass"] = M.on_pass
  vim.api.nvim_create_autocmd("LspAttach", {
    group = vim.api.nvim_create_augroup("edit_engine", { clear = true }),
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == "edit_engine" then
        on_attach(args.buf)
      end
    end,
  })
end

return M
