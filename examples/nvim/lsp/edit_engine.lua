-- Server config for Neovim 0.11+ (found on 'runtimepath' by vim.lsp.enable("edit_engine")).
-- Override any field with vim.lsp.config("edit_engine", { ... }) before enabling.
return {
  cmd = { "edit-engine", "lsp" },
  filetypes = { "python", "javascript", "typescript", "typescriptreact", "rust", "go" },
  root_markers = { "pyproject.toml", "package.json", "Cargo.toml", "go.mod", ".git" },
  -- Options the server reads (edit_engine/lsp/settings.py, docs/lsp.md): modelPath, maxTokens, threshold,
  -- minCommit, spread, floorRamp, streamPasses.
  init_options = { streamPasses = true },
  handlers = {
    ["editEngine/pass"] = function(...)
      return require("edit_engine").on_pass(...)
    end,
    ["editEngine/silent"] = function(...)
      return require("edit_engine").on_silent(...)
    end,
  },
}
