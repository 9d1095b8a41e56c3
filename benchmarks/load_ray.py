"""Load run of the Ray Serve application against the single-process server: the same client and model.

Targets (``--targets``), each a server process of its own on a free loopback port, started and stopped here:

- ``single``: ``edit-engine serve`` (one process);
- ``ray1``, ``ray2``: ``edit-engine serve --ray --replicas N`` on a local Ray instance (token authentication
  with a token of this run's, nothing written to ``~/.ray``);
- ``ray2-spread``: two replicas with ``--affinity 0`` (requests go to the less loaded replica, documents
  ignored), to show what affinity is worth.

Against each: ``load_ws.py``'s client (``--clients`` websocket clients, one request at a time, 25% document
requests, 10% cancelled after their first pass) for ``--duration`` seconds, then the editing sessions: each of
``--sessions`` clients types into a document of its own (``uri``), one document request per line typed at a
blank line, ``--session-requests`` each. Reported per target: answered, errors, lost, overloaded, p50/p95, answers
per second, requests per batched forward pass (from ``/metrics``, summed over replicas), resident memory per
replica and of the whole server (the process and everything it started: Ray's own processes too), and for
Ray targets the share of context-cache lookups the sessions found in their replica's cache (hits and partial
hits over lookups, from ``/metrics``) and the share of their context tokens reused rather than encoded.

Prints a table; ``--json PATH`` writes every figure. Exits 1 when a request was lost or wrongly answered.

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/load_ray.py --clients 32 --duration 60 --json load_ray.json
    python benchmarks/load_ray.py --tiny --targets single,ray1 --clients 2 --duration 3 --sessions 1   # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from load_ws import drive, rss_mib
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from edit_engine import protocol as rpc

TARGETS = {"single": (0, 1), "ray1": (1, 1), "ray2": (2, 1), "ray2-spread": (2, 0)}  # replicas (0: no Ray), affinity
START_TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tiny_checkpoint(folder: Path) -> str:
    """A random tiny model saved as a checkpoint (server processes load it from disk)."""
    import torch
    from load_ws import tiny_engine

    from edit_engine.model import checkpoint

    engine = tiny_engine()
    checkpoint.save(folder, engine.model, engine.tokenizer, {"note": "random weights (load_ray.py)"},
                    dtype=torch.float32)
    return str(folder)


class Server:
    """One target as a process of its own; ``stop()`` ends it (SIGTERM, as an operator would)."""

    def __init__(self, target: str, a: argparse.Namespace, model: str | None) -> None:
        replicas, affinity = TARGETS[target]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "edit_engine.cli.main", "serve", "--port", str(self.port), "--threads",
               str(a.threads), "--log-level", "warning", "--max-tokens", "256"]
        cmd += ["--model", model] if model else []
        if replicas:
            cmd += ["--ray", "--replicas", str(replicas), "--affinity", str(affinity)]
        env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "RAY_USAGE_STATS_ENABLED": "0",
               "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "TOKENIZERS_PARALLELISM": "false"}
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, text=True, env=env,
                                     start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._up():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                raise RuntimeError(f"{target} did not start:\n{self.log.read()[-3000:]}")
            threading.Event().wait(0.5)

    def _up(self) -> bool:
        try:
            return httpx.get(self.url + "/healthz", timeout=5).json().get("status") == "ok"
        except (httpx.HTTPError, ValueError):
            return False

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(60)

    def tree_rss_mib(self) -> float:
        """Resident memory of the server process and every process it started (Ray's too)."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        total, todo = 0.0, [self.proc.pid]
        while todo:
            pid = todo.pop()
            try:
                total += rss_mib(pid)
            except OSError:
                pass
            todo += children.get(pid, [])
        return total


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``/metrics``: samples by name."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def total(m: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for lab, v in m.get(name, []) if all(lab.get(k) == x for k, x in labels.items()))


DOC_BODY = "".join(f"import module_{i}\n" for i in range(12)) + "\n\nclass Shape:\n    def area(self, x):\n" \
    "        y = x + 1\n        if y:\n            z = y\n"


async def session(cid: int, url: str, n: int, max_tokens: int, timeout: float) -> int:
    """A client typing into ``file:///session/<cid>.py``: a request at the blank line after each line typed.
    Each document starts differently (the server keys a document's cached context by its first tokens), so only
    the replica that served a document's last request can reuse its context. Returns the requests answered."""
    ok = 0
    async with connect(url, max_size=2**24) as ws:
        for k in range(n):
            text = f'"""Session {cid}: shapes and their areas."""\n' + DOC_BODY + "".join(f"            v{cid}_{j} = {j}\n" for j in range(k))
            params = {"text": text + "\nprint(Shape())\n", "offset": len(text), "uri": f"file:///session/{cid}.py",
                      "maxTokens": max_tokens, "stream": False}
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": k, "method": rpc.INFILL, "params": params}))
            async with asyncio.timeout(timeout):
                while True:
                    m = json.loads(await ws.recv())
                    if m.get("id") == k:
                        ok += "result" in m
                        break
    return ok


async def sessions(url: str, a: argparse.Namespace) -> int:
    answers = await asyncio.gather(*(session(c, url, a.session_requests, a.max_tokens, a.request_timeout)
                                     for c in range(a.sessions)))
    return sum(answers)


def replica_rss(m: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, float]:
    """Resident memory of each Engine replica (``edit_engine_replica_info`` names their processes)."""
    out = {}
    for labels, _ in m.get("edit_engine_replica_info", []):
        try:
            out[labels["replica"]] = round(rss_mib(int(labels["pid"])), 1)
        except OSError:
            pass
    return out


def cache_figures(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Context-cache lookups of the sessions (after - before), summed over replicas."""
    d = {k: total(after, "edit_engine_context_cache_lookups_total", outcome=k)
         - total(before, "edit_engine_context_cache_lookups_total", outcome=k) for k in ("hits", "partial", "misses")}
    n = sum(d.values())
    tok = {k: total(after, "edit_engine_context_cache_tokens_total", kind=k)
           - total(before, "edit_engine_context_cache_tokens_total", kind=k) for k in ("reused", "encoded")}
    t = tok["reused"] + tok["encoded"]
    return {**d, "lookups": n, "reuse": round((d["hits"] + d["partial"]) / n, 3) if n else None,
            "tokens_reused": tok["reused"], "tokens_encoded": tok["encoded"],
            "token_reuse": round(tok["reused"] / t, 3) if t else None}


def run_target(target: str, a: argparse.Namespace, model: str | None) -> dict[str, Any]:
    t0 = time.monotonic()
    server = Server(target, a, model)
    started_s = round(time.monotonic() - t0, 1)
    try:
        ws_url = server.url.replace("http", "ws") + "/v1/stream"
        out = asyncio.run(drive(ws_url, a, server.proc.pid))
        m = scrape(server.url)
        passes = total(m, "edit_engine_batch_size_count")
        out.update(target=target, start_s=started_s, replicas=TARGETS[target][0],
                   forward_passes=int(total(m, "edit_engine_forward_passes_total")),
                   requests_per_forward_pass=round(total(m, "edit_engine_batch_size_sum") / passes, 2) if passes else 0.0,
                   replica_rss_mib=replica_rss(m) if TARGETS[target][0] else {"server": round(rss_mib(server.proc.pid), 1)},
                   server_tree_rss_mib=round(server.tree_rss_mib(), 1))
        if a.sessions:
            t1 = time.monotonic()
            answered = asyncio.run(sessions(ws_url, a))
            out["sessions"] = {"answered": answered, "sent": a.sessions * a.session_requests,
                               "seconds": round(time.monotonic() - t1, 1), **cache_figures(m, scrape(server.url))}
    finally:
        out_exit = server.stop()
    out["exit"] = out_exit
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| target | answered (ok) | cancelled | overloaded | errors | lost | p50 / p95 ms | answers/s "
            "| requests per forward pass | RSS per replica MiB | RSS whole server MiB | sessions: context reuse |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        rss = " / ".join(f"{v:.0f}" for v in r["replica_rss_mib"].values())
        s = r.get("sessions") or {}
        reuse = "n/a" if not r["replicas"] else \
            (f"{s['reuse']:.0%} of {s['lookups']:.0f} lookups, {s['token_reuse']:.0%} of tokens"
             if s.get("reuse") is not None else "-")
        lines.append(f"| {r['target']} | {r['answered']} ({r['ok']}) | {r['cancelled_deliberately']} | "
                     f"{r['overloaded']} | {r['errors']} | {r['lost']} | {r['p50_ms']} / {r['p95_ms']} | "
                     f"{r['req_per_s']} | {r['requests_per_forward_pass']} | {rss} | {r['server_tree_rss_mib']:.0f} "
                     f"| {reuse} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    ap.add_argument("--tiny", action="store_true", help="a random tiny model (saved to a temp folder)")
    ap.add_argument("--targets", default="single,ray1,ray2,ray2-spread",
                    help=f"comma-separated, of {', '.join(TARGETS)}")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load per target")
    ap.add_argument("--max-requests", type=int, default=100_000)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--cancel-fraction", type=float, default=0.1)
    ap.add_argument("--document-fraction", type=float, default=0.25)
    ap.add_argument("--request-timeout", type=float, default=600.0)
    ap.add_argument("--sessions", type=int, default=8, help="editing-session clients after the load (0: none)")
    ap.add_argument("--session-requests", type=int, default=12, help="document requests per session")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per server process / replica")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="write every figure here (default: nothing is written)")
    a = ap.parse_args(argv)
    targets = [t.strip() for t in a.targets.split(",") if t.strip()]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        ap.error(f"unknown targets {unknown}; known: {', '.join(TARGETS)}")
    a.api_key = None  # what load_ws.drive reads
    with tempfile.TemporaryDirectory(prefix="load-ray-") as tmp:
        model = tiny_checkpoint(Path(tmp)) if a.tiny else a.model
        rows = [run_target(t, a, model) for t in targets]
    record = {"command": " ".join(sys.argv), "rows": rows}
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(record, indent=2) + "\n")
    print(table(rows))
    bad = [r for r in rows if r["errors"] or r["lost"] or r["problems"]]
    for r in bad:
        print(f"{r['target']}: problems {r['problems'][:5]}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
