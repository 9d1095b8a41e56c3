"""Syntax: tree-sitter documents and grammars (``trees``, ``grammars/``), the planner that picks the span to fill
(``planner``, ``plan``), post-processing and repair of a fill, positions (the one place that converts between
characters, UTF-16, bytes and lines), and the mapping bounded in entries and bytes that the caches of
request-sized data share (``lru``).
"""
