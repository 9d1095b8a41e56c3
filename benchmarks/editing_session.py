"""A scripted editing session over LSP: type functions character by character, ask after every keystroke.

Starts the real language server (``python -m edit_engine.lsp``) on stdio; for each snippet (``--snippet``: the
three built-in ones by default) opens a file with some context, types the snippet one character at a time, and
closes the file. After each keystroke it sends the incremental ``didChange``, cancels
the previous request if it is still running (``$/cancelRequest``, as editors do), and sends a
``textDocument/inlineCompletion`` request with ``streamPasses`` on. Per request it records the time to the
first ``editEngine/pass`` and to the answer, and what the suggestion was worth: right (all of it is what the
typist goes on to type) and the characters of it that agree with that. Prints a table; ``--json PATH`` also writes the summary and every
request's record there (nothing is written without it).

Typing is paced at ``--interval-ms`` per keystroke (a simulated typist; 0 = as fast as the client can send);
``--wait`` instead waits for each answer before the next keystroke (no cancellations: pure request latency).
``--debounce-ms`` waits that long after each keystroke before asking, as editors do; the server starts the fill
on the keystroke unless ``--no-early`` (``startOnKeystroke``), and "keystroke to answer" is what the user
waits. The final pass of each answer carries the server's stage timings: the table gives their medians over the
answers that ran the model.

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/editing_session.py --threads 1 --json runs/editing_session.json
    python benchmarks/editing_session.py --threads 1 --wait --max-tokens 32 --json runs/editing_session_wait.json
    python benchmarks/editing_session.py --threads 2 --wait --json runs/editing_session_wait2.json
    python benchmarks/editing_session.py --threads 2 --wait --debounce-ms 50 [--no-early] --json runs/editing_session_debounce.json
    python benchmarks/editing_session.py --model DIR --snippet "x = 1" --wait --max-tokens 4   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import BaseLanguageClient

ROOT = Path(__file__).resolve().parents[1]  # the server runs this checkout's package
CONTEXT = '''"""Small helpers for reading configuration files."""

import json
from pathlib import Path


def load_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


'''
SUFFIX = '''


if __name__ == "__main__":
    print(merge_defaults({"a": 1}, {"b": 2}))
'''
SNIPPET = '''def merge_defaults(config: dict, defaults: dict) -> dict:
    out = dict(defaults)
    for key, value in config.items():
        out[key] = value
    return out'''
# The functions the session types (``--snippet``: one name, "all", or literal text), each in a document of its own.
SNIPPETS = {
    "merge": SNIPPET,
    "stack": ("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
              "        self.items.append(item)\n\n    def pop(self):\n        return self.items.pop()\n"),
    "words": ("def count_words(path: str) -> dict:\n    counts = {}\n    with open(path) as f:\n"
              "        for line in f:\n            for word in line.split():\n"
              "                counts[word] = counts.get(word, 0) + 1\n    return counts\n"),
}


def judge(now: str, at: int, item: Any, target: str) -> dict[str, Any]:
    """A suggestion against what the typist types next: the text it leaves after the cursor ``at`` in the
    document ``now``, whether all of it agrees with ``target`` (the finished document; typing only appends at
    the cursor, so both share the text before it) and how many characters of it agree."""
    start, end = at, at
    if item.range is not None:
        start = offset(now, item.range.start)
        end = offset(now, item.range.end)
    after = (now[:start] + item.insert_text + now[end:])[at : start + len(item.insert_text)]
    useful = 0
    for x, y in zip(after, target[at:], strict=False):
        if x != y:
            break
        useful += 1
    return {"text": item.insert_text, "right": bool(after) and useful == len(after), "useful": useful}


def offset(text: str, pos: Any) -> int:
    """Offset of an LSP position (ASCII text: characters = code units)."""
    lines = text.split("\n")
    return sum(len(x) + 1 for x in lines[: pos.line]) + pos.character


def percentile(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]); None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def _plain(obj: Any) -> dict[str, float]:
    """A JSON object as pygls hands it over (a named tuple of its fields) as a dict."""
    return dict(obj._asdict()) if hasattr(obj, "_asdict") else dict(obj)


def position(text: str, offset: int) -> types.Position:
    """UTF-16 position of an offset (the session types ASCII, so characters = code units)."""
    line = text.count("\n", 0, offset)
    return types.Position(line=line, character=offset - (text.rfind("\n", 0, offset) + 1))


async def session(a: argparse.Namespace) -> dict[str, Any]:
    client = BaseLanguageClient("editing-session", "0.1")
    first_pass: dict[str, float] = {}
    pass_counts: dict[str, int] = {}
    finals: dict[str, Any] = {}  # request id -> its final pass's params (stage timings, nfe)

    @client.feature("editEngine/pass")
    def on_pass(params: Any) -> None:
        rid = str(params.requestId)
        first_pass.setdefault(rid, time.perf_counter())
        pass_counts[rid] = pass_counts.get(rid, 0) + 1
        if getattr(params, "final", False):
            finals[rid] = params

    cmd = [sys.executable, "-m", "edit_engine.lsp"]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    if a.log_file:
        cmd += ["--log-file", a.log_file]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    await client.start_io(*cmd, env=env)
    init: dict[str, Any] = {"streamPasses": True, "startOnKeystroke": a.early}
    if a.model:
        init["modelPath"] = a.model
    if a.max_tokens:
        init["maxTokens"] = a.max_tokens
    if a.typing_repair_rounds is not None:
        init["typingRepairRounds"] = a.typing_repair_rounds
    t0 = time.perf_counter()
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                         initialization_options=init))
    client.initialized(types.InitializedParams())
    if a.snippet in (None, "all"):
        snippets = dict(SNIPPETS)
    elif a.snippet in SNIPPETS:
        snippets = {a.snippet: SNIPPETS[a.snippet]}
    else:
        snippets = {"text": a.snippet.replace("\\n", "\n")}
    # Warm-up: the first request loads the model; it is not counted.
    warm = "file:///editing_session_warm.py"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=warm, language_id="python", version=1, text=CONTEXT + SUFFIX)))
    await client.protocol.send_request_async("editEngine/infill", {
        "textDocument": {"uri": warm}, "position": {"line": 0, "character": 0}, "maxTokens": 1})
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=warm)))
    startup_ms = (time.perf_counter() - t0) * 1e3

    records: list[dict[str, Any]] = []
    pending: dict[str, asyncio.Future[Any]] = {}

    async def ask(rid: str, uri: str, pos: types.Position, sent: float, keystroke: int, now: str, at: int,
                  target: str) -> None:
        rec: dict[str, Any] = {"id": rid, "keystroke": keystroke}
        typed = sent
        if a.debounce_ms:  # the editor waits this long after the keystroke before it asks
            await asyncio.sleep(a.debounce_ms / 1e3)
            sent = time.perf_counter()
        try:
            result = await client.protocol.send_request_async(
                "textDocument/inlineCompletion",
                types.InlineCompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=pos,
                                             context=types.InlineCompletionContext(
                                                 trigger_kind=types.InlineCompletionTriggerKind.Automatic)),
                msg_id=rid)
            rec["outcome"] = "ok"
            items = getattr(result, "items", None) or []
            rec["chars"] = len(items[0].insert_text) if items else 0
            if items:
                rec.update(judge(now, at, items[0], target))
        except JsonRpcException as e:
            rec["outcome"] = {-32800: "cancelled", -32801: "stale"}.get(e.code, f"error {e.code}")
        done = time.perf_counter()
        rec["latency_ms"] = (done - sent) * 1e3
        rec["from_keystroke_ms"] = (done - typed) * 1e3
        if rid in first_pass:
            rec["first_pass_ms"] = (first_pass[rid] - sent) * 1e3
        rec["passes"] = pass_counts.get(rid, 0)
        final = finals.get(rid)
        if final is not None:
            rec["nfe"] = getattr(final, "nfe", None)
            stages = getattr(final, "timings", None)
            rec["stages"] = _plain(stages) if stages is not None else {}
        records.append(rec)

    t_typing = time.perf_counter()
    keystroke = 0
    for name, snippet in snippets.items():
        # Each snippet is typed into a document of its own, closed afterwards (so no other open document
        # offers the server text to copy).
        uri = f"file:///editing_session_{name}.py"
        text = CONTEXT + SUFFIX
        cursor = len(CONTEXT)
        version = 1
        target = CONTEXT + snippet + SUFFIX  # the document once the snippet is typed
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))
        previous: str | None = None
        for ch in snippet:
            pos = position(text, cursor)
            text = text[:cursor] + ch + text[cursor:]
            cursor += 1
            version += 1
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangePartial(range=types.Range(pos, pos), text=ch)]))
            if previous is not None and not pending[previous].done():
                client.protocol.notify("$/cancelRequest", types.CancelParams(id=previous))
            rid = f"k{keystroke}"
            pending[rid] = asyncio.ensure_future(ask(rid, uri, position(text, cursor), time.perf_counter(),
                                                     keystroke, text, cursor, target))
            previous = rid
            keystroke += 1
            if a.wait:
                await pending[rid]
            elif a.interval_ms:
                await asyncio.sleep(a.interval_ms / 1e3)  # the simulated typist's pace, not synchronisation
        await asyncio.gather(*pending.values())
        client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    await asyncio.gather(*pending.values())
    typing_s = time.perf_counter() - t_typing
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()

    ok = [r for r in records if r["outcome"] == "ok"]
    lat = [r["latency_ms"] for r in ok]
    ttfp = [r["first_pass_ms"] for r in records if "first_pass_ms" in r]
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    model_run = [r for r in ok if r.get("nfe")]
    shown = [r for r in ok if r.get("chars")]
    stages: dict[str, float | None] = {}
    for key in sorted({k for r in model_run for k in r.get("stages", {})}):
        stages[key] = percentile([r["stages"].get(key, 0.0) for r in model_run], 50)
    return {
        "model": a.model or "(packaged)", "snippets": list(snippets), "keystrokes": keystroke,
        "interval_ms": a.interval_ms,
        "wait": a.wait, "threads": a.threads, "startup_ms": round(startup_ms, 1), "typing_s": round(typing_s, 2),
        "outcomes": outcomes,
        "debounce_ms": a.debounce_ms, "start_on_keystroke": a.early,
        "latency_ms": {"n": len(lat), "p50": percentile(lat, 50), "p95": percentile(lat, 95)},
        "from_keystroke_ms": {"p50": percentile([r["from_keystroke_ms"] for r in ok], 50),
                              "p95": percentile([r["from_keystroke_ms"] for r in ok], 95)},
        "first_pass_ms": {"n": len(ttfp), "p50": percentile(ttfp, 50), "p95": percentile(ttfp, 95)},
        "passes_per_answer": {"p50": percentile([float(r["passes"]) for r in ok], 50)},
        # What the suggestions were worth: shown (non-empty), right (accepting it whole leaves text the typist
        # goes on to type), and the characters typed for the typist (the agreeing prefix of each suggestion).
        "suggestions": {"shown": len(shown), "right": sum(bool(r.get("right")) for r in shown),
                        "right_model_run": sum(bool(r.get("right")) for r in model_run),
                        "useful_chars": sum(r.get("useful", 0) for r in shown)},
        # Answers that ran the model (nfe > 0), apart from those answered without it (typing through a fill, a
        # copy): their latency, first pass and stage medians (server side, ms).
        "model_run": {"n": len(model_run),
                      "latency_ms": {"p50": percentile([r["latency_ms"] for r in model_run], 50),
                                     "p95": percentile([r["latency_ms"] for r in model_run], 95)},
                      "first_pass_ms": {"p50": percentile([r["first_pass_ms"] for r in model_run
                                                           if "first_pass_ms" in r], 50),
                                        "p95": percentile([r["first_pass_ms"] for r in model_run
                                                           if "first_pass_ms" in r], 95)},
                      "nfe": {"p50": percentile([float(r["nfe"]) for r in model_run], 50)},
                      "stages_p50_ms": stages},
        "requests": sorted(records, key=lambda r: r["keystroke"]),
    }


def table(r: dict[str, Any]) -> str:
    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:8.1f}"

    keystroke = {"n": r["latency_ms"]["n"], **r["from_keystroke_ms"]}
    rows = [
        ("request latency (answered)", r["latency_ms"]),
        ("keystroke to answer", keystroke),
        ("time to first pass", r["first_pass_ms"]),
    ]
    out = [f"model {r['model']}  keystrokes {r['keystrokes']}  interval {r['interval_ms']} ms  wait {r['wait']}  "
           f"threads {r['threads']}  debounce {r['debounce_ms']} ms  start on keystroke "
           f"{r.get('start_on_keystroke', False)}  startup {r['startup_ms']:.0f} ms",
           "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items())),
           f"{'':28} {'n':>5} {'p50 ms':>8} {'p95 ms':>8}"]
    for name, s in rows:
        out.append(f"{name:28} {s['n']:5d} {f(s['p50'])} {f(s['p95'])}")
    out.append(f"passes per answer, p50: {f(r['passes_per_answer']['p50']).strip()}")
    sg = r["suggestions"]
    out.append(f"suggestions shown {sg['shown']}, right {sg['right']} ({sg['right_model_run']} of them model-run), "
               f"characters typed for the typist {sg['useful_chars']}")
    m = r["model_run"]
    out.append(f"{'model-run answers (nfe > 0)':28} {m['n']:5d} {f(m['latency_ms']['p50'])} {f(m['latency_ms']['p95'])}")
    out.append(f"{'  their first pass':28} {m['n']:5d} {f(m['first_pass_ms']['p50'])} {f(m['first_pass_ms']['p95'])}")
    out.append(f"  their forward passes p50 {f(m['nfe']['p50']).strip()}; stage medians (ms): "
               + ", ".join(f"{k} {v:.1f}" for k, v in m["stages_p50_ms"].items() if v is not None))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--model", help="checkpoint directory (default: the packaged model)")
    p.add_argument("--threads", type=int, default=1, help="torch threads in the server (0 = torch's choice)")
    p.add_argument("--interval-ms", type=float, default=100.0, help="time between keystrokes")
    p.add_argument("--wait", action="store_true", help="wait for each answer before the next keystroke")
    p.add_argument("--max-tokens", type=int, help="maxTokens setting for the server")
    p.add_argument("--debounce-ms", type=float, default=0.0,
                   help="wait this long after each keystroke before asking, as editors do (the server may start "
                        "on the keystroke: startOnKeystroke); 'keystroke to answer' counts from the keystroke")
    p.add_argument("--early", action=argparse.BooleanOptionalAction, default=True,
                   help="startOnKeystroke in the server (default on, as the server has it; --no-early: off)")
    p.add_argument("--typing-repair-rounds", type=int, help="typingRepairRounds setting for the server")
    p.add_argument("--snippet", help=f"what to type: one of {', '.join(SNIPPETS)}, 'all' (the default: each in "
                   "a document of its own) or literal text (\\n for newlines)")
    p.add_argument("--log-file", help="server log file")
    p.add_argument("--json", "--out", dest="json", metavar="PATH",
                   help="write the JSON report here (--out: the same; default: nothing is written)")
    a = p.parse_args(argv)
    result = asyncio.run(session(a))
    print(table(result))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
