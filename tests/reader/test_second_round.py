"""The second search round (``corefsearch.search.second_round``, ``search --rounds 2``): N = 0 is the first round, an
expansion query is a query record like any other, the weighted fusion, the options' checks and their
round trip through the run's metadata; end to end with a tiny reader's spans and a tiny mention encoder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import flat, save_mention_encoder, saved_reader
from typer.testing import CliRunner

from corefsearch.base.errors import CorefSearchError, InputError
from corefsearch.base.schema import Hit, Query
from corefsearch.cli import app
from corefsearch.datasets.dataset import read_queries
from corefsearch.io.trec import read_run
from corefsearch.search.options import BACKGROUND_DEPTH, BACKGROUND_FROM, RRF_K, ExpansionOptions
from corefsearch.search.second_round import (
    EncoderExpansion,
    expansion_list,
    expansion_query,
    from_spans,
    fuse_rounds,
    head_and_tail,
    second_round,
)

runner = CliRunner()
QUERY = Query("q1", "d1-0", "The fire destroyed the mill .", 4, 8, "fire", "c1")


def hits(*ids: str) -> list[Hit]:
    return [Hit(pid, 10.0 - i) for i, pid in enumerate(ids)]


def test_fuse_rounds_weighs_the_second_round_and_leaves_out_the_querys_passage() -> None:
    first = hits("a", "b", "c")
    seconds = [hits("c", "d1-0", "e"), hits("c", "a")]
    fused = fuse_rounds(first, seconds, 1.0, 10, exclude="d1-0")
    score = {h.passage_id: h.score for h in fused}
    assert "d1-0" not in score
    assert score["c"] == pytest.approx(1 / (RRF_K + 3) + 0.5 * (1 / (RRF_K + 1) + 1 / (RRF_K + 1)))
    assert score["e"] == pytest.approx(0.5 / (RRF_K + 3))
    assert [h.passage_id for h in fused][:2] == ["c", "a"]
    # Weight 0, or no expansion: the first round's order.
    assert [h.passage_id for h in fuse_rounds(first, seconds, 0.0, 10)] == ["a", "b", "c"]
    assert [h.passage_id for h in fuse_rounds(first, [], 1.0, 10)] == ["a", "b", "c"]
    assert len(fuse_rounds(first, seconds, 1.0, 2)) == 2


class Recorder:
    """A retriever that answers every query with the same list (or its own, from ``answers``) and records
    what it was asked; its collection is the passages of the tests."""

    def __init__(self, answers: dict[str, list[Hit]] | None = None) -> None:
        self.asked: list[Query] = []
        self.answers = answers or {}

    def search(self, queries: list[Query], k: int):  # noqa: ANN201
        for query in queries:
            self.asked.append(query)
            yield query, self.answers.get(query.id, hits("x", "y"))[:k]

    def passage(self, passage_id: str) -> dict[str, str]:
        if passage_id not in {"a", "b", "c", "x", "y", "d1-0"}:
            raise InputError(f"passage {passage_id} is not in the index")
        return {"id": passage_id, "title": "", "text": ""}


def test_n_zero_is_the_first_round_and_an_expansion_query_is_a_query_record(tmp_path: Path) -> None:
    first = [(QUERY, hits("a", "b", "c"))]
    texts = {"a": "Smoke rose as the blaze spread .", "b": "Crews left .", "c": "no span here"}
    spans = {"a": (18, 23), "b": (0, 5), "c": (3, 3)}  # c: an empty span (a passage without tokens)
    retriever = Recorder()
    options = ExpansionOptions(rounds=2, expand=0)
    assert second_round(retriever, first, {"q1": from_spans(QUERY, first[0][1], spans, texts, 0)}, options, 10) \
        == first
    assert retriever.asked == []
    expansions = from_spans(QUERY, first[0][1], spans, texts, 3)
    assert [x.passage_id for x in expansions] == ["a", "b"]  # the empty span gives none
    blaze = expansions[0]
    assert (blaze.mention, blaze.text[blaze.start:blaze.end], blaze.cluster_id) == ("blaze", "blaze", "c1")
    path = tmp_path / "queries.jsonl"
    path.write_text("".join(json.dumps(x.to_json()) + "\n" for x in expansions))
    assert read_queries(path) == expansions  # the queries file format, read back as it is
    fused = second_round(retriever, first, {"q1": expansions},
                         ExpansionOptions(rounds=2, expand=2, weight=1.0, reciprocal=0, list_depth=0, head=0), 10)
    assert [q.id for q in retriever.asked] == ["q1>a", "q1>b"]
    assert {h.passage_id for h in fused[0][1]} == {"a", "b", "c", "x", "y"}
    assert expansion_query(QUERY, "p", "a b c", 2, 3).id == "q1>p"
    # An expansion's own passage heads its list, so the passages the second round starts from keep their support.
    assert [h.passage_id for h in expansion_list(blaze, hits("x", "a", "y"))] == ["a", "x", "y"]
    assert fused[0][1][0].passage_id == "a"


def test_the_reciprocal_test_keeps_the_expansions_that_find_the_querys_passage_again() -> None:
    first = [(QUERY, hits("a", "b", "c"))]
    texts = {"a": "Smoke rose as the blaze spread .", "b": "Crews left ."}
    expansions = from_spans(QUERY, first[0][1], {"a": (18, 23), "b": (0, 5)}, texts, 2)
    # q1>a finds the query's passage d1-0 second; q1>b never does.
    retriever = Recorder({"q1>a": hits("x", "d1-0", "y"), "q1>b": hits("y", "x", "c")})

    def fused(depth: int, query: Query = QUERY) -> list[str]:
        options = ExpansionOptions(rounds=2, expand=2, weight=1.0, reciprocal=depth, list_depth=0, head=0)
        return [h.passage_id for h in second_round(retriever, [(query, first[0][1])], {query.id: expansions},
                                                   options, 10)[0][1]]

    only_a = fuse_rounds(first[0][1], [expansion_list(expansions[0], retriever.answers["q1>a"])], 1.0, 10, "d1-0")
    both = fuse_rounds(first[0][1], [expansion_list(x, retriever.answers[x.id]) for x in expansions], 1.0, 10, "d1-0")
    assert fused(2) == [h.passage_id for h in only_a] != [h.passage_id for h in both]
    assert fused(1) == ["a", "b", "c"]  # neither finds it first: the first round stands
    assert fused(0) == [h.passage_id for h in both] and fused(3) == fused(2)
    # A query whose passage is not in the collection (an ad hoc query) has nothing to find again: no test.
    adhoc = Query("q1", "", QUERY.text, QUERY.start, QUERY.end, QUERY.mention, "")
    elsewhere = Query("q1", "other-0", QUERY.text, QUERY.start, QUERY.end, QUERY.mention, "")
    assert fused(1, adhoc) == fused(0, adhoc) and fused(1, elsewhere) == fused(0, elsewhere)
    assert "x" in fused(1, adhoc) and "x" in fused(1, elsewhere)


def test_the_list_depth_cuts_each_expansions_list_and_one_needs_no_search_without_the_reciprocal_test() -> None:
    first = [(QUERY, hits("a", "b", "c"))]
    texts = {"a": "Smoke rose as the blaze spread .", "b": "Crews left ."}
    expansions = {"q1": from_spans(QUERY, first[0][1], {"a": (18, 23), "b": (0, 5)}, texts, 2)}
    answers = {"q1>a": hits("x", "d1-0", "z"), "q1>b": hits("y", "x", "c")}

    def fused(depth: int, reciprocal: int = 0) -> tuple[list[str], int]:
        retriever = Recorder(answers)
        options = ExpansionOptions(rounds=2, expand=2, weight=1.0, reciprocal=reciprocal, list_depth=depth,
                                   head=0)
        ranked = second_round(retriever, first, expansions, options, 10)[0][1]
        return [h.passage_id for h in ranked], len(retriever.asked)

    def expected(depth: int) -> list[str]:
        lists = [expansion_list(x, answers[x.id])[:depth or None] for x in expansions["q1"]]
        return [h.passage_id for h in fuse_rounds(first[0][1], lists, 1.0, 10, "d1-0")]

    everything, searched = fused(0)  # 0: every passage of each list
    assert everything == expected(0) and searched == 2 and "x" in everything
    heads, searched = fused(1)  # each list is its expansion's own passage: nothing new, and no search
    assert heads == expected(1) and searched == 0 and set(heads) == {"a", "b", "c"}
    assert fused(2)[0] == expected(2) and "z" in everything and "z" not in fused(2)[0]
    # With the reciprocal test on, the expansions are still searched, for the test alone.
    tested, searched = fused(1, reciprocal=2)
    assert searched == 2 and tested == [h.passage_id for h in fuse_rounds(
        first[0][1], [expansion_list(expansions["q1"][0], [])], 1.0, 10, "d1-0")]


class FixedEncoder:
    """A mention encoder whose vectors are given: each mention's cosine to the query mention is chosen."""

    def __init__(self, cosines: dict[str, float]) -> None:
        self.cosines = cosines

    def encode(self, records: list) -> list:
        import numpy as np

        return [np.array([c, math.sqrt(1 - c * c)]) for c in (self.cosines[r.mention_id] for r in records)]


class FixedCandidates:
    """Candidate mentions given by hand: ``{mention id: passage id}``, all of the query's type."""

    name = "gold"

    def __init__(self, records: dict) -> None:
        self.records = records

    def of(self, passage_ids: list) -> dict:
        from corefsearch.search.candidates import Candidate

        found: dict = {}
        for record in self.records.values():
            if record.passage_id in passage_ids:
                found.setdefault(record.passage_id, []).append(Candidate(record, QUERY.type))
        return found

    def query_record(self, query: Query) -> object:
        return self.records[query.id]


def fixed_expansion(cosines: dict[str, float], passage_of: dict[str, str]) -> EncoderExpansion:
    from corefsearch.cluster.inputs import MentionRecord

    records = {m: MentionRecord(m, "c1", "d", None, p, "fire", 4, 8, QUERY.text, "")
               for m, p in {"q1": "d1-0", **passage_of}.items()}
    return EncoderExpansion(FixedEncoder({"q1": 1.0, **cosines}), FixedCandidates(records))


def test_the_margin_test_keeps_the_mentions_clearly_nearer_than_the_first_rounds_background() -> None:
    ranked = hits(*(f"p{i}" for i in range(1, 31)))  # p21 is the first passage of the background
    background = f"p{BACKGROUND_FROM + 1}"
    expansion = fixed_expansion({"m1": 0.95, "m2": 0.8, "mb": 0.9}, {"m1": "p1", "m2": "p2", "mb": background})

    def kept(margin: float | None, top: list[Hit] = ranked) -> list[str]:
        return [x.passage_id for x in expansion.expansions([(QUERY, top)], 5, None, margin)["q1"]]

    assert kept(None) == ["p1", "p2"]
    assert kept(0.0) == ["p1"]  # 0.95 beats the background's 0.9; 0.8 does not
    assert kept(0.06) == []
    assert kept(-0.1) == ["p1", "p2"]
    assert expansion.background([(QUERY, [h.passage_id for h in ranked[BACKGROUND_FROM:]])]) == \
        {"q1": pytest.approx(0.9)}
    # A first round with no mention in its background: nothing to compare with, so no test.
    assert kept(0.06, ranked[:BACKGROUND_FROM]) == ["p1", "p2"]
    # With the test on, the encoder's first round is searched to the background's depth; the run keeps k.
    on = ExpansionOptions(rounds=2, candidates="gold", margin=0.0)
    assert on.first_depth(10) == BACKGROUND_DEPTH and on.first_depth(500) == 500
    assert ExpansionOptions(rounds=2, candidates="detected").first_depth(10) == 10
    assert ExpansionOptions(rounds=2, margin=0.0).resolved(True).first_depth(10) == 10  # the reader's spans: no test
    assert ExpansionOptions(rounds=2, margin=0.0).resolved(False).first_depth(10) == BACKGROUND_DEPTH
    first = [(QUERY, ranked)]
    assert len(second_round(Recorder(), first, {"q1": []}, on, 10)[0][1]) == 10


def test_the_head_comes_from_the_lists_own_passages_and_the_tail_from_their_searches() -> None:
    first = [(QUERY, hits("a", "b", "c", "d"))]
    texts = {"c": "Smoke rose as the blaze spread .", "d": "Crews left ."}
    expansions = {"q1": from_spans(QUERY, first[0][1], {"c": (18, 23), "d": (0, 5)}, texts, 4)}
    # Both searches rank x and y first, so with whole lists they would take the top ranks.
    answers = {"q1>c": hits("x", "y", "a"), "q1>d": hits("x", "y", "b")}

    def fused(head: int, depth: int = 0, k: int = 10) -> list[Hit]:
        options = ExpansionOptions(rounds=2, expand=4, weight=4.0, reciprocal=0, list_depth=depth, head=head)
        return second_round(Recorder(answers), first, expansions, options, k)[0][1]

    lists = [expansion_list(x, answers[x.id]) for x in expansions["q1"]]
    whole = [h.passage_id for h in fuse_rounds(first[0][1], lists, 4.0, 10, "d1-0")]
    heads = [h.passage_id for h in fuse_rounds(first[0][1], [x[:1] for x in lists], 4.0, 10, "d1-0")]
    assert [h.passage_id for h in fused(0)] == whole and whole[:2] != heads[:2]
    two = fused(2)
    assert [h.passage_id for h in two][:2] == heads[:2] == ["c", "d"]  # the passages whose mention was kept
    assert [h.passage_id for h in two][2:] == [p for p in whole if p not in heads[:2]]
    assert [h.score for h in two] == sorted((h.score for h in two), reverse=True)  # scores follow the ranks
    assert two[1].score - two[2].score >= 1e-6  # apart at a run file's 6 decimals
    assert {h.passage_id for h in fused(10)} == set(whole)  # a head as deep as the run: only the order changes
    assert [h.passage_id for h in fused(10)][:4] == heads[:4]
    assert len(fused(2, k=3)) == 3
    # A head that fills the run (k passages of the first round, head ≥ k) leaves no rank for the searches' passages:
    # nothing is searched, and the run is the heads' order.
    for head, k, searched in ((4, 4, 0), (5, 4, 0), (3, 4, 2), (4, 5, 2)):
        retriever = Recorder(answers)
        options = ExpansionOptions(rounds=2, expand=4, weight=4.0, reciprocal=0, list_depth=0, head=head)
        ranked = second_round(retriever, first, expansions, options, k)[0][1]
        assert len(retriever.asked) == searched
        if not searched:
            assert [h.passage_id for h in ranked] == heads[:k]
    with_test = ExpansionOptions(rounds=2, expand=4, weight=4.0, reciprocal=3, list_depth=0, head=10)
    retriever = Recorder(answers)
    second_round(retriever, first, expansions, with_test, 4)
    assert len(retriever.asked) == 2  # searched for the reciprocal test
    assert [h.passage_id for h in fused(2, depth=1)] == heads  # lists one deep: the head is all there is
    assert head_and_tail(first[0][1], [], 4.0, 10, "d1-0", 2) == fuse_rounds(first[0][1], [], 4.0, 10, "d1-0")


def test_expansion_options_are_checked_and_round_trip_through_the_run_metadata(tmp_path: Path) -> None:
    for options, message in ((ExpansionOptions(rounds=3), "--rounds must be 1 or 2"),
                             (ExpansionOptions(rounds=2, expand=-1), "--expand must not be negative"),
                             (ExpansionOptions(rounds=2, weight=math.nan), "--expand-weight"),
                             (ExpansionOptions(rounds=2, candidates="bm25"), "--candidates must be one of"),
                             (ExpansionOptions(rounds=2, min_similarity=1.5), "--expand-min-similarity is a cosine"),
                             (ExpansionOptions(rounds=2, reciprocal=-1), "--expand-reciprocal must not be negative"),
                             (ExpansionOptions(rounds=2, margin=2.5), "--expand-margin is a difference"),
                             (ExpansionOptions(rounds=2, list_depth=-1), "--expand-list-depth must not be negative"),
                             (ExpansionOptions(rounds=2, head=-1), "--expand-head must not be negative"),
                             (ExpansionOptions(rounds=2, candidates="reader"), "--candidates reader takes the spans"),
                             (ExpansionOptions(rounds=2, candidates="gold", detector="heuristic"),
                              "--detector finds the candidates of --candidates detected"),
                             (ExpansionOptions(rounds=2), "add --mention-encoder DIR"),
                             (ExpansionOptions(rounds=2, candidates="gold", encoder=tmp_path / "nothing"),
                              "no such model folder")):
        with pytest.raises(CorefSearchError, match=message):
            options.validate(has_reader=False)
    options = ExpansionOptions(rounds=2, expand=4, weight=0.75, candidates="gold", encoder=tmp_path,
                               min_similarity=0.8, reciprocal=3, margin=0.02, list_depth=0, head=10)
    recorded = json.loads(json.dumps(options.describe()))
    assert recorded["background_ranks"] == [BACKGROUND_FROM + 1, BACKGROUND_DEPTH]
    assert ExpansionOptions.from_metadata(recorded) == \
        ExpansionOptions(2, 4, 0.75, "gold", None, tmp_path.resolve(), 0.8, 3, 0.02, 0, 10)
    assert recorded["candidates"] == "gold" and recorded["source"] == "encoder"
    # a run written before --candidates: its encoder's candidates were the annotated mentions
    assert ExpansionOptions.from_metadata({**recorded, "candidates": None}).candidates == "gold"
    del recorded["reciprocal"], recorded["margin"], recorded["list_depth"], recorded["head"]  # a run from before them
    assert ExpansionOptions.from_metadata(recorded).reciprocal == 0
    assert ExpansionOptions.from_metadata(recorded).margin is None
    assert ExpansionOptions.from_metadata(recorded).list_depth == 0  # every passage of each list, as then
    assert ExpansionOptions.from_metadata(recorded).head == 0
    with_reader = ExpansionOptions(rounds=2, expand=1, weight=2.0).resolved(True)
    assert with_reader.candidates == "reader" and with_reader.describe()["source"] == "reader"
    assert ExpansionOptions.from_metadata(with_reader.describe()).weight == 2.0


def search(index: Path, dataset: Path, out: Path, *options: str) -> dict:
    result = runner.invoke(app, ["search", "--index", str(index), "--queries", str(dataset / "queries" / "dev.jsonl"),
                                 "--out", str(out), "--k", "10", "--query-format", "mention", "--device", "cpu",
                                 *options])
    assert result.exit_code == 0, result.output
    return json.loads(Path(f"{out}.meta.json").read_text())


def test_search_with_a_second_round_from_the_readers_spans_or_the_mention_encoder(
        tiny_base: Path, tiny_dataset: Path, tiny_index: Path, tmp_path: Path) -> None:
    reader = saved_reader(tiny_base, tmp_path / "reader")
    encoder = save_mention_encoder(tiny_base, tmp_path / "encoder")
    with_reader = ["--reader", str(reader), "--rerank-k", "5"]
    one = search(tiny_index, tiny_dataset, tmp_path / "one.trec", *with_reader)
    search(tiny_index, tiny_dataset, tmp_path / "plain.trec")
    zero = search(tiny_index, tiny_dataset, tmp_path / "zero.trec", *with_reader, "--rounds", "2", "--expand", "0")
    assert read_run(tmp_path / "zero.trec") == read_run(tmp_path / "one.trec")  # N = 0: the first round
    assert zero["expansion"]["expand"] == 0 and "expansion" not in one
    two = search(tiny_index, tiny_dataset, tmp_path / "two.trec", *with_reader, "--rounds", "2", "--expand", "2",
                 "--expand-weight", "1")
    assert two["expansion"]["source"] == "reader" and two["expansion"]["queries"] > 0
    assert two["expansion"]["candidates"] == "reader" and "passages_without_candidates" in two["expansion"]
    assert ExpansionOptions.from_metadata(two["expansion"]) == ExpansionOptions(2, 2, 1.0, "reader", None, None, None,
                                                                               order="gate")
    assert two["tag"].endswith("+round2-reader2")
    run = read_run(tmp_path / "two.trec")
    queries = {q.id: q for q in read_queries(tiny_dataset / "queries" / "dev.jsonl")}
    for qid, scores in run.items():
        assert queries[qid].passage_id not in scores and 0 < len(scores) <= 10
    # By default the mention encoder picks among detected mentions: the heuristic detector, run on the top passages.
    encoded = search(tiny_index, tiny_dataset, tmp_path / "enc.trec", "--rounds", "2", "--expand", "3",
                     "--mention-encoder", str(encoder), "--expand-min-similarity", "-1")
    assert encoded["expansion"]["source"] == "encoder" and encoded["expansion"]["encoder"] == str(encoder.resolve())
    assert encoded["expansion"]["candidates"] == "detected" and encoded["expansion"]["detector"] == "heuristic"
    assert encoded["expansion"]["detected"] == "at query time"
    assert encoded["expansion"]["min_similarity"] == -1 and encoded["expansion"]["queries"] > 0
    assert read_run(tmp_path / "enc.trec").keys() == run.keys()
    # The annotated mentions only when asked for, and recorded so.
    gold = search(tiny_index, tiny_dataset, tmp_path / "gold.trec", "--rounds", "2", "--expand", "3",
                  "--mention-encoder", str(encoder), "--expand-min-similarity", "-1", "--candidates", "gold")
    assert gold["expansion"]["candidates"] == "gold" and "upper bound" in gold["expansion"]["note"]
    assert gold["expansion"]["queries"] > 0
    # A gate no mention passes: no expansion, so the first round as it is, and said.
    said = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries",
                               str(tiny_dataset / "queries" / "dev.jsonl"), "--out", str(tmp_path / "gated.trec"),
                               "--k", "10", "--query-format", "mention", "--device", "cpu", "--rounds", "2",
                               "--expand", "3", "--mention-encoder", str(encoder), "--expand-min-similarity", "1"])
    assert said.exit_code == 0 and "found no detected candidate mention of their type" in flat(said.output)
    assert "their second round is their first" in flat(said.output)
    gated = json.loads(Path(f"{tmp_path / 'gated.trec'}.meta.json").read_text())
    assert gated["expansion"]["queries"] == 0 and gated["expansion"]["queries_without_candidates"] > 0
    assert read_run(tmp_path / "gated.trec") == read_run(tmp_path / "plain.trec")


def test_second_round_errors_are_one_line(tiny_dataset: Path, tiny_index: Path, tmp_path: Path) -> None:
    queries = tiny_dataset / "queries" / "dev.jsonl"
    base = ["search", "--index", str(tiny_index), "--queries", str(queries), "--out", str(tmp_path / "r.trec")]
    for extra, message in ((["--expand", "2"], "--expand: the second round's options; add --rounds 2"),
                           (["--expand-min-similarity", "0.5"], "--expand-min-similarity: the second round's"),
                           (["--candidates", "gold"], "--candidates: the second round's"),
                           (["--rounds", "2"], "add --mention-encoder DIR"),
                           (["--rounds", "2", "--candidates", "reader"], "--candidates reader takes the spans"),
                           (["--rounds", "2", "--candidates", "bm25"], "--candidates must be one of"),
                           (["--rounds", "3"], "--rounds must be 1 or 2")):
        result = runner.invoke(app, [*base, *extra])
        assert result.exit_code == 1 and message in flat(result.output), result.output
        assert "Traceback" not in result.output and not (tmp_path / "r.trec").exists()


def test_a_query_cluster_is_scored_by_b_cubed_against_its_gold_cluster() -> None:
    from corefsearch.evaluate.query_clusters import answer_mentions, query_b_cubed

    cluster_of = {"q": "fire", "m2": "fire", "m3": "fire", "o1": "other"}
    members = {"fire": ["q", "m2", "m3"], "other": ["o1"]}
    passages = {"p2": [("m2", 0, 5), ("o1", 10, 15)], "p3": [("m3", 3, 8)], "px": []}
    spans = {("q", "p2"): (1, 4), ("q", "p3"): (3, 8), ("q", "px"): (0, 2)}
    assert answer_mentions("q", [], spans, passages) == {"q"}  # the query mention is always in its answer
    perfect = query_b_cubed("q", answer_mentions("q", ["p2", "p3"], spans, passages), cluster_of, members)
    assert perfect == {"B3 P": 1.0, "B3 R": 1.0, "B3 F1": 1.0}
    alone = query_b_cubed("q", {"q"}, cluster_of, members)
    assert alone["B3 P"] == 1.0 and alone["B3 R"] == pytest.approx(1 / 3)
    # A span over another event's mention, and one over no gold mention, lower precision only.
    noisy = answer_mentions("q", ["p2", "p3", "px"], {**spans, ("q", "p2"): (11, 14)}, passages)
    assert noisy == {"q", "o1", "m3", "px:0-2"}
    score = query_b_cubed("q", noisy, cluster_of, members)
    assert score["B3 P"] == pytest.approx((2 / 4 * 2 + 1 / 4 + 1 / 4) / 4)
    assert score["B3 R"] == pytest.approx((2 / 3 * 2 + 1 / 3) / 3)


def test_evaluate_cluster_k_adds_per_query_b_cubed(tiny_base: Path, tiny_dataset: Path, tiny_index: Path,
                                                   tmp_path: Path) -> None:
    reader = saved_reader(tiny_base, tmp_path / "reader")
    out = tmp_path / "run.trec"
    search(tiny_index, tiny_dataset, out, "--reader", str(reader), "--rerank-k", "5")
    base = ["evaluate", str(out), "--qrels", str(tiny_dataset / "qrels" / "dev.txt"), "--spans",
            f"{out}.spans.jsonl", "--dataset", str(tiny_dataset), "--output-format", "json"]
    result = runner.invoke(app, [*base, "--cluster-k", "3"])
    assert result.exit_code == 0, result.output
    metrics = next(iter(json.loads(result.stdout).values()))
    for name in ("cluster B3 P@3", "cluster B3 R@3", "cluster B3 F1@3"):
        assert 0 <= metrics[name] <= 1
    result = runner.invoke(app, ["evaluate", str(out), "--qrels", str(tiny_dataset / "qrels" / "dev.txt"),
                                 "--cluster-k", "3"])
    assert result.exit_code == 1 and "--cluster-k scores the mentions a run's spans mark" in flat(result.output)
    result = runner.invoke(app, [*base, "--cluster-k", "0"])
    assert result.exit_code == 1 and "--cluster-k must be at least 1" in flat(result.output)


def test_query_answers_with_a_second_round_and_as_a_cluster_holding_the_query_mention(
        tiny_base: Path, tiny_dataset: Path, tiny_index: Path, tmp_path: Path) -> None:
    reader = saved_reader(tiny_base, tmp_path / "reader")
    encoder = save_mention_encoder(tiny_base, tmp_path / "encoder")
    qid = read_queries(tiny_dataset / "queries" / "dev.jsonl")[0].id
    base = ["query", "--index", str(tiny_index), "--dataset", str(tiny_dataset), "--qid", qid, "--query-format",
            "mention", "--device", "cpu", "--k", "5", "--json"]
    one = runner.invoke(app, [*base, "--reader", str(reader), "--rerank-k", "5"])
    assert one.exit_code == 0, one.output
    two = runner.invoke(app, [*base, "--reader", str(reader), "--rerank-k", "5", "--rounds", "2", "--expand", "2"])
    assert two.exit_code == 0, two.output
    answer = json.loads(two.output)
    assert answer["expansion"]["source"] == "reader" and len(answer["expansion"]["queries"]) <= 2
    assert "expansion" not in json.loads(one.output)
    clustered = runner.invoke(app, [*base, "--reader", str(reader), "--rerank-k", "5", "--cluster",
                                    "--mention-encoder", str(encoder)])
    assert clustered.exit_code == 0, clustered.output
    cluster = json.loads(clustered.output)["cluster"]
    assert cluster["size"] == 1 + sum(len(d["mentions"]) for d in cluster["documents"])  # the query mention's own
    assert cluster["threshold"] == 0.5
    for mention in [m for d in cluster["documents"] for m in d["mentions"]] + cluster["near_misses"]:
        assert mention["text"][mention["start"]:mention["end"]] == mention["mention"]
    # Without a reader, the encoder marks the mentions (detected in the top passages) for both.
    encoded = runner.invoke(app, [*base, "--cluster", "--rounds", "2", "--mention-encoder", str(encoder)])
    assert encoded.exit_code == 0, encoded.output
    expansion = json.loads(encoded.output)["expansion"]
    assert expansion["source"] == "encoder" and expansion["candidates"] == "detected"
    assert expansion["detector"] == "heuristic" and "passages_without_candidates" in expansion
    table = runner.invoke(app, [*base[:-1], "--cluster", "--mention-encoder", str(encoder)])
    assert table.exit_code == 0 and "The query mention's cluster:" in table.output
    refused = runner.invoke(app, [*base, "--cluster"])
    assert refused.exit_code == 1 and "--mention-encoder DIR" in flat(refused.output)


def test_the_api_answers_as_a_cluster_and_with_a_second_round(tiny_base: Path, tiny_dataset: Path, tiny_index: Path,
                                                              tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from corefsearch.reader.rerank import ReaderOptions
    from corefsearch.search.engine import SearchEngine
    from corefsearch.search.options import RetrievalOptions, SearchOptions
    from corefsearch.serve.app import create_app
    from corefsearch.sparse.search import BM25Options

    reader = saved_reader(tiny_base, tmp_path / "reader")
    encoder = save_mention_encoder(tiny_base, tmp_path / "encoder")
    engine = SearchEngine.open(tiny_index, SearchOptions(
        bm25=BM25Options(query_format="mention"), retrieval=RetrievalOptions("bm25", device="cpu"),
        reader=ReaderOptions(reader, 5, device="cpu"), expansion=ExpansionOptions(encoder=encoder)), tiny_dataset)
    qid = read_queries(tiny_dataset / "queries" / "dev.jsonl")[0].id
    with TestClient(create_app(engine, threads=1)) as client:
        assert client.get("/info").json()["mention_encoder"] == str(encoder.resolve())
        answer = client.post("/search", json={"qid": qid, "k": 5, "cluster": True, "rounds": 2}).json()
        assert answer["cluster"]["size"] >= 1 and answer["expansion"]["rounds"] == 2
        plain = client.post("/search", json={"qid": qid, "k": 5}).json()
        assert "cluster" not in plain and "expansion" not in plain
        bad = client.post("/search", json={"qid": qid, "rounds": 3})
        assert bad.status_code == 400 and "rounds must be 1 or 2" in bad.json()["detail"]
