"""Training examples for the retriever: (query, positive passage, hard negative), and batches.

As in the CoreSearch paper (Eirew et al. 2022, §4): for each training query and each passage
relevant to it (another mention of its cluster, from the qrels) one positive; one hard
negative drawn at random from the query's BM25 top-k passages that are not relevant.
``positives_per_query`` caps the positives of a query per epoch (a seeded sample), which
makes an epoch affordable on a CPU.

An epoch's examples are a pure function of ``(seed, epoch)``: a resumed run regenerates the
epoch it was interrupted in, in the same order, and skips the batches already done.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from corefsearch.base.schema import Query
from corefsearch.io.trec import read_qrels
from corefsearch.training.common import epoch_rng


@dataclass(frozen=True)
class TrainingExample:
    query: Query
    positive: str
    hard_negative: str | None = None


@dataclass(frozen=True)
class StoredPassage:
    title: str
    text: str
    clusters: frozenset[str]


class _Hit(Protocol):
    passage_id: str


class _Searcher(Protocol):
    def search(self, queries: Sequence[Query], k: int) -> Iterable[tuple[Query, Sequence[_Hit]]]: ...


def read_relevant(path: Path) -> dict[str, list[str]]:
    """``{qid: [relevant passage ids, sorted]}`` from a TREC qrels file (relevance > 0)."""
    return {qid: sorted(pid for pid, rel in judged.items() if rel > 0)
            for qid, judged in read_qrels(path).items()}


def mine_hard_negatives(queries: Sequence[Query], relevant: Mapping[str, Sequence[str]], searcher: _Searcher,
                        depth: int) -> dict[str, list[str]]:
    """Each query's hard-negative candidates in BM25 rank order: its hits that are neither
    relevant nor its own passage.

    The search goes deeper than ``depth`` (to ``max(100, 5 * depth)``) and keeps every such
    hit, so that the caller can still take ``depth`` of them after leaving out passages outside
    the training collection (an index may also hold the dev and test passages).
    """
    candidates: dict[str, list[str]] = {}
    for query, hits in searcher.search(list(queries), max(100, 5 * depth)):
        gold = set(relevant.get(query.id, ()))
        candidates[query.id] = [h.passage_id for h in hits
                                if h.passage_id not in gold and h.passage_id != query.passage_id]
    return candidates


def examples_per_epoch(queries: Sequence[Query], relevant: Mapping[str, Sequence[str]],
                       positives_per_query: int | None) -> int:
    return sum(len(relevant.get(q.id, ())) if positives_per_query is None
               else min(positives_per_query, len(relevant.get(q.id, ()))) for q in queries)


def epoch_examples(queries: Sequence[Query], relevant: Mapping[str, Sequence[str]],
                   hard_negatives: Mapping[str, Sequence[str]], positives_per_query: int | None,
                   seed: int, epoch: int) -> list[TrainingExample]:
    """The shuffled examples of one epoch (the same for the same seed and epoch)."""
    rng = epoch_rng(seed, epoch)
    examples = []
    for query in queries:
        positives = list(relevant.get(query.id, ()))
        if positives_per_query is not None and len(positives) > positives_per_query:
            positives = rng.sample(positives, positives_per_query)
        candidates = hard_negatives.get(query.id, ())
        for positive in positives:
            negative = rng.choice(candidates) if candidates else None
            examples.append(TrainingExample(query, positive, negative))
    rng.shuffle(examples)
    return examples


def batches(examples: Sequence[TrainingExample], batch_size: int) -> list[list[TrainingExample]]:
    return [list(examples[i:i + batch_size]) for i in range(0, len(examples), batch_size)]


@dataclass
class BatchLayout:
    """The passages of a batch (each distinct passage once), each query's positive column and
    the mask of the passages that are not negatives of a query."""

    passage_ids: list[str]
    positive_index: list[int]
    mask: list[list[bool]]


def layout_batch(batch: Sequence[TrainingExample], relevant: Mapping[str, Sequence[str]],
                 passage_clusters: Mapping[str, frozenset[str]]) -> BatchLayout:
    """Columns = the batch's positives and hard negatives, deduplicated (so a passage that
    appears twice is never a negative of itself). For query ``i``, column ``j`` is masked when
    it is not ``i``'s positive but is relevant to ``i`` (in the qrels, or holding a mention of
    ``i``'s cluster) or is ``i``'s own passage."""
    column: dict[str, int] = {}
    for example in batch:
        for pid in (example.positive, example.hard_negative):
            if pid is not None and pid not in column:
                column[pid] = len(column)
    passage_ids = list(column)
    relevant_sets: dict[str, set[str]] = defaultdict(set)
    for example in batch:
        relevant_sets[example.query.id] = set(relevant.get(example.query.id, ()))
    mask = []
    for example in batch:
        query = example.query
        gold = relevant_sets[query.id]
        row = []
        for pid in passage_ids:
            same = (pid in gold or pid == query.passage_id
                    or (bool(query.cluster_id) and query.cluster_id in passage_clusters.get(pid, frozenset())))
            row.append(same and pid != example.positive)
        mask.append(row)
    return BatchLayout(passage_ids, [column[e.positive] for e in batch], mask)
