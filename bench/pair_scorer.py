"""Does a learnt pairwise scorer over the encoder's cosine and lexical cues beat the encoder (+ β lemma bonus)?

The strongest recent ECB+ systems score mention pairs with more than one signal (a lemma match
prunes the candidates, a pairwise model scores the pairs kept). Before building a pairwise model
into ``corefsearch cluster``, this asks the dev set whether a pairwise combiner helps the trained
mention encoder at all: a logistic regression (and a gradient-boosted one) over, for each mention
pair of one predicted topic and type, the encoder's cosine distance, the head-lemma match, the
exact match of the mention text (lowercased), whether both mentions are in one document, and the
cosine distance × lemma match. Its probability p gives the distance 1 − p for the same average
linkage as ``cluster``, cut at every τ of a grid.

The combiner has a handful of parameters and is fit on dev pairs, as β and τ are chosen on dev:
the dev score is two-fold by topic (fit on the pairs of half the dev topics, clustered and scored
on the other half, and the other way round; the two halves' partitions scored together), so no
pair is scored by a model fit on it. Train pairs are not used: the encoder was trained on them, so
their cosines separate far better than on unseen topics. Test is scored once, with a combiner fit
on all dev pairs, only where ``--test`` is given.

Run: ``python bench/pair_scorer.py --dataset DATASET --model MODEL_DIR [--test]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("COREFSEARCH_QUIET", "1")

FEATURES = ("cosine distance", "head lemma match", "mention text match", "same document", "distance × lemma match")
TAUS = [round(0.025 * i, 3) for i in range(1, 39)]


def split_data(dataset: Path, split: str, model: Path, scope: str) -> dict[str, Any]:
    from corefsearch.cluster.baselines import mention_head_lemmas
    from corefsearch.cluster.encoder import split_records
    from corefsearch.cluster.mentions import read_split_mentions
    from corefsearch.cluster.model import MentionEncoder
    from corefsearch.cluster.topics import mention_groups

    found = read_split_mentions(dataset, split)
    records = split_records(dataset, split)
    return {"records": records, "vectors": MentionEncoder.load(model).encode(records),
            "groups": mention_groups(found.mentions, scope, dataset),
            "types": {m.mention_id: m.type for m in found.mentions},
            "lemmas": mention_head_lemmas(found.mentions, found.passage_texts)}


def blocks(data: Mapping[str, Any]) -> list[np.ndarray]:
    rows: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(data["records"]):
        rows.setdefault((data["groups"][r.mention_id], data["types"][r.mention_id]), []).append(i)
    return [np.asarray(v) for _, v in sorted(rows.items())]


def pair_features(data: Mapping[str, Any], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of every pair of ``rows`` in scipy's condensed (pdist) order."""
    records = [data["records"][i] for i in rows]
    vectors = data["vectors"][rows]
    first, second = np.triu_indices(len(rows), 1)
    distance = 1.0 - np.sum(vectors[first] * vectors[second], axis=1)
    lemma = np.array([data["lemmas"][records[i].mention_id] for i in range(len(rows))], dtype=object)
    text = np.array([records[i].text.lower() for i in range(len(rows))], dtype=object)
    doc = np.array([records[i].doc_id for i in range(len(rows))], dtype=object)
    lemma_eq = (lemma[first] == lemma[second]).astype(float)
    features = np.stack([distance, lemma_eq, (text[first] == text[second]).astype(float),
                         (doc[first] == doc[second]).astype(float), distance * lemma_eq], axis=1)
    cluster = np.array([r.cluster_id for r in records], dtype=object)
    return features, (cluster[first] == cluster[second]).astype(int)


def sweep(data: Mapping[str, Any], which: Sequence[int], score: Any) -> dict[float, dict[str, str]]:
    """``{τ: assignment}`` of average linkage on 1 − score (or the cosine distance when ``score`` is None)."""
    from scipy.cluster.hierarchy import fcluster, linkage

    all_blocks = blocks(data)
    result: dict[float, dict[str, str]] = {tau: {} for tau in TAUS}
    for b in which:
        rows = all_blocks[b]
        ids = [data["records"][i].mention_id for i in rows]
        if len(rows) < 2:
            for tau in TAUS:
                result[tau][ids[0]] = f"{b}/0"
            continue
        features, _ = pair_features(data, rows)
        distances = features[:, 0] if score is None else 1.0 - score.predict_proba(features)[:, 1]
        tree = linkage(np.clip(distances, 0.0, None), method="average")
        for tau in TAUS:
            for mention_id, label in zip(ids, fcluster(tree, t=tau, criterion="distance"), strict=True):
                result[tau][mention_id] = f"{b}/{label}"
    return result


def fit(data: Mapping[str, Any], which: Sequence[int], kind: str) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    all_blocks = blocks(data)
    parts = [pair_features(data, all_blocks[b]) for b in which if len(all_blocks[b]) > 1]
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    model = (LogisticRegression(C=1.0, max_iter=1000) if kind == "logistic"
             else HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, random_state=13))
    return model.fit(x, y)


def conll(data: Mapping[str, Any], response: Mapping[str, str]) -> float:
    from corefsearch.evaluate.coref import score_partitions

    key = {r.mention_id: r.cluster_id for r in data["records"]}
    return score_partitions(key, dict(response), "keep").conll_f1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--scope", default="predicted-topic")
    parser.add_argument("--test", action="store_true", help="score test once with what dev chose")
    args = parser.parse_args(argv)

    dev = split_data(args.dataset, "dev", args.model, args.scope)
    n_blocks = len(blocks(dev))
    folds = [list(range(0, n_blocks, 2)), list(range(1, n_blocks, 2))]
    rows = []
    best: dict[str, tuple[float, float]] = {}
    for kind in ("encoder", "logistic", "boosted"):
        merged: dict[float, dict[str, str]] = {tau: {} for tau in TAUS}
        for held, other in ((folds[0], folds[1]), (folds[1], folds[0])):
            scorer = None if kind == "encoder" else fit(dev, other, kind)
            for tau, assignment in sweep(dev, held, scorer).items():
                merged[tau].update(assignment)
        scores = {tau: conll(dev, assignment) for tau, assignment in merged.items()}
        tau = max(scores, key=lambda t: (scores[t], -t))
        best[kind] = (scores[tau], tau)
        rows.append(f"| {kind} | {tau:g} | {100 * scores[tau]:.2f} |")
    print(f"Dev ({args.scope}, singletons kept, two folds by block), CoNLL F1 ×100:\n")
    print("| pair scorer | τ | dev CoNLL F1 |\n| --- | ---: | ---: |\n" + "\n".join(rows))
    final = fit(dev, range(n_blocks), "logistic")
    print("\nLogistic regression on all dev pairs: " + ", ".join(
        f"{name} {weight:+.3f}" for name, weight in zip(FEATURES, final.coef_[0], strict=True))
          + f", intercept {final.intercept_[0]:+.3f}")
    chosen = max(best, key=lambda k: best[k][0])
    print(f"\nDev chose: {chosen} (τ {best[chosen][1]:g}).")
    if args.test:
        test = split_data(args.dataset, "test", args.model, args.scope)
        scorer = None if chosen == "encoder" else fit(dev, range(n_blocks), chosen)
        every = range(len(blocks(test)))
        print(f"Test, once ({chosen}, τ {best[chosen][1]:g}): "
              f"{100 * conll(test, sweep(test, every, scorer)[best[chosen][1]]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
