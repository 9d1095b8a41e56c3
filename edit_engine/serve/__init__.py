"""The websocket (JSON-RPC) and OpenAI-compatible HTTP server: ``create_app(Settings(...))``.

Modules: ``settings`` (the one settings object, flags, environment), ``protocol`` (request/response models),
``errors`` (error kinds -> JSON-RPC codes and HTTP statuses), ``serving`` (requests -> planned jobs, limits),
``batching`` (the scheduler that batches passes across requests), ``ws`` and ``routes`` (the front ends),
``metrics`` (Prometheus text), ``app`` (``create_app``, ``BackgroundServer``), ``cli`` (``edit-engine serve``).
FastAPI is imported by ``app``, not here, so ``edit-engine --help`` stays fast.
"""

from __future__ import annotations

from edit_engine.serve.settings import Settings

__all__ = ["Settings"]
