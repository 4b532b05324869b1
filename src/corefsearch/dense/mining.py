"""BM25 hard-negative mining for ``train retriever``, in a child process.

Mining searches every training query once, through Lucene in a Java virtual machine that
lives inside the process that starts it, with spaCy's NER pipeline for the query strings.
Neither gives its memory back: in the training process they held about a gigabyte for the
whole run (ECB+) though they are needed only in the first minute. A child
process (``spawn``: a fresh interpreter, no copy of the parent's torch state) does the
mining and returns the candidates; its memory goes when it ends. The result is the same
as mining in-process: the same searcher, the same queries, in the same order.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from corefsearch.base.schema import Query
from corefsearch.dense.examples import mine_hard_negatives
from corefsearch.sparse.search import BM25Options, BM25Searcher


def _mine(index: str, queries: Sequence[Query], relevant: dict[str, list[str]], depth: int) -> dict[str, list[str]]:
    return mine_hard_negatives(queries, relevant, BM25Searcher(Path(index), BM25Options()), depth)


def mine_in_child(index: Path, queries: Sequence[Query], relevant: dict[str, list[str]],
                  depth: int) -> dict[str, list[str]]:
    """:func:`corefsearch.dense.examples.mine_hard_negatives` with BM25 over ``index``, run in a
    child process; its errors (a broken index …) are raised here as they were raised there."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_mine, str(index), list(queries), relevant, depth).result()

