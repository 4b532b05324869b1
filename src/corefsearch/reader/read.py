"""Re-rank retrieved passages with a trained reader and mark the coreferring span in each."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.base.models import resolve_device
from corefsearch.base.onnx_backend import check_backend_device, resolve_backend
from corefsearch.base.precision import autocast
from corefsearch.base.schema import Query, SpanRecord
from corefsearch.base.shipped import resolve_reference
from corefsearch.base.windows import QueryWindow, query_window
from corefsearch.reader.inputs import (
    PASS_OVERHEAD_TOKENS,
    PairWindow,
    PassageTokens,
    length_buckets,
    pair_format,
    pair_windows,
    tokenize_passage,
)
from corefsearch.reader.model import CrossEncoderReader

EMPTY_SCORE = -1e9  # finite, so that runs and spans stay valid TREC and JSON
TOKEN_CACHE_SIZE = 100_000  # tokenized passages kept (candidates recur across the queries of a topic)


@dataclass(frozen=True)
class ReaderHit:
    """A re-ranked passage: the reader's score and the span it marks (characters of the text)."""

    passage_id: str
    score: float
    start: int
    end: int
    text: str

    def span_record(self, qid: str) -> SpanRecord:
        """The line of the spans file (``RUN.spans.jsonl``) for this hit of query ``qid``."""
        return SpanRecord(qid, self.passage_id, self.start, self.end, self.text, self.score)

    def to_json(self, qid: str) -> dict[str, Any]:
        return self.span_record(qid).to_json()


class Reader:
    """Inference with a :class:`CrossEncoderReader`: a passage scored by its best window.

    The windows of a query are sorted by length and read in a few forward passes, each padded to
    its own longest window: :func:`~corefsearch.reader.inputs.length_buckets` cuts them where the
    padding saved outweighs ``pass_overhead`` tokens per extra pass (ECB+ sentence passages make
    windows of 40 to 110 tokens: one pass padded to the longest reads ~1.55× the real tokens, the
    buckets ~1.1× in ~3 passes; on a CPU the work is the padded tokens). ``pass_overhead=None``
    reads them all in one pass, padded to the longest. ``batch_size`` caps the windows per pass
    (None or 0: no cap), to bound the memory that long passages with many windows take. None of
    this changes a score. (Measured exception: torch on 2 threads whose cores other work keeps
    busy pays each pass's thread synchronisation, and there one pass was faster.)

    The query window is encoded again with every passage: in a cross-encoder the attention is
    bidirectional over ``[query ; passage]``, so every token's states, the query's included,
    depend on the passage, and there is no per-query prefix whose work could be shared (as a
    decoder's key/value cache shares a causal prefix). What saves time is fewer, fuller passes
    and a faster runtime for the encoder (``backend="onnx"`` or ``"onnx-int8"``).
    """

    def __init__(self, model: CrossEncoderReader, batch_size: int | None = None,
                 pass_overhead: int | None = PASS_OVERHEAD_TOKENS) -> None:
        self.model = model
        self.batch_size = batch_size  # None or 0: no cap on the windows per pass
        self.pass_overhead = pass_overhead  # None: no length buckets (one pass, or batch_size in length order)
        self._tokens: OrderedDict[str, PassageTokens] = OrderedDict()

    @classmethod
    def load(cls, folder: Path, device: str = "cpu", batch_size: int | None = None, backend: str | None = None,
             threads: int | None = None, pass_overhead: int | None = PASS_OVERHEAD_TOKENS) -> Reader:
        """The reader saved in ``folder``; ``backend`` ``onnx`` or ``onnx-int8`` runs its encoder with
        ONNX Runtime (on the CPU, ``threads`` intra-op threads) from the folder's ``onnx/`` export
        (``corefsearch export-onnx``), the head in torch; None: torch, or onnx-int8 for a folder that ships
        only that export."""
        check_backend_device(backend, device)
        folder = Path(resolve_reference(folder))  # a shipped model's name, or a folder
        backend = resolve_backend(folder, backend, device)
        return cls(CrossEncoderReader.load(folder, resolve_device(device) if backend == "torch" else "cpu", backend,
                                           threads), batch_size, pass_overhead)

    @property
    def config(self) -> Any:
        return self.model.config

    def query_window(self, query: Query) -> QueryWindow:
        fmt = pair_format(self.model.tokenizer)
        budget = self.config.max_query_len - len(fmt.prefix) - len(fmt.middle)
        return query_window(self.model.tokenizer, query.text, query.start, query.end, budget,
                            self.model.marker_ids)

    def passage_tokens(self, key: str, text: str) -> PassageTokens:
        tokens = self._tokens.get(key)
        if tokens is None:
            tokens = tokenize_passage(self.model.tokenizer, text)
            self._tokens[key] = tokens
            if len(self._tokens) > TOKEN_CACHE_SIZE:
                self._tokens.popitem(last=False)
        else:
            self._tokens.move_to_end(key)
        return tokens

    def windows(self, query: Query, passages: Sequence[tuple[str, str]]) -> list[PairWindow]:
        tokens = [self.passage_tokens(pid, text) for pid, text in passages]
        return pair_windows(self.model.tokenizer, self.query_window(query), tokens, self.config.max_length,
                            self.config.doc_stride)

    def passes(self, windows: Sequence[PairWindow], max_pass: int | None = None) -> list[list[int]]:
        """The indices of ``windows`` read in each forward pass, in order of length (at most ``batch_size``
        windows a pass, else at most ``max_pass``, else any number)."""
        if not windows:
            return []
        lengths = [len(w.input_ids) for w in windows]
        cap = self.batch_size or max_pass
        if self.pass_overhead is not None:
            return length_buckets(lengths, self.pass_overhead, cap)
        order = sorted(range(len(windows)), key=lambda i: lengths[i])
        size = cap or len(order)
        return [order[begin:begin + size] for begin in range(0, len(order), size)]

    def read(self, query: Query, passages: Sequence[tuple[str, str]]) -> list[ReaderHit]:
        """``passages`` as ``(passage_id, text)``; the hits sorted by the reader's score."""
        return self.read_many([(query, passages)])[0]

    def read_many(self, items: Sequence[tuple[Query, Sequence[tuple[str, str]]]],
                  max_pass: int | None = None) -> list[list[ReaderHit]]:
        """:meth:`read` of several queries (``(query, passages)`` each), their windows read together: the
        windows of all the queries are sorted by length and cut into passes as one query's are, so that a
        GPU reads a few full passes instead of many small ones (on the CPU, where the work is the padded
        tokens, it changes little). ``max_pass`` caps the windows per pass when ``batch_size`` does not
        (it bounds the memory and the cost of cutting). Every score and span is the one :meth:`read`
        gives for its query alone: a window is read the same in any pass."""
        import torch

        windows: list[PairWindow] = []
        owners: list[int] = []  # the item of each window
        for item, (query, passages) in enumerate(items):
            if passages:
                found = self.windows(query, passages)
                windows += found
                owners += [item] * len(found)
        best: dict[tuple[int, int], tuple[float, int, int, int]] = {}  # (item, passage) -> score, window, first, last
        self.model.train(False)
        with torch.inference_mode(), autocast(self.model.device):  # the --precision scope (fp32: nothing)
            for group in self.passes(windows, max_pass):
                batch = [windows[i] for i in group]
                output = self.model.forward(batch)
                scores, firsts, lasts = self.model.window_scores(output, batch)
                for j, window_index in enumerate(group):
                    key = (owners[window_index], windows[window_index].passage)
                    score = float(scores[j])
                    if math.isinf(score):  # a window without passage tokens (an empty passage)
                        score = EMPTY_SCORE
                    if key not in best or score > best[key][0]:
                        best[key] = (score, window_index, int(firsts[j]), int(lasts[j]))
        results = []
        for item, (_, passages) in enumerate(items):
            hits = []
            for passage_index, (pid, text) in enumerate(passages):
                hits.append(_hit(pid, text, best[item, passage_index], windows))
            hits.sort(key=lambda h: -h.score)
            results.append(hits)
        return results

    def span_scores(self, query: Query, passages: Sequence[tuple[str, str, Sequence[tuple[int, int]]]]
                    ) -> tuple[list[list[float]], list[ReaderHit]]:
        """The reader's coreference score ``s_m(m_j) + s_a(m_j, m_i)`` of given spans (characters of each
        passage's text), read with the query as :meth:`read` reads a passage, and the hit :meth:`read` gives
        each passage, from the same forward passes. ``passages``: ``(passage_id, text, spans)``; a span is
        scored in every window that holds it whole and keeps its best score (``EMPTY_SCORE`` in none). Only
        the integrated head scores a given span: the DPR head has no coreference scorer."""
        import torch

        if self.config.head == "dpr":
            raise ValueError("a reader with the DPR head scores passages, not given spans")
        windows = self.windows(query, [(pid, text) for pid, text, _ in passages]) if passages else []
        scores = [[EMPTY_SCORE] * len(spans) for _, _, spans in passages]
        best: dict[int, tuple[float, int, int, int]] = {}
        self.model.train(False)
        with torch.inference_mode(), autocast(self.model.device):
            for group in self.passes(windows):
                batch = [windows[i] for i in group]
                output = self.model.forward(batch)
                window_best, firsts, lasts = self.model.window_scores(output, batch)
                # Each window's spans that it holds whole, as passage-token indices (at least one, for shape).
                held = [[(k, span) for k, (start, end) in enumerate(passages[w.passage][2])
                         if (span := w.token_span(start, end)) is not None] for w in batch]
                width = max(1, max(len(h) for h in held))
                starts = torch.zeros((len(batch), width), dtype=torch.long, device=output.hidden.device)
                ends = torch.zeros_like(starts)
                for row, spans in enumerate(held):
                    for column, (_, (first, last)) in enumerate(spans):
                        starts[row, column], ends[row, column] = first, last
                given = self.model.coreference_scores(self.model.query_mention_vectors(output, batch),
                                                      self.model.span_vectors(output, starts, ends)).float().cpu()
                for row, (window_index, spans) in enumerate(zip(group, held, strict=True)):
                    passage = windows[window_index].passage
                    for column, (k, _) in enumerate(spans):
                        scores[passage][k] = max(scores[passage][k], float(given[row, column]))
                    score = float(window_best[row])
                    score = EMPTY_SCORE if math.isinf(score) else score
                    if passage not in best or score > best[passage][0]:
                        best[passage] = (score, window_index, int(firsts[row]), int(lasts[row]))
        return scores, [_hit(pid, text, best.get(index, (EMPTY_SCORE, -1, 0, 0)), windows)
                        for index, (pid, text, _) in enumerate(passages)]


def _hit(passage_id: str, text: str, best: tuple[float, int, int, int], windows: Sequence[PairWindow]) -> ReaderHit:
    """The hit of a passage from its best window's ``(score, window index, first, last)`` (index -1: none)."""
    score, window_index, first, last = best
    window = windows[window_index] if window_index >= 0 else None
    start, end = window.char_span(first, last) if window is not None and window.n_passage_tokens else (0, 0)
    return ReaderHit(passage_id, score, start, end, text[start:end])
