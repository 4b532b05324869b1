"""Reciprocal rank fusion and score interpolation of ranked lists, through ``pyserini.fusion``.

``pyserini.fusion`` is light to import (pandas only: no torch, no JVM; about 0.7 s, most of
it pandas, measured with ``python -X importtime``), so the fusion itself is Pyserini's:

- RRF (Cormack et al. 2009): score(p) = Σ 1 / (60 + rank of p in each list).
- Interpolation: each list's scores are min-max normalised per query, then
  score(p) = alpha · dense + (1 − alpha) · bm25. A passage missing from one list gets that
  list's minimum, which after normalisation is 0, the value Pyserini's merge gives a
  passage a list lacks. A list whose scores are all equal normalises to 1.

Each input list is cut to ``depth`` (the search depth k) before fusing; equal fused scores
are ordered by passage id (Pyserini's merge).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Hit

FUSION_METHODS = ("rrf", "interpolate")
RRF_K = 60

Ranking = Mapping[str, Sequence[Hit]]  # query id -> hits, best first


@dataclass
class FusionOptions:
    method: str = field(default="rrf", metadata={"help": "Hybrid: rrf (reciprocal rank, k=60) | interpolate.",
                                                "option": "--fusion"})
    alpha: float = field(default=0.5, metadata={  # weight of the dense scores in "interpolate"
        "help": "Hybrid --fusion interpolate: alpha·dense + (1-alpha)·BM25 on min-max normalised scores."})
    rrf_k: int = RRF_K

    def validate(self) -> None:
        if self.method not in FUSION_METHODS:
            raise InputError(f"--fusion must be one of {', '.join(FUSION_METHODS)}, got {self.method!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise InputError(f"--alpha must be between 0 and 1, got {self.alpha}")
        if self.rrf_k < 0:
            raise InputError(f"the RRF constant must not be negative, got {self.rrf_k}")

    @property
    def tag(self) -> str:
        return f"rrf{self.rrf_k}" if self.method == "rrf" else f"interp{self.alpha:g}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _trec_run(ranking: Ranking) -> Any:
    """A Pyserini ``TrecRun`` of the rankings (built column-wise: much faster than from row tuples)."""
    import pandas as pd
    from pyserini.trectools import TrecRun

    run = TrecRun()
    rows = [(qid, hit.passage_id, rank, float(hit.score))
            for qid, hits in ranking.items() for rank, hit in enumerate(hits, start=1)]
    if rows:
        topics, docids, ranks, scores = zip(*rows, strict=True)
        run.run_data = pd.DataFrame({"topic": topics, "q0": "Q0", "docid": docids, "rank": ranks,
                                     "score": scores, "tag": "run"}, columns=TrecRun.columns)
    return run


def _hits(run: Any, qids: Sequence[str]) -> dict[str, list[Hit]]:
    fused: dict[str, list[Hit]] = {qid: [] for qid in qids}
    data = run.run_data
    for qid, passage_id, score in zip(data["topic"].tolist(), data["docid"].tolist(), data["score"].tolist(),
                                      strict=True):
        fused[qid].append(Hit(passage_id, score))
    return fused


def _qids(rankings: Sequence[Ranking]) -> list[str]:
    seen: dict[str, None] = {}
    for ranking in rankings:
        seen.update(dict.fromkeys(ranking))
    return list(seen)


def _non_empty(ranking: Ranking) -> dict[str, Sequence[Hit]]:
    return {qid: hits for qid, hits in ranking.items() if hits}


def reciprocal_rank_fusion(rankings: Sequence[Ranking], k: int, depth: int | None = None,
                           rrf_k: int = RRF_K) -> dict[str, list[Hit]]:
    """RRF of several rankings; the top ``k`` per query, each list cut to ``depth`` (default ``k``) first."""
    from pyserini.fusion import reciprocal_rank_fusion as pyserini_rrf

    qids = _qids(rankings)
    runs = [_trec_run(_non_empty(r)) for r in rankings if _non_empty(r)]
    if not runs:
        return {qid: [] for qid in qids}
    if len(runs) < 2:  # Pyserini merges two or more runs; one run alone is rescored the same way
        runs.append(_trec_run({}))
    return _hits(pyserini_rrf(runs, rrf_k=rrf_k, depth=depth or k, k=k), qids)


def interpolation(dense: Ranking, bm25: Ranking, k: int, alpha: float = 0.5,
                  depth: int | None = None) -> dict[str, list[Hit]]:
    """alpha · dense + (1 − alpha) · bm25 on min-max normalised scores; the top ``k`` per query."""
    from pyserini.fusion import interpolation as pyserini_interpolation
    from pyserini.trectools import RescoreMethod

    qids = _qids([dense, bm25])
    depth = depth or k
    # Normalise over the lists as fused: their first `depth` hits.
    runs = [_trec_run({qid: list(hits)[:depth] for qid, hits in _non_empty(ranking).items()})
            for ranking in (dense, bm25)]
    if not any(len(run.run_data) for run in runs):
        return {qid: [] for qid in qids}
    normalised = [run.rescore(RescoreMethod.NORMALIZE) if len(run.run_data) else run for run in runs]
    return _hits(pyserini_interpolation(normalised, alpha=alpha, depth=depth, k=k), qids)


def fuse(dense: Ranking, bm25: Ranking, k: int, options: FusionOptions) -> dict[str, list[Hit]]:
    """Fuse a dense and a BM25 ranking of the same queries with ``options``."""
    options.validate()
    if options.method == "rrf":
        return reciprocal_rank_fusion([dense, bm25], k, rrf_k=options.rrf_k)
    return interpolation(dense, bm25, k, alpha=options.alpha)
