"""The CoreSearch paper's ranking metrics (Eirew et al. 2022), written by hand because they
reproduce the paper's evaluation code, which no library implements:

* MRR@10: reciprocal rank of the first relevant doc in the top 10, averaged over queries.
* mAP@k: sum of precision@rank over the relevant docs at rank ≤ k, divided by the number of
  relevant docs |R| of the query (equal to trec_eval's ``map_cut_k``), averaged over queries.
* R@k: MICRO-averaged — relevant found in the top k over all queries / relevant over all
  queries. Per query it is a (found, total) pair; per-query output shows found/total.

The ranking uses trec_eval's order (score descending, then doc id descending) so that both
definitions agree wherever they should.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from corefsearch.evaluate.metrics import METRICS, Qrels, Run, rank_documents


def _cutoff(metric: str) -> int:
    return int(metric.split("@", 1)[1])


def query_values(ranking: Sequence[str], relevant: set[str], metrics: Sequence[str] = METRICS,
                 ) -> tuple[dict[str, float], dict[str, tuple[int, int]]]:
    """One query's values: floats for MRR@k/mAP@k and (found, total) pairs for R@k."""
    total = len(relevant)
    hit_ranks = [rank for rank, doc in enumerate(ranking, start=1) if doc in relevant]
    scores: dict[str, float] = {}
    recall: dict[str, tuple[int, int]] = {}
    for metric in metrics:
        k = _cutoff(metric)
        hits = [rank for rank in hit_ranks if rank <= k]
        if metric.startswith("MRR@"):
            scores[metric] = 1.0 / hits[0] if hits else 0.0
        elif metric.startswith("mAP@"):
            # the i-th relevant doc, at rank r, contributes precision@r = i / r
            scores[metric] = sum(i / rank for i, rank in enumerate(hits, start=1)) / total if total else 0.0
        elif metric.startswith("R@"):
            recall[metric] = (len(hits), total)
        else:
            raise ValueError(f"no CoreSearch definition for metric {metric!r}")
    return scores, recall


def micro_recall(pairs: Iterable[tuple[int, int]]) -> float:
    """Total found / total relevant over queries (0 when nothing is relevant)."""
    found = total = 0
    for query_found, query_total in pairs:
        found += query_found
        total += query_total
    return found / total if total else 0.0


def evaluate_coresearch(run: Run, qrels: Qrels, metrics: Sequence[str] = METRICS,
                        ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """``(per_query, aggregate)`` over every qrels query, in the given metric order.

    A qrels query the run lacks has an empty ranking, so it scores 0 (and adds its |R| to the
    micro-recall denominator). Run queries absent from the qrels are ignored. Relevance > 0 is
    relevant. Per-query R@k is the query's own ratio; the aggregate R@k is micro-averaged.
    """
    per_query: dict[str, dict[str, float]] = {}
    recall_pairs: dict[str, list[tuple[int, int]]] = {metric: [] for metric in metrics}
    for qid, judged in qrels.items():
        relevant = {doc for doc, rel in judged.items() if rel > 0}
        scores, recall = query_values(rank_documents(run.get(qid) or {}), relevant, metrics)
        for metric, (found, total) in recall.items():
            scores[metric] = found / total if total else 0.0
            recall_pairs[metric].append((found, total))
        per_query[qid] = {metric: scores[metric] for metric in metrics}

    aggregate: dict[str, float] = {}
    for metric in metrics:
        if metric.startswith("R@"):
            aggregate[metric] = micro_recall(recall_pairs[metric])
        else:
            column = [values[metric] for values in per_query.values()]
            aggregate[metric] = sum(column) / len(column) if column else 0.0
    return per_query, aggregate
