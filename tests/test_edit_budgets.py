"""Next edit and apply do bounded work: whatever the shape of their input, a request finishes in a time
proportional to its size (its work budget refuses what would take longer), stops when its caller stops it, and
answers inputs nested thousands deep with a clear error or a result, never a RecursionError."""

from __future__ import annotations

import difflib
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_engine.edits import apply as applying
from edit_engine.edits import budget, propagate
from edit_engine.edits import next_edit as ne
from edit_engine.edits.sites import Edit

# Seconds a request may take: a fixed part and a part per character of its texts. The budget's own figures
# (``budget.limit``) bound the work to about a tenth of this on a 2-core machine; the margin absorbs a slower
# or busier one.
FIXED_S, PER_CHAR_S = 1.0, 50e-6


def _diff(a: str, b: str) -> str:
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "a", "b", n=3))


def _apply_input(shape: str, n: int) -> tuple[str, str, str]:
    """(original, update, language) of a shape that costs more than linear time when unbounded."""
    m = "# ... existing code ...\n"
    if shape == "identical":
        return "x = 1\n" * n, m + "x = 1\n" * max(2, n // 10) + "y = 2\n" + m, "python"
    if shape == "repeated-blocks":
        block = "if a:\n    b = c\n    d()\n"
        return block * n, m + block * max(1, n // 20) + "e = 1\n" + m, "python"
    if shape == "chunks":
        orig = "".join(f"a{i} = {i}\n" for i in range(n))
        return orig, "".join(f"{m}a{i} = {i}\nb{i} = 0\n" for i in range(0, n, 2)) + m, "python"
    if shape == "definitions":
        orig = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(n))
        upd = "".join(f"{m}def g{i}(x):\n    return x + {i}\n" for i in range(0, n, 3)) + m
        return orig, upd, "python"
    if shape == "nested":
        orig = "function f() {\n" * n + "}\n" * n + "function g() { return 2; }\n"
        return orig, "// ... existing code ...\nfunction g() { return 3; }\n", "javascript"
    if shape == "long-line":
        return "x = [" + "1, " * (20 * n) + "]\ny = 2\n", m + "y = 3\n", "python"
    raise AssertionError(shape)


def _next_edit_input(shape: str, n: int) -> tuple[str, list[str]]:
    """(document, history) of a shape that costs more than linear time when unbounded."""
    if shape == "replaced-rows":
        before = "".join(f"value_{i} = compute({i})\n" for i in range(n))
        after = "".join(f"other_{i} = evaluate({i}, x)\n" for i in range(n + 1))
        return after, [_diff(before, after)]
    if shape == "removed-definitions":
        before = "".join(f"def f{i}(x):\n    return x\n" for i in range(n)) + "y = 1\n"
        return "y = 1\n", [_diff(before, "y = 1\n")]
    if shape == "one-row-hunks":
        before = "".join(f"a{i} = {i}\n\n\n\n\n\n\n\n" for i in range(n))
        after = "".join(f"a{i} = {i + 1}\n\n\n\n\n\n\n\n" for i in range(n))
        return after, [_diff(before, after)]
    if shape == "aliases":
        rows = "".join(f"    v{i} = obj.attr{i}.call()\n" for i in range(n))
        before = "def f(obj):\n" + rows
        after = "def f(obj):\n" + "".join(f"    name{i} = obj.attr{i}\n" for i in range(n)) + rows
        return after, [_diff(before, after)]
    if shape == "long-row":
        before = "def f(old_name):\n    return " + " + ".join(["old_name"] * (4 * n)) + "\n"
        after = before.replace("def f(old_name)", "def f(new_name)")
        return after, [_diff(before, after)]
    if shape == "blanks":
        return "x = a" + " " * (20 * n) + "b\n", ["@@ -1 +1 @@\n-x = 1\n+x = a" + " " * (20 * n) + "b\n"]
    if shape == "changed-calls":  # each call's new argument looked up above it, in one long function
        rows = "".join(f"    value_{i} = compute(alpha, beta, gamma)  # the step number {i} of the long run\n"
                       for i in range(n))
        before = "def run(alpha, beta, gamma):\n" + rows
        after = before.replace("compute(alpha, beta, gamma)", "compute(alpha, beta, delta)", 1)
        return after, [_diff(before, after)]
    if shape == "added-parameter":  # each call of the definition gets the new argument, laid out to fit a line
        calls = "".join(f"    r{i} = load(path, mode)  # call number {i} in the long body of the function\n"
                        for i in range(n))
        before = "def load(path, mode):\n    return path\n\ndef run(path, mode, encoding):\n" + calls
        after = before.replace("def load(path, mode):", "def load(path, mode, encoding):", 1)
        return after, [_diff(before, after)]
    if shape == "black-wrap":  # black formats the file's statements, from the cursor on
        rows = "".join(f"def f{i}(a, b):\n    result = compute_total(first_argument_value, second_value, third_{i})\n"
                       for i in range(n))
        after = rows.replace("compute_total(first_argument_value, second_value, third_0)",
                             "compute_total(\n        first_argument_value, second_value, third_0\n    )", 1)
        return after, [_diff(rows, after)]
    raise AssertionError(shape)


def _timed(run) -> tuple[float, str]:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    try:
        run()
        outcome = "ok"
    except ValueError as e:  # refused: too much work, or nothing to place
        outcome = type(e).__name__
    return time.perf_counter() - t, outcome


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(["identical", "repeated-blocks", "chunks", "definitions", "nested", "long-line"]),
       n=st.one_of(st.integers(1, 2500), st.sampled_from([1000, 2500])))
def test_apply_time_is_proportional_to_the_input(shape: str, n: int) -> None:
    _timed(lambda: applying.merge(*_apply_input(shape, 2)))  # grammars loaded before timing
    original, update, language = _apply_input(shape, n)
    elapsed, outcome = _timed(lambda: applying.merge(original, update, language))
    size = len(original) + len(update)
    assert elapsed <= FIXED_S + PER_CHAR_S * size, (shape, n, size, elapsed, outcome)


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(["replaced-rows", "removed-definitions", "one-row-hunks", "aliases", "long-row",
                              "blanks", "changed-calls", "added-parameter", "black-wrap"]),
       n=st.one_of(st.integers(1, 2000), st.sampled_from([1000, 2000])))
def test_next_edit_time_is_proportional_to_the_input(shape: str, n: int) -> None:
    small, diffs = _next_edit_input(shape, 2)
    ne.next_edit(None, ne.check_request(small, 0, diffs), use_model=False)  # grammars loaded before timing
    document, history = _next_edit_input(shape, n)
    req = ne.check_request(document, len(document) // 2, history)
    elapsed, outcome = _timed(lambda: ne.next_edit(None, req, use_model=False))
    size = len(document) + sum(map(len, history))
    assert elapsed <= FIXED_S + PER_CHAR_S * size, (shape, n, size, elapsed, outcome)


@pytest.mark.parametrize(("shape", "n"), [("changed-calls", 2000), ("added-parameter", 3000)])
def test_a_next_edit_over_thousands_of_calls_ends_by_its_deadline(shape: str, n: int) -> None:
    """The deadline is looked at only as work is counted: work a rule does for every call without counting it
    (a lookup over the document per call) runs past it. Thousands of calls of a changed callee, or of a
    definition that gained a parameter, in one function: answered or refused by the deadline."""
    small, diffs = _next_edit_input(shape, 2)
    ne.next_edit(None, ne.check_request(small, 0, diffs), use_model=False)  # grammars loaded before timing
    document, history = _next_edit_input(shape, n)
    req = ne.check_request(document, 0, history)
    elapsed, outcome = _timed(lambda: ne.next_edit(None, req, use_model=False))
    assert elapsed <= budget.DEADLINE_S + 1.0, (shape, len(document), elapsed, outcome)


def test_an_update_needing_too_much_work_is_refused_with_the_reason() -> None:
    original, update, _ = _apply_input("identical", 4000)
    with pytest.raises(budget.OverBudget, match="needs more work than its budget allows"):
        applying.merge(original, update)
    with pytest.raises(ValueError, match="chunks between its markers, over the limit"):
        applying.merge(*_apply_input("chunks", 2 * applying.MAX_CHUNKS + 4)[:2])


def test_work_stops_when_its_caller_stops_it() -> None:
    original, update, _ = _apply_input("identical", 3000)
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 10

    t = time.perf_counter()
    with pytest.raises(budget.Stopped):
        applying.merge(original, update, should_stop=stop)
    assert time.perf_counter() - t < 1.0 and len(calls) == 11
    document, history = _next_edit_input("one-row-hunks", 400)
    calls.clear()
    assert ne.next_edit(None, ne.check_request(document, 0, history), use_model=False, should_stop=stop) is None
    assert len(calls) == 11


def test_a_budget_counts_and_refuses_past_its_limit() -> None:
    with budget.scope(100, "work") as b:
        budget.spend(60)
        with budget.scope(10, "inner") as inner:  # a scope inside another shares it
            assert inner is b
            budget.spend(40)
        with pytest.raises(budget.OverBudget, match="work needs more work"):
            budget.spend(1)
    budget.spend(10**9)  # outside a scope nothing is counted
    assert budget.limit("x" * 10) == budget.BASE_STEPS + 10 * budget.STEPS_PER_CHAR
    assert budget.limit("x" * 10**8) == budget.MAX_STEPS


def test_definitions_nested_thousands_deep_are_answered() -> None:
    """A JavaScript file of 3,000 nested functions made the definitions' walk raise RecursionError."""
    original, update, language = _apply_input("nested", 3000)
    out = applying.merge(original, update, language)
    assert out.text.endswith("function g() { return 3; }\n") and out.text.count("function f()") == 3000


def _resolved_by_pairs(edits: list[Edit]) -> list[Edit]:
    """``propagate.resolve`` as its contract reads: each edit, stronger kinds first, kept unless it touches one
    kept before it."""
    kept: list[Edit] = []
    for e in sorted(edits, key=lambda e: (propagate.KINDS.index(e.kind), e.order, e.start)):
        if not any(propagate.overlap(e, k) for k in kept):
            kept.append(e)
    return sorted(kept, key=lambda e: (e.start, e.end))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 6), st.sampled_from(propagate.KINDS),
                          st.integers(0, 3)), max_size=40))
def test_resolving_overlaps_by_neighbours_keeps_what_pairwise_checks_keep(raw: list[tuple[int, int, str, int]]) -> None:
    edits = [Edit(s, s + w, "x", kind, order) for s, w, kind, order in raw]
    assert propagate.resolve(edits) == _resolved_by_pairs(edits)
