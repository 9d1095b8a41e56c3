"""Apply edit: merging a snippet written with ``... existing code ...`` markers into a file.

Unit tests of how chunks are anchored (definitions, nesting, renames, insertions, lines, ambiguity, the file's
edges) in Python, Rust, JavaScript and Go; a Hypothesis property (a file cut into definitions, one of them
changed between markers, applies exactly); the front ends end to end against a real server (HTTP, its SSE
stream, the websocket); and the apply benchmark on the synthetic set built from this package's sources.
"""

from __future__ import annotations

import json
import keyword
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import chat_stream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from edit_engine import protocol as rpc
from edit_engine.edits import apply
from edit_engine.edits.apply import guess_language, is_marker, merge
from edit_engine.engine import Engine
from edit_engine.eval import apply_set
from edit_engine.model.network import DiffusionLM
from edit_engine.model.tokenizer import Tokenizer
from edit_engine.serve.app import BackgroundServer, create_app
from edit_engine.serve.settings import Settings

TIMEOUT = 30.0


def d(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def kinds(r: apply.ApplyResult) -> list[str]:
    return [p.kind for p in r.placements]


PY = d('''
    import os


    def load(path):
        with open(path) as f:
            return f.read()


    class Store:
        def __init__(self, root):
            self.root = root

        def get(self, key):
            return load(os.path.join(self.root, key))


    class Cache:
        def __init__(self, size):
            self.size = size

        def get(self, key):
            return None


    if __name__ == "__main__":
        print(Store(".").get("x"))
''')


# ---------------------------------------------------------------------------------------------------- markers
@pytest.mark.parametrize("line", [
    "# ... existing code ...", "    # ... existing code ...", "// ... existing code ...", "// ...", "# ...",
    "/* ... existing code ... */", "/* ... */", "... rest of code ...", "// ... rest of the file ...",
    "# … unchanged …", "<!-- ... -->", "    // existing code ...",
])
def test_marker_forms(line: str) -> None:
    assert is_marker(line)


@pytest.mark.parametrize("line", [
    "...", "    ...", "x = ...", "# wait for it ... then go", "print('...')", "def f(): ...", "# see above...",
    "// TODO: handle this case...",
])
def test_code_and_comments_are_not_markers(line: str) -> None:
    assert not is_marker(line)


# ---------------------------------------------------------------------------------------------------- Python
def test_method_in_class_respects_nesting() -> None:
    """Cache.get, not Store.get (the same name, the same indentation), because the chunk sits under Cache."""
    upd = d('''
        # ... existing code ...
        class Cache:
            # ... existing code ...
            def get(self, key):
                return self.size and None
        # ... existing code ...
    ''')
    r = merge(PY, upd)
    assert r.text == PY.replace("return None", "return self.size and None")
    assert kinds(r) == ["lines", "definition"] and r.placements[1].note == "Cache.get"


def test_method_after_a_chunk_inside_its_class() -> None:
    """A method shown alone after a chunk placed inside the class: the class around that chunk decides."""
    upd = d('''
        # ... existing code ...
            def __init__(self, root):
                self.root = str(root)
        # ... existing code ...
            def get(self, key):
                return load(os.path.join(self.root, key.strip()))
        # ... existing code ...
    ''')
    r = merge(PY, upd)
    want = PY.replace("self.root = root", "self.root = str(root)").replace("key))", "key.strip()))")
    assert r.text == want and kinds(r) == ["definition", "definition"]
    assert [p.note for p in r.placements] == ["Store.__init__", "Store.get"]


def test_whole_function_replaced_decorators_kept() -> None:
    src = "import functools\n\n\n@functools.cache\ndef f(x):\n    return x\n\n\ndef g():\n    pass\n"
    r = merge(src, "# ... existing code ...\ndef f(x):\n    return x + 1\n# ... existing code ...\n")
    assert r.text == src.replace("return x\n", "return x + 1\n") and kinds(r) == ["definition"]


def test_renamed_function() -> None:
    upd = d('''
        # ... existing code ...
        def read_file(path):
            with open(path) as f:
                return f.read()
        # ... existing code ...
    ''')
    r = merge(PY, upd)
    assert r.text == PY.replace("def load(path)", "def read_file(path)")
    assert kinds(r) == ["definition"] and "renamed" in r.placements[0].note


def test_inserted_function_goes_after_the_last_definition() -> None:
    upd = "# ... existing code ...\n\ndef save(path, text):\n    open(path, 'w').write(text)\n\n# ... existing code ...\n"
    r = merge(PY, upd)
    new = "\n\ndef save(path, text):\n    open(path, 'w').write(text)\n"
    assert r.text == PY.replace('\n\nif __name__', new + '\n\nif __name__') and kinds(r) == ["inserted"]


def test_new_method_under_an_open_class_header() -> None:
    """``class Store:`` continued by a deeper marker is a header, not a whole class to replace."""
    upd = "class Store:\n    def keys(self):\n        return []\n\n    # ... existing code ...\n"
    r = merge(PY, upd)
    assert r.text == PY.replace("class Store:\n", "class Store:\n    def keys(self):\n        return []\n\n")


def test_changed_lines_with_context() -> None:
    upd = d('''
        # ... existing code ...
            def get(self, key):
                path = os.path.join(self.root, key)
                return load(path)


        class Cache:
        # ... existing code ...
    ''')
    r = merge(PY, upd)
    assert r.text == PY.replace("        return load(os.path.join(self.root, key))\n",
                                "        path = os.path.join(self.root, key)\n        return load(path)\n")


def test_whitespace_insensitive_fallback() -> None:
    src = "def f(a,b):\n    return a+b\n\n\ndef g():\n    return 0\n"
    upd = "# ... existing code ...\ndef f(a, b):\n    return a + b + 1\n\n\ndef g():\n# ... existing code ...\n"
    r = merge(src, upd)
    assert r.text == "def f(a, b):\n    return a + b + 1\n\n\ndef g():\n    return 0\n"


def test_file_edges() -> None:
    src = "#!/usr/bin/env python\nimport os\nimport sys\n\n\ndef main():\n    pass\n"
    r = merge(src, "#!/usr/bin/env python3\nimport os\n# ... existing code ...\n")  # the first line changed
    assert r.text == src.replace("python\n", "python3\n", 1)
    # A chunk that opens the update without a marker but matches mid-file keeps what comes before it.
    assert merge(src, "def main():\n    return 1\n").text == src.replace("pass", "return 1")
    # An update that ends without a marker ends the block it is in.
    src2 = "def main():\n    run()\n    report()\n    cleanup()\n"
    assert merge(src2, "# ... existing code ...\n    run()\n    report()\n").text == src2.replace("    cleanup()\n", "")
    # ... and the file's last newline with it.
    assert merge("x = 1\ny = 2", "x = 1\ny = 3\n").text == "x = 1\ny = 3\n"


def test_crlf_original_stays_crlf() -> None:
    src = "def f():\r\n    return 1\r\n\r\n\r\ndef g():\r\n    return 2\r\n"
    r = merge(src, "# ... existing code ...\ndef g():\n    return 3\n")
    assert r.text == src.replace("return 2", "return 3")


def test_no_markers_and_nothing_matches_replaces_the_file() -> None:
    r = merge("a = 1\nb = 2\n", "c = 3\n")
    assert r.text == "c = 3\n" and kinds(r) == ["whole"]


# ---------------------------------------------------------------------------------------------------- other languages
RUST = d('''
    use std::fmt;

    #[derive(Debug)]
    struct Point {
        x: i32,
    }

    impl Point {
        fn new() -> Self {
            Point { x: 0 }
        }

        fn norm(&self) -> i32 {
            self.x.abs()
        }
    }

    impl fmt::Display for Point {
        fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "{}", self.x)
        }
    }

    fn main() {
        println!("{}", Point::new());
    }
''')


def test_rust_method_in_impl() -> None:
    upd = d('''
        // ... existing code ...
        impl Point {
            // ... existing code ...
            fn norm(&self) -> i32 {
                self.x * self.x
            }
        }
        // ... existing code ...
    ''')
    r = merge(RUST, upd, "rust")
    assert r.text == RUST.replace("self.x.abs()", "self.x * self.x")
    assert kinds(r) == ["lines", "definition"] and r.placements[1].note == "impl Point.norm"


def test_rust_function_alone() -> None:
    upd = "// ...\nfn main() {\n    println!(\"{:?}\", Point::new());\n}\n"
    r = merge(RUST, upd, "rust")
    assert r.text == RUST.replace('println!("{}", Point::new());', 'println!("{:?}", Point::new());')


JS = d('''
    import x from "y";

    export function f(a) {
      return a;
    }

    const g = (b) => b * 2;

    class C {
      m() {
        return 1;
      }

      n() {
        return 2;
      }
    }
''')


def test_javascript_arrow_function_and_method() -> None:
    r = merge(JS, "/* ... existing code ... */\nconst g = (b) => b * 3;\n/* ... existing code ... */\n", "javascript")
    assert r.text == JS.replace("b * 2", "b * 3") and kinds(r) == ["definition"]
    upd = "// ... existing code ...\nclass C {\n  // ... existing code ...\n  n() {\n    return 3;\n  }\n}\n"
    assert merge(JS, upd, "javascript").text == JS.replace("return 2;", "return 3;")


GO = d('''
    package main

    import "fmt"

    type Point struct {
    \tx int
    }

    func (p *Point) Norm() int {
    \treturn p.x
    }

    func main() {
    \tfmt.Println((&Point{}).Norm())
    }
''')


def test_go_method_and_new_function() -> None:
    upd = "// ... existing code ...\nfunc (p *Point) Norm() int {\n\treturn p.x * p.x\n}\n\nfunc Zero() int {\n\treturn 0\n}\n// ... existing code ...\n"
    r = merge(GO, upd, "go")
    want = GO.replace("\treturn p.x\n}\n", "\treturn p.x * p.x\n}\n\nfunc Zero() int {\n\treturn 0\n}\n")
    assert r.text == want and r.placements[0].note == "Point.Norm"


def test_guess_language() -> None:
    assert guess_language(RUST) == "rust" and guess_language(GO) == "go" and guess_language(PY) == "python"
    assert guess_language(JS) == "javascript" and merge(RUST, "// ...\nfn main() {}\n", "auto").text.endswith(
        "fn main() {}\n")


# ---------------------------------------------------------------------------------------------------- ambiguity, errors
TWICE = "def a():\n    x = compute()\n    return x\n\n\ndef b():\n    x = compute()\n    return x\n"
AMBIGUOUS = "# ... existing code ...\n    x = compute()\n    log(x)\n# ... existing code ...\n"


def test_a_chunk_that_fits_two_places_alike_is_refused() -> None:
    """Its lines are at two places and either would change as much: the update is refused, naming both places,
    instead of taking one of them."""
    with pytest.raises(ValueError, match=r"chunk 1 .* fits 2 places of the original alike \(at lines 2, 7\)"):
        merge(TWICE, AMBIGUOUS)


def test_ambiguous_chunk_goes_to_the_place_clearly_most_like_it() -> None:
    """Where the chunk's lines are found twice, the place most like the chunk wins when it is clearly ahead."""
    src = "def a():\n    x = 1\n    y = 'alpha'\n    return x\n\n\ndef b():\n    x = 1\n    y = 'beta'\n    return x\n"
    upd = "# ... existing code ...\n    x = 1\n    y = 'betas'\n    return x\n# ... existing code ...\n"
    r = merge(src, upd)
    assert r.text == src.replace("'beta'", "'betas'") and kinds(r) == ["ambiguous"]


@pytest.mark.parametrize("update", ["# ... existing code ...\n", "", "\n\n", "// ...\n\n/* ... */\n"])
def test_marker_only_update_is_refused(update: str) -> None:
    with pytest.raises(ValueError, match="only marker lines"):
        merge(PY, update)


def test_unplaceable_chunk_is_named() -> None:
    upd = "# ... existing code ...\nfoo(bar)\n# ... existing code ...\nimport os\n# ... existing code ...\n"
    with pytest.raises(ValueError, match=r"chunk 1 of the update \(lines 2-2, starting 'foo\(bar\)'\)"):
        merge(PY, upd)


def test_size_limits_and_bad_unicode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apply.rendering, "MAX_DOCUMENT_CHARS", 100)
    with pytest.raises(ValueError, match="the original has"):
        merge("x = 1\n" * 20, "x = 1\n")
    with pytest.raises(ValueError, match="the update has"):
        merge("x = 1\n", "x = 2\n" * 20)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="lone surrogate"):
        merge("x = 1\n", "x = '\ud800'\n")


def test_stream_and_segments() -> None:
    upd = d('''
        # ... existing code ...
        class Cache:
            # ... existing code ...
            def get(self, key):
                return key
        # ... existing code ...
    ''')
    r = merge(PY, upd)
    assert "".join(s for _, s in r.segments) == r.text and {k for k, _ in r.segments} == {-1, 0, 1}
    passes = list(apply.stream(PY, upd))
    assert [(p.index, p.masked, p.final) for p in passes] == [(0, 1, False), (1, 0, True)]
    assert passes[-1].text == r.text and passes[0].text == PY  # the class header chunk changes nothing


def test_engine_stream_apply(tiny_engine: Engine) -> None:
    passes = list(tiny_engine.stream_apply(TWICE, "# ...\ndef b():\n    return 0\n"))
    assert len(passes) == 1 and passes[0].final and passes[0].text.endswith("def b():\n    return 0\n")


# ---------------------------------------------------------------------------------------------------- the span guard
def _filler(n: int, tag: str = "f") -> str:
    """``n`` small functions, each line unique in the file."""
    return "".join(f"def {tag}{k}(a):\n    b{k} = a + {k}\n    return b{k}\n\n\n" for k in range(n))


def test_span_guard_refuses_ends_matched_far_apart() -> None:
    """The chunk's first and last lines are each found once, 60 lines apart: replacing that span would drop
    every function between them. Nothing safer exists, so the chunk is refused with the span and the count."""
    src = "def head(a):\n    x = compute(a)\n    return a\n\n\n" + _filler(12) + \
        "def tail(r):\n    return result\n"
    upd = "# ... existing code ...\n    x = compute(a)\n    y = 2\n    return result\n# ... existing code ...\n"
    with pytest.raises(ValueError, match=r"chunk 1 .* would replace original lines 2-67 and drop 38 of them") as e:
        merge(src, upd)
    assert "existing code" in str(e.value)
    # The same chunk in a file where its ends are close is applied as before.
    near = "def head(a):\n    x = compute(a)\n    return result\n\n\n" + _filler(12)
    assert merge(near, upd).text == near.replace("compute(a)\n", "compute(a)\n    y = 2\n")


def test_span_guard_keeps_a_deletion_within_the_limit() -> None:
    """Context lines around a deleted function: the function's lines are dropped on purpose (3 + 3 + 3 lines,
    within DROP_FLOOR + 2 x the chunk's lines)."""
    src = _filler(4)
    upd = "# ... existing code ...\n    b0 = a + 0\n    return b0\n\n\ndef f2(a):\n# ... existing code ...\n"
    r = merge(src, upd)
    assert r.text == src.replace("def f1(a):\n    b1 = a + 1\n    return b1\n\n\n", "")
    assert kinds(r) == ["lines"]


def test_span_guard_drops_at_most_its_limit() -> None:
    """The same deletion, one deleted function longer at a time: applied while the dropped lines stay within
    the limit, refused past it."""
    upd = "# ... existing code ...\n    return b0\n\n\ndef g(a):\n# ... existing code ...\n"
    limit = apply.DROP_FLOOR + apply.DROP_RATIO * 2
    for body in (limit - 1, limit, limit + 1):  # the deleted function: a header and body - 1 lines
        mid = "def gone(a):\n" + "".join(f"    v{k} = {k}\n" for k in range(body - 1)) + "\n\n"
        src = "def f0(a):\n    return b0\n\n\n" + mid + "def g(a):\n    return a\n"
        if body <= limit:
            assert merge(src, upd).text == src.replace(mid, "")
        else:
            with pytest.raises(ValueError, match=f"drop {body} of them"):
                merge(src, upd)


def test_span_guard_moves_context_lines_beside_a_definition() -> None:
    """A comment line shown above a replaced function is found only 40 lines up: matching it there would drop
    the functions between, so it becomes a new line above the function and they stay."""
    src = "# helpers\nimport os\n\n\n" + _filler(8) + "def target():\n    return 1\n"
    upd = "# ... existing code ...\n# helpers\ndef target():\n    return 2\n"
    r = merge(src, upd)
    assert r.text == src.replace("def target():\n    return 1\n", "# helpers\ndef target():\n    return 2\n")
    assert kinds(r) == ["definition"] and "new lines" in r.placements[0].note


def test_span_guard_leaves_whole_definitions_alone() -> None:
    """A long function rewritten short is a rewrite, not a drop: the definition's own lines do not count."""
    long = "def big(a):\n" + "".join(f"    s{k} = a * {k}\n" for k in range(60)) + "    return a\n"
    src = _filler(2) + long + "\n\n" + _filler(2, "h")
    upd = "# ... existing code ...\ndef big(a):\n    return a * 2\n# ... existing code ...\n"
    r = merge(src, upd)
    assert r.text == src.replace(long, "def big(a):\n    return a * 2\n") and kinds(r) == ["definition"]


def test_span_guard_passes_over_a_far_candidate() -> None:
    """An ambiguous chunk (its first line at two places) whose far candidate would drop a whole block goes to
    the near one."""
    src = "def a():\n    x = 1\n" + "".join(f"    k{k} = {k}\n" for k in range(30)) + "    return x\n\n\n" \
        "def b():\n    x = 1\n    return x\n"
    upd = "# ... existing code ...\n    x = 1\n    z = 3\n    return x\n"
    r = merge(src, upd)
    want = src[: src.rindex("    x = 1\n")] + "    x = 1\n    z = 3\n    return x\n"
    assert r.text == want


def test_update_without_markers_is_not_guarded() -> None:
    """An update without markers says what the span becomes: its ends found far apart, the span goes."""
    src = "first = 1\n" + _filler(10) + "last = 2\n"
    r = merge(src, "first = 1\nmiddle = 0\nlast = 2\n")
    assert r.text == "first = 1\nmiddle = 0\nlast = 2\n"


# ---------------------------------------------------------------------------------------------------- property
_RESERVED = frozenset(keyword.kwlist) | {  # names no definition can take, in Python or JavaScript
    "break", "case", "catch", "class", "const", "continue", "debugger", "default", "delete", "do", "else", "enum",
    "export", "extends", "false", "finally", "for", "function", "if", "import", "in", "instanceof", "let", "new",
    "null", "return", "super", "switch", "this", "throw", "true", "try", "typeof", "var", "void", "while", "with",
    "yield", "await", "static", "implements", "interface", "package", "private", "protected", "public"}
_NAMES = st.lists(st.from_regex(r"[a-z]{3,8}", fullmatch=True).filter(lambda n: n not in _RESERVED), min_size=2,
                  max_size=6, unique=True)
_STATEMENTS = st.lists(st.sampled_from(["x = 1", "y = x + 2", "print(x)", "total += 1", "return x",
                                        "items.append(y)", "if x:", "pass"]), min_size=1, max_size=5)


def _python_def(name: str, body: list[str]) -> str:
    lines = [f"def {name}(x):"]
    for s in body:
        lines.append("    " + s)
        if s.endswith(":"):
            lines.append("        pass")
    return "\n".join(lines) + "\n"


def _js_def(name: str, body: list[str]) -> str:
    lines = [f"function {name}(x) {{"] + [f"  {s.rstrip(':')};" if not s.endswith(":") else "  if (x) {}"
                                         for s in body]
    return "\n".join(lines + ["}"]) + "\n"


def _as_merged(changed: str, old: str) -> str:
    """The definition ``changed`` (ending at a marker) merged over ``old``, as the contract reads: when its last
    line is a line of ``old``'s body found at one place (told apart by indentation, then by the lines before it),
    with more of ``old`` after it, it shows ``old``'s beginning and
    the marker keeps the rest; else it replaces ``old`` whole."""
    new_rows, old_rows = changed.splitlines(True), old.splitlines(True)

    def telling(x: str) -> bool:  # a line that tells places apart: some word in it, four characters at least
        return len("".join(x.split())) >= 4 and any(c.isalnum() for c in x)

    # A last line that tells nothing is placed by the last telling line before it.
    j = next((i for i in range(len(new_rows) - 1, 0, -1) if telling(new_rows[i])), 0)
    if not j:
        return changed
    last, tail = new_rows[j], len(new_rows) - 1 - j
    at = [i for i in range(1, len(old_rows)) if old_rows[i].split() == last.split()]
    if len(at) > 1:  # told apart by indentation, then by the lines before it
        at = [i for i in at if old_rows[i] == last] or at
    k = 1
    while len(at) > 1 and j - k > 0:
        at = [i for i in at if i - k > 0 and old_rows[i - k].split() == new_rows[j - k].split()]
        k += 1
    if len(at) == 1 and all(at[0] + m < len(old_rows) and old_rows[at[0] + m].split() == new_rows[j + m].split()
                            for m in range(1, tail + 1)) and any(x.strip() for x in old_rows[at[0] + tail + 1 :]):
        return changed + "".join(old_rows[at[0] + tail + 1 :])
    return changed


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(names=_NAMES, bodies=st.lists(_STATEMENTS, min_size=6, max_size=6), new_body=_STATEMENTS,
       pick=st.integers(0, 5), lang=st.sampled_from(["python", "javascript"]), header=st.booleans())
def test_one_changed_definition_between_markers_applies_exactly(names: list[str], bodies: list[list[str]],
                                                                 new_body: list[str], pick: int, lang: str,
                                                                 header: bool) -> None:
    make = _python_def if lang == "python" else _js_def
    marker = "# ... existing code ..." if lang == "python" else "// ... existing code ..."
    sep = "\n\n" if lang == "python" else "\n"
    top = ("import os\n\n\n" if lang == "python" else "import os from 'os';\n\n") if header else ""
    k = pick % len(names)
    defs = [make(n, b) for n, b in zip(names, bodies, strict=False)]
    original = top + sep.join(defs)
    changed = make(names[k], new_body)
    expected = top + sep.join(_as_merged(changed, x) if i == k else x for i, x in enumerate(defs))
    if expected == original:  # the definition shown as it stands: nothing to apply, and the merge says so
        with pytest.raises(ValueError, match="changes nothing"):
            merge(original, f"{marker}\n{changed}{marker}\n", lang)
        return
    r = merge(original, f"{marker}\n{changed}{marker}\n", lang)
    assert r.text == expected
    assert kinds(r) == ["definition"]


# ---------------------------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def server(tiny_model: DiffusionLM, tiny_tokenizer: Tokenizer) -> Iterator[BackgroundServer]:
    s = Settings(port=0, log_level="warning", max_document_chars=5_000)
    with BackgroundServer(create_app(s, engine=Engine(tiny_model, tiny_tokenizer)), s) as srv:
        yield srv


UPDATE = "# ... existing code ...\nclass Cache:\n    # ... existing code ...\n    def get(self, key):\n        return key\n"
MERGED = PY.replace("return None", "return key")


def _content(original: str, update: str) -> str:
    return (f"<|original_code|>\n{original}\n<|/original_code|>\n\n"
            f"<|update_snippet|>\n{update}\n<|/update_snippet|>")


def _post(server: BackgroundServer, **body: Any) -> httpx.Response:
    return httpx.post(server.url + "/v1/apply/completions", json=body, timeout=TIMEOUT)


def test_http_apply(server: BackgroundServer) -> None:
    r = _post(server, model="edit-engine", messages=[{"role": "system", "content": "merge"},
                                                     {"role": "user", "content": _content(PY, UPDATE)}])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "edit-engine" and body["id"].startswith("chatcmpl-")
    assert body["choices"] == [{"index": 0, "message": {"role": "assistant", "content": MERGED},
                                "finish_reason": "stop"}]
    u = body["usage"]
    assert u["prompt_tokens"] > u["completion_tokens"] > 0 and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    # Content as a list of text parts, as OpenAI clients may send it.
    parts = [{"type": "text", "text": _content(PY, UPDATE)}]
    assert _post(server, messages=[{"role": "user", "content": parts}]).json()["choices"][0]["message"]["content"] == MERGED


def test_http_apply_streams_the_merged_file(server: BackgroundServer) -> None:
    chunks = chat_stream(server.url + "/v1/apply/completions",
                         {"messages": [{"role": "user", "content": _content(PY, UPDATE)}]}, TIMEOUT)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == MERGED
    assert len(chunks) >= 4  # role, the pieces of the file, the end


@pytest.mark.parametrize("body, status, code", [
    ({"messages": [{"role": "user", "content": "merge this"}]}, 400, "invalid_params"),
    ({"messages": [{"role": "system", "content": _content(PY, UPDATE)}]}, 400, "invalid_params"),
    ({"messages": [{"role": "user", "content": _content(PY, "# ... existing code ...")}]}, 400, "invalid_params"),
    ({"messages": []}, 400, "invalid_params"),
    ({"model": "gpt-4", "messages": [{"role": "user", "content": _content(PY, UPDATE)}]}, 404, "model_not_found"),
    ({"messages": [{"role": "user", "content": _content("x = 1\n" * 1000, UPDATE)}]}, 413, "max_document_chars"),
])
def test_http_apply_errors(server: BackgroundServer, body: dict[str, Any], status: int, code: str) -> None:
    r = _post(server, **body)
    assert r.status_code == status and r.json()["error"]["code"] == code


def test_http_apply_is_documented(server: BackgroundServer) -> None:
    op = httpx.get(server.url + "/openapi.json", timeout=TIMEOUT).json()["paths"]["/v1/apply/completions"]["post"]
    assert {"200", "400", "401", "404", "413", "500", "503"} <= set(op["responses"])
    assert "text/event-stream" in op["responses"]["200"]["content"]


def test_websocket_apply(server: BackgroundServer) -> None:
    with connect(server.ws_url, open_timeout=TIMEOUT) as ws:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": rpc.APPLY,
                            "params": {"original": PY, "update": UPDATE, "languageId": "python"}}))
        m = json.loads(ws.recv(timeout=TIMEOUT))
        assert m["id"] == 1 and m["result"]["text"] == MERGED and m["result"]["elapsedMs"] >= 0
        assert [p["kind"] for p in m["result"]["placements"]] == ["lines", "definition"]
        assert m["result"]["placements"][1] == {"chunk": 1, "kind": "definition", "start": 20, "end": 22,
                                                "updateStart": 3, "updateEnd": 5, "note": "Cache.get"}
        for rid, params, code in [(2, {"original": PY, "update": "// ...\n"}, rpc.INVALID_PARAMS),
                                  (3, {"original": PY}, rpc.INVALID_PARAMS),
                                  (4, {"original": 1, "update": "x"}, rpc.INVALID_PARAMS),
                                  (5, {"original": "x" * 6000, "update": "x"}, rpc.SERVER_OVERLOADED)]:
            ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": rpc.APPLY, "params": params}))
            m = json.loads(ws.recv(timeout=TIMEOUT))
            assert m["id"] == rid and m["error"]["code"] == code, m
        # The connection still serves.
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 6, "method": rpc.APPLY,
                            "params": {"original": RUST, "update": "// ...\nfn main() {}\n", "languageId": "auto"}}))
        assert json.loads(ws.recv(timeout=TIMEOUT))["result"]["text"].endswith("fn main() {}\n")


# ---------------------------------------------------------------------------------------------------- the benchmark
def test_synthetic_apply_set_scores_at_least_95_percent() -> None:
    cases = apply_set.synthetic_cases()
    assert len(cases) >= 40 and {c.edit for c in cases} == set(apply_set.EDITS)
    assert {c.style for c in cases} >= {"definition", "lines"}
    outcomes = apply_set.run(cases, lambda o, u, lang: merge(o, u, lang))
    s = apply_set.summary("apply-synthetic", outcomes)
    assert s["exact_match"] >= 0.95, [o for o in outcomes if not o.exact]
    assert s["errors"] == 0 and s["p50_ms"] < 50 and "exact match" in apply_set.table(s)


def test_snippet_elides_with_markers() -> None:
    before = PY
    after = PY.replace("return None", "return key")
    update, style = apply_set.snippet(before, after, context=2) or ("", "")
    cache = "".join(after.splitlines(keepends=True)[16:22])  # class Cache, small enough to show whole
    assert style == "definition" and update == f"# ... existing code ...\n{cache}# ... existing code ...\n"
    assert merge(before, update).text == after
    assert apply_set.snippet(PY, PY) is None


def test_eval_command(tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edit_engine.cli.main import main

    out = tmp_path / "apply.json"
    assert main(["eval", "--benchmark", "apply-synthetic", "--limit", "12", "--model", str(tiny_checkpoint),
                 "--json", "--no-progress", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["cases"] == 12 and summary["exact_match"] >= 0.9 and "p95_ms" in summary
    written = json.loads(out.read_text())
    assert len(written["results"]) == 12 and written["exact"] == summary["exact"]


def test_a_definition_after_a_comment_keeps_everything_above_it() -> None:
    """An update of a comment, then a new ``def load`` body, then a marker (none before it): the comment is new
    and the definition replaces ``load``; the imports and settings above stay. Such an update once replaced the
    file's first 23 lines, dropping all of them, with no note."""
    imports = "".join(f"import mod{i}\n" for i in range(8))
    settings_ = "".join(f"SETTING_{i} = {i}\n" for i in range(10))
    original = (imports + "\n" + settings_ + "\n\ndef load(path):\n    return open(path).read()\n\n\n"
                "def save(path, data):\n    open(path, 'w').write(data)\n")
    update = ("# Load the configuration\ndef load(path):\n    with open(path) as f:\n        return f.read()\n"
              "# ... existing code ...\n")
    out = merge(original, update).text
    kept = [x for x in original.splitlines() if x.strip() and x != "    return open(path).read()"]
    assert all(x in out.splitlines() for x in kept), out
    assert "    with open(path) as f:" in out and "return open(path).read()" not in out


MODELS = textwrap.dedent("""\
    class Operation(Base):
        tags: list[str] | None = None
        security: list[dict] | None = None
        servers: list[Server] | None = None


    class PathItem(Base):
        ref: str | None = None
    """)


def test_a_changed_last_line_before_blank_lines_replaces_the_line_it_rewrites() -> None:
    """A hunk's trailing context is blank lines (weak): beside the strong line matched before them, they still
    say the new line takes the place of the original line that stands there, when the two are alike."""
    snippet = ("# ... existing code ...\n        tags: list[str] | None = None\n"
               "        security: list[dict] | None = None\n"
               "        servers: list[Server] | None = Field(default=None)\n\n\n# ... existing code ...\n")
    snippet = snippet.replace("        ", "    ")
    out = merge(MODELS, snippet, "python").text
    assert out == MODELS.replace("servers: list[Server] | None = None", "servers: list[Server] | None = Field(default=None)")


def test_a_new_line_unlike_the_original_one_before_blank_lines_is_inserted() -> None:
    """Beside a marker indented like the class body (it stands for the rest of the body), the new line is
    inserted; blank lines before a top-level marker instead close the class there: its later fields go."""
    snippet = ("# ... existing code ...\n    security: list[dict] | None = None\n"
               "    callbacks: dict[str, Callback] = {}\n\n    # ... existing code ...\n")
    out = merge(MODELS, snippet, "python").text
    assert "    servers: list[Server] | None = None\n" in out  # kept: the new line is not a rewrite of it
    assert out.index("security") < out.index("callbacks") < out.index("servers")
    closed = snippet.replace("\n\n    # ... existing code ...\n", "\n\n\n# ... existing code ...\n")
    assert merge(MODELS, closed, "python").text == MODELS.replace(
        "    servers: list[Server] | None = None\n", "    callbacks: dict[str, Callback] = {}\n")


TWO = "def first(rows):\n    out = [r for r in rows if r]\n    return out\n\n\ndef second(rows):\n" \
    "    out = [r for r in rows if not r]\n    return out\n"


def test_shown_lines_on_either_side_of_a_deleted_block_delete_it() -> None:
    """The update shows the last line of one function, then the first body line of the next, with no marker
    between: contiguous, so the rows between them (the second header) go, though the first line (``return
    out``) stands in both functions and outside the definition the second line is in. It was kept as a new line."""
    snippet = "# ... existing code ...\n    return out\n    out = [r for r in rows if not r]\n# ... existing code ...\n"
    out = merge(TWO, snippet, "python").text
    assert out == TWO.replace("    return out\n\n\ndef second(rows):\n", "    return out\n")


NOTES = textwrap.dedent('''\
    def loads(s, **kwargs):
        """Deserialize data.

        :param s: Text.
        :param kwargs: Arguments passed on.

        .. versionchanged:: 2.2
            Calls the app's loader.

        .. versionchanged:: 2.2
            The ``app`` parameter is deprecated.
        """
        return load(s)
    ''')


def test_a_snippet_that_reads_two_ways_is_refused_and_a_line_more_tells_them_apart() -> None:
    """A note inserted before ``.. versionchanged:: 2.2``, which stands twice: read with the first, the update
    inserts; with the second, it also deletes the note between. Both parse, so which was meant is not known: the
    merge refuses (it used to delete). With the line after it shown, only one reading is left."""
    new = "    .. versionchanged:: 2.3\n        The ``app`` parameter was removed.\n\n"
    snippet = ("# ... existing code ...\n    :param kwargs: Arguments passed on.\n\n" + new
               + "    .. versionchanged:: 2.2\n# ... existing code ...\n")
    with pytest.raises(ValueError, match="reads two ways: '.. versionchanged:: 2.2' stands twice"):
        merge(NOTES, snippet, "python")
    more = snippet.replace("2.2\n# ...", "2.2\n        Calls the app's loader.\n# ...")
    assert merge(NOTES, more, "python").text == NOTES.replace("    .. versionchanged:: 2.2\n        Calls",
                                                              new + "    .. versionchanged:: 2.2\n        Calls")


def test_a_definition_shown_up_to_a_line_it_holds_twice_keeps_its_rest() -> None:
    original = textwrap.dedent('''\
        def timed(fn, reps, sync):
            for _ in range(3):
                fn()
            sync()
            xs = []
            for _ in range(reps):
                fn()
                sync()
            return xs
        ''')
    snippet = ("# ... existing code ...\ndef timed(fn, reps, sync):\n    for _ in range(3):\n        fn()\n"
               "    warm = True\n    sync()\n# ... existing code ...\n")
    out = merge(original, snippet, "python").text
    assert out == original.replace("        fn()\n    sync()\n    xs", "        fn()\n    warm = True\n    sync()\n    xs")


def test_a_rewritten_line_that_gained_a_comment_replaces_the_line_it_rewrites() -> None:
    original = "import threading\n\n_cache = {}\n_lock = threading.Lock()\n\n\ndef get(key):\n    return _cache[key]\n"
    snippet = ("# ... existing code ...\n_cache = {}\n_lock = threading.RLock()  # re-entrant: a collection "
               "inside the locked block may call back\n\n\n# ... existing code ...\n")
    out = merge(original, snippet, "python").text
    assert out == original.replace("_lock = threading.Lock()", "_lock = threading.RLock()  # re-entrant: a "
                                   "collection inside the locked block may call back")


@pytest.mark.parametrize("lang, original, update", [
    ("python", "def f(x):\n    y = 1\n    return g(x)\n\n\ndef h():\n    return 2\n",
     "# ... existing code ...\n    y = 1\n    return g(x\n# ... existing code ...\n"),
    ("javascript", "function f(x) {\n  const y = 1;\n  return g(x);\n}\n\nfunction h() {\n  return 2;\n}\n",
     "// ... existing code ...\n  const y = 1;\n  return g(x;\n// ... existing code ...\n"),
])
def test_a_merge_that_would_not_parse_is_refused_when_the_original_does(lang: str, original: str,
                                                                         update: str) -> None:
    with pytest.raises(ValueError, match=r"would not parse \(line 3\)"):
        merge(original, update, lang)
    # An original that does not parse already is merged as asked: the check is of what the merge broke.
    broken = original.replace("return 2", "return (2")
    assert "g(x\n" in merge(broken, update, lang).text or "g(x;" in merge(broken, update, lang).text


def test_definitions_of_one_chunk_found_far_apart_are_refused() -> None:
    """A chunk shows two methods without their class; the second exists only in another class 60 lines below.
    Placing it there would drop every line between; such an update once took away a 355-line class."""
    between = "".join(f"\n\ndef helper_{i}(x):\n    return x + {i}\n" for i in range(15))
    original = ("class Sizes:\n    def pop(self, key):\n        return 1\n" + between +
                "\n\nclass Timed:\n    def clear(self):\n        self.items = []\n")
    update = ("# ... existing code ...\n    def pop(self, key):\n        return 1\n\n    def clear(self):\n"
              "        pass\n# ... existing code ...\n")
    with pytest.raises(ValueError, match="lie apart in the original"):
        merge(original, update, "python")


def test_a_definition_left_twice_side_by_side_is_refused() -> None:
    """A chunk rewrites a protocol class whose method headers changed layout; its lines anchored after the class
    instead of over it, which left the class written twice (the copy parses)."""
    original = ("import typing as t\n\nif t.TYPE_CHECKING:\n    import typing_extensions as te\n\n"
                "    class _Client(te.Protocol):\n        def get(self, key: str) -> bytes: ...\n\n"
                "        def set(self, key: str, value: bytes, timeout: t.Optional[int] = None) -> None:\n"
                "            ...\n\n\nversion = 5\n# Magic bytes of the cache files.\nmagic = b\"j2\"\n")
    update = ("# ... existing code ...\n    class _Client(te.Protocol):\n        def get(self, key: str) -> bytes: ...\n\n"
              "        def set(\n            self, key: str, value: bytes, timeout: t.Optional[int] = None\n"
              "        ) -> None: ...\n\n\nversion = 5\n# Magic bytes of the cache files.\n# ... existing code ...\n")
    with pytest.raises(ValueError, match=r"'class _Client\(te.Protocol\):' twice"):
        merge(original, update, "python")
    # Shown over the whole class (its header's line before it too), it rewrites the class in place.
    whole = update.replace("# ... existing code ...\n    class", "# ... existing code ...\n"
                           "    import typing_extensions as te\n\n    class", 1)
    assert merge(original, whole, "python").text.count("class _Client") == 1


def test_a_place_that_would_cut_a_definition_from_its_header_is_passed_over() -> None:
    """Two functions alike; the chunk rewrites the second one's ``raise`` into the form the first one has, so its
    leading lines read as the first function's and its last line is the second's: the lines between them (the
    first one's return, the second one's header) would go and the second one's body join the first. That place
    is passed over, and the one where both its ends stand in the second function is taken."""
    body = ('    """Run it{}."""\n    try:\n        backend = local.backend\n        token = local.token\n'
            "    except AttributeError:\n{}\n\n    return backend.run_{}(func, token=token)\n")
    multi = '        raise RuntimeError(\n            "only from a worker thread"\n        ) from None'
    one = '        raise RuntimeError("only from a worker thread")'
    original = ("def run(func):\n" + body.format("", multi, "async") + "\n\ndef run_sync(func):\n"
                + body.format(" synchronously", one, "sync") + "\n\ndef later():\n    return 1\n")
    update = ("# ... existing code ...\n        token = local.token\n    except AttributeError:\n" + multi
              + "\n\n    return backend.run_sync(func, token=token)\n# ... existing code ...\n")
    assert merge(original, update, "python").text == original.replace(one, multi)


def test_methods_of_one_name_told_apart_by_the_lines_around_them() -> None:
    """``def __init__(self):`` in two classes, its first line in a third: the method's own lines find it in one
    class, and there it is rewritten as a whole, its old last line replaced, not kept after the new one."""
    cls = ("class {}:\n    \"\"\"A {}.\"\"\"\n\n    def __init__(self{}):\n        self._waiters = {}\n"
           "        self._{} = {}\n")
    original = (cls.format("Lock", "lock", "", "None", "locked", "False") + "\n    def locked(self):\n"
                "        return self._locked\n\n\n" + cls.format("Event", "event", "", "[]", "value", "False")
                + "\n\n" + cls.format("Semaphore", "semaphore", ", value=1", "None", "value", "value"))
    update = ("# ... existing code ...\nclass Lock:\n    # ... existing code ...\n    def __init__(self):\n"
              "        self._waiters = None\n        self._held = 0\n    # ... existing code ...\n")
    r = merge(original, update, "python")
    assert r.text == original.replace("        self._locked = False\n", "        self._held = 0\n", 1)
    assert r.placements[-1].kind == "definition"


def test_a_definition_shown_with_its_docstring_alone_keeps_its_code() -> None:
    """A method shown with a rewritten docstring and nothing after it, a marker next: the marker keeps the
    method's code. It was replaced whole, the function left a docstring."""
    original = textwrap.dedent('''\
        class Processor:
            def test(self, block):
                return True

            def run(self, blocks):
                """
                Find and remove all Abbreviation references from the text.
                """
                block = blocks.pop(0)
                return bool(block)
        ''')
    update = textwrap.dedent('''\
        # ... existing code ...
            def run(self, blocks):
                """
                Find and remove all abbreviation references from the text.
                """
        # ... existing code ...
        ''')
    assert merge(original, update, "python").text == original.replace("Abbreviation", "abbreviation")


def test_a_header_rewritten_into_the_form_another_has_goes_where_its_body_is() -> None:
    """Two ``__setitem__`` methods; the chunk rewrites the second one's header into the form the first one's
    already has. The header alone pointed at the first (whose body holds none of the chunk's lines); the body
    lines point at the second, and they decide."""
    original = textwrap.dedent("""\
        class Base:
            def __setitem__(self, key: Key | str, value: Any) -> None:
                self._value[key] = value
                self._changed = True


        class Table(Base):
            def render(self):
                return buf

            def __setitem__(self, key: Union[Key, str], value: Any) -> None:
                if hasattr(value, "trivia") and value.trivia.comment:
                    value.trivia.comment = ""
                super().__setitem__(key, value)
        """)
    update = textwrap.dedent("""\
        # ... existing code ...
                return buf

            def __setitem__(self, key: Key | str, value: Any) -> None:
                if hasattr(value, "trivia") and value.trivia.comment:
                    value.trivia.comment = ""
        # ... existing code ...
        """)
    assert merge(original, update, "python").text == original.replace("Union[Key, str]", "Key | str")


def test_an_update_that_changes_nothing_is_refused() -> None:
    """A deleted block between two lines that also stand side by side elsewhere: the snippet reads as the file
    unchanged, and saying so beats returning it as if applied."""
    block = '    "iso_15": [\n        "cp1252",\n        "latin_1",\n    ],\n'
    original = "TABLE = {\n" + block + block.replace("15", "16") + '    "koi8_r": [\n        "cp1251",\n    ],\n}\n'
    update = '# ... existing code ...\n        "latin_1",\n    ],\n    "koi8_r": [\n# ... existing code ...\n'
    with pytest.raises(ValueError, match="changes nothing"):
        merge(original, update, "python")


def test_blank_lines_before_a_shallower_marker_close_the_block() -> None:
    """Two context lines, then new lines, a blank line and a marker at the top level: the block ends there, so
    what the function held after the context lines goes (the snippet shows them replaced). The same snippet
    with its marker indented like the body keeps them: the marker stands for them."""
    original = ("def total(items):\n    seen = set()\n    count = 0\n    return sum(items) + count\n\n\n"
                "def other():\n    return 2\n")
    update = ("# ... existing code ...\n    seen = set()\n    count = 0\n    for item in items:\n"
              "        seen.add(item)\n    return len(seen)\n\n# ... existing code ...\n")
    assert merge(original, update, "python").text == original.replace(
        "    return sum(items) + count\n", "    for item in items:\n        seen.add(item)\n    return len(seen)\n")
    kept = update.replace("\n\n# ... existing code ...\n", "\n    # ... existing code ...\n")
    assert "return sum(items) + count" in merge(original, kept, "python").text
    # Lines that only stand as they are delete nothing after them: the update is refused as changing nothing.
    with pytest.raises(ValueError, match="changes nothing"):
        merge(original, "# ... existing code ...\n    seen = set()\n    count = 0\n\n# ... existing code ...\n",
              "python")


def test_a_rewrite_that_anchors_nowhere_is_refused_not_inserted() -> None:
    """A method shown without its class, whose name two classes define and whose lines are all new, rewrites one
    of them: inserting it as new code would double one and misplace the other."""
    original = ("class Stack:\n    def clear(self):\n        self.items = []\n\n\n"
                "class Queue:\n    def clear(self):\n        self.items = []\n")
    update = "# ... existing code ...\n    def clear(self, deep=False):\n        self.items.clear()\n# ... existing code ...\n"
    with pytest.raises(ValueError, match="defines at 2 places"):
        merge(original, update, "python")
    # Indented, anchored nowhere, with nothing at its level in the original (a file the parser half reads): it
    # is not put at the top level as if it were a function.
    update = "# ... existing code ...\n    def pop(self, key):\n        return self.maps[0].pop(key)\n# ... existing code ...\n"
    with pytest.raises(ValueError, match="defines 'pop' indented"):
        merge("def helper():\n    return 1\n", update, "python")


def test_more_blank_lines_before_a_marker_widen_the_spacing() -> None:
    """Imports rewritten with two blank lines after them where the original had one: the spacing the update
    shows is kept where the chunk changes something; a chunk that changes nothing widens nothing."""
    original = "import os\nimport sys\n\nVALUE = 1\n"
    update = "import os\nimport re\n\n\n# ... existing code ...\n"
    assert merge(original, update, "python").text == "import os\nimport re\n\n\nVALUE = 1\n"
    with pytest.raises(ValueError, match="changes nothing"):
        merge(original, "import os\nimport sys\n\n\n# ... existing code ...\n", "python")
