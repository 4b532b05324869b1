"""Cross-encoder inputs for the readers: ``[CLS] query window [SEP] passage window [SEP]``.

The query is its passage cut to a window of at most ``max_query_len`` tokens grown around the
mention (with the boundary tokens when the model has them); the passage is split into windows
of at most as many tokens as the rest of ``max_length`` leaves, the start of each window
``doc_stride`` tokens after the previous one (the original BERT SQuAD meaning of the stride),
so that a passage longer than one window is read in overlapping pieces. Every passage token
keeps its character offsets into the passage text, so a span of window tokens maps back to
exact characters of the passage.

Special tokens are found by probing the tokenizer (transformers 5 tokenizers no longer expose
``build_inputs_with_special_tokens``); this works for BERT- and RoBERTa-style pair formats.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.windows import QueryWindow

# A forward pass costs about as much as this many padded tokens besides its tokens (CPU,
# all-MiniLM-L6-v2, ECB+): what splitting a query's windows into one more pass costs. Measured in
# training (1.23× faster steps than one pass) and at inference (Reader.read, top 50: 1.3× faster
# with torch on one thread, 1.3–1.7× with ONNX Runtime).
PASS_OVERHEAD_TOKENS = 128


@dataclass(frozen=True)
class PassageTokens:
    """A passage tokenized once: ids and each token's character offsets into the text."""

    ids: list[int]
    offsets: list[tuple[int, int]]


def tokenize_passage(tokenizer: Any, text: str) -> PassageTokens:
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    return PassageTokens(list(encoding["input_ids"]), [tuple(o) for o in encoding["offset_mapping"]])


def window_starts(n_tokens: int, size: int, stride: int) -> list[int]:
    """Token positions where the windows of a passage begin: every ``stride`` tokens (never a
    gap: the step is at most ``size``) until a window reaches the end."""
    if size < 1:
        raise InputError(f"no room for passage tokens: the query window leaves {size} of the maximum length")
    step = max(1, min(stride, size))
    starts = [0]
    while starts[-1] + size < n_tokens:
        starts.append(starts[-1] + step)
    return starts


@dataclass(frozen=True)
class PairWindow:
    """One model input: the query with one window of one passage."""

    input_ids: list[int]
    token_type_ids: list[int]
    passage: int  # index of the passage among those being read
    passage_start: int  # position of the window's first passage token in input_ids
    offsets: list[tuple[int, int]]  # character offsets of the window's passage tokens
    query_mention: tuple[int, int]  # positions of the query mention's first and last tokens

    @property
    def n_passage_tokens(self) -> int:
        return len(self.offsets)

    def char_span(self, first: int, last: int) -> tuple[int, int]:
        """Characters ``[start, end)`` of the passage covered by window tokens ``first..last``."""
        return self.offsets[first][0], self.offsets[last][1]

    def token_span(self, start: int, end: int) -> tuple[int, int] | None:
        """Window tokens ``(first, last)`` covering characters ``[start, end)``; None unless the
        whole span lies inside the window."""
        inside = [i for i, (s, e) in enumerate(self.offsets) if s < end and e > start and e > s]
        if not inside:
            return None
        if self.offsets[inside[0]][0] > start or self.offsets[inside[-1]][1] < end:
            return None
        return inside[0], inside[-1]


@dataclass(frozen=True)
class PairFormat:
    """Where a tokenizer puts its special tokens in a pair, and the segment ids of each part."""

    prefix: list[int]
    middle: list[int]
    suffix: list[int]
    first_type: int
    second_type: int
    has_types: bool

    @property
    def n_special(self) -> int:
        return len(self.prefix) + len(self.middle) + len(self.suffix)


@functools.lru_cache(maxsize=8)
def _probe(tokenizer: Any) -> PairFormat:
    a = tokenizer("alpha", add_special_tokens=False)["input_ids"]
    b = tokenizer("omega", add_special_tokens=False)["input_ids"]
    pair = tokenizer("alpha", "omega", add_special_tokens=True, return_token_type_ids=True)
    ids, types = pair["input_ids"], pair.get("token_type_ids")
    for i in range(len(ids) - len(a) + 1):
        if ids[i:i + len(a)] != a:
            continue
        for j in range(i + len(a), len(ids) - len(b) + 1):
            if ids[j:j + len(b)] == b:
                has_types = types is not None
                return PairFormat(ids[:i], ids[i + len(a):j], ids[j + len(b):],
                                  types[i] if has_types else 0, types[j] if has_types else 0, has_types)
    raise InputError(f"cannot tell where {type(tokenizer).__name__} puts the special tokens of a pair")


def pair_format(tokenizer: Any) -> PairFormat:
    return _probe(tokenizer)


def pair_windows(tokenizer: Any, query: QueryWindow, passages: list[PassageTokens], max_length: int,
                 doc_stride: int) -> list[PairWindow]:
    """Every window of every passage paired with the query, in passage order."""
    fmt = pair_format(tokenizer)
    size = max_length - fmt.n_special - len(query.ids)
    head = [*fmt.prefix, *query.ids, *fmt.middle]
    head_types = [fmt.first_type] * len(head)
    mention = (len(fmt.prefix) + query.mention_first, len(fmt.prefix) + query.mention_last)
    windows = []
    for index, passage in enumerate(passages):
        for begin in window_starts(len(passage.ids), size, doc_stride):
            body = passage.ids[begin:begin + size]
            tail = [*body, *fmt.suffix]
            windows.append(PairWindow(head + tail, head_types + [fmt.second_type] * len(tail), index, len(head),
                                      passage.offsets[begin:begin + size], mention))
    return windows


def length_buckets(lengths: list[int], overhead: int = PASS_OVERHEAD_TOKENS,
                   max_size: int | None = None) -> list[list[int]]:
    """The indices of ``lengths`` (one per window) grouped into forward passes: sorted by length and
    cut where it saves padding, minimising the padded tokens plus ``overhead`` per pass, with at most
    ``max_size`` windows a pass (None or 0: no cap).

    One query's windows pair one query window with passages of very different lengths (ECB+
    sentences: 10 to 80 tokens); padded to the longest of them all, a third of the tokens read were
    padding. The cut is an exact dynamic programme over the sorted lengths (optimal contiguous
    groups; n is a query's windows, 1 + negatives in training, about the re-ranked passages at
    inference, so O(n²) is nothing). Training (``train.example_loss``) and inference
    (``Reader.read``) both read a query's windows in these passes. Written by hand: no library
    groups a handful of sequences this way (bucketing samplers work across a data set)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    ordered = [lengths[i] for i in order]
    n = len(ordered)
    cap = max_size or n
    cost = [0.0] + [math.inf] * n
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        for begin in range(max(0, end - cap), end):
            value = cost[begin] + (end - begin) * ordered[end - 1] + overhead
            if value < cost[end]:
                cost[end], cut[end] = value, begin
    groups, end = [], n
    while end > 0:
        groups.append(order[cut[end]:end])
        end = cut[end]
    return groups[::-1]
