"""Per-language tree-sitter queries and settings for syntax-aware masking (package data).

Each folder ``grammars/<language>/`` holds ``settings.json`` (which grammar package to load, indentation,
block openers, bracket pairs, comment and string delimiters) and ``spans.scm`` (a tree-sitter query whose
captures name the node kinds the planner cares about: ``@comment``, ``@string``, ``@brackets``, ``@block``,
``@unit``). The loader is ``edit_engine.syntax.trees``. Adding a language is adding a folder and a dependency.
"""
