"""Decoding: the denoise loop (``sampler``) with its settings defined once (``sampler_settings``), the pass
floor, and the left-to-right baseline (``ar``). Yields passes; knows nothing of documents or syntax.
"""
