"""The language server with a large workspace: how long the memory's workspace index takes, what the server
holds in memory, and how fast a keystroke is answered while it indexes and after.

Builds a workspace of ``--files`` Python files (copied from a folder of real code, ``--source``: by default this
interpreter's ``site-packages``; the copy keeps their relative paths), starts the real language server
(``python -m edit_engine.lsp``, the memory of code on) with that folder as its workspace and a fresh cache folder,
opens one file of it
and waits for the server's ``editEngine/indexed``. Meanwhile and after, it asks for an inline completion at the
end of the open file every ``--interval-ms`` and records the answer times. Then it stops the server and starts it
again on the same folders, to time the walk with the cache on disk. The server's resident memory (``VmRSS``) and
its peak (``VmHWM``) are read from ``/proc``. Prints a table; ``--json PATH`` writes it.

    python benchmarks/workspace_index.py --files 2000 --json runs/workspace_index.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import BaseLanguageClient

ROOT = Path(__file__).resolve().parents[1]


def build_workspace(source: Path, dest: Path, files: int, max_bytes: int = 300_000) -> int:
    """Copy the first ``files`` Python files under ``source`` (sorted paths, each at most ``max_bytes``)."""
    n = 0
    for p in sorted(source.rglob("*.py")):
        if n >= files:
            break
        if not p.is_file() or p.is_symlink() or p.stat().st_size > max_bytes:
            continue
        target = dest / p.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)
        n += 1
    return n


def memory_of(pid: int) -> dict[str, float]:
    """The process's resident memory and its peak, in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


async def session(workspace: Path, cache: Path, doc: Path, interval_ms: float, threads: int) -> dict[str, Any]:
    client = BaseLanguageClient("workspace-index-bench", "1")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads),
           "EDIT_ENGINE_MEMORY": "on"}
    await client.start_io(sys.executable, "-m", "edit_engine.lsp", "--threads", str(threads), "--log-file",
                          str(cache.parent / "server.log"), env=env)
    indexed: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    @client.feature("editEngine/indexed")
    def on_indexed(params: Any) -> None:
        if not indexed.done() and getattr(params, "event", None) == "walked":
            indexed.set_result({k: getattr(params, k) for k in ("files", "from_cache", "seconds", "skipped")})

    t0 = time.perf_counter()
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=workspace.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name=workspace.name)]))
    client.initialized(types.InitializedParams())
    pid = client._server.pid  # type: ignore[attr-defined]
    text = doc.read_text(encoding="utf-8") + "\n"
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=doc.as_uri(), language_id="python", version=1, text=text)))
    line = text.count("\n")
    during: list[float] = []
    after: list[float] = []

    async def ask() -> float:
        t = time.perf_counter()
        await client.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=doc.as_uri()), position=types.Position(line, 0),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)))
        return (time.perf_counter() - t) * 1e3

    while not indexed.done():
        during.append(await ask())
        await asyncio.wait([indexed], timeout=interval_ms / 1e3)
    walked = indexed.result()
    ready_s = time.perf_counter() - t0
    for _ in range(20):
        after.append(await ask())
    mem = memory_of(pid)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()

    def q(xs: list[float], p: float) -> float | None:
        return round(statistics.quantiles(xs, n=20)[int(p * 20) - 1], 1) if len(xs) >= 2 else None

    return {**walked, "start_to_indexed_s": round(ready_s, 2), "rss_mb": round(mem["VmRSS"]),
            "peak_rss_mb": round(mem["VmHWM"]), "answers_while_indexing": len(during),
            "p50_while_indexing_ms": q(during, 0.5), "p95_while_indexing_ms": q(during, 0.95),
            "p50_after_ms": q(after, 0.5), "p95_after_ms": q(after, 0.95)}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--source", default=str(Path(json.__file__).parents[0].parent / "site-packages"),
                    help="a folder of Python code to copy the workspace from (default: site-packages)")
    ap.add_argument("--interval-ms", type=float, default=200.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    source = Path(a.source)
    if not source.is_dir():
        source = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    with tempfile.TemporaryDirectory() as tmp:
        ws, cache = Path(tmp) / "ws", Path(tmp) / "cache"
        n = build_workspace(source, ws, a.files)
        doc = sorted(ws.rglob("*.py"))[n // 2]
        chars = sum(p.stat().st_size for p in ws.rglob("*.py"))
        rows = {"first start": asyncio.run(session(ws, cache, doc, a.interval_ms, a.threads)),
                "restart (cache on disk)": asyncio.run(session(ws, cache, doc, a.interval_ms, a.threads))}
    keys = list(next(iter(rows.values())))
    print(f"workspace: {n} Python files, {chars / 1e6:.1f} MB, copied from {source}")
    print(f"{'':28}" + "".join(f"{k:>26}" for k in rows))
    for k in keys:
        print(f"{k:28}" + "".join(f"{str(r[k]):>26}" for r in rows.values()))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"files": n, "bytes": chars, "source": str(source), "runs": rows},
                                           indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
