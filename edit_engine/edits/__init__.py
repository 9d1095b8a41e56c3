"""Edits: next edit (the change that follows the user's recent ones: ``patterns``, ``propagate``, ``call_sites``,
``sites``, ``next_edit``, the edit model's prompt and runner) and apply (a snippet with ``... existing code ...``
markers merged into a file). ``Engine.next_edit`` and ``Engine.apply`` delegate here; the model rewrite of a region
runs on the fill's runtime.
"""
