"""The request shapes real editors send to ``/v1/completions``, against a real server: Zed's OpenAI-compatible
edit-prediction provider (the text after the cursor inside the prompt, between FIM tokens; a list of stop
strings; temperature 0.2; no ``suffix``), and the FIM templates of the other common coders."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from edit_engine.engine import Engine
from edit_engine.serve.app import BackgroundServer, create_app
from edit_engine.serve.fim import cut_at_stop, split_fim
from edit_engine.serve.settings import Settings

TIMEOUT = 60.0
PREFIX = "def mean(xs):\n    total = sum(xs)\n    return "
SUFFIX = "\n\n\nprint(mean([1, 2, 3]))\n"
# What Zed puts around the cursor for a model it does not recognise, and its stop strings.
ZED_STOP = ["<|endoftext|>", "<|file_separator|>", "<|fim_pad|>", "<|fim_prefix|>", "<|fim_middle|>",
            "<|fim_suffix|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<PRE>", "<SUF>", "<MID>",
            "[PREFIX]", "[SUFFIX]"]


@pytest.fixture(scope="module")
def server(packaged_engine: Engine) -> Iterator[BackgroundServer]:
    settings = Settings(port=0, log_level="warning")
    with BackgroundServer(create_app(settings, engine=packaged_engine), settings) as s:
        yield s


def _post(server: BackgroundServer, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_zed_edit_prediction_request_gets_the_fill_of_its_prefix_and_suffix(server: BackgroundServer) -> None:
    """Zed's body, field for field: the answer is the fill a plain {prompt, suffix} request gets (greedy at
    temperature 0 vs Zed's 0.2 would differ, so both are sent with Zed's temperature and the same seed), and
    never the markers."""
    zed = {"model": "edit-engine", "prompt": f"<fim_prefix>{PREFIX}<fim_suffix>{SUFFIX}<fim_middle>",
           "max_tokens": 64, "stop": ZED_STOP, "temperature": 0.2, "stream": False}
    plain = {"model": "edit-engine", "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 64, "temperature": 0.2}
    a, b = _post(server, zed), _post(server, plain)
    assert a["object"] == "text_completion" and a["id"]
    text = a["choices"][0]["text"]
    assert text == b["choices"][0]["text"] and text.strip()
    assert not any(marker in text for marker in ZED_STOP)


@pytest.mark.parametrize("template", [
    "<|fim_prefix|>{p}<|fim_suffix|>{s}<|fim_middle|>", "<PRE> {p} <SUF>{s} <MID>",
    "<\uff5cfim\u2581begin\uff5c>{p}<\uff5cfim\u2581hole\uff5c>{s}<\uff5cfim\u2581end\uff5c>",
    "[SUFFIX]{s}[PREFIX]{p}", "<|code_prefix|>{p}<|code_suffix|>{s}<|code_middle|>"])
def test_other_fim_templates_split_into_prefix_and_suffix(template: str) -> None:
    assert split_fim(template.format(p=PREFIX, s=SUFFIX)) == (PREFIX, SUFFIX)


def test_a_plain_prompt_and_a_given_suffix_are_left_alone(server: BackgroundServer) -> None:
    assert split_fim("x = <fim_prefix> but no template") is None
    literal = {"prompt": "s = '<fim_prefix>a<fim_suffix>b<fim_middle>'", "suffix": "\n", "max_tokens": 8,
               "temperature": 0}
    assert "choices" in _post(server, literal)  # with a suffix the prompt is the prefix, markers and all


def test_stop_strings_end_the_text_before_them(server: BackgroundServer) -> None:
    assert cut_at_stop("a + b\nprint", ["\n", "zz"]) == ("a + b", True)
    assert cut_at_stop("a + b", ["\n"]) == ("a + b", False)
    base = {"prompt": "def f(a, b):\n    return ", "suffix": "\n", "max_tokens": 16, "temperature": 0}
    whole = _post(server, base)["choices"][0]["text"]
    assert len(whole) > 1
    stop = whole[1:3] if len(whole) >= 3 else whole[1:]
    cut = _post(server, {**base, "stop": stop})["choices"][0]
    assert cut["text"] == whole[: whole.find(stop)] and cut["finish_reason"] == "stop"
    with httpx.stream("POST", server.url + "/v1/completions", json={**base, "stop": [stop], "stream": True,
                                                                     "diffusing": True}, timeout=TIMEOUT) as r:
        chunks = [line for line in r.iter_lines() if line.startswith("data: {")]
    assert chunks and all(stop not in c for c in chunks)
    too_many = httpx.post(server.url + "/v1/completions", json={**base, "stop": ["x"] * 33}, timeout=TIMEOUT)
    assert too_many.status_code == 400


def test_splitting_a_prompt_is_linear() -> None:
    """Many middle markers and no closing one (300 KB): a pattern with two greedy groups froze the server 23 s
    on this prompt, before its size was checked."""
    import time

    t0 = time.perf_counter()
    assert split_fim("<fim_prefix>" + "<fim_suffix>" * 25_000) is None
    assert split_fim("<fim_prefix>a<fim_suffix>b<fim_suffix>c<fim_middle>") == ("a<fim_suffix>b", "c")
    assert time.perf_counter() - t0 < 0.5
