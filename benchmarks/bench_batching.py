"""Batched against unbatched serving: throughput and p50/p95 latency with 1, 4 and 16 concurrent clients.

In-process, no network: each client submits its requests one after another to the scheduler and waits for the
final pass. Modes:
  batched    the scheduler with max_batch = 16 (passes of concurrent requests share forward passes)
  unbatched  the same scheduler with max_batch = 1 (requests run one at a time, in arrival order)
  threads    no scheduler: each client calls Engine.stream in its own thread (what a naive server does)

Prompts are slices of the package's own Python source (prefix before a random line start, suffix after it).
Prints a Markdown table (one row per mode and client count; progress on stderr); ``--json PATH`` also writes
the rows and the run's settings there (nothing is written without it).

    nice -n 19 python benchmarks/bench_batching.py --model runs/small/checkpoint --json bench.json
    python benchmarks/bench_batching.py --model DIR --clients 1,2 --requests 2 --max-tokens 4   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

import edit_engine
from edit_engine.engine import Engine
from edit_engine.serve.batching import JobSpec, Scheduler

SOURCE = Path(edit_engine.__file__).resolve().parent  # prompts are cut from the package's own source


def prompts(n: int, prefix_chars: int, suffix_chars: int, seed: int) -> list[tuple[str, str]]:
    files = sorted(SOURCE.rglob("*.py"))
    texts = [t for t in (f.read_text(encoding="utf-8") for f in files) if len(t) > prefix_chars + suffix_chars]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        t = rng.choice(texts)
        cut = rng.randrange(prefix_chars, len(t) - suffix_chars)
        cut = t.rfind("\n", 0, cut) + 1 or cut  # start of a line
        out.append((t[max(0, cut - prefix_chars) : cut], t[cut : cut + suffix_chars]))
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


async def run_mode(engine: Engine, mode: str, clients: int, work: list[tuple[str, str]], max_tokens: int,
                   max_batch: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    sched = None if mode == "threads" else Scheduler(engine, max_batch=max_batch if mode == "batched" else 1,
                                                     max_queue=len(work) + clients)
    queue = list(enumerate(work))
    latencies: list[float] = []
    nfe_total = 0
    passes_total = 0

    async def one(prefix: str, suffix: str) -> tuple[int, int]:
        if sched is None:
            def run() -> tuple[int, int]:
                last = None
                for p in engine.stream(prefix, suffix, max_tokens=max_tokens):
                    last = p
                assert last is not None
                return last.nfe, last.index + 1
            return await asyncio.to_thread(run)
        job = await asyncio.to_thread(sched.submit, JobSpec(prefix, suffix, max_tokens), loop)
        last = None
        async for p in job.passes():
            last = p
        assert last is not None and last.final
        return last.nfe, last.index + 1

    async def client() -> None:
        nonlocal nfe_total, passes_total
        while queue:
            _, (p, s) = queue.pop(0)
            t0 = time.perf_counter()
            nfe, n = await one(p, s)
            latencies.append(time.perf_counter() - t0)
            nfe_total += nfe
            passes_total += n

    await one(*work[0])  # warm-up, not timed
    forward0 = sched.metrics.forward_passes.value() if sched is not None else 0.0
    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - t0
    forward = None
    if sched is not None:
        forward = sched.metrics.forward_passes.value() - forward0
        sched.close()
    return {
        "mode": mode, "clients": clients, "requests": len(latencies), "wall_s": round(wall, 3),
        "req_per_s": round(len(latencies) / wall, 3), "passes_per_s": round(passes_total / wall, 1),
        "p50_ms": round(pct(latencies, 0.5) * 1e3, 1), "p95_ms": round(pct(latencies, 0.95) * 1e3, 1),
        "mean_batch": round(passes_total / forward, 2) if forward else 1.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    ap.add_argument("--clients", default="1,4,16", help="comma-separated client counts")
    ap.add_argument("--modes", default="batched,unbatched,threads")
    ap.add_argument("--requests", type=int, default=32, help="requests per (mode, clients) run")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--prefix-chars", type=int, default=1500)
    ap.add_argument("--suffix-chars", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="write the rows and settings here (default: nothing is written)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    engine = Engine.load(a.model, device=a.device)
    rows = []
    for clients in (int(c) for c in a.clients.split(",")):
        work = prompts(max(a.requests, clients), a.prefix_chars, a.suffix_chars, a.seed)
        for mode in a.modes.split(","):
            rows.append(asyncio.run(run_mode(engine, mode, clients, work, a.max_tokens, a.max_batch)))
            r = rows[-1]
            print(f"{r['mode']:>9} {r['clients']:>3} clients: {r['req_per_s']:7.2f} req/s  "
                  f"p50 {r['p50_ms']:8.1f} ms  p95 {r['p95_ms']:8.1f} ms  mean batch {r['mean_batch']}",
                  file=sys.stderr, flush=True)
    head = f"| {'mode':<9} | clients | requests | req/s  | passes/s | p50 ms  | p95 ms  | mean batch |"
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for r in rows:
        print(f"| {r['mode']:<9} | {r['clients']:>7} | {r['requests']:>8} | {r['req_per_s']:>6.2f} | "
              f"{r['passes_per_s']:>8.1f} | {r['p50_ms']:>7.1f} | {r['p95_ms']:>7.1f} | {r['mean_batch']:>10} |")
    meta = {"model": str(engine.path), "params": engine.model.num_parameters(), "device": a.device,
            "torch_threads": a.threads, "max_tokens": a.max_tokens, "prefix_chars": a.prefix_chars,
            "suffix_chars": a.suffix_chars, "machine": platform.machine(), "torch": torch.__version__,
            "command": " ".join(sys.argv)}
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
