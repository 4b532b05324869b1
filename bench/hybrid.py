"""Which BM25 the hybrid retriever should fuse with the dense retriever, and how: chosen on dev.

Why: the hybrid of bench/dense.py fuses the dense retriever with the CoreSearch paper's BM25 form
(mention + named entities, RM3: 62.77 MRR@10 on the ECB+ test queries, all-topics collection),
while bench/bm25.py's coreferent mention retrieval table has a stronger BM25: the mention's
sentence as the query over a field-weighted index (sentence 1, document 0.1: 71.04). A hybrid is
only as good as what it fuses, so the BM25 form, the fusion (RRF with its constant, or score
interpolation with its weight) and whether to fuse all three lists are picked here on the dev
queries, and the test queries are scored once, for every candidate's dev-best setting, with both
BM25 rows beside them.

ECB+ events, collection = all 43 topics (15,812 passages). The dense retriever is bench/dense.py's
"dense trained, markers" recipe (``train retriever``: 1 epoch, 1 positive per query, batch 16,
lr 3e-5, mean pooling, one BM25 hard negative from the top 20, the best dev epoch kept on 300 dev
queries); it is trained here unless ``--retriever DIR`` names one. Every ranking is to depth 500.

Writes ``## Hybrid: which BM25 to fuse (bench/hybrid.py)`` in bench/RESULTS.md (``--results``).

Run: ``python bench/hybrid.py [--out-dir DIR] [--retriever DIR] [--results bench/RESULTS.md]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bm25 import machine, markdown_table, write_section  # noqa: E402

from corefsearch.datasets.build import BuildOptions, build_dataset  # noqa: E402
from corefsearch.datasets.dataset import Dataset  # noqa: E402
from corefsearch.datasets.ecbplus import read_ecbplus  # noqa: E402
from corefsearch.evaluate import evaluate_run  # noqa: E402
from corefsearch.io.trec import read_qrels  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ECBPLUS = ROOT / "data" / "ecbplus" / "ECBplus.tar.gz"
SECTION = "## Hybrid: which BM25 to fuse (bench/hybrid.py)"
METRICS = ("MRR@10", "mAP@10", "R@10", "R@100", "R@500")
K = 500
SENTENCE_FIELDS = {"sentence": 1.0, "document": 0.1}
RRF_CONSTANTS = (10, 30, 60, 100)
ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)

Ranking = dict[str, list[Any]]


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def rankings(searcher: Any, queries: Sequence[Any]) -> Ranking:
    return {query.id: hits for query, hits in searcher.search(list(queries), K)}


def scores(ranking: Ranking, qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    run = {qid: {hit.passage_id: hit.score for hit in hits} for qid, hits in ranking.items()}
    return dict(evaluate_run(run, qrels, "trec", "hybrid").aggregate)


def fusions(dense: Ranking, bm25: dict[str, Ranking]) -> dict[str, tuple[str, Callable[[], Ranking]]]:
    """Every candidate hybrid: ``{name: (family, fuse)}``; a family's settings compete on dev."""
    from corefsearch.fusion import interpolation, reciprocal_rank_fusion

    candidates: dict[str, tuple[str, Callable[[], Ranking]]] = {}
    for form, ranking in bm25.items():
        for c in RRF_CONSTANTS:
            candidates[f"dense + {form}, RRF k {c}"] = (
                f"dense + {form}, RRF", lambda r=ranking, c=c: reciprocal_rank_fusion([dense, r], K, rrf_k=c))
        for alpha in ALPHAS:
            candidates[f"dense + {form}, interpolation α {alpha:g}"] = (
                f"dense + {form}, interpolation",
                lambda r=ranking, a=alpha: interpolation(dense, r, K, alpha=a))
    if len(bm25) > 1:
        for c in RRF_CONSTANTS:
            candidates[f"dense + both BM25, RRF k {c}"] = (
                "dense + both BM25, RRF",
                lambda c=c: reciprocal_rank_fusion([dense, *bm25.values()], K, rrf_k=c))
    return candidates


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=None, help="working folder (reused when run again)")
    parser.add_argument("--retriever", type=Path, default=None, help="a trained retriever folder to use")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    started, clock = dt.datetime.now(), time.perf_counter()
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-bench-hybrid-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"working in {root}")

    from corefsearch.dense.indexing import build_dense_index
    from corefsearch.dense.model import BiEncoder
    from corefsearch.dense.search import DenseSearcher
    from corefsearch.dense.train import RetrieverTrainingArguments, train_retriever
    from corefsearch.sparse.index import build_lucene_index
    from corefsearch.sparse.search import BM25Options, BM25Searcher

    dataset_dir = root / "ecb-all"
    if not (dataset_dir / "manifest.json").exists():
        build_dataset(read_ecbplus(ECBPLUS), dataset_dir, BuildOptions(), overwrite=True, source_name="ecb-all")
    index = root / "ecb-all-index"
    if not (index / "lucene" / "manifest.json").exists():
        build_lucene_index(dataset_dir, index, threads=2, overwrite=True, fields=True)
    retriever = args.retriever or root / "retriever"
    training: dict[str, Any] = {}
    if not (retriever / "corefsearch_retriever.json").exists():
        log("training the dense retriever (bench/dense.py's recipe)")
        begun = time.perf_counter()
        summary = train_retriever(dataset_dir, retriever, RetrieverTrainingArguments(
            markers=True, pooling="mean", epochs=1, batch_size=16, lr=3e-5, positives_per_query=1,
            dev_max_queries=300, seed=13), index=index, overwrite=True, log=log)
        training = {"minutes": (time.perf_counter() - begun) / 60, "dev_curve": summary.dev_curve}
    dense_dir = root / "ecb-all-dense"
    if not (dense_dir / "dense" / "manifest.json").exists():
        log("encoding the collection")
        build_dense_index(dataset_dir, dense_dir, BiEncoder.load(str(retriever), device="cpu"), batch_size=64,
                          overwrite=True)
        # The Lucene index lives beside it in its own folder; the searchers each open their own.
    dataset = Dataset(dataset_dir)
    dense = DenseSearcher(dense_dir, device="cpu")
    bm25_forms = {"BM25 mention+entities + RM3": BM25Searcher(index, BM25Options(query_format="mention+entities",
                                                                                  rm3=True, threads=2)),
                  "BM25 sentence, fields sentence 1, document 0.1": BM25Searcher(
                      index, BM25Options(query_format="sentence", fields=dict(SENTENCE_FIELDS), threads=2))}

    splits: dict[str, dict[str, Any]] = {}
    for split in ("dev", "test"):
        queries = dataset.queries(split)
        qrels = read_qrels(dataset.qrels_path(split))
        log(f"{split}: {len(queries):,} queries: dense and BM25 rankings")
        lists = {"dense retriever (markers)": rankings(dense, queries)}
        lists.update({name: rankings(searcher, queries) for name, searcher in bm25_forms.items()})
        splits[split] = {"queries": len(queries), "qrels": qrels, "lists": lists}

    # Dev: every candidate; the best setting of each family.
    dev = splits["dev"]
    bm25_short = {"BM25 mention+entities + RM3": "BM25 m+e+RM3", "BM25 sentence, fields sentence 1, document 0.1":
                  "BM25 sentence fields"}
    dev_lists = dev["lists"]
    candidates = fusions(dev_lists["dense retriever (markers)"],
                         {bm25_short[n]: dev_lists[n] for n in bm25_forms})
    dev_rows: list[list[str]] = []
    best: dict[str, tuple[str, float]] = {}
    for name, (family, fuse) in candidates.items():
        mrr = scores(fuse(), dev["qrels"])["MRR@10"]
        dev_rows.append([name, f"{100 * mrr:.2f}"])
        if family not in best or mrr > best[family][1]:
            best[family] = (name, mrr)
        log(f"dev {name}: MRR@10 {100 * mrr:.2f}")
    single_dev = {name: scores(ranking, dev["qrels"])["MRR@10"] for name, ranking in dev_lists.items()}
    chosen = max(best.values(), key=lambda pair: pair[1])[0]

    # Test, once: the single lists and each family's dev-best setting.
    test = splits["test"]
    test_lists = test["lists"]
    test_candidates = fusions(test_lists["dense retriever (markers)"],
                              {bm25_short[n]: test_lists[n] for n in bm25_forms})
    rows: list[list[str]] = []
    single_test = {name: scores(ranking, test["qrels"]) for name, ranking in test_lists.items()}
    base = single_test["BM25 mention+entities + RM3"]["MRR@10"]
    strongest = single_test["BM25 sentence, fields sentence 1, document 0.1"]["MRR@10"]

    def row(name: str, metrics: dict[str, float], dev_mrr: float) -> list[str]:
        return [name + (" **(dev's choice)**" if name == chosen else ""), f"{100 * dev_mrr:.2f}",
                *(f"{100 * metrics[m]:.2f}" for m in METRICS),
                f"{metrics['MRR@10'] / base:.2f}×", f"{metrics['MRR@10'] / strongest:.2f}×"]

    for name, metrics in single_test.items():
        rows.append(row(name, metrics, single_dev[name]))
    for name, mrr in sorted(best.values(), key=lambda pair: -pair[1]):
        rows.append(row(name, scores(test_candidates[name][1](), test["qrels"]), mrr))
    minutes = (time.perf_counter() - clock) / 60
    lines = [
        f"- Date: {started:%Y-%m-%d %H:%M} (local time), run time {minutes:.1f} min"
        + (f" (training the retriever {training['minutes']:.1f} min)" if training else ""),
        *(f"- {name}: {value}" for name, value in machine().items()),
        f"- Command: `python bench/hybrid.py{' --retriever ' + str(args.retriever) if args.retriever else ''}`",
        f"- ECB+ events, collection = all 43 topics ({dataset.manifest['counts']['passages']:,} passages); "
        f"{dev['queries']:,} dev queries pick, {test['queries']:,} test queries scored once; depth {K}; "
        "metrics ×100, trec definition.",
        "- Dense retriever: bench/dense.py's \"dense trained, markers\" recipe (1 epoch, 1 positive per query, "
        "batch 16, lr 3e-5, mean pooling, BM25 hard negatives, best dev epoch)"
        + (f"; dev curve {training['dev_curve']}" if training else f" ({retriever})") + ".",
        "- Candidates on dev: each BM25 form fused with the dense ranking by RRF "
        f"(k {', '.join(map(str, RRF_CONSTANTS))}) "
        f"and by interpolation of min-max normalised scores (dense weight α {', '.join(f'{a:g}' for a in ALPHAS)}), "
        "and RRF of all three lists; each family's best dev setting is scored on test, the best of all marked.",
        "", "### Test, once, with what dev chose", "",
        markdown_table(["Run", "dev MRR@10", *METRICS, "MRR@10 / BM25 m+e+RM3", "MRR@10 / BM25 sentence fields"],
                       rows, "l" + "r" * (len(METRICS) + 3)),
        "", "### Dev, every candidate", "", markdown_table(["Candidate", "dev MRR@10"], dev_rows, "lr"), ""]
    section = SECTION + "\n\n" + "\n".join(lines)
    print(section)
    if not args.no_write:
        write_section(args.results, section, SECTION)
        log(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
