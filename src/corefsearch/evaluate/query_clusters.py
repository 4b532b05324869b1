"""A run's top k as a coreference cluster: per-query B³ of the mentions it returns (``evaluate --cluster-k K``).

A user asks "where else is this event mentioned?", and the answer is a set of mentions. So a run
with a reader's spans is also scored as one: the query's answer is the query mention plus, for each
of the run's top ``k`` passages that has a span, the gold mention of the passage that the span
overlaps most (of any cluster). A span that overlaps no gold mention is a mention of its own, in no
gold cluster. The answer A is scored against the query's gold cluster G with B³ (Bagga & Baldwin
1998) of the one cluster each side holds:
- precision, over the answered mentions: the mean over m ∈ A of |A ∩ K(m)| / |A|, K(m) being m's gold
  cluster (a mention in none is alone in its own);
- recall, over the gold mentions: the mean over m ∈ G of |C(m) ∩ G| / |G|, C(m) being A when m was
  answered and m alone when it was missed.

Precision falls with each answered mention of another event; recall falls with each mention of the
event that is not in the top k (a passage can hold only its one marked mention). The scores are
means over the queries (macro), each ×100 in the tables. The query's own mention is always in the
answer, and a query whose cluster has two mentions, both answered, scores 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError
from corefsearch.datasets.dataset import Dataset
from corefsearch.evaluate.metrics import Run
from corefsearch.evaluate.spans import read_spans


@dataclass
class QueryClusterScores:
    k: int
    per_query: dict[str, dict[str, float]]  # qid -> {"B3 P", "B3 R", "B3 F1"}

    def aggregate(self) -> dict[str, float]:
        names = ("B3 P", "B3 R", "B3 F1")
        n = len(self.per_query)
        return {f"cluster {name}@{self.k}": (sum(s[name] for s in self.per_query.values()) / n if n else 0.0)
                for name in names}


def answer_mentions(qid: str, ranked: list[str], spans: Mapping[tuple[str, str], tuple[int, int]],
                    passages: Mapping[str, list[tuple[str, int, int]]]) -> set[str]:
    """The mention ids a query's top passages (``ranked``) answer: the query's own, and per passage with a span
    the gold mention (``passages``: ``(mention id, start, end)`` each) it overlaps most, else the span itself."""
    answer = {qid}
    for passage_id in ranked:
        span = spans.get((qid, passage_id))
        if span is None or span[0] >= span[1]:
            continue
        best, overlap = None, 0
        for mention_id, start, end in passages.get(passage_id, ()):
            shared = min(end, span[1]) - max(start, span[0])
            if shared > overlap:
                best, overlap = mention_id, shared
        answer.add(best if best is not None else f"{passage_id}:{span[0]}-{span[1]}")
    return answer


def query_b_cubed(qid: str, answer: set[str], cluster_of: Mapping[str, str],
                  members: Mapping[str, list[str]]) -> dict[str, float]:
    """B³ of one query's answer against its gold cluster (module docstring)."""
    gold = set(members[cluster_of[qid]])
    precision = sum(len(answer & set(members[cluster_of[m]])) if m in cluster_of else 1
                    for m in answer) / len(answer) ** 2
    found = len(answer & gold)
    recall = (found * found + len(gold - answer)) / len(gold) ** 2
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"B3 P": precision, "B3 R": recall, "B3 F1": f1}


def cluster_index(dataset: Dataset) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The dataset's gold clusters both ways: each mention's cluster, and each cluster's mentions."""
    cluster_of: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for cluster in dataset.clusters():
        members[cluster.cluster_id] = list(cluster.mention_ids)
        for mention_id in cluster.mention_ids:
            cluster_of[mention_id] = cluster.cluster_id
    return cluster_of, members


def score_query_clusters(run: Run, spans_path: Path, dataset: Dataset, k: int) -> QueryClusterScores:
    """Per-query B³ of the run's top ``k`` with the spans of ``spans_path`` (read and checked as ``--spans``
    is) over the queries of ``run`` whose id is a mention of the dataset's clusters (a dataset's queries are
    its mentions)."""
    at_least_one("--cluster-k", k)
    predictions = read_spans(spans_path)
    spans = {(p.qid, p.passage_id): (p.start, p.end) for p in predictions}
    cluster_of, members = cluster_index(dataset)
    tops = {qid: [pid for pid, _ in sorted(scores.items(), key=lambda x: -x[1])[:k]]
            for qid, scores in run.items() if qid in cluster_of}
    if not tops:
        raise InputError(f"--cluster-k: no query of the run is a mention of {dataset.clusters_path}")
    wanted = {pid for qid, ranked in tops.items() for pid in ranked if (qid, pid) in spans}
    passages: dict[str, list[tuple[str, int, int]]] = {}
    for passage in dataset.passages():
        if passage.id in wanted:
            passages[passage.id] = [(m.mention_id, m.start, m.end) for m in passage.mentions]
    per_query = {qid: query_b_cubed(qid, answer_mentions(qid, ranked, spans, passages), cluster_of, members)
                 for qid, ranked in tops.items()}
    return QueryClusterScores(k, per_query)
