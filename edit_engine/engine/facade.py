"""The one engine API every front end calls: ``Engine.load``, ``infill``, ``stream``, ``complete``,
``stream_complete``.

``infill``/``stream`` take the text before and after a hole. ``complete``/``stream_complete`` take a whole
document and a cursor or selection, let the planner choose the span, and return an edit (range + text).
Streams yield a ``Pass`` after every denoising pass: the whole span as it stands (committed tokens; slots still
masked are left out), so a front end can show it and replace it with the next one. The last pass has
``final=True`` and equals the result. Closing a stream (or ``should_stop()`` returning True) stops the work
before the next forward pass. ``plan_document`` plans a document request without running it and
``finish_document`` runs its check and repair rounds after a first round run elsewhere; ``prepare`` makes a
hole's sampler settings and context tokens: the server batches first rounds across clients with them
(``edit_engine/serve``). ``apply``/``stream_apply`` merge an update snippet written with ``... existing code ...``
markers into a file (``apply``, without the model). ``next_edit``/
``stream_next_edit`` propose the change that follows the user's recent edits (``next_edit.py``: the history's
patterns propagated with tree-sitter first, the model's rewrite of a row second).

The parts: ``holes`` (a hole or a document request run to its passes), ``runtime`` (the model and what is kept about it), ``contexts`` (context tokens and the
per-document cache of encoded contexts), ``vocab`` (vocabulary tables: line stop, headers, token healing,
novel names), ``decoders`` (diffusion or autoregressive, one protocol), ``document`` (planning) and ``rounds``
(check and repair). No model math here: tokens in, sampler, tokens out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from edit_engine.decoding.sampler import SamplerConfig
from edit_engine.edits import apply as applying
from edit_engine.edits import next_edit as next_edits
from edit_engine.edits.apply import ApplyResult
from edit_engine.edits.edit_model import EditModel
from edit_engine.edits.next_edit import NextEdit
from edit_engine.engine import drafts, holes, lifecycle, rounds
from edit_engine.engine.contexts import ContextCacheConfig, ContextStore
from edit_engine.engine.document import DocumentPlan, plan_document
from edit_engine.engine.gate import ShowGate
from edit_engine.engine.holes import Prepared
from edit_engine.engine.results import Completion, InfillResult, Pass
from edit_engine.engine.runtime import Runtime
from edit_engine.memory import Memory
from edit_engine.memory.indexer import Indexer
from edit_engine.model import checkpoint
from edit_engine.model.interfaces import CanvasModel, TextTokenizer
from edit_engine.syntax import trees as syntax


class Engine:
    """A loaded model plus its sampler settings. Thread-safe: each request has its own state."""

    def __init__(self, model: CanvasModel, tokenizer: TextTokenizer, sampler: SamplerConfig | None = None,
                 path: Path | None = None, record: dict[str, Any] | None = None,
                 context_cache: ContextCacheConfig | None = None, analysis: bool = False, analysis_ms: float = 10.0,
                 edits: EditModel | None = None, memory: Memory | None = None) -> None:
        self.rt = Runtime(model, tokenizer, sampler, path, record, context_cache, analysis, analysis_ms)
        self.rt.memory = memory  # drafts from a memory of code (``drafts``); ``Engine.load`` gives the shipped one
        self.edits = edits or EditModel()  # the model that writes next edits (``edit_model.py``)

    @classmethod
    def load(cls, path: str | Path | None = None, *, device: str | None = None, threads: int | None = None,
             sampler: SamplerConfig | None = None, context_cache: ContextCacheConfig | None = None,
             dtype: torch.dtype | str | None = None, analysis: bool = False, analysis_ms: float = 10.0,
             edit_model: str | Path | None | bool = None, memory: bool | Memory | None = None) -> Engine:
        """Load a checkpoint directory (default: the model packaged with edit-engine). ``dtype`` (a dtype or its
        name, ``dtypes.DTYPES``, or ``auto``): what the model computes in; default ``EDIT_ENGINE_DTYPE``, else the
        checkpoint family's (``auto`` for ours: ``dtypes.auto_dtype``; bf16 for open models on CUDA). ``analysis``: the novel-name penalty spares
        the names jedi knows at the cursor (``engine/analysis.py``, Python), waiting ``analysis_ms`` per fill.
        ``memory``: the memory of code whose drafts may answer (True: the shipped one; False: none; None:
        ``EDIT_ENGINE_MEMORY``, on unless it says off)."""
        if threads:
            torch.set_num_threads(threads)
        ck = checkpoint.load(path, device=device or "cpu", dtype=dtype)
        if sampler is None:  # the model's measured commit policy, if it has one
            try:
                sampler = SamplerConfig.for_checkpoint(ck.path)
            except (ValueError, TypeError) as e:  # JSONDecodeError is a ValueError
                raise checkpoint.CheckpointError(f"{ck.path}/sampler.json: {e}") from e
        engine = cls(ck.model, ck.tokenizer, sampler, ck.path, ck.record, context_cache, analysis, analysis_ms,
                     EditModel.for_load(edit_model, path, dtype, device or "cpu"),
                     drafts.memory_for(memory))
        engine.rt.gate = ShowGate.load()  # the fitted show gate (``gate``); an engine made directly shows all
        return engine

    # ------------------------------------------------------------------ what is loaded
    @property
    def model(self) -> Any:
        return self.rt.model

    @property
    def tokenizer(self) -> Any:
        return self.rt.tokenizer

    @property
    def sampler(self) -> SamplerConfig:
        """The checkpoint's sampler settings (its ``sampler.json``), which every call's overrides start from."""
        return self.rt.sampler

    @property
    def path(self) -> Path | None:
        return self.rt.path

    @property
    def record(self) -> dict[str, Any]:
        return self.rt.record

    @property
    def contexts(self) -> ContextStore:
        """The per-document store of encoded contexts (``stats`` counts hits)."""
        return self.rt.contexts

    @property
    def syntax_cache(self) -> syntax.SyntaxCache:
        """Syntax trees of the documents seen with a ``uri`` (front ends may also ``edit``/``close`` them)."""
        return self.rt.syntax

    @property
    def is_ar(self) -> bool:
        """An autoregressive checkpoint (the baseline), decoded token by token (``edit_engine/decoding/ar.py``)."""
        return not self.rt.canvas

    @property
    def batchable(self) -> bool:
        """A server may batch this engine's first rounds: a canvas decoder over an exact context cache."""
        return self.rt.canvas and self.rt.model.exact_context_cache

    @property
    def dtype(self) -> str:
        """What the model computes in, by name (``float32``, ``bfloat16``, ``int8``): ``Engine.load``'s ``dtype``."""
        return "int8" if self.rt.model.int8 else str(next(iter(self.rt.model.parameters())).dtype)[6:]

    @property
    def name(self) -> str:
        """The model's id (``/v1/models``): its folder's name; ``edit-engine`` for the packaged model."""
        return "edit-engine" if self.path is None or self.path.resolve() == checkpoint.DEFAULT_DIR else self.path.name

    @property
    def line_end(self) -> torch.Tensor:
        """(V,) bool on the model's device: token ids whose text holds a newline (the sampler's line stop)."""
        return self.rt.tables.line_end

    # ------------------------------------------------------------------ the parts a server composes
    def sampler_for(self, overrides: dict[str, Any]) -> SamplerConfig:
        """The sampler settings a call with these overrides runs with (the checkpoint's, overridden)."""
        return self.rt.config(None, overrides)

    def context_ids(self, prefix: str, suffix: str) -> tuple[list[int], list[int]]:
        """The model's context tokens for the hole between ``prefix`` and ``suffix``."""
        return self.rt.context_ids(prefix, suffix)

    def novelty_bias(self, p_ids: list[int], s_ids: list[int], language: str,
                     cfg: SamplerConfig) -> torch.Tensor | None:
        """The sampler's novel-name penalty for a context (``vocab.TokenTables.novelty_bias``)."""
        return self.rt.tables.novelty_bias(p_ids, s_ids, language, cfg)

    def healing(self, prefix: str, suffix: str = "") -> tuple[str, torch.Tensor | None]:
        """Token healing for a ``{prefix, suffix}`` request: the partial word at the end of ``prefix`` that the
        model writes again, and slot 0's tokens; ("", None) when there is none or the decoder has no canvas."""
        return holes.healing(self.rt, prefix, suffix)

    def prepare(self, prefix: str, suffix: str = "", language: str = "python", max_tokens: int | None = None,
                initial_slots: int | None = None, heal: bool = True, **overrides: Any) -> Prepared:
        """A hole made ready to decode: the sampler settings (the checkpoint's with ``overrides``, clamped to the
        model), token healing, the context tokens and the novel-name penalty. Raises ValueError (too large, bad
        settings). ``initial_slots``: the first canvas's size, clamped to 1..max_tokens (the sampler's
        ``initial_canvas`` override sets it too, clamped to ``max_tokens`` as given). What ``stream`` runs, and what
        the server's scheduler batches."""
        return holes.prepare(self.rt, prefix, suffix, language, max_tokens, initial_slots, heal, overrides)

    # ------------------------------------------------------------------ hole in, text out
    def stream(self, prefix: str, suffix: str = "", language: str = "python", max_tokens: int | None = None,
               seed: int = 0, should_stop: Callable[[], bool] | None = None, uri: str | None = None,
               heal: bool = True, single_line: bool = False, initial_slots: int | None = None,
               **overrides: Any) -> Iterator[Pass]:
        """Yield every pass of filling the hole between ``prefix`` and ``suffix``. ``uri`` names the document
        for the context cache (without one, the first prefix tokens do). ``heal``: token healing when the
        prefix ends inside a word (``healing``); the text is then what follows the prefix, as without it.
        ``single_line``: every pass's text is cut before its first newline. ``initial_slots``: as ``prepare``."""
        for p, _ in holes.passes(self.rt, prefix, suffix, language, max_tokens, seed, should_stop, uri, heal,
                                 single_line, initial_slots, overrides):
            yield p

    def infill(self, prefix: str, suffix: str = "", language: str = "python", max_tokens: int | None = None,
               seed: int = 0, uri: str | None = None, heal: bool = True, **overrides: Any) -> InfillResult:
        """Fill the hole between ``prefix`` and ``suffix``; returns the final text and counters (``heal``: as
        ``stream``)."""
        last = deque(holes.passes(self.rt, prefix, suffix, language, max_tokens, seed, None, uri, heal, False,
                                  None, overrides), maxlen=1)
        p, t = last[0]
        return InfillResult(p.text, p.index + 1, p.nfe, t["total"], p.stop_reason, self.rt.count_tokens(p.text), t)

    # ------------------------------------------------------------------ document + cursor in, edit out
    def stream_complete(self, text: str, offset: int, language: str = "python",
                        selection: tuple[int, int] | None = None, max_tokens: int | None = None, seed: int = 0,
                        should_stop: Callable[[], bool] | None = None, mode: str = "insert", repair: bool | int = True,
                        uri: str | None = None, related: list[str] | None = None, show_threshold: float | None = 0.0,
                        **overrides: Any) -> Iterator[Pass]:
        """Plan the span at ``offset`` (or rewrite ``selection``) and yield every pass as an edit.

        ``mode="rewrite"`` (with a selection) starts from the selection's tokens and re-denoises the least likely
        ones. ``repair`` re-masks what a fill broke in the parse and runs more passes (streamed too); a number caps
        the rounds (0: the fill cut to its longest prefix that parses). ``uri`` keeps the document's syntax tree
        between requests. ``related``: other files' text, searched for copies. ``show_threshold``: the final
        answer is replaced by none (with the reason) when the show gate estimates it less likely to be accepted
        (``gate``): 0 (the default) shows every answer, as an explicit request wants; None applies the engine's
        fitted threshold, as an editor does for the suggestions it shows while the user types."""
        for p, (_, t) in holes.document_passes(self.rt, self.plan_document, text, offset, language, selection,
                                               max_tokens, seed, should_stop, overrides, mode, repair, uri,
                                               related, show_threshold=show_threshold):
            yield replace(p, timings=t) if p.final else p

    def complete(self, text: str, offset: int, language: str = "python",
                 selection: tuple[int, int] | None = None, max_tokens: int | None = None, seed: int = 0,
                 mode: str = "insert", repair: bool | int = True, uri: str | None = None,
                 related: list[str] | None = None, show_threshold: float | None = 0.0,
                 **overrides: Any) -> Completion:
        """The edit for a cursor (or a selection): ``text`` replaces ``document[start:end]`` (``stream_complete``
        documents the arguments)."""
        last = deque(holes.document_passes(self.rt, self.plan_document, text, offset, language, selection,
                                           max_tokens, seed, None, overrides, mode, repair, uri, related,
                                           stream=False, show_threshold=show_threshold), maxlen=1)
        p, (kind, t) = last[0]
        return Completion(p.text, p.index + 1, p.nfe, t["total"], p.stop_reason, self.rt.count_tokens(p.text), t,
                          p.start, p.end, kind, p.source, p.reason, p.score, p.estimate)

    def plan_document(self, text: str, offset: int, language: str = "python",
                      selection: tuple[int, int] | None = None, max_tokens: int | None = None, mode: str = "insert",
                      repair: bool | int = True, uri: str | None = None, related: list[str] | None = None,
                      automatic: bool = False, **overrides: Any) -> DocumentPlan:
        """Plan a document request without running it: parse, choose the span, set the sampler (the arguments
        of ``stream_complete``). Raises ValueError (bad mode, document too large, max_tokens < 1).

        ``stream_complete`` runs such a plan; a server may instead run its first denoising round itself (the
        hole between ``model_prefix`` and ``model_suffix`` under ``cfg``, each pass's text through ``finish``)
        and hand the last canvas to ``finish_document`` (see ``DocumentPlan``). With several candidate
        indentations (``Plan.indents``) planning runs one forward pass: the model chooses (``DocumentPlan.nfe``).
        ``automatic``: the editor asked while the user types (a draft from the memory stops where it stops being
        sure); an explicit request gets a draft of the whole line.
        """
        return plan_document(self.rt, text, offset, language, selection, max_tokens, mode, repair, uri, related,
                             automatic, **overrides)

    def finish_document(self, dp: DocumentPlan, tokens: torch.Tensor, index: int, nfe: int, stop_reason: str,
                        seed: int = 0, should_stop: Callable[[], bool] | None = None,
                        context: Callable[[], Any] | None = None) -> Iterator[Pass]:
        """Check and repair an insert-mode document request whose first round ran elsewhere
        (``rounds.finish_document`` documents the arguments); yields the passes from ``index`` on."""
        return rounds.finish_document(self.rt, dp, tokens, index, nfe, stop_reason, seed, should_stop, context)

    # ------------------------------------------------------------------ snippet in, file out; edits in, next edit out
    def apply(self, original: str, update: str, language: str = "python",
              should_stop: Callable[[], bool] | None = None) -> ApplyResult:
        """Merge ``update`` (code with ``# ... existing code ...``-style markers) into ``original``: the merged
        text, how each chunk was placed and the time it took (``apply.merge``; no model: a chunk that fits
        several places alike is refused). Raises ValueError (also past the request's work budget), and
        ``budget.Stopped`` when ``should_stop`` says so."""
        return applying.merge(original, update, language, should_stop)

    def stream_apply(self, original: str, update: str, language: str = "python",
                     should_stop: Callable[[], bool] | None = None) -> Iterator[Pass]:
        """``apply`` as a stream: a ``Pass`` per placed chunk, its text the whole file so far (``apply.stream``)."""
        return applying.stream(original, update, language, should_stop)

    def next_edit(self, document: str, cursor: int, history: list[str], language: str = "python",
                  related: list[str] | None = None, region: tuple[int, int] | None = None, use_model: bool = True,
                  seed: int = 0, should_stop: Callable[[], bool] | None = None,
                  others: Mapping[str, str] | None = None, others_first: bool = False) -> NextEdit | None:
        """The change after the recent edits (``history``: unified diffs, oldest first) near ``cursor``, inside
        ``region`` (rows), or None (``next_edit.py`` documents the arguments). Without a region, ``others`` (the
        other open documents, name -> text, the most relevant first) are searched when the document holds no
        pattern edit (before it with ``others_first``: the user is in the first of them, this document being the
        one they changed last): the proposal's ``document`` names the one it edits. Raises ValueError."""
        req = next_edits.check_request(document, cursor, history, language, related, region, others,
                                           others_first)
        return next_edits.next_edit(self.edits.runtime(self.rt, use_model), req, use_model, seed, should_stop)

    def next_edit_patterns(self, document: str, cursor: int, history: list[str], language: str = "python",
                           related: list[str] | None = None, region: tuple[int, int] | None = None,
                           should_stop: Callable[[], bool] | None = None,
                           others: Mapping[str, str] | None = None,
                           others_first: bool = False) -> next_edits.Staged | None:
        """``next_edit``'s first stage, which runs no model: the history analysed and the pattern edit chosen
        (``Staged.proposal``); None when ``should_stop`` stopped it. ``next_edit_model`` finishes it. A front
        end runs the two on different threads, so that this CPU work never waits behind the model, nor the
        model behind it. Raises ValueError (also past the request's work budget)."""
        req = next_edits.check_request(document, cursor, history, language, related, region, others,
                                           others_first)
        return next_edits.pattern_stage(self.rt, req, should_stop)

    def next_edit_model(self, staged: next_edits.Staged, use_model: bool = True, seed: int = 0,
                        should_stop: Callable[[], bool] | None = None) -> NextEdit | None:
        """The proposal after ``next_edit_patterns``: its pattern edit, else the model's rewrite, else None."""
        out: NextEdit | None = None
        for _, ne in next_edits.model_stage(self.edits.runtime(self.rt, use_model), staged, use_model, seed,
                                            should_stop):
            out = ne
        return out

    def stream_next_edit(self, document: str, cursor: int, history: list[str], language: str = "python",
                         related: list[str] | None = None, region: tuple[int, int] | None = None, use_model: bool = True,
                         seed: int = 0, should_stop: Callable[[], bool] | None = None) -> Iterator[Pass]:
        """``next_edit`` as passes; the final one has ``stop_reason == "no_edit"`` when there is no proposal."""
        req = next_edits.check_request(document, cursor, history, language, related, region)
        return (p for p, _ in next_edits.passes(self.edits.runtime(self.rt, use_model), req, use_model, seed,
                                                should_stop))

    # ------------------------------------------------------------------ lifecycle
    def warm_up(self) -> float:
        """Run a few small fills so that the first user request does not pay for lazy initialisation; returns
        the milliseconds it took (``lifecycle.warm_up``). Front ends call it at start-up."""
        return lifecycle.warm_up(self)

    def compile(self) -> float:
        """``torch.compile`` the per-pass step and warm it up (``lifecycle.compile_pass``); returns the seconds it
        took. Raises RuntimeError (and keeps the eager step) when compiling fails."""
        return lifecycle.compile_pass(self)

    def set_workspace(self, files: list[tuple[str, str]], language: str) -> None:
        """The user's workspace files of ``language`` ((path, text)), for the memory of code's workspace tier
        (``drafts.set_workspace``); nothing without a memory."""
        if self.rt.memory is not None:
            drafts.set_workspace(self.rt.memory, files, language)

    def index_workspace(self, roots: list[str], focus: tuple[str, ...] = (), packages: bool = False,
                        cache_dir: str | Path | None = None,
                        on_event: Callable[[dict[str, object]], None] | None = None) -> Indexer | None:
        """Start counting the source files under ``roots`` (the ones nearest the ``focus`` folders first) and,
        with ``packages``, those of the packages they import, into the memory of code on a background thread
        (``memory.indexer``, which calls ``on_event`` when its walk ends and when it counted a changed file); the
        indexer, or None without a memory."""
        if self.rt.memory is None:
            return None
        return Indexer(self.rt.memory, roots, focus, packages=packages, cache_dir=cache_dir,
                       on_event=on_event).start()

    def close_document(self, uri: str) -> None:
        """Forget what is cached for ``uri``: its syntax tree and its encoded context (an editor closed it)."""
        self.rt.syntax.close(uri)
        self.rt.contexts.take(("uri", uri))

