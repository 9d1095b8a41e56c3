-- Minimal Neovim 0.11+ config for edit-engine:   nvim -u examples/nvim/init.lua some_file.py
-- Insert mode: <C-g><C-g> asks; while a suggestion is shown <C-l> accepts, <C-j> accepts one line, <M-Right>
-- one word, <C-e> dismisses. Typing the suggestion keeps it; other typing or moving the cursor cancels it.
local here = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h")
vim.opt.runtimepath:prepend(here) -- lua/edit_engine (the plugin) and lsp/edit_engine.lua (the server config)

require("edit_engine").setup({ auto = true })
-- vim.lsp.config("edit_engine", { cmd = { "edit-engine", "lsp", "--log-file", "/tmp/edit-engine.log" },
--                                init_options = { streamPasses = true, maxTokens = 64 } })
vim.lsp.enable("edit_engine")
