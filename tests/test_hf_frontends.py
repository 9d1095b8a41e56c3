"""Open checkpoints (edit_engine/hf) through the other two front ends: the real language server over stdio and
the real websocket/HTTP server, each on a tiny random ``transformers`` model saved into a tmp folder (no
download). ``tests/test_hf.py`` covers parity, the Engine and the CLI; the folders here are built the same way.

Fills are noise from random weights, so no test asserts specific text: answers must be well formed, streamed
passes must end with a final pass equal to the answer, and each front end must give what ``Engine.load`` on the
same folder gives in-process (fp32 on CPU, one thread: deterministic).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

import httpx  # noqa: E402
import pytest_asyncio  # noqa: E402
from helpers import plain  # noqa: E402
from lsprotocol import types  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402
from tokenizers import Tokenizer as HFTok  # noqa: E402
from websockets.sync.client import ClientConnection, connect  # noqa: E402

from edit_engine import protocol as rpc  # noqa: E402
from edit_engine.engine import Engine  # noqa: E402
from edit_engine.model import hf  # noqa: E402
from edit_engine.serve.app import BackgroundServer, create_app  # noqa: E402
from edit_engine.serve.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 90.0  # seconds for any single wait (server start-up, model load, a fill) on a loaded machine
MAX_TOKENS = 8
DOC = "import os\n\n\ndef add(a, b):\n    return \n\n\nprint(add(1, 2))\n"
CURSOR = DOC.index("return ") + len("return ")
PREFIX, SUFFIX = DOC[:CURSOR], DOC[CURSOR:]
FAMILIES = ["dream", "llada"]


# ---------------------------------------------------------------------------------------------------- folders
def _dream_folder(d: Path, tok: HFTok) -> Path:
    """Dream layout: Qwen2 weights, config rewritten to model_type 'Dream' + mask_token_id (shifted logits)."""
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=tok.get_vocab_size() + 8, hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=512, rope_theta=1000.0, tie_word_embeddings=False)
    transformers.Qwen2ForCausalLM(cfg).eval().save_pretrained(d)
    eos = tok.token_to_id("<|endoftext|>")
    raw = json.loads((d / "config.json").read_text())
    raw.update(model_type="Dream", architectures=["DreamModel"], mask_token_id=tok.token_to_id("<|mask|>"),
               pad_token_id=eos, eos_token_id=eos)
    (d / "config.json").write_text(json.dumps(raw))
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>",
         "add_bos_token": False}))
    return d


def _llama(tok: HFTok) -> Any:
    """A tiny random LLaMA, to be written in LLaDA's native layout (mask found as '<|mdm_mask|>')."""
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(vocab_size=tok.get_vocab_size() + 8, hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=512, rope_theta=500000.0, rms_norm_eps=1e-5,
                                   tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, hf_tokenizer: Callable[[str], HFTok],
            write_llada_folder: Callable[[Path, Any, HFTok], Path]) -> dict[str, Path]:
    """The two folders, built by the shared conftest pieces as tests/test_hf.py builds its own (smaller here)."""
    llada_tok = hf_tokenizer("<|mdm_mask|>")
    return {"dream": _dream_folder(tmp_path_factory.mktemp("dream"), hf_tokenizer("<|mask|>")),
            "llada": write_llada_folder(tmp_path_factory.mktemp("llada"), _llama(llada_tok), llada_tok)}


@pytest.fixture(scope="module")
def engines(folders: dict[str, Path]) -> dict[str, Engine]:
    out = {name: Engine.load(d) for name, d in folders.items()}
    assert {name: e.record["family"] for name, e in out.items()} == {"dream": "dream", "llada": "llada"}
    assert all(isinstance(e.model, hf.FullAttnLM) for e in out.values())
    return out


# ---------------------------------------------------------------------------------------------------- LSP
def lsp_range(text: str, start: int, end: int) -> dict[str, Any]:
    """An LSP range (UTF-16, the default encoding) computed here, independently of edit_engine.syntax.positions."""
    def p(offset: int) -> dict[str, int]:
        line_start = text.rfind("\n", 0, offset) + 1
        return {"line": text.count("\n", 0, offset),
                "character": len(text[line_start:offset].encode("utf-16-le")) // 2}
    return {"start": p(start), "end": p(end)}


def inside(text: str, r: dict[str, Any]) -> bool:
    lines = text.split("\n")
    s, e = (r["start"]["line"], r["start"]["character"]), (r["end"]["line"], r["end"]["character"])
    ok = all(0 <= ln < len(lines) and 0 <= ch <= len(lines[ln].encode("utf-16-le")) // 2 for ln, ch in (s, e))
    return ok and s <= e


class Session:
    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.passes: dict[Any, list[dict[str, Any]]] = {}

        @client.feature("editEngine/pass")
        def on_pass(params: Any) -> None:
            params = plain(params)
            self.passes.setdefault(params["requestId"], []).append(params)

    async def request(self, method: str, params: Any, msg_id: str) -> Any:
        return await asyncio.wait_for(
            self.client.protocol.send_request_async(method, params, msg_id=msg_id), DEADLINE)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=FAMILIES)
async def lsp(request: pytest.FixtureRequest, folders: dict[str, Path],
              tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[str, Session]]:
    """The real ``python -m edit_engine.lsp`` over stdio, modelPath = the HF folder, as tests/test_lsp.py starts it."""
    family = request.param
    log_file = tmp_path_factory.mktemp(f"lsp-{family}") / "server.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "edit_engine.lsp", "--threads", "1", "--log-file", str(log_file)],
        server_env=env)
    client = await config.start()
    assert isinstance(client, LanguageClient)
    session = Session(client)
    caps = types.ClientCapabilities(text_document=types.TextDocumentClientCapabilities(
        inline_completion=types.InlineCompletionClientCapabilities()))
    result = await asyncio.wait_for(client.initialize_session(types.InitializeParams(
        capabilities=caps, initialization_options={"modelPath": str(folders[family]), "streamPasses": True,
                                                   "maxTokens": MAX_TOKENS})), DEADLINE)
    assert result.capabilities.inline_completion_provider is not None
    yield family, session
    await asyncio.wait_for(client.shutdown_session(), DEADLINE)
    await client.stop()


def _open(s: Session, uri: str, version: int = 1) -> None:
    s.client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=version, text=DOC)))


@pytest.mark.asyncio(loop_scope="module")
async def test_lsp_inline_completion_on_hf_folder(lsp: tuple[str, Session], engines: dict[str, Engine]) -> None:
    family, s = lsp
    uri = f"file:///inline-{family}.py"
    _open(s, uri)
    cursor = lsp_range(DOC, CURSOR, CURSOR)["start"]
    result = await s.request("textDocument/inlineCompletion", types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=types.Position(line=cursor["line"], character=cursor["character"]),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)),
        f"inline-{family}")
    assert isinstance(result, types.InlineCompletionList), result
    expected = engines[family].complete(DOC, CURSOR, max_tokens=MAX_TOKENS)
    if not expected.text:
        assert result.items == []
        return
    (item,) = result.items
    assert isinstance(item.insert_text, str) and item.insert_text == expected.text
    assert "<|mask|>" not in item.insert_text and "<|mdm_mask|>" not in item.insert_text
    assert item.range is not None
    got = s.client.protocol._converter.unstructure(item.range)
    assert inside(DOC, got) and got == lsp_range(DOC, expected.start, expected.end)
    passes = s.passes[f"inline-{family}"]  # streamPasses is on: the inline request streams too
    assert passes[-1]["final"] and passes[-1]["text"] == item.insert_text


@pytest.mark.asyncio(loop_scope="module")
async def test_lsp_infill_streams_passes_ending_with_the_answer(lsp: tuple[str, Session],
                                                               engines: dict[str, Engine]) -> None:
    family, s = lsp
    uri = f"file:///stream-{family}.py"
    _open(s, uri, version=3)
    rid = f"infill-{family}"
    answer = plain(await s.request("editEngine/infill", {
        "textDocument": {"uri": uri}, "position": lsp_range(DOC, CURSOR, CURSOR)["start"]}, rid))
    passes = s.passes[rid]  # every pass was sent before the answer, and messages arrive in order
    assert passes, "no editEngine/pass was streamed"
    assert [p["passIndex"] for p in passes] == list(range(len(passes)))
    assert [p["final"] for p in passes] == [False] * (len(passes) - 1) + [True]
    assert all(p["uri"] == uri and p["version"] == 3 and p["range"] == answer["range"] for p in passes)
    assert passes[-1]["text"] == answer["text"] and passes[-1]["masked"] == 0
    assert answer["passes"] == len(passes) and answer["version"] == 3
    assert answer["stopReason"] in ("complete", "length", "line")
    assert isinstance(answer["text"], str) and inside(DOC, answer["range"])
    expected = engines[family].complete(DOC, CURSOR, max_tokens=MAX_TOKENS)
    assert answer["text"] == expected.text
    assert answer["range"] == lsp_range(DOC, expected.start, expected.end)


# ---------------------------------------------------------------------------------------------------- websocket
TIMEOUT = 60.0


@pytest.fixture(scope="module", params=FAMILIES)
def server(request: pytest.FixtureRequest, folders: dict[str, Path]) -> Iterator[tuple[str, BackgroundServer]]:
    """The real server loading the HF folder from its settings (as ``edit-engine serve --model DIR`` does)."""
    settings = Settings(port=0, log_level="warning", model=str(folders[request.param]))
    with BackgroundServer(create_app(settings), settings) as srv:
        yield request.param, srv


def ws_request(rid: int | str, **params: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.INFILL, "params": params})


def until_answer(ws: ClientConnection, rid: int | str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    passes = []
    for _ in range(10_000):
        m = json.loads(ws.recv(timeout=TIMEOUT))
        if m.get("method") == rpc.PASS:
            if m["params"]["requestId"] == rid:
                passes.append(m["params"])
        elif m.get("id") == rid:
            return passes, m
    raise AssertionError("no answer")


def check_stream(passes: list[dict[str, Any]], answer: dict[str, Any]) -> dict[str, Any]:
    assert "result" in answer, answer
    res = answer["result"]
    assert passes, "no pass was streamed"
    assert [p["passIndex"] for p in passes] == list(range(len(passes)))
    assert passes[-1]["final"] and not any(p["final"] for p in passes[:-1])
    assert passes[-1]["text"] == res["text"] and passes[-1]["masked"] == 0
    assert res["passes"] == len(passes) and res["nfe"] >= 1 and res["stopReason"] in ("complete", "length", "line")
    return res  # type: ignore[no-any-return]


def test_ws_prefix_suffix_and_document_requests(server: tuple[str, BackgroundServer],
                                                engines: dict[str, Engine]) -> None:
    family, srv = server
    with connect(srv.ws_url, open_timeout=TIMEOUT) as ws:
        ws.send(ws_request(1, prefix=PREFIX, suffix=SUFFIX, languageId="python", maxTokens=MAX_TOKENS))
        res = check_stream(*until_answer(ws, 1))
        assert res["text"] == engines[family].infill(PREFIX, SUFFIX, max_tokens=MAX_TOKENS).text

        ws.send(ws_request("doc", text=DOC, offset=CURSOR, uri="file:///w.py", version=2, maxTokens=MAX_TOKENS))
        passes, answer = until_answer(ws, "doc")
        res = check_stream(passes, answer)
        expected = engines[family].complete(DOC, CURSOR, max_tokens=MAX_TOKENS)
        assert res["text"] == expected.text and res["version"] == 2
        assert res["range"] == lsp_range(DOC, expected.start, expected.end) and inside(DOC, res["range"])
        assert all(p["range"] == res["range"] and p["uri"] == "file:///w.py" for p in passes)


def test_http_completion(server: tuple[str, BackgroundServer], engines: dict[str, Engine]) -> None:
    family, srv = server
    body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": MAX_TOKENS, "temperature": 0}
    r = httpx.post(srv.url + "/v1/completions", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["object"] == "text_completion"
    (ch,) = j["choices"]
    assert ch["finish_reason"] in ("stop", "length") and isinstance(ch["text"], str)
    assert ch["text"] == engines[family].infill(PREFIX, SUFFIX, max_tokens=MAX_TOKENS).text
    u = j["usage"]
    assert u["prompt_tokens"] > 0 and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
