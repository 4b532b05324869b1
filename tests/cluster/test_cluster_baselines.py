"""corefsearch cluster --method lemma|singletons: the baselines, their scopes, the topic field
(ECB+ and generic), the output files, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import NEWS_DOCUMENTS, NewsCorpus, partition, read_clusters, write_jsonl
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Passage
from corefsearch.cli import app
from corefsearch.cluster.output import conll_lines
from corefsearch.cluster.run import cluster_dataset
from corefsearch.cluster.topics import predicted_topics
from corefsearch.datasets.build import BuildOptions, build_dataset
from corefsearch.datasets.dataset import Dataset
from corefsearch.datasets.generic import read_generic

runner = CliRunner(env={"COLUMNS": "250"})
ALL_TEST = BuildOptions(split_ratios=(0.0, 0.0, 1.0))  # every cluster in the test split


def _build(folder: Path, out: Path) -> Path:
    build_dataset(read_generic(folder), out, ALL_TEST, source_name=str(folder))
    return out


# --- the news corpus: singletons and lemma ------------------------------------------------------------


def test_lemma_groups_mentions_with_the_same_head_lemma(news_corpus: NewsCorpus, tmp_path: Path) -> None:
    dataset = _build(news_corpus.folder, tmp_path / "ds")
    summary = cluster_dataset(dataset, tmp_path / "lemma.jsonl", method="lemma", scope="corpus")
    # "flooding"/"flood," share the lemma flood, the two "earthquake"s theirs; "quake" is another word,
    # and the adjectival "Evacuated residents" has the lemma "evacuated", not the verb's "evacuate".
    assert partition(read_clusters(tmp_path / "lemma.jsonl")) == {
        frozenset({"flooding", "flood"}), frozenset({"earthquake", "earthquake-2"}), frozenset({"quake"}),
        frozenset({"overflowed"}), frozenset({"evacuated"}), frozenset({"evacuated-2"}), frozenset({"deployed"}),
        frozenset({"aftershocks"}), frozenset({"rattled"})}
    assert (summary.mentions, summary.clusters, summary.groups) == (11, 9, 1)
    assert read_clusters(tmp_path / "lemma.jsonl")["flood"] == "corpus/event/flood"


def test_singletons_puts_every_mention_alone(news_corpus: NewsCorpus, tmp_path: Path) -> None:
    dataset = _build(news_corpus.folder, tmp_path / "ds")
    summary = cluster_dataset(dataset, tmp_path / "single.jsonl", method="singletons", scope="corpus")
    assignment = read_clusters(tmp_path / "single.jsonl")
    assert set(assignment) == set(news_corpus.mentions)
    assert len(set(assignment.values())) == len(assignment) == summary.clusters == 11


def test_lemma_keeps_events_and_entities_apart(tmp_path: Path) -> None:
    text = "Police arrested the protest leader. The arrest of the leader sparked a protest."
    folder = tmp_path / "typed"
    write_jsonl(folder / "corpus.jsonl", [{"doc_id": "d1", "text": text}])
    spans = [("m1", text.index("protest"), "protest-e", "event"), ("m2", text.rindex("protest"), "protest-x", "entity")]
    mentions = [{"mention_id": m, "doc_id": "d1", "start": start, "end": start + len("protest"), "cluster_id": c,
                 "type": kind} for m, start, c, kind in spans]
    write_jsonl(folder / "mentions.jsonl", mentions)
    with pytest.warns(UserWarning, match="the dataset has no queries"):  # single-mention clusters: nothing to search
        dataset = _build(folder, tmp_path / "ds")
    cluster_dataset(dataset, tmp_path / "c.jsonl", method="lemma", scope="corpus")
    assert read_clusters(tmp_path / "c.jsonl") == {"m1": "corpus/event/protest", "m2": "corpus/entity/protest"}


# --- scopes --------------------------------------------------------------------------------------------

# Two documents about one bank raid in Dallas (topic "raid") and one about a hacked hospital
# (topic "hack"); "attacked"/"attack"/"attack" share the lemma attack across the topics.
TOPIC_DOCUMENTS = [
    {"doc_id": "raid-1", "topic": "raid", "text": "Gunmen attacked a bank in Dallas, Texas on Monday."},
    {"doc_id": "raid-2", "topic": "raid", "text": "The Dallas bank attack in Texas left two bank guards wounded."},
    {"doc_id": "hack-1", "topic": "hack", "text": "Hackers launched an attack on a Berlin hospital network."},
]
TOPIC_MENTIONS = [("raid-1-attack", "raid-1", "attacked", "raid"), ("raid-2-attack", "raid-2", "attack", "raid"),
                  ("hack-1-attack", "hack-1", "attack", "hack")]


@pytest.fixture
def topic_dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "topics"
    texts = {d["doc_id"]: d["text"] for d in TOPIC_DOCUMENTS}
    write_jsonl(folder / "corpus.jsonl", TOPIC_DOCUMENTS)
    write_jsonl(folder / "mentions.jsonl", [
        {"mention_id": m, "doc_id": d, "start": texts[d].index(w), "end": texts[d].index(w) + len(w), "cluster_id": c}
        for m, d, w, c in TOPIC_MENTIONS])
    return _build(folder, tmp_path / "topic-ds")


def test_generic_topic_is_kept_on_passages(topic_dataset: Path) -> None:
    topics = {p.doc_id: p.topic for p in Dataset(topic_dataset).passages()}
    assert topics == {"raid-1": "raid", "raid-2": "raid", "hack-1": "hack"}


@pytest.mark.parametrize(("scope", "expected", "groups"), [
    ("topic", {frozenset({"raid-1-attack", "raid-2-attack"}), frozenset({"hack-1-attack"})}, 2),
    ("predicted-topic", {frozenset({"raid-1-attack", "raid-2-attack"}), frozenset({"hack-1-attack"})}, 2),
    ("corpus", {frozenset({"raid-1-attack", "raid-2-attack", "hack-1-attack"})}, 1),
])
def test_scope_limits_lemma_matching(topic_dataset: Path, tmp_path: Path, scope: str,
                                     expected: set[frozenset[str]], groups: int) -> None:
    summary = cluster_dataset(topic_dataset, tmp_path / "c.jsonl", method="lemma", scope=scope)
    assert partition(read_clusters(tmp_path / "c.jsonl")) == expected
    assert summary.groups == groups


def test_topic_scope_names_clusters_after_the_gold_topic(topic_dataset: Path, tmp_path: Path) -> None:
    cluster_dataset(topic_dataset, tmp_path / "c.jsonl", method="lemma", scope="topic")
    assert read_clusters(tmp_path / "c.jsonl") == {"raid-1-attack": "raid/event/attack",
                                               "raid-2-attack": "raid/event/attack",
                                               "hack-1-attack": "hack/event/attack"}


def test_predicted_topics_follow_the_threshold() -> None:
    texts = {d["doc_id"]: d["text"] for d in TOPIC_DOCUMENTS}
    assert predicted_topics(texts) == {"hack-1": "p1", "raid-1": "p2", "raid-2": "p2"}
    assert len(set(predicted_topics(texts, threshold=1e-6).values())) == 3  # nothing merges
    assert set(predicted_topics(texts, threshold=2.0).values()) == {"p1"}  # everything merges
    assert predicted_topics({"only": "one document"}) == {"only": "p1"}
    with pytest.raises(InputError, match="--topic-threshold"):
        predicted_topics(texts, threshold=0)


def test_topic_threshold_is_only_for_predicted_topics(topic_dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--scope predicted-topic"):
        cluster_dataset(topic_dataset, tmp_path / "c.jsonl", scope="topic", topic_threshold=0.5)
    cluster_dataset(topic_dataset, tmp_path / "c.jsonl", scope="predicted-topic", topic_threshold=1e-6)
    assert len(set(read_clusters(tmp_path / "c.jsonl").values())) == 3


# --- ECB+ ----------------------------------------------------------------------------------------------


def test_ecbplus_passages_record_their_topic(subset_dataset: Path) -> None:
    passages = list(Dataset(subset_dataset).passages())
    assert {p.topic for p in passages} == {"36", "37"}
    assert all(p.doc_id.split("_")[0] == p.topic for p in passages)


def test_ecbplus_lemma_clusters_within_topics(subset_dataset: Path, tmp_path: Path) -> None:
    by_topic = cluster_dataset(subset_dataset, tmp_path / "topic.jsonl", method="lemma", scope="topic")
    whole = cluster_dataset(subset_dataset, tmp_path / "corpus.jsonl", method="lemma", scope="corpus")
    topic_clusters, corpus_clusters = read_clusters(tmp_path / "topic.jsonl"), read_clusters(tmp_path / "corpus.jsonl")
    gold = {m for line in (subset_dataset / "clusters.jsonl").read_text().splitlines()
            for m in json.loads(line)["mention_ids"]}
    assert set(topic_clusters) == set(corpus_clusters) == gold
    assert by_topic.groups == 2 and whole.groups == 1
    for mention_id, cluster_id in topic_clusters.items():
        assert cluster_id.split("/")[0] == mention_id.split("_")[0]  # "36_1ecb_m3" is clustered in topic 36
    # Within a topic the clusters are the same as over the corpus, split by topic.
    assert partition(topic_clusters) == {frozenset(g & {m for m in gold if m.startswith(f"{t}_")})
                                          for g in partition(corpus_clusters) for t in ("36", "37")} - {frozenset()}
    assert 2 <= by_topic.clusters < len(gold)


# --- output files ----------------------------------------------------------------------------------------


def test_conll_file_is_one_pseudo_document(topic_dataset: Path, tmp_path: Path) -> None:
    cluster_dataset(topic_dataset, tmp_path / "c.jsonl", method="lemma", scope="topic", conll=tmp_path / "c.conll")
    assert (tmp_path / "c.conll").read_text(encoding="utf-8") == (
        "#begin document (all); part 000\n"
        "all\t0\t0\thack-1-attack\t(1)\n"
        "all\t0\t1\traid-1-attack\t(2)\n"
        "all\t0\t2\traid-2-attack\t(2)\n"
        "#end document\n")
    assert [json.loads(line)["mention_id"] for line in (tmp_path / "c.jsonl").read_text().splitlines()] == [
        "hack-1-attack", "raid-1-attack", "raid-2-attack"]


def test_conll_lines_number_clusters_in_order_of_first_mention() -> None:
    lines = list(conll_lines({"b": "x", "a": "y", "c": "y"}, document="doc"))
    assert lines[1:4] == ["doc\t0\t0\ta\t(1)\n", "doc\t0\t1\tb\t(2)\n", "doc\t0\t2\tc\t(1)\n"]


def test_cli_cluster_writes_both_files(topic_dataset: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["cluster", str(topic_dataset), "--out", str(tmp_path / "c.jsonl"), "--method",
                                 "singletons", "--scope", "corpus", "--conll", str(tmp_path / "c.conll")])
    assert result.exit_code == 0, result.output
    assert "Clustered 3 mentions into 3 clusters" in result.output
    assert len(read_clusters(tmp_path / "c.jsonl")) == 3
    assert (tmp_path / "c.conll").read_text().count("\n") == 5
    assert not list(tmp_path.glob(".c.*"))  # no lock or temporary file left


# --- bad input -----------------------------------------------------------------------------------------------


def _cli_error(*args: object) -> str:
    result = runner.invoke(app, ["cluster", *(str(a) for a in args)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


def test_split_without_mentions_is_an_error(topic_dataset: Path, tmp_path: Path) -> None:
    message = _cli_error(topic_dataset, "--out", tmp_path / "c.jsonl", "--method", "lemma", "--split", "dev")
    assert "the split 'dev' has no mentions to cluster (it has clusters in test)" in message
    assert not (tmp_path / "c.jsonl").exists()


def test_dataset_without_topics_and_scope_topic_is_an_error(news_corpus: NewsCorpus, tmp_path: Path) -> None:
    dataset = _build(news_corpus.folder, tmp_path / "ds")  # as datasets built before topics were recorded
    assert "topic" not in json.loads((dataset / "passages.jsonl").read_text().splitlines()[0])
    for method in ("lemma", "singletons"):
        message = _cli_error(dataset, "--out", tmp_path / "c.jsonl", "--method", method, "--scope", "topic")
        assert "records no topic, which --scope topic needs: rebuild the dataset" in message
    assert not (tmp_path / "c.jsonl").exists()


def test_bad_options_and_outputs(topic_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    assert "--method must be one of lemma, singletons, gold, encoder" in _cli_error(topic_dataset, "--out", out,
                                                                                 "--method", "oracle")
    assert "--scope must be one of topic, predicted-topic, corpus" in _cli_error(
        topic_dataset, "--out", out, "--method", "lemma", "--scope", "world")
    assert "--split must be one of" in _cli_error(topic_dataset, "--out", out, "--method", "lemma", "--split", "x")
    assert "--conll" in _cli_error(topic_dataset, "--out", out, "--method", "lemma", "--conll", out)
    assert "the input DATASET" in _cli_error(topic_dataset, "--out", topic_dataset / "clusters.jsonl", "--method",
                                             "lemma")
    assert "is not a corefsearch dataset" in _cli_error(tmp_path / "none", "--out", out, "--method", "lemma")
    assert not out.exists()


@pytest.mark.parametrize(("topic", "why"), [("", "field 'topic' must be a non-empty string or integer"),
                                            ([1], "field 'topic' must be a non-empty string or integer"),
                                            (True, "field 'topic' must be a non-empty string or integer")])
def test_generic_topic_is_checked(tmp_path: Path, topic: object, why: str) -> None:
    folder = tmp_path / "bad"
    write_jsonl(folder / "corpus.jsonl", [NEWS_DOCUMENTS[0], {**NEWS_DOCUMENTS[1], "topic": topic}])
    write_jsonl(folder / "mentions.jsonl", [])
    with pytest.raises(InputError, match=rf"corpus.jsonl:2: document flood-2: {why}"):
        list(read_generic(folder))


def test_passage_topic_round_trip() -> None:
    record = {"id": "p", "doc_id": "d", "title": "", "text": "t", "mentions": [], "split": None}
    assert Passage.from_json(record).topic is None
    assert "topic" not in Passage.from_json(record).to_json()  # datasets without topics stay as they were
    assert Passage.from_json({**record, "topic": 36}).to_json()["topic"] == "36"
    with pytest.raises(InputError, match="field 'topic'"):
        Passage.from_json({**record, "topic": {"n": 1}})
