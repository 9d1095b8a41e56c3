"""The network and what loads it: the diffusion transformer and its presets (``network``), the BPE tokenizer,
the protocols any model meets (``interfaces``), serving dtypes, checkpoint folders, and open checkpoints (``hf/``).
The packaged weights are data, in ``edit_engine/models/``.
"""
