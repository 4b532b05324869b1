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

from answers import open_engine  # noqa: E402
from headline import log  # noqa: E402

# per passage of the top 10: relevant, the nearest mention's cosine, the first round's score
Top = list[tuple[bool, float | None, float]]


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
    for m in (2, 3):
        out[f"the {m} highest cosines, if >= 0.9"] = lambda top, m=m: [
            c >= 0.9 and c >= sorted(cos(top), reverse=True)[min(m, len(top)) - 1] for c in cos(top)]
    return out


CALIBRATED = "calibrated per collection (EM, gate 0.9)"
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


def calibrated(tops: Sequence[Top], gate: float = 0.9, iterations: int = 300) -> tuple[list[list[float]], str]:
    """A re-ranking that weighs the gate against the first round's rank by how much each says in this collection,
    learnt from the collection's own queries without gold: a two-class latent model (relevant or not) in which a
    passage at rank r is relevant with prior σ(α − β·log r) and passes the gate with probability a if relevant, b
    if not, fitted by EM over the queries' top 10; each passage then scores its posterior P(relevant | r, gate).
    Written by hand: a four-parameter mixture no library fits. Returns the scores and the fitted parameters."""
    import numpy as np

    g = np.array([[1.0 if e[1] is not None and e[1] >= gate else 0.0 for e in t[:RANKS]]
                  + [0.0] * (RANKS - len(t[:RANKS])) for t in tops])
    alpha, beta, a, b = 0.0, 1.0, 0.7, 0.3  # a start that reads "higher ranks and passing are both better"

    def posterior(prior: Any) -> Any:
        yes = np.where(g > 0, a, 1 - a) * prior
        no = np.where(g > 0, b, 1 - b) * (1 - prior)
        return yes / (yes + no)

    for _ in range(iterations):
        post = posterior(_prior(alpha, beta))
        a, b = (post * g).sum() / post.sum(), ((1 - post) * g).sum() / (1 - post).sum()
        alpha, beta = _fit_prior(alpha, beta, post.mean(0))
    prior = _prior(alpha, beta)
    return _by_query(posterior(prior), tops), f"prior {' '.join(f'{v:.2f}' for v in prior)}; a {a:.2f}, b {b:.2f}"


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", required=True, help="NAME=INDEX,DATASET,SPLIT")
    parser.add_argument("--choose", required=True, help="the corpus the gate is chosen on (its dev split)")
    parser.add_argument("--work", type=Path, default=Path("work/rerank-gate"))
    parser.add_argument("--only", default=None, help="these gates alone, ';'-separated (the test read)")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    corpora: dict[str, list[Top]] = {}
    for spec in args.corpus:
        name, rest = spec.split("=", 1)
        index, dataset, split = rest.split(",")
        corpora[name] = collect(Path(index), Path(dataset), split, args.work / f"{name}.jsonl")
    rules = gates()
    # The calibrated re-rankings' scores, by entry: each corpus is fitted alone.
    fitted: dict[str, str] = {}
    for label, calibrate in ((CALIBRATED, calibrated), (CALIBRATED_COSINE, calibrated_cosine)):
        by_entry: dict[int, list[float]] = {}
        for name, tops in corpora.items():
            posteriors, described = calibrate(tops)
            fitted[name] = f"{fitted[name]} | by the cosine: {described}" if name in fitted else described
            by_entry.update((id(entry), row) for entry, row in zip(tops, posteriors, strict=True))
        rules[label] = lambda top, by_entry=by_entry: by_entry[id(top)]
    if args.only:
        rules = {label: rules[label] for label in ["first round (nothing moves)", *args.only.split(";")]}
    names = list(corpora)
    print("| gate | " + " | ".join(f"{n} MRR@10 ({len(corpora[n]):,} q)" for n in names) + " | "
          + " | ".join(f"{n} moved / query" for n in names) + " |")
    print("| --- |" + " ---: |" * (2 * len(names)))
    base = {n: mrr(corpora[n], rules["first round (nothing moves)"]) for n in names}
    scores: dict[str, float] = {}
    for label, rule in rules.items():
        values = {n: mrr(corpora[n], rule) for n in names}
        scores[label] = values[args.choose]
        moved = {n: sum(moved_count(t, rule) for t in corpora[n]) / max(len(corpora[n]), 1) for n in names}
        print(f"| {label} | " + " | ".join(f"{values[n]:.2f} ({values[n] - base[n]:+.2f})" for n in names) + " | "
              + " | ".join(f"{moved[n]:.1f}" for n in names) + " |")
    if CALIBRATED in rules:
        print("\n" + "\n".join(f"{name}, fitted: {described}" for name, described in fitted.items()))
    best = max(scores, key=scores.get)  # type: ignore[arg-type]
    print(f"\n{args.choose} chooses: {best} ({scores[best]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
