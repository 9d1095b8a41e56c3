"""Soak run: a real ``edit-engine serve`` process under a mixed, misbehaving load for a long time.

``--ws`` websocket clients and ``--http`` HTTP clients (SSE streams and plain completions) send one request at
a time for ``--duration`` seconds. A share of the requests are aborted mid-stream (``--abort``: the websocket is
closed after the first pass and reopened, the SSE stream is dropped after its first event) and a share are
malformed (``--malformed``: not JSON, wrong types, unknown methods, a model the server lacks). Every
well-formed request that is not aborted must be answered; a malformed one must get an error. Counted:

- answered: results and completions; errors: error answers to well-formed requests (overload answers are
  counted apart, as ``overloaded``); lost: no answer within ``--request-timeout`` or a dropped connection;
- p50/p95 latency of answered requests, per front end;
- the server's resident memory every ``--sample-every`` seconds (flat after warm-up: the growth from the
  first sample after ``--warm-up`` seconds to the last is reported).

``--edit-clients`` more HTTP clients send next edits (``/v1/edit/completions``) and applies
(``/v1/apply/completions``) built from this package's sources, a share of them costly (a file of identical
lines: refused by the work budget, counted as ``refused``) and a share abandoned (``--abort``: the client
disconnects after ``--abandon-after`` seconds). ``/healthz`` is timed every second, and the fills' p95 is
compared between the first and the last ``--window`` seconds after warm-up (unchanged when edit work neither
piles up nor delays fills).

The server runs as its own process (``edit-engine serve`` on a free loopback port), so the memory is its own.
Prints a table and writes ``--json PATH`` (the server's log beside it). Exits 1 when a request was lost, a
well-formed one got an error, a malformed one was accepted, or the server logged a traceback (its shutdown, by
SIGTERM with requests in flight, included).

    OMP_NUM_THREADS=1 python benchmarks/soak.py --duration 600 --json soak.json     # 32 ws + 16 HTTP, 10 min
    python benchmarks/soak.py --model DIR --ws 2 --http 2 --duration 5 --sample-every 1   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from load_ws import prompts, rss_mib
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from edit_engine import protocol as rpc


class Tally:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {k: 0 for k in (
            "sent", "answered", "errors", "overloaded", "aborted", "malformed", "malformed_refused",
            "malformed_accepted", "lost", "refused")}
        self.latency: dict[str, list[float]] = {"ws": [], "http": [], "edit": [], "healthz": []}
        self.fills: list[tuple[float, float]] = []  # (monotonic time, ms) of answered websocket fills
        self.problems: list[str] = []

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)


def _malformed_ws(rng: random.Random, rid: int) -> str:
    return rng.choice([
        "{not json", json.dumps([1, 2]), json.dumps({"jsonrpc": "2.0", "id": rid, "method": "editEngine/nope"}),
        json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.INFILL, "params": {"prefix": 3}}),
        json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.INFILL, "params": {"text": "x", "offset": 99}}),
    ])


async def _ws_request(ws: Any, rid: int, params: dict[str, Any], abort: bool, timeout: float) -> str:
    """One request on ``ws``: 'answered', 'error', 'overloaded' or 'aborted' (raises TimeoutError if lost)."""
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.INFILL, "params": params}))
    async with asyncio.timeout(timeout):
        while True:
            m = json.loads(await ws.recv())
            if m.get("method") == rpc.PASS and abort:
                return "aborted"
            if m.get("id") == rid:
                if "result" in m:
                    return "answered"
                return "overloaded" if m["error"]["code"] == rpc.SERVER_OVERLOADED else "error"


async def ws_client(cid: int, url: str, deadline: float, work: list[tuple[str, str]], a: argparse.Namespace,
                    t: Tally) -> None:
    rng = random.Random(a.seed * 7919 + cid)
    rid = 0
    while time.monotonic() < deadline:
        try:
            async with connect(url, max_size=2**24) as ws:
                while time.monotonic() < deadline:
                    rid += 1
                    await asyncio.sleep(rng.uniform(0, a.think_ms / 1e3))  # the user typing
                    if rng.random() < a.malformed:
                        t.add("malformed")
                        await ws.send(_malformed_ws(rng, rid))
                        async with asyncio.timeout(a.request_timeout):
                            m = json.loads(await ws.recv())
                        t.add("malformed_refused" if "error" in m else "malformed_accepted")
                        continue
                    prefix, suffix = rng.choice(work)
                    params = {"prefix": prefix, "suffix": suffix, "maxTokens": a.max_tokens, "uri": f"file:///{cid}"}
                    abort = rng.random() < a.abort
                    t.add("sent")
                    t0 = time.perf_counter()
                    outcome = await _ws_request(ws, rid, params, abort, a.request_timeout)
                    t.add(outcome)
                    if outcome == "answered":
                        t.latency["ws"].append((time.perf_counter() - t0) * 1e3)
                        t.fills.append((time.monotonic(), t.latency["ws"][-1]))
                    if outcome == "aborted":
                        break  # close the socket mid-stream; the next loop opens a new one
        except TimeoutError:
            t.add("lost")
            t.problem(f"ws client {cid}: request {rid} not answered in {a.request_timeout} s")
        except (ConnectionClosed, OSError) as e:
            t.add("lost")
            t.problem(f"ws client {cid}: connection dropped: {type(e).__name__}: {e}")


async def http_client(cid: int, base: str, deadline: float, work: list[tuple[str, str]], a: argparse.Namespace,
                      t: Tally) -> None:
    rng = random.Random(a.seed * 104729 + cid)
    async with httpx.AsyncClient(base_url=base, timeout=a.request_timeout) as c:
        while time.monotonic() < deadline:
            await asyncio.sleep(rng.uniform(0, a.think_ms / 1e3))
            prefix, suffix = rng.choice(work)
            body: dict[str, Any] = {"prompt": prefix, "suffix": suffix, "max_tokens": a.max_tokens}
            try:
                if rng.random() < a.malformed:
                    t.add("malformed")
                    bad: dict[str, Any] = rng.choice([
                        {"content": b"{not json"}, {"json": {**body, "max_tokens": "many"}},
                        {"json": {**body, "model": "no-such-model"}}, {"json": {"prompt": 3}}])
                    r = await c.post("/v1/completions", headers={"Content-Type": "application/json"}, **bad)
                    t.add("malformed_refused" if r.status_code >= 400 else "malformed_accepted")
                    continue
                t.add("sent")
                t0 = time.perf_counter()
                if rng.random() < 0.5:  # an SSE stream, sometimes dropped after its first event
                    abort = rng.random() < a.abort
                    async with c.stream("POST", "/v1/completions", json={**body, "stream": True,
                                                                         "diffusing": True}) as r:
                        async for line in r.aiter_lines():
                            if line.startswith("data: ") and abort:
                                break
                    outcome = "aborted" if abort else ("answered" if r.status_code == 200 else "error")
                else:
                    r = await c.post("/v1/completions", json=body)
                    outcome = "answered" if r.status_code == 200 else "overloaded" if r.status_code == 503 else "error"
                t.add(outcome)
                if outcome == "answered":
                    t.latency["http"].append((time.perf_counter() - t0) * 1e3)
            except httpx.TimeoutException:
                t.add("lost")
                t.problem(f"http client {cid}: not answered in {a.request_timeout} s")
            except httpx.TransportError as e:
                t.add("lost")
                t.problem(f"http client {cid}: {type(e).__name__}: {e}")


def edit_work(seed: int) -> list[tuple[str, dict[str, Any]]]:
    """(path, body) of next-edit and apply requests on this package's sources: a rename at one row of a file
    with its diff as the history, a function body changed under markers, and costly ones (identical lines)."""
    import difflib

    from edit_engine.eval import apply_set

    rng = random.Random(seed)
    out: list[tuple[str, dict[str, Any]]] = []
    for c in apply_set.synthetic_cases(limit=40):
        out.append(_apply_request(c.original, c.update))
        rows = c.original.split("\n")
        k = rng.randrange(len(rows))
        words = [w for w in rows[k].replace("(", " ").replace(")", " ").split() if w.isidentifier()]
        if words:
            w = rng.choice(words)
            before = "\n".join(rows[:k] + [rows[k].replace(w, w + "_old", 1)] + rows[k + 1 :])
            diff = "".join(difflib.unified_diff(before.splitlines(True), c.original.splitlines(True), "a", "b"))
            cursor = sum(len(r) + 1 for r in rows[:k])
            doc = c.original[:cursor] + "<|cursor|>" + c.original[cursor:]
            out.append(("/v1/edit/completions", {"messages": [{"role": "user", "content": (
                f"<|current_file_content|>\n{doc}\n<|/current_file_content|>\n"
                f"<|edit_diff_history|>\n{diff}\n<|/edit_diff_history|>")}]}))
    out.append(_apply_request("x = 1\n" * 2000, "# ... existing code ...\n" + "x = 1\n" * 300 + "y = 2\n"
                              "# ... existing code ...\n"))
    return out


def _apply_request(original: str, update: str) -> tuple[str, dict[str, Any]]:
    return "/v1/apply/completions", {"messages": [{"role": "user", "content": (
        f"<|original_code|>\n{original}\n<|/original_code|>\n\n<|update_snippet|>\n{update}\n"
        "<|/update_snippet|>")}]}


async def edit_client(cid: int, base: str, deadline: float, work: list[tuple[str, dict[str, Any]]],
                      a: argparse.Namespace, t: Tally) -> None:
    rng = random.Random(a.seed * 15485863 + cid)
    async with httpx.AsyncClient(base_url=base, timeout=a.request_timeout) as c:
        while time.monotonic() < deadline:
            await asyncio.sleep(rng.uniform(0, a.think_ms / 1e3))
            path, body = rng.choice(work)
            abandon = rng.random() < a.abort
            t.add("sent")
            t0 = time.perf_counter()
            try:
                r = await c.post(path, json=body, timeout=a.abandon_after if abandon else a.request_timeout)
            except httpx.TimeoutException:
                if abandon:
                    t.add("aborted")
                    continue
                t.add("lost")
                t.problem(f"edit client {cid}: {path} not answered in {a.request_timeout} s")
                continue
            except httpx.TransportError as e:
                t.add("lost")
                t.problem(f"edit client {cid}: {type(e).__name__}: {e}")
                continue
            if r.status_code == 200:
                t.add("answered")
                t.latency["edit"].append((time.perf_counter() - t0) * 1e3)
            elif r.status_code == 503:
                t.add("overloaded")
            elif r.status_code == 400 and "budget" in r.text:
                t.add("refused")
            else:
                t.add("errors")
                t.problem(f"edit client {cid}: {path} answered {r.status_code}: {r.text[:200]}")


async def healthz(base: str, deadline: float, t: Tally) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            try:
                ok = (await c.get("/healthz")).status_code == 200
            except httpx.TransportError as e:
                ok = False
                t.problem(f"/healthz: {type(e).__name__}: {e}")
            t.latency["healthz"].append((time.perf_counter() - t0) * 1e3)
            if not ok:
                t.add("errors")
            await asyncio.sleep(1.0)  # the probe's period


def in_flight(base: str) -> list[socket.socket]:
    """Requests left in flight: websocket fills and edit requests sent and not read, and a request whose body
    never arrives; the sockets are returned so that they stay open."""
    host, port = base.removeprefix("http://").split(":")
    out = []
    for k, (path, body) in enumerate([("/v1/completions", {"prompt": "def f(x):\n    return ", "suffix": "\n",
                                                           "max_tokens": 64})] * 4 + edit_work(0)[:4]):
        data = json.dumps(body).encode()
        s = socket.create_connection((host, int(port)))
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data) + (k == 0)}\r\n\r\n".encode() + data)  # the first: a byte short
        out.append(s)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(a: argparse.Namespace, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "edit_engine.cli.main", "serve", "--port", str(port), "--log-level", "warning"]
    if a.model:
        cmd += ["--model", a.model]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # the server loads and warms its model before it listens
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        time.sleep(0.2)  # polling a process that is starting up: there is no event to wait on
    proc.kill()
    raise SystemExit("the server did not start within 300 s")


async def run(a: argparse.Namespace, pid: int, base: str) -> tuple[Tally, list[dict[str, float]]]:
    t = Tally()
    work = prompts(200, a.seed)
    start = time.monotonic()
    deadline = start + a.duration
    memory: list[dict[str, float]] = []

    async def sample() -> None:
        while time.monotonic() < deadline:
            memory.append({"t_s": round(time.monotonic() - start, 1), "rss_mib": round(rss_mib(pid), 1),
                           "caches_mib": await cache_mib(base), **{k: t.counts[k] for k in ("answered", "lost")}})
            await asyncio.sleep(min(a.sample_every, max(0.0, deadline - time.monotonic())))

    ws_url = base.replace("http://", "ws://") + "/v1/stream"
    edits = edit_work(a.seed) if a.edit_clients else []
    await asyncio.gather(sample(), healthz(base, deadline, t),
                         *(ws_client(i, ws_url, deadline, work, a, t) for i in range(a.ws)),
                         *(http_client(i, base, deadline, work, a, t) for i in range(a.http)),
                         *(edit_client(i, base, deadline, edits, a, t) for i in range(a.edit_clients)))
    t.start = start  # type: ignore[attr-defined]
    memory.append({"t_s": round(time.monotonic() - start, 1), "rss_mib": round(rss_mib(pid), 1),
                   "caches_mib": await cache_mib(base), **{k: t.counts[k] for k in ("answered", "lost")}})
    return t, memory


async def cache_mib(base: str) -> float:
    """The bytes the server's request-sized caches hold (``edit_engine_cache_bytes`` on /metrics), in MiB; NaN
    when the server does not answer."""
    try:
        async with httpx.AsyncClient(timeout=10) as c:
            text = (await c.get(base + "/metrics")).text
    except httpx.HTTPError:
        return float("nan")
    held = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("edit_engine_cache_bytes{")]
    return round(sum(held) / 2**20, 1) if held else float("nan")


def _pct(xs: list[float], q: int) -> float:
    return round(statistics.quantiles(xs, n=100)[q - 1], 1) if len(xs) >= 2 else float("nan")


def _windows(a: argparse.Namespace, t: Tally) -> dict[str, float]:
    """The websocket fills' p95 in the first and the last ``--window`` seconds after warm-up."""
    start = getattr(t, "start", 0.0)
    first = [ms for at, ms in t.fills if a.warm_up <= at - start < a.warm_up + a.window]
    last = [ms for at, ms in t.fills if at - start >= a.duration - a.window]
    return {"first": _pct(first, 95), "last": _pct(last, 95), "n_first": len(first), "n_last": len(last)}


def report(a: argparse.Namespace, t: Tally, memory: list[dict[str, float]]) -> dict[str, Any]:
    warm = [m for m in memory if m["t_s"] >= a.warm_up] or memory
    out: dict[str, Any] = {
        "settings": {k: getattr(a, k) for k in ("ws", "http", "duration", "abort", "malformed", "max_tokens",
                                                  "think_ms", "seed", "model")},
        **t.counts,
        "latency_ms": {k: {"p50": _pct(v, 50), "p95": _pct(v, 95), "n": len(v)} for k, v in t.latency.items()},
        "healthz_max_ms": round(max(t.latency["healthz"], default=float("nan")), 1),
        "fills_p95_ms": _windows(a, t),
        "rss_mib": {"after_warm_up": warm[0]["rss_mib"], "end": memory[-1]["rss_mib"],
                    "growth_after_warm_up": round(memory[-1]["rss_mib"] - warm[0]["rss_mib"], 1),
                    "max": max(m["rss_mib"] for m in memory),
                    # what the caches' byte budgets account for, and the rest
                    "caches_growth_after_warm_up": round(memory[-1]["caches_mib"] - warm[0]["caches_mib"], 1),
                    "growth_beside_caches": round(memory[-1]["rss_mib"] - warm[0]["rss_mib"]
                                                  - (memory[-1]["caches_mib"] - warm[0]["caches_mib"]), 1)},
        "memory": memory, "problems": t.problems,
    }
    print(f"{'sent':>7} {'answered':>8} {'errors':>6} {'overl.':>6} {'aborted':>7} {'malformed':>9} "
          f"{'lost':>4}  {'ws p50/p95 ms':>15}  {'http p50/p95 ms':>15}  {'RSS MiB warm→end':>17}")
    lat = out["latency_ms"]
    print(f"{t.counts['sent']:>7} {t.counts['answered']:>8} {t.counts['errors']:>6} {t.counts['overloaded']:>6} "
          f"{t.counts['aborted']:>7} {t.counts['malformed']:>9} {t.counts['lost']:>4}  "
          f"{lat['ws']['p50']:>7}/{lat['ws']['p95']:<7}  {lat['http']['p50']:>7}/{lat['http']['p95']:<7}  "
          f"{out['rss_mib']['after_warm_up']:>8}→{out['rss_mib']['end']:<8}")
    print(f"edits: p50/p95 {lat['edit']['p50']}/{lat['edit']['p95']} ms, refused by budget {t.counts['refused']}; "
          f"/healthz max {out['healthz_max_ms']} ms (p95 {lat['healthz']['p95']}); fills' p95 first/last window "
          f"{out['fills_p95_ms']['first']}/{out['fills_p95_ms']['last']} ms")
    print(f"RSS growth after warm-up {out['rss_mib']['growth_after_warm_up']} MiB, of it the caches (bounded in "
          f"bytes) {out['rss_mib']['caches_growth_after_warm_up']} MiB, the rest "
          f"{out['rss_mib']['growth_beside_caches']} MiB")
    print("RSS / caches every sample (s: MiB): " + ", ".join(
        f"{m['t_s']:.0f}: {m['rss_mib']:.0f}/{m['caches_mib']:.0f}" for m in memory))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    p.add_argument("--ws", type=int, default=32, help="websocket clients")
    p.add_argument("--http", type=int, default=16, help="HTTP clients")
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    p.add_argument("--abort", type=float, default=0.10, help="share of requests aborted mid-stream")
    p.add_argument("--malformed", type=float, default=0.05, help="share of requests that are malformed")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--think-ms", type=float, default=200.0, help="each client waits up to this long between requests")
    p.add_argument("--request-timeout", type=float, default=120.0, help="an answer later than this is lost")
    p.add_argument("--sample-every", type=float, default=30.0, help="seconds between memory samples")
    p.add_argument("--warm-up", type=float, default=60.0, help="memory growth is measured from this second on")
    p.add_argument("--edit-clients", type=int, default=4, help="HTTP clients sending next edits and applies")
    p.add_argument("--abandon-after", type=float, default=0.05, help="seconds before an abandoned edit disconnects")
    p.add_argument("--window", type=float, default=120.0, help="seconds of the first and last fill windows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the record here")
    a = p.parse_args()
    log = Path(a.json).with_suffix(".server.log") if a.json else Path(os.devnull)
    proc, base = start_server(a, log)
    try:
        t, memory = asyncio.run(run(a, proc.pid, base))
        out = report(a, t, memory)
        health = httpx.get(base + "/healthz", timeout=30).json()
        out["queue_depth_at_end"] = health["queueDepth"]
        held = in_flight(base)  # SIGTERM with requests in flight: the shutdown must log no traceback
    finally:
        proc.terminate()
        try:
            out_code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out_code = -9
    for s in held:
        s.close()
    out["server_exit"] = out_code
    logged = log.read_text(errors="replace") if a.json else ""
    out["server_tracebacks"] = logged.count("Traceback")
    print(f"server exit {out_code}, tracebacks in its log: {out['server_tracebacks']}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    failed = t.counts["lost"] or t.counts["errors"] or t.counts["malformed_accepted"] or out_code not in (0, -15) \
        or out["server_tracebacks"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
