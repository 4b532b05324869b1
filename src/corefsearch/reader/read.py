"""Re-rank retrieved passages with a trained reader and mark the coreferring span in each."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.reader.inputs import PairWindow, PassageTokens, pair_format, pair_windows, tokenize_passage
from corefsearch.reader.model import CrossEncoderReader
from corefsearch.schema import Query
from corefsearch.windows import QueryWindow, query_window

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

    def to_json(self, qid: str) -> dict[str, Any]:
        return {"qid": qid, "passage_id": self.passage_id, "start": self.start, "end": self.end,
                "text": self.text, "score": self.score}


class Reader:
    """Inference with a :class:`CrossEncoderReader`: windows in length-sorted batches, a passage
    scored by its best window."""

    def __init__(self, model: CrossEncoderReader, batch_size: int = 32) -> None:
        self.model = model
        self.batch_size = batch_size
        self._tokens: OrderedDict[str, PassageTokens] = OrderedDict()

    @classmethod
    def load(cls, folder: Path, device: str = "cpu", batch_size: int = 32) -> Reader:
        from corefsearch.dense.encoder import resolve_device

        return cls(CrossEncoderReader.load(Path(folder), resolve_device(device)), batch_size)

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

    def read(self, query: Query, passages: Sequence[tuple[str, str]]) -> list[ReaderHit]:
        """``passages`` as ``(passage_id, text)``; the hits sorted by the reader's score."""
        import torch

        if not passages:
            return []
        windows = self.windows(query, passages)
        order = sorted(range(len(windows)), key=lambda i: len(windows[i].input_ids))
        best: dict[int, tuple[float, int, int, int]] = {}  # passage -> (score, window, first, last)
        self.model.train(False)
        with torch.inference_mode():
            for begin in range(0, len(order), self.batch_size):
                batch = [windows[i] for i in order[begin:begin + self.batch_size]]
                output = self.model.forward(batch)
                scores, firsts, lasts = self.model.window_scores(output, batch)
                for j, window_index in enumerate(order[begin:begin + self.batch_size]):
                    passage = windows[window_index].passage
                    score = float(scores[j])
                    if math.isinf(score):  # a window without passage tokens (an empty passage)
                        score = EMPTY_SCORE
                    if passage not in best or score > best[passage][0]:
                        best[passage] = (score, window_index, int(firsts[j]), int(lasts[j]))
        hits = []
        for passage_index, (pid, text) in enumerate(passages):
            score, window_index, first, last = best[passage_index]
            window = windows[window_index]
            if window.n_passage_tokens:
                start, end = window.char_span(first, last)
            else:
                start = end = 0
            hits.append(ReaderHit(pid, score, start, end, text[start:end]))
        hits.sort(key=lambda h: -h.score)
        return hits
