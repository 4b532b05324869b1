"""The second search round (``search --rounds 2``): which N and which weight, on dev; then test once.

The first round is the hybrid dev chose (bench/hybrid.py: dense + BM25 over the sentence fields,
interpolation α 0.5), searched to depth ``--k`` as ``corefsearch search`` does (the CLI's own option
builder). Its expansion mentions are marked by the mention encoder (``--expand-from encoder``:
in each of the top N passages, the candidate mention nearest to the query mention; ``--candidates
detected``, the default, takes the candidates from a mention detector: the dataset's stored predicted
mentions, or ``--detector heuristic|DIR`` at query time; ``gold``, the dataset's annotated mentions, an
upper bound), or, with
``--spans RUN.spans.jsonl`` of a reader run over the same first round, by the reader. Every expansion
query of the largest N is searched once; each (N, w) of the grid then fuses the first round with
the lists of its first N expansions (``corefsearch.search.second_round.fuse_rounds``, what the CLI runs;
only the expansions at least as similar as the grid's least gate are searched, the others never being fused),
and is scored with ``corefsearch evaluate``'s scorer: MRR@10, mAP@10, R@10, R@50, R@100 (trec
definitions), ×100, on ``--split`` (dev). ``--test``: the test split once with what dev chose.

``--test-reader FOLDER`` adds the test rows of the best single-round pipeline: the reader run
``FOLDER/test.trec`` (a re-ranking of the same hybrid's test run, e.g. by bench/rerank_run.py) fused with
the hybrid by RRF as ``search --rerank-fusion rrf`` does, and its second round from the reader's spans
(``FOLDER/test.trec.spans.jsonl``) and from the encoder, with dev's N and w. Each of those rows also
has the per-query cluster B³ F1 of its top 10 (``evaluate --cluster-k 10``): the reader's spans,
or the encoder's nearest mention in each passage for the encoder's row.

The grid also spans ``--gates`` (the encoder's cosine gate), ``--reciprocal`` (the reciprocal test's
depths R, 0 = off: an expansion counts only when its own search ranks the query's passage in its top
R, as ``--expand-reciprocal`` does) and ``--shares`` (``kept``: the second round weighs w, shared
among the expansions kept, as the CLI does; ``n``: each kept expansion weighs w / N) and ``--margins`` (the
margin test of ``--expand-margin``: an encoder's mention counts only when its cosine to the query mention
exceeds by the margin the highest of any mention in the first round's passages ranked 21st to 100th) and
``--list-depths`` (``--expand-list-depth``: how many passages of each expansion's list are fused, its own first) and
``--heads`` (``--expand-head``: the top H ranks from the lists' own passages alone, the rest from the lists).

Every table also has the oracle row (``oracle_row``; bench/mention_promotion.py): the first round with its
top N passages that hold an annotated mention of the query's type moved first. The encoder's expansions are
annotated mentions, so that is what knowing them alone is worth. Dev's choice is also scored "heads only": each
expansion's list is its own passage alone, as if its search had found nothing.

``--first-run RUN`` starts from a run of ``--split`` rather than the hybrid (e.g. ``search --reader
--rerank-fusion rrf``, the best single round), with ``--spans RUN.spans.jsonl`` for the reader's spans (their
gate, ``--gates``, is then on the reader's span score); ``--test-first-run`` is the same for ``--test``.
``--write-runs FOLDER`` writes the fused runs of dev's choice (``dev.trec``, ``test.CANDIDATES.trec``), e.g. for a
reader to re-rank after the second round (bench/rerank_run.py).

``--test`` scores the test split once: the first round, then a second round at dev's choice from each candidate
source of ``--test-sources`` (``detected``, ``stored:DATASET`` for a dataset copy's stored predicted mentions,
``detector:heuristic|DIR`` at query time, ``gold``), the gold row and the oracle row in a table of their own.
``--only-test N,w,gate --test`` does the same at that setting (with the first of ``--list-depths`` and ``--heads``)
without dev; with ``--warm C`` it times C test queries on the warm engine, one round against two.

Run: ``python bench/second_round.py --index INDEX --dataset D --mention-encoder M [--k 100]
[--expand 1,2,3,5] [--weights 0.25,0.5,1,2] [--gates 0.8,0.9] [--reciprocal 0,10] [--shares kept,n]
[--margins none,0,0.02] [--list-depths 1,5,all] [--heads 0,10] [--first-run RUN [--spans RUN.spans.jsonl]]
[--write-runs FOLDER] [--candidates detected|gold] [--detector heuristic|DIR] [--test [--test-first-run RUN]
[--test-sources detected,stored:D2,gold]] [--only-test N,w,gate [--warm C]]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")

METRICS = ("MRR@10", "mAP@10", "R@10", "R@50", "R@100")
CANDIDATES: list[Any] = ["gold", None]  # --candidates and --detector (main sets them)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def hybrid_options(device: str) -> Any:
    """The options of the hybrid dev chose (a ``SearchOptions``: its ``bm25``, ``retrieval``), built by the CLI's
    own builder (``search_options``)."""
    from corefsearch.cli.options import FileBM25Args, ModelArgs, RoundArgs, search_options

    return search_options(["hybrid"], FileBM25Args(query_format="sentence", fields="sentence=1,document=0.1",
                                                   threads=2),
                          ModelArgs(fusion="interpolate", alpha=0.5, device=device), RoundArgs())


def rounds(index: Path, dataset: Path, split: str, encoder: Path, k: int, n_max: int, device: str,
           spans: Path | None, first_run: Path | None = None, background: bool = True,
           source: tuple[str, str | None, Path] | None = None, ran: tuple[list[Any], float] | None = None,
           least_gate: float | None = None
           ) -> tuple[list[Any], dict[str, list[Any]], dict[str, list[Any]], float, float]:
    """The first round (the hybrid's, or ``first_run``'s: e.g. ``search --reader --rerank-fusion rrf``; ``ran``:
    one already run, with its seconds), each query's expansion queries (largest N), their hits; seconds of each
    round. ``source``: the encoder's candidates (``(candidates, detector, dataset)``; default ``--candidates``,
    ``--detector`` over ``dataset``). ``least_gate``: only expansions at least that similar are searched (the
    grid's least gate: the others are never fused)."""
    from corefsearch.base.schema import Hit
    from corefsearch.datasets.dataset import read_queries
    from corefsearch.search.candidates import open_candidates
    from corefsearch.search.retriever import open_retriever
    from corefsearch.search.second_round import EncoderExpansion, from_spans

    options = hybrid_options(device)
    retriever = open_retriever(index, options.bm25, options.retrieval)
    queries = read_queries(dataset / "queries" / f"{split}.jsonl")
    log(f"{split}: first round, {len(queries):,} queries" + (" (run once before)" if ran is not None else ""))
    began = time.perf_counter()
    if ran is not None:
        first, first_seconds = ran
    elif first_run is not None:
        from corefsearch.io.trec import read_run

        ran = read_run(first_run)
        first = [(q, [Hit(p, s) for p, s in sorted(ran[q.id].items(), key=lambda x: -x[1])][:k]) for q in queries]
    else:
        first = list(retriever.search(queries, k))
    if ran is None:
        first_seconds = time.perf_counter() - began
    if spans is not None:
        from corefsearch.evaluate.spans import read_spans

        marked: dict[str, dict[str, tuple[int, int]]] = {}
        span_score: dict[tuple[str, str], float] = {}
        for span in read_spans(spans):
            marked.setdefault(span.qid, {})[span.passage_id] = (span.start, span.end)
            span_score[span.qid, span.passage_id] = span.score
        texts = {h.passage_id: retriever.passage(h.passage_id)["text"] for _, hits in first for h in hits[:n_max]}
        expansions = {q.id: from_spans(q, hits, marked.get(q.id, {}), texts, n_max) for q, hits in first}
        for q, _ in first:
            for x in expansions[q.id]:
                SIMILARITY[x.id] = span_score[q.id, x.passage_id]  # the reader's spans are gated on their score
                CORRECT[x.id] = q.cluster_id in gold_clusters(dataset, x)
    else:
        from corefsearch.search.options import BACKGROUND_FROM
        from corefsearch.search.second_round import expansion_query

        candidates, detector, candidate_dataset = source or (CANDIDATES[0], CANDIDATES[1], dataset)
        opened = OfTypes(open_candidates(candidates, candidate_dataset, detector), {q.type for q, _ in first})
        expander = EncoderExpansion.load(encoder, opened, device)
        log(f"{split}: candidates {candidates}"
            + (f" ({detector or candidate_dataset})" if candidates != "gold" else ""))
        chosen = expander.nearest([(q, [h.passage_id for h in hits[:n_max]]) for q, hits in first])
        floor = (expander.background([(q, [h.passage_id for h in hits[BACKGROUND_FROM:]]) for q, hits in first])
                 if background else {q.id: None for q, _ in first})  # no margin in the grid: not encoded
        expansions = {}
        for q, _ in first:
            expansions[q.id] = []
            cosine = expander.similarities(q, chosen[q.id])
            for pid, r in chosen[q.id].items():
                x = expansion_query(q, pid, r.sentence, r.start, r.end)
                SIMILARITY[x.id] = cosine[pid]
                MARGIN[x.id] = SIMILARITY[x.id] - floor[q.id] if floor[q.id] is not None else float("inf")
                # a detected mention has no cluster: right when it overlaps a mention of the query's gold cluster
                CORRECT[x.id] = (r.cluster_id == q.cluster_id if r.cluster_id
                                 else q.cluster_id in gold_clusters(dataset, x))
                expansions[q.id].append(x)
        if least_gate is not None and least_gate > -1:  # never fused: neither searched nor kept
            expansions = {qid: [x for x in xs if SIMILARITY[x.id] >= least_gate] for qid, xs in expansions.items()}
        EMPTY[split] = expander.empty
    flat = [x for q, _ in first for x in expansions[q.id]]
    log(f"{split}: second round, {len(flat):,} expansion queries")
    began = time.perf_counter()
    found = {x.id: hits for x, hits in retriever.search(flat, k)}
    second_seconds = time.perf_counter() - began
    return first, expansions, found, first_seconds, second_seconds


class OfTypes:
    """A candidate source that gives only the candidates of the queries' types: the encoder picks among those
    alone (``EncoderExpansion.nearest``), so the choice is the same and the other types are not encoded."""

    def __init__(self, source: Any, types: set[str]) -> None:
        self.source, self.types, self.name = source, types, source.name

    def of(self, passage_ids: Any) -> dict[str, list[Any]]:
        found = {pid: [c for c in mentions if c.type in self.types]
                 for pid, mentions in self.source.of(passage_ids).items()}
        return {pid: mentions for pid, mentions in found.items() if mentions}

    def query_record(self, query: Any) -> Any:
        return self.source.query_record(query)


EMPTY: dict[str, int] = {}  # split -> top passages asked about that held no candidate of the query's type
SIMILARITY: dict[str, float] = {}  # expansion id -> the encoder's similarity of its mention to the query's
MARGIN: dict[str, float] = {}  # expansion id -> its similarity less the background's (corefsearch.search.second_round)
CORRECT: dict[str, bool] = {}  # expansion id -> its mention is in the query's gold cluster


GOLD: dict[str, list[Any]] = {}  # passage id -> the dataset's mention records in it


def gold_clusters(dataset: Path, expansion: Any) -> set[str]:
    """The clusters of the dataset mentions an expansion's marked span overlaps (in its passage)."""
    if not GOLD:
        from corefsearch.cluster.inputs import dataset_mention_records

        for record in dataset_mention_records(dataset).values():
            GOLD.setdefault(record.passage_id, []).append(record)
    return {r.cluster_id for r in GOLD.get(expansion.passage_id, ())
            if r.start < expansion.end and expansion.start < r.end}


def oracle_row(dataset: Path, first: list[Any], k: int, qrels: Path, depth: int) -> dict[str, float]:
    """The oracle row (bench/mention_promotion.py's ``annotated_first``): of each query's first-round top ``depth``,
    the passages that hold an annotated mention of the query's type first. The encoder's expansions are annotated
    mentions, so on a collection annotated only in part this is what knowing them alone is worth."""
    from mention_promotion import annotated_first, passage_mentions

    from corefsearch.evaluate.ranking import evaluate_run
    from corefsearch.io.trec import read_qrels

    if dataset not in MENTIONS:
        MENTIONS[dataset] = passage_mentions(dataset)
    ranked = annotated_first({q.id: [h.passage_id for h in hits[:k]] for q, hits in first}, {q.id: q for q, _ in first},
                             MENTIONS[dataset], depth)
    run = {qid: {pid: float(len(ids) - i) for i, pid in enumerate(ids)} for qid, ids in ranked.items()}
    aggregate = evaluate_run(run, read_qrels(qrels)).aggregate
    return {m: 100 * float(aggregate[m]) for m in METRICS}


MENTIONS: dict[Path, dict[str, list[dict[str, Any]]]] = {}  # dataset -> its passages' annotated mentions


def reciprocal(query: Any, expansion: Any, found: dict[str, list[Any]], depth: int) -> bool:
    """The expansion's own search finds the query's passage in its top ``depth`` (0: no such test): the
    library's test (``corefsearch.search.second_round.finds_again``) on the cached hits."""
    from corefsearch.search.second_round import finds_again

    return finds_again(query, found[expansion.id], depth)


def scores(first: list[Any], expansions: dict[str, list[Any]], found: dict[str, list[Any]], n: int, weight: float,
           k: int, qrels: Path, gate: float = -1.0, depth: int = 0, share: str = "kept",
           margin: float | None = None, write: Path | None = None, list_depth: int | None = None,
           head: int = 0) -> dict[str, float]:
    """The scores of one setting (``write``: also write its fused run, TREC, for a reader to re-rank;
    ``list_depth``: each expansion's list is cut to its first ``list_depth`` passages, as ``--expand-list-depth``;
    1 is "heads only", as if its search had found nothing)."""
    from corefsearch.evaluate.ranking import evaluate_run
    from corefsearch.io.trec import read_qrels
    from corefsearch.search.second_round import expansion_list, head_and_tail

    run = {}
    for query, hits in first:
        top = {h.passage_id for h in hits[:n]}  # the top N passages' expansions, as the CLI takes them
        mine = [x for x in expansions[query.id] if x.passage_id in top and SIMILARITY.get(x.id, 1.0) >= gate
                and (margin is None or MARGIN.get(x.id, math.inf) >= margin) and reciprocal(query, x, found, depth)]
        lists = [expansion_list(x, found[x.id])[:list_depth] for x in mine]
        # share "kept": the second round weighs w whatever the number of expansions kept; "n": each kept
        # expansion weighs w / N, so the round weighs w only when all N passages gave one.
        scaled = weight if share == "kept" else weight * len(lists) / n if n else 0.0
        # head: the top `head` ranks from the lists' own passages alone, the rest from the lists (--expand-head)
        ranked = head_and_tail(hits, lists, scaled, k, query.passage_id, head) if n and mine else hits
        run[query.id] = {h.passage_id: float(len(ranked) - i) for i, h in enumerate(ranked)}  # ranks, tie-free
    if write is not None:
        from corefsearch.io.trec import RunRow, write_run

        write_run(write, [RunRow(qid, pid, rank, score, "round2") for qid, ranked in run.items()
                          for rank, (pid, score) in enumerate(ranked.items(), start=1)])
    aggregate = evaluate_run(run, read_qrels(qrels)).aggregate
    return {m: 100 * float(aggregate[m]) for m in METRICS}


def reader_rows(retriever: Any, dataset: Path, reader: Path, first_stage: Path, encoder: Path, n: int,
                weight: float, k: int, device: str, gate: float | None = None,
                depths: tuple[int, ...] = (0,)) -> list[tuple[str, dict[str, float]]]:
    """The best single-round pipeline's test rows and its second rounds (module docstring)."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    from e2e import fuse_with_retriever

    from corefsearch.base.schema import Hit, SpanRecord
    from corefsearch.datasets.dataset import Dataset, read_queries
    from corefsearch.evaluate.query_clusters import score_query_clusters
    from corefsearch.evaluate.spans import read_spans
    from corefsearch.io.trec import read_qrels, read_run
    from corefsearch.search.candidates import open_candidates
    from corefsearch.search.second_round import EncoderExpansion, expansion_list, finds_again, from_spans, fuse_rounds

    queries = read_queries(dataset / "queries" / "test.jsonl")
    root = Path(tempfile.mkdtemp(prefix="corefsearch-second-round-"))
    fused = read_run(fuse_with_retriever(reader / "test.trec", first_stage, {q.id for q in queries}, root))
    first = [(q, [Hit(p, s) for p, s in sorted(fused[q.id].items(), key=lambda x: -x[1])][:k]) for q in queries]
    spans_path = Path(f"{reader / 'test.trec'}.spans.jsonl")
    marked: dict[str, dict[str, tuple[int, int]]] = {}
    for span in read_spans(spans_path):
        marked.setdefault(span.qid, {})[span.passage_id] = (span.start, span.end)
    texts = {h.passage_id: retriever.passage(h.passage_id)["text"] for _, hits in first for h in hits[:n]}
    expander = EncoderExpansion.load(encoder, open_candidates(CANDIDATES[0], dataset, CANDIDATES[1]), device)
    sources = {"reader": {q.id: from_spans(q, hits, marked.get(q.id, {}), texts, n) for q, hits in first},
               "encoder": expander.expansions(first, n, gate)}
    # The same passage may give each source a query, with other mentions marked: searched apart.
    flat = {(source, x.id): x for source, found in sources.items() for xs in found.values() for x in xs}
    log(f"test: second round of the reader run, {len(flat):,} expansion queries")
    keys = list(flat)
    searched = {key: hits for key, (_, hits) in zip(keys, retriever.search([flat[key] for key in keys], k),
                                                    strict=True)}
    # The encoder's rows are scored as clusters with its nearest mention in each top-10 passage as the span.
    nearest = expander.nearest([(q, [h.passage_id for h in hits[:10]]) for q, hits in first])
    encoder_spans = root / "encoder.spans.jsonl"
    encoder_spans.write_text("".join(
        json.dumps(SpanRecord(qid, pid, r.start, r.end, r.sentence[r.start:r.end], 0.0).to_json()) + "\n"
        for qid, chosen in nearest.items() for pid, r in chosen.items()))
    qrels = read_qrels(dataset / "qrels" / "test.txt")
    data = Dataset(dataset)

    def row(ranking: dict[str, list[Any]], spans: Path) -> dict[str, float]:
        from corefsearch.evaluate.ranking import evaluate_run

        run = {qid: {h.passage_id: float(len(hits) - i) for i, h in enumerate(hits)} for qid, hits in ranking.items()}
        values = {m: 100 * float(evaluate_run(run, qrels).aggregate[m]) for m in METRICS}
        clusters = score_query_clusters(run, spans, data, 10).aggregate()
        return {**values, "cluster F1@10": 100 * clusters["cluster B3 F1@10"]}

    rows = [("hybrid + reader, RRF (the best single round)", row({q.id: h for q, h in first}, spans_path))]
    for source, expansions in sources.items():
        for depth in depths:
            ranking = {}
            for q, hits in first:
                kept = [x for x in expansions[q.id] if finds_again(q, searched[source, x.id], depth)]
                ranking[q.id] = fuse_rounds(hits, [expansion_list(x, searched[source, x.id]) for x in kept], weight,
                                            k, q.passage_id) if kept else hits
            label = f"+ second round from the {source}'s mentions (N {n}, w {weight:g}" + (
                f", reciprocal R {depth})" if depth else ")")
            rows.append((label, row(ranking, spans_path if source == "reader" else encoder_spans)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True, help="index with lucene/, lucene/fields/ and dense/")
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--mention-encoder", type=Path, required=True)
    parser.add_argument("--spans", type=Path, default=None, help="a reader's spans of the same first round")
    parser.add_argument("--first-run", type=Path, default=None,
                        help="the first round as a run of --split (e.g. search --reader --rerank-fusion rrf) rather "
                             "than the hybrid; --spans may be its RUN.spans.jsonl")
    parser.add_argument("--test-first-run", type=Path, default=None, help="--first-run of the test split (--test)")
    parser.add_argument("--write-runs", type=Path, default=None,
                        help="write the runs of dev's choice (FOLDER/dev.trec, and FOLDER/test.trec with --test)")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--expand", default="1,2,3,5")
    parser.add_argument("--weights", default="0.25,0.5,1,2")
    parser.add_argument("--gates", default="-1", help="least encoder similarity of an expansion mention (-1: none)")
    parser.add_argument("--reciprocal", default="0",
                        help="depths R: an expansion counts only when its own search ranks the query's passage in its "
                             "top R (0: no such test)")
    parser.add_argument("--shares", default="kept",
                        help="kept (the second round weighs w) | n (each kept expansion weighs w / N), comma-separated")
    parser.add_argument("--margins", default="none",
                        help="margins of the encoder's expansion mentions over the background (none: no such test)")
    parser.add_argument("--list-depths", default="all",
                        help="how many passages of each expansion's list the fusion reads (its own first; all: every "
                             "one), comma-separated, as --expand-list-depth")
    parser.add_argument("--heads", default="0",
                        help="H: the top H ranks come from each list's own passage alone, the rest from the lists "
                             "(0: no such split)")
    parser.add_argument("--candidates", default="detected", choices=("detected", "gold"),
                        help="the encoder's candidate mentions (gold: an upper bound, the annotations)")
    parser.add_argument("--detector", default=None, help="with --candidates detected: heuristic or a detector folder "
                                                           "run at query time (default: the dataset's stored ones)")
    parser.add_argument("--test-sources", default=None,
                        help="the test's second-round rows, comma-separated: detected (--dataset's stored mentions, or "
                             "--detector), stored:DATASET (a copy's stored mentions), detector:REF (at query time), "
                             "gold (with the oracle row, in a table of its own); default: --candidates")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--test", action="store_true")
    parser.add_argument("--test-reader", type=Path, default=None,
                        help="a reader's folder with test.trec (+ .spans.jsonl) re-ranking --first-stage's test run")
    parser.add_argument("--first-stage", type=Path, default=None, help="the hybrid's test run the reader re-ranked")
    parser.add_argument("--only-test", default=None, help="N,w[,gate]: skip dev, use these (and --reciprocal)")
    parser.add_argument("--warm", type=int, default=0, help="also time N test queries on the warm engine")
    args = parser.parse_args(argv)
    CANDIDATES[:] = [args.candidates, args.detector]
    if args.only_test:
        n, w, *g = args.only_test.split(",")
        gate = float(g[0]) if g else None
        if args.test:  # the test rows at this setting, with the first of --list-depths and --heads
            depth = args.list_depths.split(",")[0]
            test_rows(args, (int(n), float(w), -1.0 if gate is None else gate, int(args.reciprocal.split(",")[0]),
                             args.shares.split(",")[0], None, None if depth == "all" else int(depth),
                             int(args.heads.split(",")[0])))
        if args.warm:
            warm_cost(args, int(n), float(w), args.warm, gate, args.list_depths.split(",")[0],
                      int(args.heads.split(",")[0]))
        depths = tuple(int(x) for x in args.reciprocal.split(","))
        return test_reader_only(args, int(n), float(w), gate, depths) if args.test_reader is not None else 0
    grid_n = [int(x) for x in args.expand.split(",")]
    grid_w = [float(x) for x in args.weights.split(",")]
    grid_g = [float(x) for x in args.gates.split(",")]
    first, expansions, found, s1, s2 = rounds(args.index, args.dataset, args.split, args.mention_encoder, args.k,
                                              max(grid_n), args.device, args.spans, args.first_run,
                                              args.margins != "none", least_gate=min(grid_g))
    qrels = args.dataset / "qrels" / f"{args.split}.txt"
    base = scores(first, expansions, found, 0, 0.0, args.k, qrels)
    print(f"{args.split}, {len(first):,} queries, ×100; first round {s1:.0f} s, the second round's "
          f"{len(found):,} queries {s2:.0f} s ({1000 * s2 / max(len(first), 1):.0f} ms per original query at "
          f"N = {max(grid_n)}, those ≥ the least gate {min(grid_g):g}); {EMPTY.get(args.split, 0):,} top passages "
          "held no candidate of the query's type\n")
    grid_r = [int(x) for x in args.reciprocal.split(",")]
    if CORRECT:
        print("Expansion mentions (the encoder's, top " + str(max(grid_n)) + " passages): how many pass each gate, "
              "and the share in the query's gold cluster\n\n| gate | expansions | in the query's cluster |\n"
              "| ---: | ---: | ---: |")
        for g in sorted({-1.0, 0.5, 0.7, 0.8, 0.9, 0.95, *grid_g}):
            passing = [x for x, s in SIMILARITY.items() if s >= g]
            share = 100 * sum(CORRECT[x] for x in passing) / len(passing) if passing else 0.0
            print(f"| {'none' if g == -1 else g} | {len(passing):,} | {share:.1f}% |")
        print()
        if grid_r != [0]:
            print("| gate | reciprocal R | expansions | in the query's cluster |\n| ---: | ---: | ---: | ---: |")
            for g in grid_g:
                for r in grid_r:
                    passing = [x.id for q, _ in first for x in expansions[q.id]
                               if SIMILARITY.get(x.id, 1.0) >= g and reciprocal(q, x, found, r)]
                    share = 100 * sum(CORRECT[x] for x in passing) / len(passing) if passing else 0.0
                    print(f"| {'none' if g == -1 else g} | {r or 'off'} | {len(passing):,} | {share:.1f}% |")
            print()
    grid_s = args.shares.split(",")
    grid_m = [None if x == "none" else float(x) for x in args.margins.split(",")]
    if CORRECT and grid_m != [None]:
        print("| gate | margin | reciprocal R | expansions | in the query's cluster |\n"
              "| ---: | ---: | ---: | ---: | ---: |")
        for g in grid_g:
            for mg in grid_m:
                for r in grid_r:
                    passing = [x.id for q, _ in first for x in expansions[q.id]
                               if SIMILARITY.get(x.id, 1.0) >= g and (mg is None or MARGIN[x.id] >= mg)
                               and reciprocal(q, x, found, r)]
                    share = 100 * sum(CORRECT[x] for x in passing) / len(passing) if passing else 0.0
                    print(f"| {'none' if g == -1 else g} | {'off' if mg is None else mg} | {r or 'off'} | "
                          f"{len(passing):,} | {share:.1f}% |")
        print()
    print("| N | w | gate | margin | R | share | " + " | ".join(METRICS)
          + " |\n| ---: | ---: | ---: | ---: | ---: | --- |" + " ---: |" * len(METRICS))
    print("| first round | | | | | | " + " | ".join(f"{base[m]:.2f}" for m in METRICS) + " |")
    oracle = oracle_row(args.dataset, first, args.k, qrels, max(grid_n))
    print(f"| annotated first, top {max(grid_n)} (oracle) | | | | | | "
          + " | ".join(f"{oracle[m]:.2f}" for m in METRICS) + " |")
    grid_l = [None if x == "all" else int(x) for x in args.list_depths.split(",")]
    grid_h = [int(x) for x in args.heads.split(",")]
    best = (base["MRR@10"], 0, 0.0, -1.0, 0, "kept", None, None, 0)
    for n in grid_n:
        for w in grid_w:
            for g in grid_g:
                for mg in grid_m:
                    for r in grid_r:
                        for share in grid_s:
                            for depth, head in ((d, h) for d in grid_l for h in grid_h):
                                row = scores(first, expansions, found, n, w, args.k, qrels, g, r, share, mg,
                                             list_depth=depth, head=head)
                                label = share if depth is None else f"{share}, lists {depth} deep"
                                label += f", top {head} from the heads" if head else ""
                                print(f"| {n} | {w:g} | {g:g} | {'off' if mg is None else mg} | {r} | {label} | "
                                      + " | ".join(f"{row[m]:.2f}" for m in METRICS) + " |", flush=True)
                                if row["MRR@10"] > best[0]:
                                    best = (row["MRR@10"], n, w, g, r, share, mg, depth, head)
    if best[1]:
        heads = scores(first, expansions, found, best[1], best[2], args.k, qrels, best[3], best[4], best[5], best[6],
                       list_depth=1)
        print(f"| {best[1]} | {best[2]:g} | {best[3]:g} | {'off' if best[6] is None else best[6]} | {best[4]} | "
              f"{best[5]}, heads only (no search) | " + " | ".join(f"{heads[m]:.2f}" for m in METRICS) + " |")
    print(f"\nDev chose N = {best[1]}, w = {best[2]:g}, gate {best[3]:g}, margin {best[6]}, R {best[4]}, share "
          f"{best[5]}, lists {best[7] or 'all'} deep, top {best[8]} from the heads (MRR@10 {best[0]:.2f}; N = 0 is "
          "the first round).")
    if args.write_runs is not None:
        args.write_runs.mkdir(parents=True, exist_ok=True)
        scores(first, expansions, found, best[1], best[2], args.k, qrels, best[3], best[4], best[5], best[6],
               args.write_runs / f"{args.split}.trec", list_depth=best[7], head=best[8])
    if args.test:
        test_rows(args, best[1:])
    if args.test_reader is not None:
        test_reader_only(args, best[1], best[2], best[3] if best[3] != -1 else None, (0, best[4]) if best[4] else (0,))
    return 0


def test_sources(args: argparse.Namespace) -> list[tuple[str, tuple[str, str | None, Path]]]:
    """``--test-sources``: the candidate sources of the test's second-round rows, each with its label."""
    sources = []
    for item in (args.test_sources or args.candidates).split(","):
        if item == "gold":
            sources.append(("gold candidates (the dataset's annotated mentions)", ("gold", None, args.dataset)))
        elif item == "detected":
            what = f"detector {args.detector}, at query time" if args.detector else "the dataset's stored ones"
            sources.append((f"detected candidates ({what})", ("detected", args.detector, args.dataset)))
        elif item.startswith("stored:"):
            path = Path(item.split(":", 1)[1])
            sources.append((f"detected candidates (stored in {path})", ("detected", None, path)))
        elif item.startswith("detector:"):
            ref = item.split(":", 1)[1]
            sources.append((f"detected candidates (detector {ref}, at query time)", ("detected", ref, args.dataset)))
        else:
            raise SystemExit(f"--test-sources: unknown item {item!r}")
    return sources


def test_rows(args: argparse.Namespace, setting: tuple[Any, ...]) -> None:
    """The test split, once: the first round, then a second round at ``setting`` (dev's choice: N, w, gate, R,
    share, margin, list depth, head) from each of ``--test-sources``; gold candidates and the oracle row in a
    table of their own (an upper bound)."""
    n, w, gate, depth, share, margin, list_depth, head = setting
    qrels = args.dataset / "qrels" / "test.txt"
    test_spans = Path(f"{args.test_first_run}.spans.jsonl") if args.spans and args.test_first_run else None
    described = (f"N {n}, w {w:g}, gate {gate:g}, lists {list_depth or 'all'} deep, top {head} from the heads"
                 + (f", margin {margin}" if margin is not None else "") + (f", R {depth}" if depth else "")
                 + (f", share {share}" if share != "kept" else ""))
    ran = None
    rows: list[tuple[str, str, dict[str, float]]] = []
    for label, source in test_sources(args):
        first, expansions, found, s1, s2 = rounds(args.index, args.dataset, "test", args.mention_encoder, args.k,
                                                  max(n, 1), args.device, test_spans, args.test_first_run,
                                                  margin is not None, source, ran, gate)
        if ran is None:
            ran = (first, s1)
            rows.append(("detected", "first round", scores(first, expansions, found, 0, 0.0, args.k, qrels)))
        kept = [x.id for q, _ in first for x in expansions[q.id]]
        right = 100 * sum(CORRECT[x] for x in kept) / max(len(kept), 1)
        log(f"test, {label}: {len(kept):,} expansions pass the gate, {right:.1f}% in the query's cluster; "
            f"{EMPTY.get('test', 0):,} top passages without a candidate; second round {s2:.0f} s")
        two = scores(first, expansions, found, n, w, args.k, qrels, gate, depth, share, margin,
                     args.write_runs / f"test.{source[0]}.trec" if args.write_runs is not None else None,
                     list_depth=list_depth, head=head)
        rows.append((source[0], f"+ second round, {label}: {len(kept):,} expansions ≥ gate, {right:.1f}% right",
                     two))
        log(f"test, {label}: " + ", ".join(f"{m} {two[m]:.2f}" for m in METRICS) + " (first round: "
            + ", ".join(f"{m} {rows[0][2][m]:.2f}" for m in METRICS) + ")")
        if source[0] == "gold":
            rows.append(("gold", f"annotated first, top {max(n, 1)} (oracle)",
                         oracle_row(args.dataset, first, args.k, qrels, max(n, 1))))
    first = ran[0] if ran else []
    print(f"\nTest, once ({len(first):,} queries), ×100; second round: {described}:\n")
    for table in ("detected", "gold"):
        chosen = [(name, values) for kind, name, values in rows if kind == table or name == "first round"]
        if table == "gold":
            if len(chosen) == 1:
                continue
            print("\nGold mentions (an upper bound; not available on unannotated text):\n")
        print("| run | " + " | ".join(METRICS) + " |\n| --- |" + " ---: |" * len(METRICS))
        for name, values in chosen:
            print(f"| {name} | " + " | ".join(f"{values[m]:.2f}" for m in METRICS) + " |", flush=True)


def warm_cost(args: argparse.Namespace, n: int, w: float, count: int, gate: float | None = None,
              list_depth: str = "all", head: int = 10) -> None:
    """ms per query of the warm engine (what ``serve`` answers with), one round against two, taking turns."""
    import statistics
    from dataclasses import replace

    from corefsearch.datasets.dataset import read_queries
    from corefsearch.search.engine import SearchEngine
    from corefsearch.search.options import ExpansionOptions

    options = replace(hybrid_options(args.device),
                      expansion=ExpansionOptions(1, max(n, 1), w, CANDIDATES[0], CANDIDATES[1], args.mention_encoder,
                                                 gate, list_depth=0 if list_depth == "all" else int(list_depth),
                                                 head=head))
    engine = SearchEngine.open(args.index, options, args.dataset)
    queries = read_queries(args.dataset / "queries" / "test.jsonl")[:count]
    times: dict[int, list[float]] = {1: [], 2: []}
    for i, query in enumerate(queries):
        for rounds in ((1, 2) if i % 2 == 0 else (2, 1)):
            began = time.perf_counter()
            engine.query(qid=query.id, k=10, rounds=rounds)
            times[rounds].append(1000 * (time.perf_counter() - began))
    one, two = statistics.median(times[1]), statistics.median(times[2])
    what = f"{CANDIDATES[0]}" + (f", detector {CANDIDATES[1]} at query time" if CANDIDATES[1] else
                                 ", the dataset's stored mentions" if CANDIDATES[0] == "detected" else "")
    print(f"\nWarm engine (serve's), {len(queries)} test queries, k 10, median ms/query: one round {one:.0f}, two "
          f"rounds (encoder, N {max(n, 1)}, candidates {what}) {two:.0f}: {two - one:+.0f} ms "
          f"(means {statistics.mean(times[1]):.0f} and {statistics.mean(times[2]):.0f})")


def test_reader_only(args: argparse.Namespace, n: int, w: float, gate: float | None = None,
                     depths: tuple[int, ...] = (0,)) -> int:
    from corefsearch.search.retriever import open_retriever

    options = hybrid_options(args.device)
    retriever = open_retriever(args.index, options.bm25, options.retrieval)
    rows = reader_rows(retriever, args.dataset, args.test_reader, args.first_stage, args.mention_encoder,
                       max(n, 1), w, args.k, args.device, gate, depths)
    columns = [*METRICS, "cluster F1@10"]
    print(f"\nTest, the reader rows (N {max(n, 1)}, w {w:g}), ×100:\n")
    print("| run | " + " | ".join(columns) + " |\n| --- |" + " ---: |" * len(columns))
    for name, values in rows:
        print(f"| {name} | " + " | ".join(f"{values[c]:.2f}" for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
