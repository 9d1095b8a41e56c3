"""Syntax repair and rewrite mode: the error check, the choice of slots to re-mask, and the engine's passes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_engine.engine import Engine
from edit_engine.syntax import repair
from edit_engine.syntax import trees as syntax

DOC = "def f(x):\n    y = x\n    return y\n"


def test_check_sees_what_the_fill_broke() -> None:
    doc = syntax.Document.parse(DOC, "python")
    at = DOC.index("    return")
    ok = repair.check(doc, at, at, "    z = 1\n")
    assert ok.errors == 0 and ok.ranges == []
    bad = repair.check(doc, at, at, "    z = (1 +\n")
    assert bad.errors >= 1
    assert all(0 <= a < b <= len("    z = (1 +\n") for a, b in bad.ranges)


def test_check_ignores_errors_the_document_already_had() -> None:
    text = "def f(x):\n    y = x\n\nz = = 2\n"
    doc = syntax.Document.parse(text, "python")
    assert doc.tree is not None and syntax.broken_nodes(doc.tree)
    at = text.index("\n\nz") + 1
    assert repair.check(doc, at, at, "    w = 3\n").errors == 0
    assert repair.check(doc, at, at, "    w = )\n").errors >= 1


def test_python_check_sees_indentation_tree_sitter_accepts() -> None:
    doc = syntax.Document.parse(DOC, "python")
    at = DOC.index("    return")
    fill = "        z = 1\n"  # unexpected indent: tree-sitter-python parses it without an error node
    tree = doc.parse_with(at, at, fill)
    assert tree is not None and not tree.root_node.has_error
    bad = repair.check(doc, at, at, fill)
    assert bad.errors == 1 and bad.ranges == [(0, len(fill) - 1)]
    # An error the document already had (a hole that removed a block opener) is not the fill's.
    text = "def f(x):\n\n        return x\n"
    hole = syntax.Document.parse(text, "python")
    assert repair.check(hole, 10, 10, "").errors == 0
    assert repair.check(hole, 10, 10, "    if x:\n").errors == 0


def test_check_without_grammar_is_clean() -> None:
    doc = syntax.Document.parse("x = (", "cobol")
    assert repair.check(doc, 0, 0, ")))") == repair.Check(0, [], False)


def test_to_raw_follows_postprocessing() -> None:
    raw = "\n  x = (1 +\n  y"
    fill = "\n    x = (1 +\n    y)"
    a = fill.index("(")
    (ra, rb), = repair.to_raw([(a, a + 1)], raw, fill)
    assert raw[ra:rb] == "("


def test_remask_masks_the_broken_slots_and_their_least_confident_neighbours() -> None:
    mask, pad = 1, 0
    canvas = torch.tensor([10, 11, 12, 13, 14, 15, 16, 17, pad, pad])
    real = canvas != pad
    spans = [(i, i + 1) if r else (8, 8) for i, r in enumerate(real.tolist())]
    conf = torch.tensor([0.9, 0.1, 0.9, 0.9, 0.9, 0.2, 0.9, 0.9, 0.5, 0.5])
    out = repair.remask(canvas, conf, spans, [(4, 5)], False, real, mask)
    masked = (out == mask).nonzero().flatten().tolist()
    assert 4 in masked and 5 in masked and 1 in masked  # the slot, then the least confident around it
    assert len(masked) <= int(repair.SHARE * 8)
    assert (out[8:] == pad).all()  # pads are never re-masked
    assert (out[out != mask] == canvas[out != mask]).all()


def test_remask_error_elsewhere_takes_the_least_confident() -> None:
    canvas = torch.arange(10, 18)
    conf = torch.linspace(0.9, 0.1, 8)
    out = repair.remask(canvas, conf, [(i, i + 1) for i in range(8)], [], True, torch.ones(8, dtype=torch.bool), 1)
    assert (out == 1).nonzero().flatten().tolist() == [6, 7]


# ---------------------------------------------------------------------------------------------- through the engine
def _errors(language: str, text: str) -> int:
    doc = syntax.Document.parse(text, language)
    assert doc.tree is not None
    return len(syntax.broken_nodes(doc.tree))


@pytest.mark.parametrize("text,offset", [(DOC, DOC.index("x\n")), ("def f(x):", 9), ("def f(x):\n    return max()\n", 25)])
def test_complete_repairs_within_bounds_and_streams_it(tiny_engine: Engine, text: str, offset: int) -> None:
    c = tiny_engine.complete(text, offset, "python", max_tokens=16)
    for key in ("plan", "parse", "repair", "denoise", "total"):
        assert key in c.timings
    passes = list(tiny_engine.stream_complete(text, offset, "python", max_tokens=16))
    assert passes[-1].final and [p.final for p in passes].count(True) == 1
    assert passes[-1].text == c.text and passes[-1].nfe == c.nfe and len(passes) == c.passes
    assert [p.index for p in passes] == list(range(len(passes)))
    assert all((p.start, p.end) == (c.start, c.end) for p in passes)
    assert [p.nfe for p in passes] == sorted(p.nfe for p in passes)
    # Passes whose canvas was fully decided (masked == 0) end each round; the first such one is unrepaired.
    rounds = [p for p in passes if p.masked == 0]
    assert 1 <= len(rounds) <= 1 + repair.MAX_ROUNDS
    first = rounds[0].text
    with_first = _errors("python", text[: c.start] + first + text[c.end :])
    assert _errors("python", text[: c.start] + c.text + text[c.end :]) <= with_first
    plain = tiny_engine.complete(text, offset, "python", max_tokens=16, repair=False)
    assert plain.text == first and plain.nfe == rounds[0].nfe


@pytest.mark.parametrize("text,offset", [(DOC, DOC.index("x\n")), ("def f(x):\n    return max()\n", 25)])
def test_repair_caps_its_rounds(tiny_engine: Engine, text: str, offset: int) -> None:
    """``repair=N`` runs at most N repair rounds; 0 checks the first round's fill and keeps its longest prefix
    that parses (no more passes); a bad count is refused."""
    full = list(tiny_engine.stream_complete(text, offset, "python", max_tokens=16))
    first = [p for p in full if p.masked == 0][0]
    plain = tiny_engine.complete(text, offset, "python", max_tokens=16, repair=False)
    for n in range(repair.MAX_ROUNDS + 1):
        passes = list(tiny_engine.stream_complete(text, offset, "python", max_tokens=16, repair=n))
        assert len([p for p in passes if p.masked == 0]) <= 1 + n + 1  # the rounds, then the final pass
        assert passes[-1].nfe <= full[-1].nfe
    capped = tiny_engine.complete(text, offset, "python", max_tokens=16, repair=0)
    assert capped.nfe == first.nfe == plain.nfe and capped.timings["repair"] == 0.0
    assert first.text.startswith(capped.text)
    assert _errors("python", text[: capped.start] + capped.text + text[capped.end :]) <= \
        _errors("python", text[: capped.start] + first.text + text[capped.end :])
    with pytest.raises(ValueError, match="repair"):
        tiny_engine.complete(text, offset, "python", repair=-1)


def test_rewrite_starts_from_the_selection(tiny_engine: Engine) -> None:
    sel = (DOC.index("y = x"), len(DOC) - 1)
    tok = tiny_engine.tokenizer
    ids = tok.encode(DOC[sel[0] : sel[1]])
    ins = list(tiny_engine.stream_complete(DOC, sel[0], "python", selection=sel, repair=False))
    rew = list(tiny_engine.stream_complete(DOC, sel[0], "python", selection=sel, mode="rewrite", repair=False))
    assert rew[-1].final and (rew[-1].start, rew[-1].end) == sel
    assert rew[0].nfe == 2  # one scoring pass, then the first denoising pass
    # After one denoising pass most of the selection's tokens are already there (only the least likely quarter
    # was re-masked); filling from masks has committed a few slots only.
    kept = sum(tok.decode([i]) in rew[0].text for i in ids)
    assert kept >= len(ids) - max(1, len(ids) // 4)
    assert len(tok.encode(ins[0].text)) < len(ids) // 2


def test_bad_mode_is_rejected(tiny_engine: Engine) -> None:
    with pytest.raises(ValueError):
        tiny_engine.complete(DOC, 0, "python", mode="replace")


def test_unknown_language_and_uri(tiny_engine: Engine) -> None:
    c = tiny_engine.complete("foo(bar)\n", 4, "cobol", max_tokens=4)
    assert c.kind == "in_line" and c.start == c.end == 4
    c1 = tiny_engine.complete(DOC, 9, "python", max_tokens=4, uri="file:///a.py")
    c2 = tiny_engine.complete(DOC + "z = 1\n", 9, "python", max_tokens=4, uri="file:///a.py")
    assert c1.kind == c2.kind == "block_body" and len(tiny_engine.syntax_cache) == 1


TEXTS = st.lists(st.sampled_from(["def f(x):", "\n", "    ", "return ", "max(", ")", "😀", "日本", "e\u0301", "# c",
                                  "'s'", " = ", "1"]), max_size=12).map("".join)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS, data=st.data(), language=st.sampled_from(["python", "go", "cobol"]))
def test_completion_edits_only_its_span(tiny_engine: Engine, text: str, data: st.DataObject, language: str) -> None:
    offset = data.draw(st.integers(0, len(text)))
    c = tiny_engine.complete(text, offset, language, max_tokens=4)
    assert 0 <= c.start <= offset <= c.end <= len(text)
    passes = list(tiny_engine.stream_complete(text, offset, language, max_tokens=4))
    assert passes[-1].text == c.text and all((p.start, p.end) == (c.start, c.end) for p in passes)
    new = text[: c.start] + c.text + text[c.end :]
    assert new.startswith(text[: c.start]) and new.endswith(text[c.end :])


# ------------------------------------------------------------------------------------------------------ salvage
def test_cut_points_are_line_ends_then_the_first_lines_tokens() -> None:
    assert repair.cut_points("x = foo(a)") == [9, 8, 7, 3, 1]  # after "a", "(", "foo", "=", "x"
    body = "a = 1\nb = (2"
    assert repair.cut_points(body) == [6, 5, 3, 1]  # the break after line 1, then line 1's tokens
    assert repair.cut_points("\n    x = (1") == [10, 8, 6, 1]  # a block body's first line of code


def test_salvage_cuts_within_a_block_bodys_first_line() -> None:
    text = "def f(x):\n\ny = 2\n"
    doc = syntax.Document.parse(text, "python")
    at = text.index(":") + 1
    fill = "\n    return g(x,\n"
    assert repair.check(doc, at, at, fill).errors >= 1
    assert repair.salvage(doc, at, at, fill) == "\n    return g\n"


def test_salvage_cuts_a_broken_line_back_to_its_longest_clean_prefix() -> None:
    doc = syntax.Document.parse(DOC, "python")
    at = DOC.index("    return")
    fill = "    z = foo(a, b\n"
    assert repair.check(doc, at, at, fill).errors >= 1
    cut = repair.salvage(doc, at, at, fill)
    assert cut == "    z = foo\n"
    assert repair.check(doc, at, at, cut).errors == 0


def test_salvage_keeps_whole_lines_of_a_block_first() -> None:
    doc = syntax.Document.parse(DOC, "python")
    at = DOC.index("    return")
    assert repair.salvage(doc, at, at, "    a = g(1)\n    b = (2 +\n") == "    a = g(1)\n"


def test_salvage_gives_up_without_a_prefix_that_holds_code() -> None:
    doc = syntax.Document.parse(DOC, "python")
    at = DOC.index("    return")
    assert repair.salvage(doc, at, at, "    if x ==:\n") is None  # no prefix of an if-header parses
    assert repair.salvage(doc, at, at, "    # note (\n") is None  # only a comment: not code
    assert repair.salvage(doc, at, at, "    (\n") is None
    assert repair.salvage(doc, at, at, "    z = foo(a, b\n", limit=2) is None  # the bound on parses holds


FILLS = st.lists(st.sampled_from(["    ", "z", " = ", "(", ")", "[", "1", ", ", "\n", ":", "if ", "# c", "日本", "'"]),
                 min_size=1, max_size=10).map("".join)


@settings(max_examples=60, deadline=None)
@given(fill=FILLS)
def test_salvage_returns_a_clean_prefix_with_code_or_nothing(fill: str) -> None:
    doc = syntax.Document.parse(DOC, "python")
    at = DOC.index("    return")
    cut = repair.salvage(doc, at, at, fill, budget_ms=1e9)
    if cut is None:
        return
    body = fill.rstrip()
    assert cut.endswith(fill[len(body):]) and body.startswith(cut[: len(cut) - len(fill) + len(body)])
    assert repair.check(doc, at, at, cut).errors == 0
    assert any(ln.strip() and not ln.lstrip().startswith("#") for ln in cut.splitlines())


def test_engine_final_pass_salvages_a_fill_that_still_breaks(tiny_engine: Engine) -> None:
    from edit_engine.engine.rounds import Rounds, final

    at = DOC.index("    return")
    dp = tiny_engine.plan_document(DOC, at, "python")
    assert dp.checks
    timings: dict[str, float] = {}
    st_ = Rounds(best=("    z = foo(a, b\n", 2))
    p = final(tiny_engine.rt, dp, st_, timings)
    assert p.final and p.text == "    z = foo\n" and "salvage" in timings
    # A fill that breaks nothing, or one with no clean prefix, is returned as it is.
    for best in [("    z = 1\n", 0), ("    (\n", 1)]:
        timings = {}
        p = final(tiny_engine.rt, dp, Rounds(best=best), timings)
        assert p.text == best[0] and "salvage" not in timings
    off = tiny_engine.plan_document(DOC, at, "python", repair=False)
    assert final(tiny_engine.rt, off, Rounds(best=("    z = foo(a, b\n", 2)), {}).text == "    z = foo(a, b\n"


def test_salvage_keeps_a_headers_close() -> None:
    """A header fill is cut back before its ``:`` and keeps it: cutting the colon off would leave a statement
    before a deeper line, an error the document already had and so one the check would not see."""
    text = "def f(xs):\n    r = []\n\n        r.append(xs)\n"
    doc = syntax.Document.parse(text, "python")
    at = text.index("\n\n") + 1
    fill = "    for x in xs)) if:"
    assert repair.check(doc, at, at, fill).errors >= 1
    assert not (repair.salvage(doc, at, at, fill) or "").endswith(":")  # without it the colon is cut off
    cut = repair.salvage(doc, at, at, fill, close=":")
    assert cut == "    for x in xs:"
    assert repair.check(doc, at, at, cut).errors == 0
    assert repair.salvage(doc, at, at, "    return x:", close=":") is None  # no header in any prefix
