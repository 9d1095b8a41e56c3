"""Edits: next edit (the change that follows the user's recent ones: ``patterns`` analyses the history, its
patterns become rules of one interface, ``sites.Rule``, made and sought by ``propagate`` with ``call_sites`` and
the tree ``rules``; ``next_edit`` picks one; the edit model's prompt and runner) and apply (a snippet with
``... existing code ...`` markers merged into a file). ``Engine.next_edit`` and ``Engine.apply`` delegate here;
the model rewrite of a region runs on the fill's runtime.
"""
