"""Unit and property tests of the language server's conversion layer: document edits and their line index, message
framing, and settings."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types

from edit_engine import protocol
from edit_engine.lsp.documents import Document, apply_change
from edit_engine.lsp.settings import Settings, parse
from edit_engine.lsp.transport import Framer
from edit_engine.syntax.positions import ENCODINGS, line_starts, offset_to_position, position_to_offset

# Text with the characters that make encodings differ: ASCII, 2- and 3-byte UTF-8, astral (surrogate pairs in
# UTF-16), and every LSP line break.
CHARS = st.sampled_from(list("ab \t") + ["é", "—", "漢", "😀", "𝄞", "\n", "\r\n", "\r"])
TEXTS = st.lists(CHARS, max_size=40).map("".join)


def _range(text: str, start: int, end: int, encoding: Any) -> types.Range:
    (sl, sc), (el, ec) = offset_to_position(text, start, encoding), offset_to_position(text, end, encoding)
    return types.Range(types.Position(sl, sc), types.Position(el, ec))


def _inside_crlf(text: str, offset: int) -> bool:
    return 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n"


@settings(max_examples=150, deadline=None)
@given(TEXTS, TEXTS, st.data(), st.sampled_from(ENCODINGS))
def test_incremental_change_round_trips(text: str, new: str, data: st.DataObject, encoding: Any) -> None:
    """An edit sent as LSP positions in any encoding lands on exactly the characters it names."""
    a = data.draw(st.integers(0, len(text)))
    b = data.draw(st.integers(a, len(text)))
    # An offset between the \r and \n of a CRLF has no LSP position of its own (it is the end of the line).
    if _inside_crlf(text, a) or _inside_crlf(text, b):
        return
    change = types.TextDocumentContentChangePartial(range=_range(text, a, b, encoding), text=new)
    assert apply_change(text, change, encoding) == text[:a] + new + text[b:]


@settings(max_examples=50, deadline=None)
@given(TEXTS, TEXTS)
def test_whole_document_change_replaces_the_text(text: str, new: str) -> None:
    assert apply_change(text, types.TextDocumentContentChangeWholeDocument(text=new), "utf-16") == new


@settings(max_examples=150, deadline=None)
@given(TEXTS, st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), TEXTS), max_size=8), st.sampled_from(ENCODINGS),
       st.data())
def test_the_line_index_follows_every_edit(text: str, edits: list[tuple[float, float, str]], encoding: Any,
                                           data: st.DataObject) -> None:
    """The document's line index, updated edit by edit, is the index of the text built from scratch; its position
    conversions are ``edit_engine.syntax.positions``' (out-of-range positions included)."""
    doc = Document("file:///t.py", text, 1, "python")
    for fa, fb, new in edits:
        a, b = sorted((round(fa * len(doc.text)), round(fb * len(doc.text))))
        if _inside_crlf(doc.text, a) or _inside_crlf(doc.text, b):
            continue
        expected = doc.text[:a] + new + doc.text[b:]
        doc.apply(types.TextDocumentContentChangePartial(range=_range(doc.text, a, b, encoding), text=new), encoding)
        assert doc.text == expected
        assert doc.index.starts.tolist() == line_starts(doc.text)
    for _ in range(4):
        line, character = data.draw(st.integers(0, 12)), data.draw(st.integers(0, 12))
        assert doc.offset(line, character, encoding) == position_to_offset(doc.text, line, character, encoding)
        offset = data.draw(st.integers(0, len(doc.text)))
        assert doc.position(offset, encoding) == offset_to_position(doc.text, offset, encoding)


JSON_BODIES = st.dictionaries(st.text(max_size=6), st.text(max_size=20) | st.integers(), max_size=3).map(
    lambda d: json.dumps({"jsonrpc": "2.0", "method": "m", "params": d}).encode())


def _framed(body: bytes, length: int | None = None) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length) + body


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[i:j] for i, j in zip(points, points[1:], strict=False)]


@st.composite
def broken(draw: st.DrawFn) -> bytes:
    """Bytes that are not one well-framed message."""
    body = draw(JSON_BODIES)
    return draw(st.sampled_from([
        _framed(body, len(body) + draw(st.integers(1, 300))),  # too long
        _framed(body, draw(st.integers(0, len(body) - 1))),  # too short
        _framed(body)[:draw(st.integers(0, len(body)))],  # truncated
        b"Content-Length: x\r\n\r\n" + body, b"Content-Type: a\r\n\r\n" + body,  # no usable length
        _framed(body, 2**40), b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n" + body,  # over the limit
        b"Content-Length: 7\r\n", draw(st.binary(max_size=50))]))


@settings(max_examples=200, deadline=None)
@given(st.lists(JSON_BODIES, min_size=1, max_size=4), st.lists(broken(), max_size=3), st.lists(st.integers(0, 10**6)))
def test_framing_recovers_at_the_next_header(good: list[bytes], noise: list[bytes], cuts: list[int]) -> None:
    """Whatever came before (a wrong length, a truncated body, a header without a length, noise) and however the
    stream is cut into reads, the well-framed messages after it come out whole and last."""
    stream = b"".join(noise) + b"".join(_framed(b) for b in good)
    framer = Framer(max_bytes=2**20)
    frames = [f for chunk in _chunks(stream, cuts) for f in framer.feed(chunk)]
    assert [f.body for f in frames[-len(good):]] == good
    assert all(f.problem is None for f in frames[-len(good):])
    if not noise:
        assert len(frames) == len(good) and framer.skipped == []


def test_a_length_too_large_waits_then_yields_to_the_next_message() -> None:
    framer = Framer()
    first = b'{"jsonrpc": "2.0", "method": "a"}'
    assert framer.feed(_framed(first, len(first) + 100)) == []  # it may still be arriving
    second = b'{"jsonrpc": "2.0", "method": "b"}'
    cut, whole = framer.feed(_framed(second))
    assert (cut.body, whole.body, whole.problem) == (first, second, None)
    assert cut.problem is not None and "next message" in cut.problem


def test_the_document_limit_is_the_http_servers() -> None:
    from edit_engine.serve.settings import Settings as ServeSettings

    assert ServeSettings().max_document_chars == protocol.MAX_DOCUMENT_CHARS


def test_logging_defaults_keep_stderr_for_warnings() -> None:
    """Editors show every stderr line as an error: INFO goes to stderr only when asked for; a log file gets INFO."""
    import logging

    from edit_engine.lsp.cli import configure_logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging(None, None)
        assert root.level == logging.WARNING
        configure_logging(None, "INFO")
        assert root.level == logging.INFO
        configure_logging(os.devnull, None)
        assert root.level == logging.INFO
    finally:
        for h in root.handlers:
            h.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_settings_defaults_and_valid_values(tmp_path: Path) -> None:
    s, warnings = parse({"modelPath": str(tmp_path), "maxTokens": 12, "threshold": 0.5, "streamPasses": True,
                         "minCommit": 2, "spread": 3, "floorRamp": 1, "typingRepairRounds": 2})
    assert warnings == []
    assert s == Settings(model_path=str(tmp_path), max_tokens=12, threshold=0.5, stream_passes=True, min_commit=2,
                         spread=3, floor_ramp=1, typing_repair_rounds=2)
    assert s.overrides() == {"threshold": 0.5, "min_commit": 2, "spread": 3, "floor_ramp": 1}
    assert parse({"spread": True})[0].spread == 1 and parse({"spread": False})[0].spread == 0
    assert parse(None) == (Settings(), [])
    assert Settings().overrides() == {}


def test_settings_nested_section_and_partial_update() -> None:
    base, _ = parse({"maxTokens": 5})
    s, warnings = parse({"editEngine": {"streamPasses": True}}, base)
    assert warnings == [] and s == Settings(max_tokens=5, stream_passes=True)


def test_invalid_settings_fall_back_to_defaults_with_a_warning(tmp_path: Path) -> None:
    base = Settings(max_tokens=9, threshold=0.3, stream_passes=True, typing_repair_rounds=1)
    s, warnings = parse({"modelPath": str(tmp_path / "missing"), "maxTokens": 0, "threshold": float("nan"),
                         "streamPasses": 1, "typo": 3, "minCommit": 0, "spread": 9, "remask": 0.5,
                         "floorRamp": -1, "typingRepairRounds": 3}, base)
    assert s == Settings()
    assert len(warnings) == 10  # remask: a setting measurements rejected, now unknown
    assert all(any(k in w for w in warnings)
               for k in ("modelPath", "maxTokens", "threshold", "streamPasses", "typo", "minCommit", "spread",
                         "remask", "floorRamp", "typingRepairRounds"))
    assert parse([1, 2], base)[0] == base and len(parse([1, 2], base)[1]) == 1


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=3),
                    max_leaves=8)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["modelPath", "maxTokens", "threshold", "streamPasses", "minCommit", "spread",
                                        "remask", "floorRamp", "typingRepairRounds", "other"]),
                       JSON))
def test_any_json_gives_valid_settings(options: dict[str, Any]) -> None:
    s, warnings = parse(options)
    assert s.max_tokens is None or (isinstance(s.max_tokens, int) and s.max_tokens >= 1)
    assert s.threshold is None or s.threshold >= 0
    assert s.min_commit is None or (isinstance(s.min_commit, int) and s.min_commit >= 1)
    assert s.spread is None or (type(s.spread) is int and 0 <= s.spread <= 8)
    assert s.floor_ramp is None or (type(s.floor_ramp) is int and s.floor_ramp >= 0)
    assert isinstance(s.stream_passes, bool)
    assert type(s.typing_repair_rounds) is int and 0 <= s.typing_repair_rounds <= 2
    assert s.model_path is None or Path(s.model_path).is_dir()
    assert len(warnings) <= len(options)


def test_cli_registers_the_lsp_subcommand() -> None:
    from edit_engine.cli.main import build_parser

    a = build_parser().parse_args(["lsp", "--log-file", "server.log", "--threads", "2"])
    assert (a.command, a.log_file, a.threads, a.tcp, a.model) == ("lsp", "server.log", 2, None, None)
    assert build_parser().parse_args(["lsp", "--tcp", "2087"]).tcp == 2087


def test_lsp_refuses_a_public_address_without_allow_remote(capsys: pytest.CaptureFixture[str]) -> None:
    """The language server has no authentication: ``--tcp`` on an address beyond this machine is refused with
    one line (exit 2) before anything listens, unless the user says ``--allow-remote``."""
    from edit_engine.cli.args import is_loopback
    from edit_engine.cli.main import main

    for host in ("0.0.0.0", "192.0.2.10", "::"):
        assert main(["lsp", "--tcp", "1", "--host", host]) == 2
        assert "--allow-remote" in capsys.readouterr().err
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
