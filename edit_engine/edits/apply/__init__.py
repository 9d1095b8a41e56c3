"""Apply edit: merge an update snippet written with ``... existing code ...`` markers into a file.

A chat model that edits a file writes only what changes, the rest elided by marker comments::

    # ... existing code ...
    def area(r):
        return math.pi * r ** 2
    # ... existing code ...

``merge(original, update, language)`` puts such a snippet into the file, structure first:

1. **Chunks.** Marker lines (a comment of any supported language holding ``...``: ``# ... existing code ...``,
   ``// ...``, ``/* ... */``, a bare ``... rest of code ...``; ``is_marker``) split the update into chunks. Each
   chunk is a contiguous piece of the new file; each marker stands for original code that stays. Blank lines at a
   chunk's edges are formatting around the markers and are dropped (the original's spacing stays), unless new
   lines at that edge meet original code with no blank line between. Blank lines before a marker less indented
   than the chunk's last line close that block: the original's lines after the chunk's place as deep as that
   line, up to its next blank line, go (``placing._closed_block``); more blank lines before a marker than the
   original has there widen its spacing, where the chunk changes something.
2. **Definitions.** A chunk is parsed with tree-sitter (``edit_engine.syntax.trees``). A complete definition in it
   (``def f``/``class C``, ``function f``, ``fn f``, ``impl T``, ``func (r T) f``...) replaces the original
   definition of the same name at the same indentation; nesting is respected: a method shown under its class
   header, or after a chunk placed inside that class, replaces that class's method. A definition that a deeper
   marker continues (``class C:`` followed by ``    # ...``) is open: only its header is context. A definition
   whose name is new but whose body mostly matches one original definition that the update no longer names is
   that definition renamed. Decorators and attributes stay when the chunk shows the definition without them;
   so does the code after a docstring when the chunk shows the definition with its docstring alone.
3. **Lines.** Around (or without) definitions, the chunk's first and last context lines are matched on the
   original as blocks of lines, exact first, then ignoring whitespace; unique matches only: in the whole file,
   then between the neighbouring chunks, then inside the definition the previous chunk ended in. Once one line
   is found at a single place, the chunk's outermost matching lines go to their nearest match beside it.
4. **Placing.** The original lines between a chunk's first and last anchored lines are replaced by the chunk;
   unmatched lines at its edges are new lines inserted there. An update that opens without a marker starts the
   file (one that ends without one ends it) when that drops no more lines than the chunk holds and no
   definition. Chunks are placed in order, each after the previous one; a chunk that would change nothing at
   its place while its lines occur elsewhere goes where it changes something. **Span guard**: a place whose
   span would drop many original lines that appear nowhere in the update (outside the original definitions the
   chunk shows whole) — more than ``DROP_FLOOR`` plus ``DROP_RATIO`` times the chunk's own lines — is passed
   over: a definition's context lines become new lines beside it, a chunk placed by lines takes another of its
   candidate places, or is inserted when it defines something new, else refused (``ValueError`` with the span
   and the count). So is a place whose span deletes a definition's header and other lines the update does not
   show while ending inside that definition's body (``Guard.cut``: the body would join the code before it).
   Definitions of one name that their own lines cannot tell apart are told apart by where the chunk's lines
   are found (``definitions.told_apart``). An update without markers is taken literally and not guarded.
5. **What is left.** A chunk with no anchor that defines something new is inserted after the last definition
   at its level before the next placed chunk (or, when it opens the update, before the first). One whose
   definition the original has under that name and indentation (at places it could not tell apart) rewrites
   it, and one indented with nothing at its level to go beside is inside code the original does not show:
   both are refused, never inserted as new code. A chunk whose
   lines match several places and none uniquely is ambiguous: of the places where it changes something,
   spanning at most twice its lines, the one clearly most like it (``placing.CLEAR_MARGIN``) wins; where
   several remain alike the update is refused (``ValueError`` naming the chunk and the places): a merge is
   never a guess. A chunk that matches nothing and defines nothing cannot be placed (``ValueError`` naming it);
   an update without any marker that matches nothing replaces the file. A merge that would leave an original
   that parses unparsable is refused (``ValueError`` naming the line): a chunk beside the wrong lines cuts code
   apart or doubles it, and a refusal is seen where a broken file may not be. So is a merge that leaves a
   definition header twice side by side in one block (the chunk's copy beside the original's: it went beside
   the definition it rewrites), and one that changes nothing (every chunk already stands in the file: a
   deletion whose context lines also stand side by side elsewhere reads so).

Every placement is recorded (``Placement.kind``: definition, lines, inserted, ambiguous, whole).

The modules, each importing only the ones before it: ``source`` (the original indexed, and the definitions of
a syntax tree, for every stage), then one per stage: ``chunks`` (1), ``definitions`` (2), ``anchoring`` (3),
``placing`` (4 and 5, with the span guard and the refusal of places alike) and ``rendering`` (the
entry points ``merge`` and ``stream``: the texts checked and split, the stages run over every chunk, the
merged text and the result).
The package exports what the rest of the engine uses.
"""

from edit_engine.edits.apply.chunks import is_marker
from edit_engine.edits.apply.placing import DROP_FLOOR, DROP_RATIO
from edit_engine.edits.apply.rendering import (
           MAX_CHUNKS,
           ApplyResult,
           Placement,
           guess_language,
           merge,
           stream,
)
from edit_engine.edits.apply.source import Definition, definitions
from edit_engine.engine.results import MAX_DOCUMENT_CHARS

__all__ = ["DROP_FLOOR", "DROP_RATIO", "MAX_CHUNKS", "MAX_DOCUMENT_CHARS", "ApplyResult", "Definition", "Placement",
           "definitions", "guess_language", "is_marker", "merge", "stream"]
