"""The second round's top 10 is a re-ranking: which gate moves a passage up on every corpus, not only on ECB+.

In the top 10, ``search --rounds 2`` (``--expand 10``, top 10 from the heads) moves up the first round's passages
whose mention passes the gate, in their first-round order, ahead of the others: what it does to MRR@10 is that
re-ranking (bench/RESULTS.md, "The second round's top 10 is a re-ranking": heads only, no second search, gives
the same MRR@10 on ECB+ dev). This bench computes, per query of a split, each of its first round's top 10
passages' relevance and its candidate mention nearest to the query mention (the encoder's cosine, the engine's
candidates: the dataset's stored detected mentions), and scores gates offline:

- ``cosine >= g``: the fixed gate (the default 0.9);
- ``within d of the best``: a passage moves up when its cosine is within ``d`` of the highest of the query's
  top 10 (a gate set by the query's own passages, so that a corpus whose similarities run high or low moves
  the same few);
- ``cosine >= g and at most m move``: the fixed gate, skipped when more than ``m`` of the 10 pass it (a query
  whose every passage passes tells nothing by passing);
- ``rank of the cosine <= m``: the ``m`` passages with the highest cosines move up (``m`` of 10, whatever the
  corpus);
- ``cosine >= max(0.9, background + d)``: the fixed gate, raised on a query whose background (the highest
  cosine of the nearest mentions of its passages ranked 21 to 100, mentions of other events mostly) runs high;
- ``cosine >= 0.9 and >= the top passage's + d``: only what the encoder finds nearer than the first round's top
  passage moves above it;
- ``RRF of the first round and the cosine``: a soft re-ranking, the two orders fused (k 60, the cosine's weighted);
- ``cosine >= 0.9 unless the first round's top leads by g``: the fixed gate, skipped where the first round is sure
  (its top score leads the second by a share g of it);
- ``calibrated per collection``: the gate weighed against the first round's rank by a latent model fitted, without
  gold, to the collection's own queries (:func:`calibrated`).

The first round is the engine's list at k 100 (its top 10 re-ranked, ranks 21-100 the background).

Chosen on ECB+ dev (MRR@10); then ECB+ test, MEANTIME and WEC-Eng Dev, not tuned on, scored once for the choice
and the fixed gate.

Run: ``python bench/rerank_gate.py --corpus ecb-dev=INDEX,DATASET,dev --choose ecb-dev`` (every gate, dev), then
``--corpus …test corpora… --only "GATE;cosine >= 0.9"`` (the choice and the fixed gate, once).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")

from answers import ENCODER, open_engine  # noqa: E402
from headline import log  # noqa: E402

# per passage of the top 10: relevant, the nearest mention's cosine, the first round's score (and, from
# collect_signals, the rank its mention's search gives the query's passage)
Top = list[tuple]


def collect(index: Path, dataset: Path, split: str, out: Path) -> list[Top]:
    """Per query: its top 10 (relevant, the nearest mention's cosine), then as an 11th entry ``(False, background)``,
    the highest cosine of the nearest mentions of its passages ranked 21 to 100 (how similar a mention of another
    event gets for this query in this collection; None when they hold none)."""
    from corefsearch.datasets.dataset import read_queries

    if out.is_file():
        return [[(bool(e[0]), e[1], e[2] if len(e) > 2 else 0.0) for e in json.loads(line)]
                for line in out.read_text().splitlines()]
    engine = open_engine(index, dataset, "cpu")
    expansion = engine.expander()
    tops: list[Top] = []
    queries = read_queries(dataset / "queries" / f"{split}.jsonl")
    started = time.perf_counter()
    for number, query in enumerate(queries, 1):
        result = engine.query(qid=query.id, k=100)
        pids = [h.passage_id for h in result.hits[:10]]
        nearest = expansion.nearest([(query, pids)], count=False)[query.id]
        cosines = expansion.similarities(query, nearest)
        background = expansion.background([(query, [h.passage_id for h in result.hits[20:100]])])[query.id]
        tops.append([(bool(h.relevant), cosines.get(h.passage_id), float(h.score)) for h in result.hits[:10]]
                    + [(False, background, 0.0)])
        if number % 200 == 0:
            log(f"{out.stem}: {number:,} of {len(queries):,} ({time.perf_counter() - started:.0f} s)")
    out.write_text("".join(json.dumps(top) + "\n" for top in tops))
    return tops


def collect_signals(index: Path, dataset: Path, split: str, out: Path, batch: int = 100,
                    limit: int | None = None, encoder: str = ENCODER, queries: Sequence[Any] | None = None,
                    with_background: bool = True) -> list[dict[str, Any]]:
    """Per query, what the re-rankings read besides the gate, for its first round's top 10: each passage's id,
    relevance (for scoring), nearest mention's cosine, first-round score, and where the search made from that
    mention (the second round's expansion query, every mention whatever its cosine) ranks the query's own
    passage (``recip``: 1-100, None when not in its top 100); the background as in :func:`collect`. Searched in
    batches of ``batch`` queries (the retriever's batch search), so the second searches cost what a second
    round's do."""
    from corefsearch.datasets.dataset import read_queries
    from corefsearch.io.trec import read_qrels
    from corefsearch.search.second_round import expansion_query

    if out.is_file():
        return [json.loads(line) for line in out.read_text().splitlines()]
    engine = open_engine(index, dataset, "cpu", encoder)
    retriever, expansion = engine.retriever(), engine.expander()
    judged = dataset / "qrels" / f"{split}.txt"
    qrels = read_qrels(judged) if queries is None or judged.is_file() else {}
    queries = list(queries if queries is not None else read_queries(dataset / "queries" / f"{split}.jsonl"))[:limit]
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for start in range(0, len(queries), batch):
        block = queries[start:start + batch]
        first = list(retriever.search(block, 100))
        nearest = expansion.nearest([(q, [h.passage_id for h in hits[:10]]) for q, hits in first], count=False)
        background = (expansion.background([(q, [h.passage_id for h in hits[20:100]]) for q, hits in first])
                      if with_background else {q.id: None for q, _ in first})
        seconds: list[Any] = []
        for query, _ in first:
            for pid, record in nearest[query.id].items():
                seconds.append(expansion_query(query, pid, record.sentence, record.start, record.end))
        recip: dict[str, int | None] = {}
        for second, hits in retriever.search(seconds, 100):
            own = second.id.split(">", 1)[0]
            passage = next(q.passage_id for q in block if q.id == own)
            recip[second.id] = next((r for r, h in enumerate(hits, 1) if h.passage_id == passage), None)
        for query, hits in first:
            cosines = expansion.similarities(query, nearest[query.id])
            judged = qrels.get(query.id, {})
            rows.append({"qid": query.id, "background": background[query.id], "top": [
                {"pid": h.passage_id, "rel": judged.get(h.passage_id, 0) > 0, "cos": cosines.get(h.passage_id),
                 "score": float(h.score), "recip": recip.get(f"{query.id}>{h.passage_id}"),
                 "mid": nearest[query.id][h.passage_id].mention_id if h.passage_id in nearest[query.id] else None}
                for h in hits[:10]]})
        log(f"{out.stem}: {len(rows):,} of {len(queries):,} ({time.perf_counter() - started:.0f} s)")
    tmp = out.with_suffix(".partial")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(out)
    return rows


def add_ranks(index: Path, dataset: Path, split: str, rows: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """Each top passage's rank in the hybrid's two lists alone (``bm25``, ``dense``: 1-100, None when not in its top
    100), written back into ``out``: two views of the first round that the fusion had joined."""
    from corefsearch.datasets.dataset import read_queries

    if all("bm25" in e for row in rows for e in row["top"]):
        return rows
    retriever = open_engine(index, dataset, "cpu").retriever()
    by_id = {q.id: q for q in read_queries(dataset / "queries" / f"{split}.jsonl")}
    queries = [by_id[row["qid"]] for row in rows]
    ranks: dict[str, dict[str, dict[str, int]]] = {"bm25": {}, "dense": {}}
    for start in range(0, len(queries), 500):
        chunk = queries[start:start + 500]
        strings = retriever.bm25.formulate(chunk)
        sparse = retriever.bm25.search_batch(strings, [q.id for q in chunk], 100, [q.passage_id for q in chunk])
        dense = retriever.dense.search_chunk(chunk, 100)
        for name, lists in (("bm25", sparse), ("dense", dense)):
            for qid, hits in lists.items():
                ranks[name][qid] = {h.passage_id: r for r, h in enumerate(hits, 1)}
    for row in rows:
        for e in row["top"]:
            for name in ranks:
                e[name] = ranks[name][row["qid"]].get(e["pid"])
    tmp = out.with_suffix(".partial")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(out)
    return rows


def pseudo_queries(dataset: Path, n: int, mention_type: str = "event", seed: int = 13) -> list[Any]:
    """``n`` of the collection's own detected mentions (``detect``'s, seeded sample) as queries: what a collection
    of plain documents offers to calibrate on, with no gold and no query of a user's."""
    import random

    from corefsearch.base.schema import Query

    texts = {}
    with (dataset / "passages.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            texts[record["id"]] = record["text"]
    mentions = [json.loads(line) for line in (dataset / "predicted_mentions.jsonl").read_text().splitlines()]
    mentions = [m for m in mentions if m["type"] == mention_type and m["passage_id"] in texts]
    chosen = random.Random(seed).sample(mentions, min(n, len(mentions)))
    return [Query(m["mention_id"], m["passage_id"], texts[m["passage_id"]], m["start"], m["end"], m["text"],
                  "", mention_type) for m in chosen]


def as_top(row: dict[str, Any]) -> Top:
    """A :func:`collect_signals` row as :func:`collect`'s entry (the top 10, then the background)."""
    return ([(e["rel"], e["cos"], e["score"], e["recip"], e.get("bm25"), e.get("dense")) for e in row["top"]]
            + [(False, row["background"], 0.0, None, None, None)])


def reordered(entry: Top, rule: Callable[[Top], list[Any]]) -> list[int]:
    """The top 10's new order under ``rule``: a gate's passages (True) moved up in their first-round order, or, for
    a rule that gives each passage a score, the order by it."""
    up = rule(entry)[:10]
    if up and isinstance(up[0], float):
        return sorted(range(len(up)), key=lambda i: -up[i])
    return [i for i in range(len(up)) if up[i]] + [i for i in range(len(up)) if not up[i]]


def mrr(tops: Sequence[Top], rule: Callable[[Top], list[Any]]) -> float:
    total = 0.0
    for entry in tops:
        total += next((1.0 / rank for rank, i in enumerate(reordered(entry, rule), 1) if entry[i][0]), 0.0)
    return 100 * total / max(len(tops), 1)


def moved_count(entry: Top, rule: Callable[[Top], list[Any]]) -> int:
    """How many of the top 10 a rule moves up: a gate's passages, or those a scoring rule puts above their
    first-round rank."""
    up = rule(entry)[:10]
    if up and isinstance(up[0], float):
        return sum(1 for rank, i in enumerate(reordered(entry, rule)) if rank < i)
    return sum(up)


def gates() -> dict[str, Callable[[Top], list[Any]]]:
    def cos(entry: Top) -> list[float]:
        return [e[1] if e[1] is not None else -2.0 for e in entry[:10]]

    def background(entry: Top) -> float:
        return entry[10][1] if len(entry) > 10 and entry[10][1] is not None else -2.0

    out: dict[str, Callable[[Top], list[Any]]] = {"first round (nothing moves)": lambda top: [False] * len(top)}
    for g in (0.8, 0.85, 0.9, 0.93, 0.95):
        out[f"cosine >= {g:g}"] = lambda top, g=g: [c >= g for c in cos(top)]
    for d in (0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2):
        out[f"within {d:g} of the best"] = lambda top, d=d: [c >= max(cos(top)) - d and c > -2 for c in cos(top)]
    for m in (3, 5, 7):
        out[f"cosine >= 0.9 and at most {m} move"] = lambda top, m=m: (
            [c >= 0.9 for c in cos(top)] if sum(c >= 0.9 for c in cos(top)) <= m else [False] * len(top))
    for m in (1, 2, 3, 5):
        out[f"the {m} highest cosines"] = lambda top, m=m: [
            c > -2 and c >= sorted(cos(top), reverse=True)[min(m, len(top)) - 1] for c in cos(top)]
    for d in (0.0, 0.01, 0.02, 0.03, 0.05):
        out[f"cosine >= max(0.9, background + {d:g})"] = lambda top, d=d: [
            c >= max(0.9, background(top) + d) for c in cos(top)]
    for d in (0.0, 0.02, 0.05, 0.1):
        # Only what the encoder finds nearer than the first round's top passage moves above it.
        out[f"cosine >= 0.9 and >= the top passage's + {d:g}"] = lambda top, d=d: [
            c >= 0.9 and c >= cos(top)[0] + d for c in cos(top)]
    for w in (0.25, 0.5, 1.0):
        # Reciprocal rank fusion (k 60) of the first round's order and the cosine's: a soft re-ranking.
        out[f"RRF of the first round and the cosine, weight {w:g}"] = lambda top, w=w: [
            1 / (61 + i) + w / (61 + sorted(cos(top), reverse=True).index(c)) for i, c in enumerate(cos(top))]
    for g in (0.1, 0.2, 0.3):
        # The fixed gate, skipped where the first round is sure: its top score leads the second by g of it.
        out[f"cosine >= 0.9 unless the first round's top leads by {g:g}"] = lambda top, g=g: (
            [False] * len(top) if len(top) > 1 and top[0][2] > 0 and (top[0][2] - top[1][2]) >= g * abs(top[0][2])
            else [c >= 0.9 for c in cos(top)])
    def recip(entry: Top) -> list[float]:
        return [e[3] if len(e) > 3 and e[3] is not None else math.inf for e in entry[:10]]

    for r in (1, 3, 5, 10, 20, 50, 100):
        # The second round's reciprocal test as a gate: the passage's mention, searched, finds the query's passage.
        out[f"cosine >= 0.9 and its search finds the query within {r}"] = lambda top, r=r: [
            c >= 0.9 and q <= r for c, q in zip(cos(top), recip(top), strict=True)]
    for r in (1, 3, 10):
        out[f"its search finds the query within {r}"] = lambda top, r=r: [q <= r for q in recip(top)]
    # The fixed gate below a first-round top that stays first.
    out["cosine >= 0.9, the top kept first"] = lambda top: [True] + [c >= 0.9 for c in cos(top)[1:]]
    out["cosine >= 0.9 and within 10, the top kept first"] = lambda top: [True] + [
        c >= 0.9 and q <= 10 for c, q in zip(cos(top)[1:], recip(top)[1:], strict=True)]
    for w in (0.05, 0.1, 0.2, 0.3, 0.5):
        # A linear fusion: the first round's score (the hybrid's, normalised over its list) plus w if the gate passes;
        # a passage jumps only over those that lead it by less than w.
        out[f"first-round score + {w:g} if the gate passes"] = lambda top, w=w: [
            e[2] + (w if c >= 0.9 else 0.0) for e, c in zip(top[:10], cos(top), strict=True)]
    for w in (0.25, 0.5, 1.0):
        out[f"first-round score + {w:g} x cosine"] = lambda top, w=w: [
            e[2] + w * max(c, 0.0) for e, c in zip(top[:10], cos(top), strict=True)]
    for m in (2, 3):
        out[f"the {m} highest cosines, if >= 0.9"] = lambda top, m=m: [
            c >= 0.9 and c >= sorted(cos(top), reverse=True)[min(m, len(top)) - 1] for c in cos(top)]
    return out


CALIBRATED = "calibrated per collection (EM, gate 0.9)"
PSEUDO = "calibrated on the collection's detected mentions (--expand-order calibrated)"
FROM_FILE = "the library's calibrated order (corefsearch calibrate's file)"
RANKS = 10


def _prior(alpha: float, beta: float) -> Any:
    """The relevance prior of ranks 1 to 10, σ(α − β·log r)."""
    import numpy as np

    return 1 / (1 + np.exp(-(alpha - beta * np.log(np.arange(1, RANKS + 1)))))


def _fit_prior(alpha: float, beta: float, target: Any) -> tuple[float, float]:
    """α and β moved towards the per-rank posteriors ``target`` (gradient steps of a least-squares fit)."""
    import numpy as np

    x = np.log(np.arange(1, RANKS + 1))
    for _ in range(50):
        miss = target - _prior(alpha, beta)
        alpha, beta = alpha + 0.2 * miss.sum(), beta - 0.2 * (miss * x).sum()
    return alpha, beta


def _by_query(scores: Any, tops: Sequence[Top]) -> list[list[float]]:
    """Each query's posteriors for its passages, ties broken by the first round's order."""
    return [[float(v) - 1e-9 * i for i, v in enumerate(row[:len(t[:RANKS])])] for row, t in zip(scores, tops,
                                                                                                strict=True)]


def passing(entry: Top, gate: float) -> list[bool]:
    """Whether each passage of a top 10 passes the gate (a passage without a candidate mention does not)."""
    return [e[1] is not None and e[1] >= gate for e in entry[:RANKS]]


def calibrated(tops: Sequence[Top], gate: float = 0.9, iterations: int = 300) -> tuple[list[list[float]], str]:
    """A re-ranking that weighs the gate against the first round's rank by how much each says in this collection,
    learnt from the collection's own queries without gold: the library's ``--expand-order calibrated`` model
    (corefsearch.search.calibration.fit) fitted to these queries' top 10; each passage scores its posterior
    P(relevant | r, gate). Returns the scores and the fitted parameters."""
    from corefsearch.search.calibration import fit

    model = fit([passing(t, gate) for t in tops], gate, iterations)
    return scored_by(model, tops), describe_model(model)


def scored_by(model: Any, tops: Sequence[Top]) -> list[list[float]]:
    """Each query's passages scored by a fitted calibration's posterior (ties broken by the first round's order)."""
    return [[model.posterior(i + 1, p) - 1e-9 * i for i, p in enumerate(passing(t, model.gate))] for t in tops]


def describe_model(model: Any) -> str:
    from corefsearch.search.calibration import _prior

    return (f"prior {' '.join(f'{v:.2f}' for v in _prior(model.alpha, model.beta))}; a {model.a:.2f}, b "
            f"{model.b:.2f}; top pass rate {model.top_pass_rate:.2f}")


CALIBRATED_COSINE = "calibrated per collection (EM, the cosine)"


def calibrated_cosine(tops: Sequence[Top], iterations: int = 300) -> tuple[list[list[float]], str]:
    """As :func:`calibrated`, with the cosine itself in place of the gate: given relevance, a passage's nearest
    cosine is Gaussian (its own mean and spread for each class), a passage without a mention of the query's type
    is a third outcome with its own rate in each class; the shape of the collection's cosines then tells how far
    apart the classes are, where one binary gate cannot. Written by hand, as :func:`calibrated`."""
    import numpy as np

    c = np.array([[e[1] if e[1] is not None else np.nan for e in t[:RANKS]] + [np.nan] * (RANKS - len(t[:RANKS]))
                  for t in tops])
    has = ~np.isnan(c)
    cv = np.where(has, c, 0.0)
    alpha, beta = 0.0, 1.0
    mean1, mean0, sd1, sd0, none1, none0 = np.nanpercentile(c, 75), np.nanpercentile(c, 25), 0.1, 0.1, 0.1, 0.1

    def density(mean: float, sd: float, none: float) -> Any:
        gauss = np.exp(-0.5 * ((cv - mean) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
        return np.where(has, (1 - none) * gauss, none)

    def posterior(prior: Any) -> Any:
        yes = density(mean1, sd1, none1) * prior
        no = density(mean0, sd0, none0) * (1 - prior)
        return yes / np.maximum(yes + no, 1e-300)

    for _ in range(iterations):
        post = posterior(_prior(alpha, beta))
        w1, w0 = post * has, (1 - post) * has
        mean1, mean0 = (w1 * cv).sum() / w1.sum(), (w0 * cv).sum() / w0.sum()
        sd1 = max(math.sqrt((w1 * (cv - mean1) ** 2).sum() / w1.sum()), 1e-3)
        sd0 = max(math.sqrt((w0 * (cv - mean0) ** 2).sum() / w0.sum()), 1e-3)
        none1 = (post * ~has).sum() / post.sum()
        none0 = ((1 - post) * ~has).sum() / (1 - post).sum()
        alpha, beta = _fit_prior(alpha, beta, post.mean(0))
    prior = _prior(alpha, beta)
    return _by_query(posterior(prior), tops), (
        f"prior {' '.join(f'{v:.2f}' for v in prior)}; relevant cos {mean1:.3f} ± {sd1:.3f}, other "
        f"{mean0:.3f} ± {sd0:.3f}; no mention {none1:.2f} / {none0:.2f}")


RANK_BINS = (1, 3, 10, 100)  # a rank's outcomes: 1, 2-3, 4-10, 11-100, then not in the top 100


def _rank_bin(rank: int | None) -> int:
    return len(RANK_BINS) if rank is None else next(b for b, top in enumerate(RANK_BINS) if rank <= top)


# What a latent-class re-ranking can read of a passage, each as outcomes ordered from "most like relevant" to
# "least", the last one "no mention" where the signal needs one. Entries are as_top's tuples.
SIGNALS: dict[str, tuple[int, Callable[[tuple], int]]] = {
    "gate": (3, lambda e: 2 if e[1] is None else int(e[1] < 0.9)),
    "cosine": (5, lambda e: 4 if e[1] is None else (0 if e[1] >= 0.95 else 1 if e[1] >= 0.9 else
                                                   2 if e[1] >= 0.8 else 3)),
    "reciprocal": (len(RANK_BINS) + 2, lambda e: len(RANK_BINS) + 1 if e[1] is None else _rank_bin(e[3])),
    "bm25": (len(RANK_BINS) + 1, lambda e: _rank_bin(e[4])),
    "dense": (len(RANK_BINS) + 1, lambda e: _rank_bin(e[5])),
}


def latent_class(tops: Sequence[Top], signals: Sequence[str], rank_prior: bool = True, iterations: int = 300
                 ) -> tuple[list[list[float]], str]:
    """A re-ranking learnt from the collection's own queries without gold, as :func:`calibrated` with more than one
    signal: a two-class latent model (relevant or not) in which each passage of a top 10 is relevant with a prior
    (σ(α − β·log r) by its first-round rank r, or one rate for the collection) and, given its class, shows each
    of ``signals`` (:data:`SIGNALS`: categorical outcomes) independently of the others; fitted by EM, each passage
    then scores its posterior. Two or more signals beside the prior make the model identifiable where the gate
    alone could not tell a weak first round from a strong gate. Written by hand: a latent class model over
    categorical signals with a logistic prior, which no well-kept library fits."""
    import numpy as np

    n = len(tops)
    real = np.zeros((n, RANKS), dtype=bool)
    outs = {name: np.zeros((n, RANKS), dtype=int) for name in signals}
    for i, top in enumerate(tops):
        for j, e in enumerate(top[:RANKS]):
            real[i, j] = True
            for name in signals:
                outs[name][i, j] = SIGNALS[name][1](e)
    emit: dict[str, list[Any]] = {}
    for name in signals:  # the start: the relevant class leans to the first outcomes, the other to the last
        size = SIGNALS[name][0]
        lean = np.linspace(2.0, 1.0, size)
        emit[name] = [lean[::-1] / lean.sum(), lean / lean.sum()]  # [not relevant, relevant]
    alpha, beta, rate = 0.0, (1.0 if rank_prior else 0.0), 0.3

    def prior() -> Any:
        return _prior(alpha, beta) if rank_prior else np.full(RANKS, rate)

    def posterior(p: Any) -> Any:
        yes, no = np.broadcast_to(p, real.shape).copy(), np.broadcast_to(1 - p, real.shape).copy()
        for name in signals:
            yes *= emit[name][1][outs[name]]
            no *= emit[name][0][outs[name]]
        return np.where(real, yes / np.maximum(yes + no, 1e-300), 0.0)

    for _ in range(iterations):
        post = posterior(prior())
        neg = np.where(real, 1 - post, 0.0)
        for name in signals:
            size = SIGNALS[name][0]
            counts = [np.array([(w * (outs[name] == k) * real).sum() for k in range(size)]) + 1e-3
                      for w in (neg, post)]
            emit[name] = [c / c.sum() for c in counts]
        if rank_prior:
            alpha, beta = _fit_prior(alpha, beta, post.sum(0) / np.maximum(real.sum(0), 1))
        else:
            rate = float(post.sum() / max(real.sum(), 1))
    p = prior()
    described = "; ".join(f"{name} {' '.join(f'{v:.2f}' for v in emit[name][1])} / "
                          f"{' '.join(f'{v:.2f}' for v in emit[name][0])}" for name in signals)
    return _by_query(posterior(p), tops), f"prior {' '.join(f'{v:.2f}' for v in p)}; {described}"


def top_pass_rate(tops: Sequence[Top], gate: float = 0.9) -> float:
    """The share of a collection's queries whose first-round top passage passes the gate: how often the gate and
    the first round agree where the first round is surest (read without gold)."""
    return sum(1 for t in tops if t and t[0][1] is not None and t[0][1] >= gate) / max(len(tops), 1)


def abstaining(inner: Callable[[Sequence[Top]], tuple[list[list[float]], str]], floor: float
               ) -> Callable[[Sequence[Top]], tuple[list[list[float]], str]]:
    """``inner``'s re-ranking on a collection whose top pass rate (:func:`top_pass_rate`) is at least ``floor``, the
    first round's order elsewhere: where the gate seldom passes what the first round ranks first, a passage that
    passes it says less than the first round's order does."""

    def rerank(tops: Sequence[Top]) -> tuple[list[list[float]], str]:
        rate = top_pass_rate(tops)
        if rate >= floor:
            scores, described = inner(tops)
            return scores, f"top pass rate {rate:.2f}: re-ranked ({described})"
        return [[-float(i) for i in range(len(t[:RANKS]))] for t in tops], f"top pass rate {rate:.2f}: kept"

    return rerank


def fixed_gate_scores(tops: Sequence[Top], gate: float = 0.9) -> tuple[list[list[float]], str]:
    """The fixed gate as scores: the passing passages first, each group in its first-round order."""
    return [[float(p) - 1e-3 * i for i, p in enumerate(passing(t, gate))]
            for t in tops], "gate 0.9"


# The latent-class re-rankings scored on dev: (signals, a rank prior or one rate).
LATENT = {
    "latent: rank, gate": (("gate",), True),
    "latent: rank, cosine (5 bins)": (("cosine",), True),
    "latent: rank, gate, reciprocal": (("gate", "reciprocal"), True),
    "latent: rank, cosine, reciprocal": (("cosine", "reciprocal"), True),
    "latent: flat, gate, bm25, dense": (("gate", "bm25", "dense"), False),
    "latent: flat, cosine, bm25, dense": (("cosine", "bm25", "dense"), False),
    "latent: flat, cosine, bm25, dense, reciprocal": (("cosine", "bm25", "dense", "reciprocal"), False),
    "latent: rank, cosine, bm25, dense": (("cosine", "bm25", "dense"), True),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", required=True,
                        help="NAME=INDEX,DATASET,SPLIT[,MENTION_ENCODER] (default encoder: the shipped event one)")
    parser.add_argument("--choose", required=True, help="the corpus the gate is chosen on (its dev split)")
    parser.add_argument("--work", type=Path, default=Path("work/rerank-gate"))
    parser.add_argument("--signals", action="store_true",
                        help="collect the reciprocal rank beside the gate (collect_signals) and score the gates "
                             "that read it")
    parser.add_argument("--max-queries", type=int, default=None, help="the first N queries of each (a check)")
    parser.add_argument("--guard", action="append", default=[],
                        help="a corpus (a dev split) where the chosen gate must not lower MRR@10")
    parser.add_argument("--min-gain", type=float, default=3.0, help="the gain the choice needs on --choose")
    parser.add_argument("--pseudo", action="append", default=[],
                        help="NAME=FILE: the corpus NAME's calibration lists of its own detected mentions as queries "
                             "(collect_signals over pseudo_queries), for the library's calibrated order")
    parser.add_argument("--calibration", action="append", default=[],
                        help="NAME=FILE: a calibration `corefsearch calibrate` wrote for the corpus NAME's collection")
    parser.add_argument("--only", default=None, help="these gates alone, ';'-separated (the test read)")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    corpora: dict[str, list[Top]] = {}
    for spec in args.corpus:
        name, rest = spec.split("=", 1)
        index, dataset, split, *encoder = rest.split(",")
        if args.signals:
            out = args.work / f"{name}.signals.jsonl"
            rows = collect_signals(Path(index), Path(dataset), split, out, limit=args.max_queries,
                                   encoder=encoder[0] if encoder else ENCODER)
            rows = add_ranks(Path(index), Path(dataset), split, rows, out)
            corpora[name] = [as_top(row) for row in rows]
        else:
            corpora[name] = collect(Path(index), Path(dataset), split, args.work / f"{name}.jsonl")
    rules = gates()
    if not args.signals:  # the reciprocal rank is collected by collect_signals alone
        rules = {label: rule for label, rule in rules.items() if "its search" not in label}
    # The calibrated re-rankings' scores, by entry: each corpus is fitted alone.
    fitted: dict[str, str] = {}
    calibrations: list[tuple[str, Callable[[Sequence[Top]], tuple[list[list[float]], str]]]] = [
        (CALIBRATED, calibrated), (CALIBRATED_COSINE, calibrated_cosine)]
    if args.signals:
        calibrations += [(label, lambda tops, s=s, r=r: latent_class(tops, s, r)) for label, (s, r) in LATENT.items()]
    for floor in (0.4, 0.5):
        calibrations += [(f"cosine >= 0.9 where the top pass rate >= {floor:g}", abstaining(fixed_gate_scores, floor)),
                         (f"calibrated (gate) where the top pass rate >= {floor:g}", abstaining(calibrated, floor)),
                         (f"latent: rank, cosine (5 bins) where the top pass rate >= {floor:g}",
                          abstaining(lambda tops: latent_class(tops, ("cosine",)), floor))]
    for label, calibrate in calibrations:
        by_entry: dict[int, list[float]] = {}
        for name, tops in corpora.items():
            posteriors, described = calibrate(tops)
            fitted[name] = f"{fitted[name]} | {label}: {described}" if name in fitted else described
            by_entry.update((id(entry), row) for entry, row in zip(tops, posteriors, strict=True))
        rules[label] = lambda top, by_entry=by_entry: by_entry[id(top)]
    if args.pseudo:
        # The library's --expand-order calibrated: fitted on the collection's own detected mentions as queries
        # (corefsearch calibrate), applied to the real queries; the first round's order under the floor.
        from corefsearch.search.calibration import fit

        by_entry = {}
        for spec in args.pseudo:
            name, path = spec.split("=", 1)
            pseudo = [as_top(row) for row in collect_signals(Path(), Path(), "", Path(path))]
            model = fit([passing(t, 0.9) for t in pseudo], 0.9)
            fitted[name] = f"{fitted.get(name, '')} | {PSEUDO}: {describe_model(model)}, applies {model.applies}"
            scores = scored_by(model, corpora[name]) if model.applies else [
                [-float(i) for i in range(len(t[:RANKS]))] for t in corpora[name]]
            by_entry.update((id(entry), row) for entry, row in zip(corpora[name], scores, strict=True))
        rules[PSEUDO] = lambda top, by_entry=by_entry: by_entry[id(top)]
    if args.calibration:
        # A calibration file `corefsearch calibrate` wrote, applied as the library applies it (HeadCalibration.order).
        from corefsearch.search.calibration import HeadCalibration

        by_file = {}
        for spec in args.calibration:
            name, path = spec.split("=", 1)
            model = HeadCalibration.load(Path(path))
            fitted[name] = f"{fitted.get(name, '')} | {FROM_FILE}: {describe_model(model)}, applies {model.applies}"
            for entry in corpora[name]:
                order = model.order(passing(entry, model.gate))
                scores = [0.0] * len(order)
                for place, (i, _) in enumerate(order):
                    scores[i] = float(len(order) - place)
                by_file[id(entry)] = scores
        rules[FROM_FILE] = lambda top, by_file=by_file: by_file[id(top)]
    if args.only:
        rules = {label: rules[label] for label in ["first round (nothing moves)", *args.only.split(";")]}
    names = list(corpora)
    print("| gate | " + " | ".join(f"{n} MRR@10 ({len(corpora[n]):,} q)" for n in names) + " | "
          + " | ".join(f"{n} moved / query" for n in names) + " |")
    print("| --- |" + " ---: |" * (2 * len(names)))
    base = {n: mrr(corpora[n], rules["first round (nothing moves)"]) for n in names}
    scores: dict[str, float] = {}
    gains: dict[str, dict[str, float]] = {}
    for label, rule in rules.items():
        values = {n: mrr(corpora[n], rule) for n in names}
        scores[label] = values[args.choose]
        gains[label] = {n: values[n] - base[n] for n in names}
        moved = {n: sum(moved_count(t, rule) for t in corpora[n]) / max(len(corpora[n]), 1) for n in names}
        print(f"| {label} | " + " | ".join(f"{values[n]:.2f} ({values[n] - base[n]:+.2f})" for n in names) + " | "
              + " | ".join(f"{moved[n]:.1f}" for n in names) + " |")
    if CALIBRATED in rules:
        print("\n" + "\n".join(f"{name}, fitted: {described}" for name, described in fitted.items()))
    best = max(scores, key=scores.get)  # type: ignore[arg-type]
    print(f"\n{args.choose} chooses: {best} ({scores[best]:.2f})")
    if args.guard:
        # The rule: a gain of at least --min-gain on the chosen corpus and none lost on the guard's; the highest gain.
        kept = [label for label in rules if gains[label][args.choose] >= args.min_gain
                and all(gains[label][g] >= 0 for g in args.guard)]
        if kept:
            best = max(kept, key=lambda label: scores[label])
            print(f"with the guard {', '.join(args.guard)} (gain >= {args.min_gain:g} on {args.choose}, >= 0 there): "
                  f"{best} ({scores[best]:.2f})")
        else:
            print(f"with the guard {', '.join(args.guard)}: no gate gains {args.min_gain:g} on {args.choose} and "
                  "loses nothing there")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
