"""Load test of the websocket endpoint: N concurrent JSON-RPC clients for a bounded time and request count.

Each client sends one request at a time, a mix of document requests ({text, offset}: planned by the engine,
batched, checked and repaired) and {prefix, suffix} ones (--document-fraction). Checks, per request: exactly one
answer; a result's last streamed pass is final and equals the result; errors are only deliberate ones (-32800
after our own $/cancelRequest, -32001 overload answers). Samples the resident memory of the server process every
second and compares the end with the level once every client has had its first answer (warm-up). At the end it
reads the server's /metrics: forward passes, and how many requests each shared (the batch-size histogram).

Loopback only, bounded in time (--duration, then the requests in flight finish) and count (--max-requests). By
default it starts the server in this process (uvicorn in a thread) on an ephemeral port, so the memory figure
covers server and clients; with --url it drives a running server and --pid names its process.

Prints a one-row table and the summary as JSON; ``--json PATH`` also writes the whole record there (the summary
plus the memory samples and the first problems found). Nothing is written without ``--json``. Exits 1 when a
request was lost, answered with an unexpected error, or broke the protocol.

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/load_ws.py --clients 32 --duration 60 --json load_ws.json
    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/load_ws.py --tiny --clients 32 --duration 60   # random tiny model
    python benchmarks/load_ws.py --model DIR --clients 2 --duration 2 --max-requests 4 --max-tokens 4   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from websockets.asyncio.client import connect

import edit_engine
from edit_engine import protocol as rpc

SOURCE = Path(edit_engine.__file__).resolve().parent  # prompts are cut from the package's own source

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def prompts(n: int, seed: int) -> list[tuple[str, str]]:
    files = sorted(SOURCE.rglob("*.py"))
    texts = [f.read_text(encoding="utf-8") for f in files]
    texts = [t for t in texts if len(t) > 2000]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        t = rng.choice(texts)
        cut = rng.randrange(1000, len(t) - 200)
        out.append((t[cut - 1000 : cut], t[cut : cut + 200]))
    return out


class Stats:
    def __init__(self) -> None:
        self.sent = self.ok = self.cancelled = self.overloaded = self.errors = self.lost = 0
        self.latencies: list[float] = []
        self.by_kind: dict[str, list[float]] = {"document": [], "prefix_suffix": []}  # latencies of ok answers
        self.sent_by_kind: dict[str, int] = {"document": 0, "prefix_suffix": 0}
        self.problems: list[str] = []


async def client(cid: int, url: str, headers: dict[str, str], deadline: float, budget: list[int],
                 work: list[tuple[str, str]], a: argparse.Namespace, st: Stats) -> None:
    rng = random.Random(a.seed * 1000 + cid)
    async with connect(url, additional_headers=headers, max_size=2**24) as ws:
        rid = 0
        while time.monotonic() < deadline and budget[0] > 0:
            budget[0] -= 1
            rid += 1
            prefix, suffix = rng.choice(work)
            cancel = rng.random() < a.cancel_fraction
            params: dict[str, Any] = {"maxTokens": a.max_tokens, "uri": f"file:///load/{cid}.py"}
            if rng.random() < a.document_fraction:  # planned by the engine, batched, then checked and repaired
                kind = "document"
                params.update(text=prefix + suffix, offset=len(prefix), languageId="python")
            else:
                kind = "prefix_suffix"
                params.update(prefix=prefix, suffix=suffix)
            t0 = time.perf_counter()
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.INFILL, "params": params}))
            st.sent += 1
            st.sent_by_kind[kind] += 1
            last_pass: dict[str, Any] | None = None
            answer = None
            try:
                async with asyncio.timeout(a.request_timeout):
                    while answer is None:
                        m = json.loads(await ws.recv())
                        if m.get("method") == rpc.PASS:
                            if m["params"]["requestId"] != rid:
                                st.problems.append(f"client {cid}: pass for {m['params']['requestId']} during {rid}")
                            last_pass = m["params"]
                            if cancel and m["params"]["passIndex"] == 0 and not m["params"]["final"]:
                                await ws.send(json.dumps({"jsonrpc": "2.0", "method": rpc.CANCEL,
                                                          "params": {"id": rid}}))
                        elif m.get("id") == rid:
                            answer = m
                        else:
                            st.problems.append(f"client {cid}: unexpected {str(m)[:120]}")
            except TimeoutError:
                st.lost += 1
                st.problems.append(f"client {cid}: request {rid} not answered in {a.request_timeout} s")
                return
            if "result" in answer:
                if last_pass is None or not last_pass["final"] or last_pass["text"] != answer["result"]["text"]:
                    st.problems.append(f"client {cid}: request {rid}: last pass differs from the result")
                    st.errors += 1
                else:
                    st.ok += 1
                    st.latencies.append(time.perf_counter() - t0)
                    st.by_kind[kind].append(time.perf_counter() - t0)
            elif answer["error"]["code"] == rpc.REQUEST_CANCELLED and cancel:
                st.cancelled += 1
            elif answer["error"]["code"] == rpc.SERVER_OVERLOADED:
                st.overloaded += 1
            else:
                st.errors += 1
                st.problems.append(f"client {cid}: request {rid}: {answer['error']}")


async def drive(url: str, a: argparse.Namespace, pid: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}
    work = prompts(64, a.seed)
    st = Stats()
    t_start = time.monotonic()
    deadline = t_start + a.duration
    budget = [a.max_requests]
    samples: list[tuple[float, float]] = []
    warm_at: list[float] = []  # when every client had its first answer (warm-up over)

    async def sample() -> None:
        while True:
            now = time.monotonic() - t_start
            samples.append((now, rss_mib(pid)))
            if not warm_at and st.ok + st.cancelled + st.overloaded + st.errors >= a.clients:
                warm_at.append(now)
            await asyncio.sleep(1.0)  # a sampling period, not synchronisation

    sampler = asyncio.create_task(sample())
    await asyncio.gather(*(client(i, url, headers, deadline, budget, work, a, st) for i in range(a.clients)))
    sampler.cancel()
    wall = time.monotonic() - t_start
    samples.append((wall, rss_mib(pid)))
    start = warm_at[0] if warm_at else wall
    warm = [r for t, r in samples if t >= start] or [samples[-1][1]]

    def q(xs: list[float], p: float) -> float:
        lat = sorted(xs)
        return round(lat[min(len(lat) - 1, int(p * (len(lat) - 1)))] * 1e3, 1) if lat else float("nan")

    answered = st.ok + st.cancelled + st.overloaded + st.errors
    return {
        "clients": a.clients, "duration_s": round(wall, 1), "sent": st.sent, "answered": answered, "ok": st.ok,
        "cancelled_deliberately": st.cancelled, "overloaded": st.overloaded, "errors": st.errors,
        "lost": st.lost + (st.sent - answered - st.lost),
        "sent_by_kind": st.sent_by_kind, "ok_by_kind": {k: len(v) for k, v in st.by_kind.items()},
        "req_per_s": round(st.ok / wall, 2), "p50_ms": q(st.latencies, 0.5), "p95_ms": q(st.latencies, 0.95),
        "p50_p95_ms_by_kind": {k: [q(v, 0.5), q(v, 0.95)] for k, v in st.by_kind.items()},
        "warmup_s": round(start, 1), "rss_mib_after_warmup": round(warm[0], 1), "rss_mib_end": round(samples[-1][1], 1),
        "rss_mib_max_after_warmup": round(max(warm), 1), "server": server_metrics(url, headers),
        "rss_samples": [(round(t, 1), round(r, 1)) for t, r in samples], "problems": st.problems[:20],
    }


def server_metrics(ws_url: str, headers: dict[str, str]) -> dict[str, Any]:
    """From the server's /metrics: forward passes, passes delivered, and the batch-size histogram."""
    u = urlparse(ws_url)
    req = urllib.request.Request(f"http://{u.netloc}/metrics", headers=headers)
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    n = values.get("edit_engine_batch_size_count", 0.0)
    return {
        "forward_passes": int(values.get("edit_engine_forward_passes_total", 0)),
        "passes_delivered": int(values.get("edit_engine_passes_total", 0)),
        "mean_batch": round(values.get("edit_engine_batch_size_sum", 0.0) / n, 2) if n else 0.0,
        "shared_forward_passes": int(n - values.get('edit_engine_batch_size_bucket{le="1"}', 0.0)),
        "retired": {k.split('"')[1]: int(v) for k, v in values.items()
                    if k.startswith("edit_engine_jobs_retired_total{")},
    }


def tiny_engine() -> Any:
    """A random-weight model of the ``tiny`` preset with a tokenizer trained on three stdlib modules (what the
    tests use): every fill runs to max_tokens, one token per pass, so per-pass overhead dominates."""
    import inspect
    import json as json_mod
    import random as random_mod
    import textwrap

    import torch

    from edit_engine.engine import Engine
    from edit_engine.model.network import PRESETS, DiffusionLM
    from edit_engine.model.tokenizer import Tokenizer

    tok = Tokenizer.train([inspect.getsource(m) for m in (random_mod, json_mod.decoder, textwrap)],
                          vocab_size=PRESETS["tiny"].vocab_size)
    torch.manual_seed(0)
    return Engine(DiffusionLM(PRESETS["tiny"]).eval(), tok)


def table(out: dict[str, Any]) -> str:
    """The run as one row: answers by outcome, latency, throughput, batching and memory."""
    by_kind = out["p50_p95_ms_by_kind"]["document"]
    ok = out["ok_by_kind"]
    head = ("| clients | wall s | sent | answered | ok (document + prefix/suffix) | cancelled | overloaded | errors "
            "| lost | p50 / p95 ms | p50 / p95 ms documents | req/s | mean batch | RSS MiB after warm-up -> end |")
    row = (f"| {out['clients']} | {out['duration_s']} | {out['sent']} | {out['answered']} | {out['ok']} "
           f"({ok['document']} + {ok['prefix_suffix']}) | {out['cancelled_deliberately']} | {out['overloaded']} "
           f"| {out['errors']} | {out['lost']} | {out['p50_ms']} / {out['p95_ms']} | {by_kind[0]} / {by_kind[1]} "
           f"| {out['req_per_s']} | {out['server']['mean_batch']} | {out['rss_mib_after_warmup']} -> "
           f"{out['rss_mib_end']} |")
    return "\n".join([head, "|" + "---|" * (head.count("|") - 1), row])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--url", help="ws://127.0.0.1:PORT/v1/stream of a running server (default: start one here)")
    ap.add_argument("--pid", type=int, help="process id of the server given by --url (for the memory figure)")
    ap.add_argument("--model", help="checkpoint directory for the in-process server (default: packaged)")
    ap.add_argument("--tiny", action="store_true", help="in-process server on a random tiny model (no checkpoint)")
    ap.add_argument("--api-key")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    ap.add_argument("--max-requests", type=int, default=100_000, help="stop after this many requests")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--cancel-fraction", type=float, default=0.1, help="requests cancelled after their first pass")
    ap.add_argument("--document-fraction", type=float, default=0.25,
                    help="requests sent as {text, offset} (document requests) instead of {prefix, suffix}")
    ap.add_argument("--request-timeout", type=float, default=120.0)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="write the whole record here (default: nothing is written)")
    a = ap.parse_args(argv)
    if a.url:
        host = urlparse(a.url).hostname or ""
        if host not in LOOPBACK:
            ap.error("loopback addresses only")
        out = asyncio.run(drive(a.url, a, a.pid or os.getpid()))
    else:
        import torch

        from edit_engine.engine import Engine
        from edit_engine.serve.app import BackgroundServer, create_app
        from edit_engine.serve.settings import Settings

        torch.set_num_threads(a.threads)
        settings = Settings(port=0, api_key=a.api_key, max_batch=a.max_batch, log_level="warning")
        engine = tiny_engine() if a.tiny else Engine.load(a.model)
        with BackgroundServer(create_app(settings, engine=engine), settings) as srv:
            out = asyncio.run(drive(srv.ws_url, a, os.getpid()))
        out["engine_context_cache_mib"] = round(engine.contexts.nbytes / 2**20, 1)
    out["command"] = " ".join(sys.argv)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    print(table(out))
    print(json.dumps({k: v for k, v in out.items() if k not in ("problems", "rss_samples")}, indent=2))
    for p in out["problems"]:
        print("problem:", p, file=sys.stderr)
    return 0 if out["errors"] == 0 and out["lost"] == 0 and not out["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
