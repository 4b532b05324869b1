"""Does a cross-encoder over lemma- and encoder-pruned mention pairs beat the mention encoder on dev?

The strongest recent ECB+ systems (lemma-match candidate pruning, then a pairwise cross-encoder over
the pairs kept) score a mention pair by reading both mentions' sentences at once, where a
bi-encoder such as ``train clusterer``'s compares two vectors made apart. A cross-encoder over all
n² pairs of a topic is out of a CPU budget, so the pairs are pruned first: within each (topic,
type) block, a pair is kept when both mentions share a head lemma or when one is among the other's
``--k`` nearest by the trained mention encoder. The script reports the pruning's recall of
coreferent pairs, trains a cross-encoder (``[CLS] sentence₁ [SEP] sentence₂ [SEP]``, each mention
wrapped in ``[E]``…``[/E]``, one logit, binary cross-entropy) on the kept pairs of the train split
(gold topics), starting from the mention encoder's transformer (it already has the markers), and
scores the kept pairs of dev and test (predicted topics).

The clustering is the same average linkage as ``cluster``, on the distance

    d = (1 − w) · (cosine distance − β · same lemma) + w · (1 − p),

p being 0 for a pair not kept,

with w (0: the encoder alone, 1: the cross-encoder alone), β and τ chosen on dev; test is scored
once, for dev's choice, with ``--test``. Everything expensive is cached in ``--work`` (the kept
pairs, the trained cross-encoder, the probabilities), so a rerun resumes.

Run: ``python bench/cross_pairs.py --dataset DATASET --model CLUSTERER_DIR --work DIR [--test]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("COREFSEARCH_QUIET", "1")

TAUS = [round(0.025 * i, 3) for i in range(1, 41)]
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
BETAS = (0.0, 0.1)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def marked(record: Any) -> str:
    """The mention's sentence with the mention wrapped in the markers."""
    s = record.sentence
    return f"{s[:record.start]}[E] {s[record.start:record.end]} [/E]{s[record.end:]}"


class Split:
    """One split's mentions: records, vectors of the mention encoder, head lemmas, blocks of (group, type)."""

    def __init__(self, dataset: Path, split: str, encoder: Any, scope: str) -> None:
        from corefsearch.cluster.baselines import mention_head_lemmas
        from corefsearch.cluster.encoder import split_records
        from corefsearch.cluster.mentions import read_split_mentions
        from corefsearch.cluster.topics import mention_groups

        found = read_split_mentions(dataset, split)
        self.records = split_records(dataset, split)
        self.ids = [r.mention_id for r in self.records]
        types = {m.mention_id: m.type for m in found.mentions}
        groups = mention_groups(found.mentions, scope, dataset)
        lemmas = mention_head_lemmas(found.mentions, found.passage_texts)
        self.lemma = np.array([lemmas[i] for i in self.ids], dtype=object)
        self.cluster = np.array([r.cluster_id for r in self.records], dtype=object)
        log(f"{split}: {len(self.ids):,} mentions; encoding")
        self.vectors = encoder.encode(self.records, batch_size=64)
        rows: dict[tuple[str, str], list[int]] = {}
        for i, mention_id in enumerate(self.ids):
            rows.setdefault((groups[mention_id], types[mention_id]), []).append(i)
        self.blocks = [np.asarray(v) for _, v in sorted(rows.items())]

    def candidates(self, k: int) -> np.ndarray:
        """Kept pairs (i < j, global rows): same head lemma, or one among the other's k nearest, in one block."""
        kept: set[tuple[int, int]] = set()
        for rows in self.blocks:
            if len(rows) < 2:
                continue
            sims = self.vectors[rows] @ self.vectors[rows].T
            np.fill_diagonal(sims, -np.inf)
            near = np.argsort(-sims, axis=1)[:, :k]
            for a in range(len(rows)):
                for b in near[a]:
                    i, j = sorted((int(rows[a]), int(rows[b])))
                    kept.add((i, j))
            lemma = self.lemma[rows]
            first, second = np.triu_indices(len(rows), 1)
            same = lemma[first] == lemma[second]
            kept.update(zip(rows[first[same]].tolist(), rows[second[same]].tolist(), strict=True))
        return np.array(sorted(kept), dtype=np.int64).reshape(-1, 2)

    def positives(self) -> int:
        total = 0
        for rows in self.blocks:
            _, counts = np.unique(self.cluster[rows], return_counts=True)
            total += int((counts * (counts - 1) // 2).sum())
        return total

    def labels(self, pairs: np.ndarray) -> np.ndarray:
        return (self.cluster[pairs[:, 0]] == self.cluster[pairs[:, 1]]).astype(np.float32)


def texts(split: Split, pairs: np.ndarray) -> list[tuple[str, str]]:
    return [(marked(split.records[i]), marked(split.records[j])) for i, j in pairs.tolist()]


def load_cross(folder: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), num_labels=1)
    torch.set_num_threads(os.cpu_count() or 1)
    return tokenizer, model


def train_cross(split: Split, pairs: np.ndarray, start: Path, out: Path, epochs: int, batch_size: int, lr: float,
                max_length: int, seed: int) -> None:
    import torch
    from transformers import get_linear_schedule_with_warmup

    if (out / "model.safetensors").is_file():
        log(f"cross-encoder already trained: {out}")
        return
    tokenizer, model = load_cross(start)
    torch.manual_seed(seed)
    data = texts(split, pairs)
    labels = split.labels(pairs)
    log(f"training on {len(pairs):,} pairs ({int(labels.sum()):,} coreferent), {epochs} epoch(s), batch {batch_size}")
    rng = np.random.default_rng(seed)
    steps = epochs * ((len(pairs) + batch_size - 1) // batch_size)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = get_linear_schedule_with_warmup(optimiser, int(0.1 * steps), steps)
    positive_weight = torch.tensor(float((1 - labels).sum() / max(labels.sum(), 1)) ** 0.5)
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=positive_weight)
    model.train()
    step = 0
    started = time.time()
    for _ in range(epochs):
        order = rng.permutation(len(pairs))
        for at in range(0, len(order), batch_size):
            rows = order[at:at + batch_size]
            batch = tokenizer([data[r][0] for r in rows], [data[r][1] for r in rows], truncation=True,
                              max_length=max_length, padding=True, return_tensors="pt")
            logits = model(**batch).logits.squeeze(-1)
            loss = loss_fn(logits, torch.from_numpy(labels[rows]))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            optimiser.zero_grad()
            step += 1
            if step % 50 == 0 or step == steps:
                rate = (time.time() - started) / step
                log(f"step {step}/{steps} loss {loss.item():.4f} ({rate:.2f} s/step, "
                    f"{rate * (steps - step) / 60:.0f} min left)")
    tmp = out.with_name(out.name + ".tmp")
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    tmp.rename(out)


def score_pairs(split: Split, pairs: np.ndarray, folder: Path, cache: Path, batch_size: int, max_length: int
                ) -> np.ndarray:
    import torch

    if cache.is_file():
        return np.load(cache)
    tokenizer, model = load_cross(folder)
    model.eval()
    data = texts(split, pairs)
    order = sorted(range(len(data)), key=lambda r: len(data[r][0]) + len(data[r][1]))
    probs = np.zeros(len(data), dtype=np.float32)
    started = time.time()
    with torch.inference_mode():
        for n, at in enumerate(range(0, len(order), batch_size)):
            rows = order[at:at + batch_size]
            batch = tokenizer([data[r][0] for r in rows], [data[r][1] for r in rows], truncation=True,
                              max_length=max_length, padding=True, return_tensors="pt")
            probs[rows] = torch.sigmoid(model(**batch).logits.squeeze(-1)).numpy()
            if n % 100 == 0:
                log(f"scored {at:,}/{len(order):,} pairs ({time.time() - started:.0f} s)")
    np.save(cache, probs)
    return probs


def sweep(split: Split, pairs: np.ndarray, probs: np.ndarray, weight: float, beta: float
          ) -> dict[float, dict[str, str]]:
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    lookup = {(int(i), int(j)): float(p) for (i, j), p in zip(pairs.tolist(), probs.tolist(), strict=True)}
    result: dict[float, dict[str, str]] = {tau: {} for tau in TAUS}
    for b, rows in enumerate(split.blocks):
        if len(rows) < 2:
            for tau in TAUS:
                result[tau][split.ids[rows[0]]] = f"{b}/0"
            continue
        cosine = 1.0 - split.vectors[rows] @ split.vectors[rows].T
        lemma = split.lemma[rows]
        same = (lemma[:, None] == lemma[None, :]).astype(np.float64)
        cross = np.zeros((len(rows), len(rows)))  # p = 0 for a pair not kept
        for a in range(len(rows)):
            for c in range(a + 1, len(rows)):
                cross[a, c] = cross[c, a] = lookup.get((int(rows[a]), int(rows[c])), 0.0)
        distance = (1 - weight) * (cosine - beta * same) + weight * (1.0 - cross)
        np.fill_diagonal(distance, 0.0)
        tree = linkage(squareform(np.clip(distance, 0.0, None), checks=False), method="average")
        for tau in TAUS:
            for row, label in zip(rows.tolist(), fcluster(tree, t=tau, criterion="distance"), strict=True):
                result[tau][split.ids[row]] = f"{b}/{label}"
    return result


def conll(split: Split, response: Mapping[str, str]) -> float:
    from corefsearch.evaluate.coref import score_partitions

    key = dict(zip(split.ids, split.cluster.tolist(), strict=True))
    return score_partitions(key, dict(response), "keep").conll_f1


def lemma_row(dataset: Path, split_name: str, split: Split, scope: str) -> float:
    from corefsearch.cluster.baselines import same_lemma
    from corefsearch.cluster.mentions import read_split_mentions
    from corefsearch.cluster.topics import mention_groups

    found = read_split_mentions(dataset, split_name)
    lemmas = dict(zip(split.ids, split.lemma.tolist(), strict=True))
    return conll(split, same_lemma(found.mentions, mention_groups(found.mentions, scope, dataset), lemmas))


def main(argv: list[str] | None = None) -> int:
    from corefsearch.cluster.model import MentionEncoder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True, help="mention encoder (`train clusterer`)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--k", type=int, default=5, help="encoder neighbours kept per mention besides lemma matches")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--max-length", type=int, default=192)
    parser.add_argument("--max-train-pairs", type=int, default=None, help="sample at most this many train pairs")
    parser.add_argument("--counts-only", action="store_true", help="print the pruning's pairs and recall, then stop")
    parser.add_argument("--test", action="store_true", help="score test once with what dev chose")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    encoder = MentionEncoder.load(args.model)
    splits = {"train": ("topic", Split(args.dataset, "train", encoder, "topic")),
              "dev": ("predicted-topic", Split(args.dataset, "dev", encoder, "predicted-topic"))}
    if args.test:
        splits["test"] = ("predicted-topic", Split(args.dataset, "test", encoder, "predicted-topic"))
    pairs = {}
    print(f"Pruning (same head lemma, or among the {args.k} nearest by the mention encoder):\n")
    print("| split | mentions | all block pairs | kept | coreferent pairs | kept coreferent | recall |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, (_, split) in splits.items():
        pairs[name] = split.candidates(args.k)
        every = sum(len(r) * (len(r) - 1) // 2 for r in split.blocks)
        positives = split.positives()
        kept_pos = int(split.labels(pairs[name]).sum())
        print(f"| {name} | {len(split.ids):,} | {every:,} | {len(pairs[name]):,} | {positives:,} | {kept_pos:,} | "
              f"{100 * kept_pos / max(positives, 1):.1f}% |", flush=True)
    if args.counts_only:
        return 0
    train_pairs = pairs["train"]
    if args.max_train_pairs and len(train_pairs) > args.max_train_pairs:
        pick = np.random.default_rng(13).choice(len(train_pairs), args.max_train_pairs, replace=False)
        train_pairs = train_pairs[np.sort(pick)]
    cross = args.work / "cross-encoder"
    train_cross(splits["train"][1], train_pairs, args.model, cross, args.epochs, args.batch_size, args.lr,
                args.max_length, 13)
    probs = {name: score_pairs(splits[name][1], pairs[name], cross, args.work / f"{name}_probs.npy", 64,
                               args.max_length) for name in splits if name != "train"}
    dev = splits["dev"][1]
    labels = dev.labels(pairs["dev"])
    predicted = probs["dev"] > 0.5
    print(f"\nDev kept pairs: precision {100 * (labels[predicted].mean() if predicted.any() else 0):.1f}%, "
          f"recall {100 * predicted[labels == 1].mean():.1f}% of kept coreferent pairs at p > 0.5\n")
    print(f"Dev (predicted topics, singletons kept), CoNLL F1 ×100; lemma baseline "
          f"{100 * lemma_row(args.dataset, 'dev', dev, 'predicted-topic'):.2f}:\n")
    print("| w (cross-encoder share) | β | best τ | dev CoNLL F1 |\n| ---: | ---: | ---: | ---: |")
    best: tuple[float, float, float, float] | None = None
    for weight in WEIGHTS:
        for beta in BETAS:
            if weight == 1.0 and beta:
                continue
            scores = {tau: conll(dev, a) for tau, a in sweep(dev, pairs["dev"], probs["dev"], weight, beta).items()}
            tau = max(scores, key=lambda t: (scores[t], -t))
            print(f"| {weight:g} | {beta:g} | {tau:g} | {100 * scores[tau]:.2f} |", flush=True)
            if best is None or scores[tau] > best[0]:
                best = (scores[tau], weight, beta, tau)
    assert best is not None
    print(f"\nDev chose w {best[1]:g}, β {best[2]:g}, τ {best[3]:g} ({100 * best[0]:.2f}).")
    record = {"k": args.k, "epochs": args.epochs, "lr": args.lr, "dev": best}
    if args.test:
        test = splits["test"][1]
        encoder_only = max(
            (conll(test, a), t) for t, a in sweep(test, pairs["test"], probs["test"], 0.0, 0.1).items()
            if t == 0.075)
        chosen = sweep(test, pairs["test"], probs["test"], best[1], best[2])[best[3]]
        record["test"] = conll(test, chosen)
        print(f"Test, once: {100 * record['test']:.2f} (lemma baseline "
              f"{100 * lemma_row(args.dataset, 'test', test, 'predicted-topic'):.2f}; encoder over the same kept "
              f"pairs, β 0.1, τ 0.075: {100 * encoder_only[0]:.2f})")
    (args.work / "result.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
