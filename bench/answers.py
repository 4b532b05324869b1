"""The answer's members: which candidate mentions of a query's top 10 hits corefer with the query mention.

``query --cluster`` answers "where else is this event mentioned, and how" with mentions of the top hits. This
bench asks a dataset's queries by id through the engine that ``query`` and ``serve`` use (the hybrid the
headline uses; candidates: the dataset's stored predicted mentions, ``detect`` with the shipped detector) and,
per query, scores every candidate mention of the query's type in the top 10 hits with each model that can
choose members:

- the mention encoder (``event-encoder-ecbplus``): the cosine of the candidate to the query mention, plus its
  lemma weight β when both have the same head lemma (as ``cluster --method encoder`` reads a pair);
- the reader (``reader-ecbplus``): its coreference score ``s_m + s_a`` of the candidate span, read with the query
  (``Reader.span_scores``), and whether the candidate overlaps the span the reader marks in its passage;
- both, by a logistic regression on those features (fitted on dev by 5-fold cross-validation grouped by topic,
  so that each dev query is scored by a model that did not see its topic);
- with ``--pair-scorer DIR``, a mention-pair cross-encoder (``train pair-scorer``): its probability that the
  candidate corefers with the query mention, alone and in the regression;
- the two contexts (who, where, when): the overlap of the names, numbers and words of the query's and the
  candidate's sentences and document heads, in regressions with the encoder's features (and the reader's).

Target, per query: the gold mentions of the query's cluster that lie in its top 10 hits (what an answer can
hold), the query's own mention left out. A candidate counts as the gold mention it overlaps most (one gold
mention counts once). Mention precision, recall and F1, micro (pooled over the queries) and macro (per query,
averaged; a query with no target counts for precision only). B³ of the whole cluster (``query_b_cubed``) beside.
The former answer (the encoder's average linkage at its τ, one mention per hit) is the first row; ``today`` in a
record is the library's answer when it was collected (the former one in dev's records, the new one in test's).

The distractor subset: queries whose top 10 holds a passage of the same ECB+ topic's other half (the ``ecb``
documents against the ``ecbplus`` ones: a similar event, another time and place); "other half" is the share
of the answer's members in those passages.

Rules are chosen on dev (micro F1); ``--test`` scores test once for the rules dev chose.

Run: ``python bench/answers.py --index INDEX --dataset DATASET_WITH_PREDICTED_MENTIONS --work work/answers
[--max-queries 500] [--pair-scorer DIR] [--test]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("COREFSEARCH_QUIET", "1")

from headline import log  # noqa: E402

ENCODER, READER = "event-encoder-ecbplus", "reader-ecbplus"
K = 10


@dataclass
class Candidate:
    pid: str
    rank: int
    start: int
    end: int
    text: str
    cosine: float
    same_lemma: bool
    reader: float  # the reader's coreference score of this span
    reader_passage: float  # the reader's best score in the passage
    on_reader_span: bool  # overlaps the span the reader marks
    gold: int | None  # index of the target gold mention it overlaps most, else None
    other_half: bool  # in a passage of the same topic's other half (ECB+)
    validated: bool  # in a sentence the ECB+ annotators validated (where the annotation is complete)
    pair: float | None = None  # the pair scorer's probability that it corefers with the query mention (--pair-scorer)


@dataclass
class Answered:
    qid: str
    topic: str
    targets: list[str]  # the passage of each gold mention of the query's cluster in the top 10 (query's own left out)
    candidates: list[Candidate]
    today: list[tuple[int | None, str]]  # today's answer's members: the target it overlaps (None: none), passage
    today_other_half: int
    distractor: bool  # the top 10 holds a passage of the topic's other half
    validated_hits: list[str]  # the hits that are validated sentences
    seconds: dict[str, float] = field(default_factory=dict)
    # The former answer (average linkage of each hit's nearest candidate and the query at the encoder's τ),
    # recomputed here; None in the records collected while it was the library's (``today`` is it there)
    former: list[tuple[int | None, str]] | None = None


def open_engine(index: Path, dataset: Path, device: str, encoder: str = ENCODER) -> Any:
    from corefsearch.fusion import FusionOptions
    from corefsearch.search.engine import SearchEngine
    from corefsearch.search.options import ExpansionOptions, RetrievalOptions, SearchOptions
    from corefsearch.sparse.search import BM25Options

    return SearchEngine.open(index, SearchOptions(
        bm25=BM25Options(query_format="sentence", fields={"sentence": 1.0, "document": 0.1}),
        retrieval=RetrievalOptions(retriever="hybrid", device=device,
                                   fusion=FusionOptions(method="interpolate", alpha=0.5)),
        expansion=ExpansionOptions(encoder=encoder)), dataset)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return min(a[1], b[1]) - max(a[0], b[0])


def _align(spans: Sequence[tuple[int, int]], golds: Sequence[tuple[int, int]]) -> list[int | None]:
    """Each span as the gold span it overlaps most (index into ``golds``), else None."""
    out: list[int | None] = []
    for span in spans:
        best, most = None, 0
        for index, gold in enumerate(golds):
            if (shared := _overlap(span, gold)) > most:
                best, most = index, shared
        out.append(best)
    return out


def _half(doc_id: str) -> str:
    return "ecbplus" if doc_id.endswith("ecbplus") else "ecb"


def answer_one(engine: Any, reader: Any, query: Any, doc_of: Callable[[str], str], validated: set[str],
               scorer: Any = None) -> Answered:
    from corefsearch.search.cluster_answer import _head_lemmas

    clock = time.perf_counter()
    result = engine.query(qid=query.id, k=K, cluster=True)
    seconds = {"today": time.perf_counter() - clock}
    hits = result.hits
    # Targets: the gold mentions of the query's cluster in the hits (the engine marks them on each hit).
    targets: list[tuple[str, tuple[int, int]]] = [(h.passage_id, tuple(g)) for h in hits for g in h.gold_mentions]
    index_of = {t: i for i, t in enumerate(targets)}
    query_doc = doc_of(query.passage_id)
    topic, half = query_doc.split("_")[0], _half(query_doc)
    other = {h.passage_id for h in hits if doc_of(h.passage_id).split("_")[0] == topic
             and _half(doc_of(h.passage_id)) != half}

    def as_target(pid: str, span: tuple[int, int]) -> int | None:
        golds = [g for p, g in targets if p == pid]
        found = _align([span], golds)[0]
        return None if found is None else index_of[(pid, golds[found])]

    today = [(as_target(m["passage_id"], (m["start"], m["end"])), m["passage_id"])
             for d in result.cluster["documents"] for m in d["mentions"]]
    today_other = sum(1 for d in result.cluster["documents"] for m in d["mentions"] if m["passage_id"] in other)

    clock = time.perf_counter()
    expansion = engine.expander()
    pids = [h.passage_id for h in hits]
    found = expansion.candidates.of(pids)
    records = [c.record for pid in pids for c in found.get(pid, ())
               if c.type == query.type and c.record.mention_id != query.id]
    query_record = expansion.candidates.query_record(query)
    vectors = expansion.encoder.encode([query_record, *records]) if records else None
    beta = float(expansion.encoder.config.lemma_weight or 0.0)
    lemmas = _head_lemmas([query_record, *records]) if records else []
    seconds["encoder"] = time.perf_counter() - clock
    clock = time.perf_counter()
    texts = {h.passage_id: h.text for h in hits}
    spans_of = {pid: [(r.start, r.end) for r in records if r.passage_id == pid] for pid in pids}
    scores, read = reader.span_scores(query, [(pid, texts[pid], spans_of[pid]) for pid in pids])
    seconds["reader"] = time.perf_counter() - clock
    by_pid = {pid: (dict(zip(spans_of[pid], s, strict=True)), hit) for pid, s, hit in zip(pids, scores, read,
                                                                                           strict=True)}
    pairs = None
    if scorer is not None and records:
        import numpy as np

        clock = time.perf_counter()
        pairs = scorer.score([query_record, *records], np.array([(0, i) for i in range(1, len(records) + 1)]))
        seconds["pair"] = time.perf_counter() - clock
    rank = {h.passage_id: h.rank for h in hits}
    candidates = []
    for i, record in enumerate(records, start=1):
        span = (record.start, record.end)
        span_scores, hit = by_pid[record.passage_id]
        cosine = float(vectors[i] @ vectors[0]) if vectors is not None else 0.0
        candidates.append(Candidate(record.passage_id, rank[record.passage_id], record.start, record.end,
                                    record.text, cosine, lemmas[i] == lemmas[0] and beta > 0,
                                    span_scores[span], hit.score, _overlap(span, (hit.start, hit.end)) > 0,
                                    as_target(record.passage_id, span), record.passage_id in other,
                                    record.passage_id in validated,
                                    None if pairs is None else float(pairs[i - 1])))
    former = None
    if records:
        from corefsearch.cluster.agglomerative import cluster_dense

        nearest: dict[str, int] = {}
        for i, record in enumerate(records, start=1):
            j = nearest.get(record.passage_id)
            if j is None or float(vectors[i] @ vectors[0]) > float(vectors[j] @ vectors[0]):
                nearest[record.passage_id] = i
        chosen = sorted(nearest.values())
        labels = cluster_dense(vectors[[0, *chosen]], float(expansion.encoder.config.threshold),
                               [lemmas[0], *(lemmas[i] for i in chosen)], beta)
        former = [(as_target(records[i - 1].passage_id, (records[i - 1].start, records[i - 1].end)),
                   records[i - 1].passage_id) for n, i in enumerate(chosen, start=1) if labels[n] == labels[0]]
    return Answered(query.id, topic, [pid for pid, _ in targets], candidates, today, today_other, bool(other),
                    [pid for pid in pids if pid in validated], seconds, former or [])


def collect(engine: Any, reader: Any, queries: Sequence[Any], out: Path, doc_of: Callable[[str], str],
            validated: set[str], label: str, scorer: Any = None) -> list[Answered]:
    """Each query answered once; kept in ``out`` (JSONL), so a second run reads them back."""
    done: dict[str, Answered] = {}
    if out.is_file():
        for line in out.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            record["candidates"] = [Candidate(**c) for c in record["candidates"]]
            record["today"] = [tuple(m) for m in record["today"]]
            if record.get("former") is not None:
                record["former"] = [tuple(m) for m in record["former"]]
            done[record["qid"]] = Answered(**record)
    with out.open("a", encoding="utf-8") as handle:
        for number, query in enumerate(queries, 1):
            if query.id in done:
                continue
            answered = answer_one(engine, reader, query, doc_of, validated, scorer)
            done[query.id] = answered
            handle.write(json.dumps(asdict(answered)) + "\n")
            handle.flush()
            if number % 50 == 0:
                log(f"{label}: {number:,} of {len(queries):,}")
    return [done[q.id] for q in queries]


# --- rules ------------------------------------------------------------------------------------------------------

FEATURES = ("cosine", "same_lemma", "reader", "on_reader_span", "reader_passage", "nearest_in_passage",
            "below_passage_best", "rank")
PAIR_FEATURES = ("pair", "pair_below_passage_best")


def has_pairs(answered: Sequence[Answered]) -> bool:
    return any(c.pair is not None for a in answered for c in a.candidates)


def features(a: Answered, i: int, pair: bool = False) -> list[float]:
    c = a.candidates[i]
    best = max(o.cosine for o in a.candidates if o.pid == c.pid)
    out = [c.cosine, float(c.same_lemma), c.reader, float(c.on_reader_span), c.reader_passage,
           float(c.cosine >= best), best - c.cosine, float(c.rank)]
    if pair:
        out += [c.pair or 0.0, max(o.pair or 0.0 for o in a.candidates if o.pid == c.pid) - (c.pair or 0.0)]
    return out


def fit_logistic(answered: Sequence[Answered], folds: int = 5, pair: bool = False
                 ) -> tuple[dict[tuple[str, int], float], Any]:
    """Out-of-fold probabilities of each candidate (keyed by query id and position), folds grouped by topic,
    and the model fitted on all of them (``pair``: the pair scorer's features too)."""
    import numpy as np

    return _cross_validated(answered, np.array([features(a, i, pair) for a in answered
                                                for i in range(len(a.candidates))]), folds)


def _cross_validated(answered: Sequence[Answered], x: Any, folds: int) -> tuple[dict[tuple[str, int], float], Any]:
    """Out-of-fold probabilities of a logistic regression on ``x`` (a row per candidate, in order), folds grouped by
    topic, and the model fitted on all of them."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    keys = [(a.qid, i) for a in answered for i in range(len(a.candidates))]
    y = np.array([c.gold is not None for a in answered for c in a.candidates])
    groups = np.array([a.topic for a in answered for _ in a.candidates])
    probability = np.zeros(len(keys))
    for train, held in GroupKFold(n_splits=folds).split(x, y, groups):
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(x[train], y[train])
        probability[held] = model.predict_proba(x[held])[:, 1]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(x, y)
    return dict(zip(keys, probability.tolist(), strict=True)), model


# --- who, where, when: overlap of the two contexts (texts only; no corpus statistics, so the library could read them)

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+|\d[\d,.:/-]*")


def _names(text: str) -> set[str]:
    """Capitalised words not opening a sentence (names of people, places, organisations), lower-cased."""
    words = _WORD.findall(text)
    return {w.lower() for i, w in enumerate(words) if w[0].isupper() and i and not words[i - 1].endswith(".")
            and len(w) > 1}


def _numbers(text: str) -> set[str]:
    return {w.rstrip(".,") for w in _WORD.findall(text) if w[0].isdigit()}


def _content(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text) if len(w) > 3 and not w[0].isdigit()}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


CONTEXT_FEATURES = ("names_sentence", "numbers_sentence", "words_sentence", "names_document", "words_document")


class Contexts:
    """Each passage's sentence and its document's head (its first two passages), as the encoder reads them."""

    def __init__(self, passages: Sequence[Any], queries: Sequence[Any]) -> None:
        self.text = {p.id: p.text for p in passages}
        self.doc = {p.id: p.doc_id for p in passages}
        heads: dict[str, list[str]] = {}
        for passage in passages:
            heads.setdefault(passage.doc_id, [])
            if len(heads[passage.doc_id]) < 2:
                heads[passage.doc_id].append(passage.text)
        self.head = {doc: " ".join(texts) for doc, texts in heads.items()}
        self.query_pid = {q.id: q.passage_id for q in queries}
        self.cache: dict[tuple[str, str], list[float]] = {}

    def features(self, qid: str, pid: str) -> list[float]:
        key = (qid, pid)
        if key not in self.cache:
            own = self.query_pid[qid]
            a, b = self.text[own], self.text[pid]
            ha, hb = self.head[self.doc[own]], self.head[self.doc[pid]]
            self.cache[key] = [_jaccard(_names(a), _names(b)), _jaccard(_numbers(a), _numbers(b)),
                               _jaccard(_content(a), _content(b)), _jaccard(_names(ha), _names(hb)),
                               _jaccard(_content(ha), _content(hb))]
        return self.cache[key]


def context_row(a: Answered, i: int, contexts: Contexts, names: Sequence[str]) -> list[float]:
    """Candidate ``i``'s row for a context regression: its ``names`` among :data:`FEATURES`, then the contexts'."""
    row = features(a, i)
    return [row[FEATURES.index(n)] for n in names if n in FEATURES] + contexts.features(a.qid, a.candidates[i].pid)


def fit_context(answered: Sequence[Answered], contexts: Contexts, reader: bool, folds: int = 5
                ) -> tuple[dict[tuple[str, int], float], Any]:
    """As :func:`fit_logistic`, over the encoder's features (``reader``: and the reader's) and the contexts'.
    Returns the out-of-fold probabilities and (the model, its feature names)."""
    import numpy as np

    names = [n for n in FEATURES if reader or not n.startswith(("reader", "on_reader"))] + list(CONTEXT_FEATURES)
    x = np.array([context_row(a, i, contexts, names) for a in answered for i in range(len(a.candidates))])
    probability, model = _cross_validated(answered, x, folds)
    return probability, (model, names)


def passage_best(a: Answered, c: Candidate, score: Callable[[Candidate], float]) -> bool:
    """Whether ``c`` has the highest ``score`` of the candidates in its passage."""
    return score(c) >= max(score(o) for o in a.candidates if o.pid == c.pid)


def members_by(rule: Callable[[Answered, int, Candidate], bool]) -> Callable[[Answered], list[int]]:
    return lambda a: [i for i, c in enumerate(a.candidates) if rule(a, i, c)]


def score_rule(answered: Sequence[Answered], today: bool | str, chosen: Callable[[Answered], list[int]] | None,
               validated_only: bool = True) -> dict[str, float]:
    """Mention P/R/F1 (micro and macro) and the other-half share of today's answer (``today``) or of the
    candidates ``chosen`` keeps. ``validated_only``: members outside the validated sentences, where ECB+ leaves
    mentions unannotated, are left out of the count (the targets all lie inside them)."""
    right = size = total = other = 0
    macro_p: list[float] = []
    macro_r: list[float] = []
    for a in answered:
        valid = set(a.validated_hits) if validated_only else {pid for pid in a.targets} | {c.pid for c in a.candidates}
        counted = {i for i, pid in enumerate(a.targets) if pid in valid}
        if today:
            listed = a.former if today == "former" and a.former is not None else a.today
            kept_today = [(t, pid) for t, pid in listed if pid in valid]
            aligned = [t for t, _ in kept_today]
            others = {c.pid for c in a.candidates if c.other_half}
            from_other = sum(1 for _, pid in kept_today if pid in others)
        else:
            kept = [i for i in (chosen(a) if chosen is not None else []) if a.candidates[i].pid in valid]
            aligned = [a.candidates[i].gold for i in kept]
            from_other = sum(1 for i in kept if a.candidates[i].other_half)
        hit = len({g for g in aligned if g is not None and g in counted})
        right, size, total, other = right + hit, size + len(aligned), total + len(counted), other + from_other
        macro_p.append(hit / len(aligned) if aligned else 1.0)
        if counted:
            macro_r.append(hit / len(counted))
    p = right / size if size else 0.0
    r = right / total if total else 0.0
    mp = sum(macro_p) / max(len(macro_p), 1)
    mr = sum(macro_r) / max(len(macro_r), 1)
    return {"P": 100 * p, "R": 100 * r, "F1": 100 * (2 * p * r / (p + r) if p + r else 0.0),
            "macro P": 100 * mp, "macro R": 100 * mr, "macro F1": 100 * (2 * mp * mr / (mp + mr) if mp + mr else 0.0),
            "members / query": size / max(len(answered), 1), "other half %": 100 * other / size if size else 0.0}


def rules(answered: Sequence[Answered], probability: dict[tuple[str, int], float], beta: float,
          with_pair: dict[tuple[str, int], float] | None = None,
          context: dict[str, dict[tuple[str, int], float]] | None = None) -> dict[str, Callable[[Answered], list[int]]]:
    """Every rule tried: a cut on each score (a grid), and one member per hit (the reader's span, the encoder's
    nearest) above a cut."""
    out: dict[str, Callable[[Answered], list[int]]] = {}
    cuts = [round(0.8 + 0.01 * step, 2) for step in range(18)]
    for cut in cuts:
        out[f"encoder: cosine (+β same lemma) >= {cut:g}"] = members_by(
            lambda a, i, c, cut=cut: c.cosine + beta * c.same_lemma >= cut)
    def encoder(c: Candidate) -> float:
        return c.cosine + beta * c.same_lemma

    def pair(c: Candidate) -> float:
        return c.pair or 0.0

    for cut in cuts:
        out[f"encoder: each passage's nearest, cosine (+β) >= {cut:g}"] = members_by(
            lambda a, i, c, cut=cut: encoder(c) >= cut and passage_best(a, c, encoder))
    for cut in (-2, -1, 0, 1, 2, 3, 4):
        out[f"reader: span score >= {cut:g}"] = members_by(lambda a, i, c, cut=cut: c.reader >= cut)
    for cut in (-2, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3):
        out[f"reader: its marked span, passage score >= {cut:g}"] = members_by(
            lambda a, i, c, cut=cut: c.on_reader_span and c.reader_passage >= cut)
    for cut in (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6):
        out[f"both (logistic, {len(FEATURES)} features) >= {cut:g}"] = members_by(
            lambda a, i, c, cut=cut: probability[(a.qid, i)] >= cut)
    for name, scores in (context or {}).items():
        for cut in (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6):
            out[f"{name} >= {cut:g}"] = members_by(lambda a, i, c, cut=cut, scores=scores: scores[(a.qid, i)] >= cut)
    if with_pair is None:
        return out

    pair_cuts = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    for cut in pair_cuts:
        out[f"pair scorer: p >= {cut:g}"] = members_by(lambda a, i, c, cut=cut: pair(c) >= cut)
    for cut in pair_cuts:
        out[f"pair scorer: each passage's best, p >= {cut:g}"] = members_by(
            lambda a, i, c, cut=cut: pair(c) >= cut and passage_best(a, c, pair))
    for cut in pair_cuts:
        out[f"encoder's nearest >= 0.84, and pair scorer p >= {cut:g}"] = members_by(
            lambda a, i, c, cut=cut: pair(c) >= cut and encoder(c) >= 0.84 and passage_best(a, c, encoder))
    for cut in (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7):
        out[f"all three (logistic, {len(FEATURES) + len(PAIR_FEATURES)} features) >= {cut:g}"] = members_by(
            lambda a, i, c, cut=cut: with_pair[(a.qid, i)] >= cut)
    return out


def table(rows: list[tuple[str, dict[str, float]]], marks: dict[str, str] | None = None) -> str:
    names = list(rows[0][1])
    lines = ["| rule | " + " | ".join(names) + " | |", "| --- |" + " ---: |" * len(names) + " --- |"]
    for label, values in rows:
        lines.append(f"| {label} | " + " | ".join(f"{values[n]:.2f}" if "query" in n else f"{values[n]:.1f}"
                                                for n in names) + f" | {(marks or {}).get(label, '')} |")
    return "\n".join(lines)


FORMER = "former: average linkage of each hit's nearest and the query at the encoder's τ"


def not_tuned(answered: Sequence[Answered], split: str) -> int:
    """The library's answer and the former one on a corpus nothing was chosen on (``--not-tuned SPLIT``)."""
    print(f"\n{split}: {len(answered):,} queries, k {K}; targets {sum(len(a.targets) for a in answered):,}, "
          f"candidates {sum(len(a.candidates) for a in answered):,}; ×100\n")
    print(table([(FORMER, score_rule(answered, "former", None)),
                 ("the library's answer (query --cluster, the engine)", score_rule(answered, True, None))]))
    ms = sum(a.seconds.get("today", 0.0) for a in answered) / max(len(answered), 1) * 1000
    print(f"\nms a query (mean): the engine's query with its answer {ms:.0f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--dataset", type=Path, required=True, help="with predicted_mentions.jsonl (`detect`)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--validated", type=Path, required=True,
                        help="the same corpus built with --validated-only: its sentences are where ECB+ is annotated")
    parser.add_argument("--max-queries", type=int, default=500, help="a seeded sample of each split's queries")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--test", action="store_true")
    parser.add_argument("--cost", type=int, default=0, help="time the answer on this many other dev queries")
    parser.add_argument("--not-tuned", default=None, metavar="SPLIT",
                        help="a corpus not tuned on: the library's answer and the former one on this split alone")
    parser.add_argument("--pair-scorer", type=Path, default=None,
                        help="a pair scorer (`train pair-scorer`): its rules are tried beside the others")
    args = parser.parse_args(argv)

    from corefsearch.datasets.dataset import Dataset, read_queries
    from corefsearch.reader.read import Reader

    args.work.mkdir(parents=True, exist_ok=True)
    engine = open_engine(args.index, args.dataset, args.device)
    reader = Reader.load(READER)
    scorer = None
    if args.pair_scorer is not None:
        from corefsearch.pair_scorer.model import PairScorer

        scorer = PairScorer.load(args.pair_scorer)
    passages = list(Dataset(args.dataset).passages())
    doc_ids = {p.id: p.doc_id for p in passages}
    # The validated dataset numbers its passages afresh: a sentence is known by its document and text.
    annotated = {(p.doc_id, p.text) for p in Dataset(args.validated).passages()}
    validated = {p.id for p in passages if (p.doc_id, p.text) in annotated}

    samples: dict[str, list[Any]] = {}

    def sample(split: str) -> list[Any]:
        if split not in samples:
            queries = read_queries(args.dataset / "queries" / f"{split}.jsonl")
            samples[split] = random.Random(13).sample(queries, min(args.max_queries, len(queries)))
        return samples[split]

    if args.not_tuned:
        return not_tuned(collect(engine, reader, sample(args.not_tuned), args.work / f"{args.not_tuned}.jsonl",
                                 doc_ids.__getitem__, validated, args.not_tuned), args.not_tuned)
    dev = collect(engine, reader, sample("dev"), args.work / "dev.jsonl", doc_ids.__getitem__, validated,
                  "dev", scorer)
    beta = float(engine.expander().encoder.config.lemma_weight or 0.0)
    probability, model = fit_logistic(dev)
    pair = scorer is not None and has_pairs(dev)
    with_pair, pair_model = fit_logistic(dev, pair=True) if pair else (None, None)
    contexts = Contexts(passages, [*sample("dev"), *(sample("test") if args.test else [])])
    context_models = {}
    context_dev = {}
    for reader_too in (False, True):
        scores, (fitted, names) = fit_context(dev, contexts, reader_too)
        label = f"contexts + encoder{' + reader' if reader_too else ''} (logistic, {len(names)} features)"
        context_dev[label], context_models[label] = scores, (fitted, names)
    tried = rules(dev, probability, beta, with_pair, context_dev)
    former = FORMER
    rows = [(former, score_rule(dev, "former", None))]
    rows += [(name, score_rule(dev, False, rule)) for name, rule in tried.items()]
    # The rule (set after reading this dev table, before any test read): the best micro F1; within 0.5 of it, a
    # rule of the encoder alone (no reader to load and run, no fitted weights to ship), the best of those.
    top = max(values["F1"] for _, values in rows[1:])
    near = [row for row in rows[1:] if row[1]["F1"] >= top - 0.5]
    best = max([row for row in near if row[0].startswith("encoder")] or near, key=lambda row: row[1]["F1"])[0]
    per_family = {}
    for name, values in rows[1:]:
        family = name.split(" >= ")[0]
        if family not in per_family or values["F1"] > per_family[family][1]["F1"]:
            per_family[family] = (name, values)
    print(f"\ndev: {len(dev):,} queries (seeded sample), k {K}; targets {sum(len(a.targets) for a in dev):,}, "
          f"candidates {sum(len(a.candidates) for a in dev):,}; scored on the validated sentences; ×100\n")
    print(table(rows, {best: "**chosen**", **{n: "best of its kind" for n, _ in per_family.values() if n != best}}))
    shown = list(dict.fromkeys([best, *(n for n, _ in per_family.values())]))
    distractors = [a for a in dev if a.distractor]
    print(f"\ndev, distractor subset ({len(distractors):,} queries whose top {K} holds the topic's other half):\n")
    print(table([(former, score_rule(distractors, "former", None))]
                + [(n, score_rule(distractors, False, tried[n])) for n in shown]))
    print("\ndev, every hit passage counted (ECB+ leaves mentions outside the validated sentences unannotated, so "
          "precision here is a lower bound):\n")
    print(table([(former, score_rule(dev, "former", None, validated_only=False))]
                + [(n, score_rule(dev, False, tried[n], validated_only=False)) for n in shown]))
    coefficients = dict(zip(FEATURES, model[-1].coef_[0].round(3).tolist(), strict=True))
    print(f"\nLogistic regression (all dev, standardised features): {coefficients}")
    if pair_model is not None:
        coefficients = dict(zip(FEATURES + PAIR_FEATURES, pair_model[-1].coef_[0].round(3).tolist(), strict=True))
        print(f"With the pair scorer: {coefficients}")
    for label, (fitted, names) in context_models.items():
        print(f"{label}: {dict(zip(names, fitted[-1].coef_[0].round(3).tolist(), strict=True))}")
    cost = {name: sum(a.seconds.get(name, 0.0) for a in dev) / len(dev) * 1000 for name in ("today", "encoder",
                                                                                           "reader", "pair")}
    print("ms a query (mean, 2 cores, the engine warm): the engine's query with its answer " + f"{cost['today']:.0f}"
          + f"; scoring every candidate by the encoder {cost['encoder']:.0f}; by the reader {cost['reader']:.0f}"
          + (f"; by the pair scorer {cost['pair']:.0f}" if pair else ""))
    if args.test:
        test = collect(engine, reader, sample("test"), args.work / "test.jsonl", doc_ids.__getitem__,
                       validated, "test", scorer)
        on_test = rules(test, {(a.qid, i): float(model.predict_proba([features(a, i)])[0, 1])
                               for a in test for i in range(len(a.candidates))}, beta,
                        None if pair_model is None else {
                            (a.qid, i): float(pair_model.predict_proba([features(a, i, True)])[0, 1])
                            for a in test for i in range(len(a.candidates))},
                        {label: {(a.qid, i): float(fitted.predict_proba([context_row(a, i, contexts, names)])[0, 1])
                                 for a in test for i in range(len(a.candidates))}
                         for label, (fitted, names) in context_models.items()})
        print(f"\ntest, once: {len(test):,} queries; scored on the validated sentences\n")
        test_rows = [(former, score_rule(test, "former", None)),
                     ("the library's answer (query --cluster, the engine)", score_rule(test, True, None))]
        test_rows += [(n, score_rule(test, False, on_test[n])) for n in shown]
        print(table(test_rows, {best: "dev's choice"}))
        subset = [a for a in test if a.distractor]
        print(f"\ntest, distractor subset ({len(subset):,} queries):\n")
        print(table([(former, score_rule(subset, "former", None)),
                     ("the library's answer", score_rule(subset, True, None)),
                     (best, score_rule(subset, False, on_test[best]))]))
        print("\ntest, every hit passage counted:\n")
        print(table([(former, score_rule(test, "former", None, validated_only=False)),
                     ("the library's answer", score_rule(test, True, None, validated_only=False))]))
        cost = {name: sum(a.seconds.get(name, 0.0) for a in test) / len(test) * 1000 for name in ("today",)}
        print(f"\nms a query (mean): the engine's query with its answer {cost['today']:.0f}")
    if args.cost:
        import statistics

        asked = {q.id for q in sample("dev")}
        others = [q for q in read_queries(args.dataset / "queries" / "dev.jsonl") if q.id not in asked]
        others = random.Random(7).sample(others, min(args.cost, len(others)))
        plain, answered, extra = [], [], []
        for query in others:  # each query first without its answer, then with it: the answer's own cost
            clock = time.perf_counter()
            engine.query(qid=query.id, k=K)
            plain.append(time.perf_counter() - clock)
            clock = time.perf_counter()
            engine.query(qid=query.id, k=K, cluster=True)
            answered.append(time.perf_counter() - clock)
            extra.append(answered[-1] - plain[-1])
        print(f"\nWarm cost on {len(others)} other dev queries (k {K}, 2 cores), ms: the query alone median "
              f"{1000 * statistics.median(plain):.0f}, mean {1000 * statistics.mean(plain):.0f}; with the answer "
              f"median {1000 * statistics.median(answered):.0f}, mean {1000 * statistics.mean(answered):.0f}; the "
              f"answer's own cost median {1000 * statistics.median(extra):.0f}, "
              f"mean {1000 * statistics.mean(extra):.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
