"""Document groups of ``--scope predicted-topic``: the default (encoder and TF-IDF similarities), TF-IDF alone,
K-means, a ``--topics`` file, ``--write-topics``, and their agreement with the gold topics."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import read_clusters, write_jsonl
from test_cluster_baselines import TOPIC_DOCUMENTS, TOPIC_MENTIONS, _build

from corefsearch.base.errors import InputError
from corefsearch.cluster.agreement import agreement, ecbplus_subtopic, ecbplus_subtopics
from corefsearch.cluster.run import cluster_dataset
from corefsearch.cluster.topics import (
    DEFAULT_TOPIC_THRESHOLD,
    TFIDF_TOPIC_THRESHOLD,
    default_topic_threshold,
    document_embeddings,
    predicted_topics,
    read_topics_file,
    topic_encoder,
)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "topics"
    texts = {d["doc_id"]: d["text"] for d in TOPIC_DOCUMENTS}
    write_jsonl(folder / "corpus.jsonl", TOPIC_DOCUMENTS)
    write_jsonl(folder / "mentions.jsonl", [
        {"mention_id": m, "doc_id": d, "start": texts[d].index(w), "end": texts[d].index(w) + len(w), "cluster_id": c}
        for m, d, w, c in TOPIC_MENTIONS])
    return _build(folder, tmp_path / "topic-ds")


def test_agreement_against_hand_computed_values() -> None:
    # Reference a a a b b b, predicted x x y y y y. Contingency: x = {a: 2}, y = {a: 1, b: 3}.
    # ARI: sum C(n_ij, 2) = 1 + 0 + 3 = 4; predicted sizes 2, 4: 1 + 6 = 7; reference 3, 3: 3 + 3 = 6;
    # expected 7 * 6 / C(6, 2) = 42 / 15 = 2.8; max (7 + 6) / 2 = 6.5; ARI = (4 - 2.8) / (6.5 - 2.8) = 12 / 37.
    # Homogeneity 1 - H(ref|pred) / H(ref) = 1 - (4/6) H(1/4, 3/4) / ln 2 = 0.45915; completeness
    # 1 - H(pred|ref) / H(pred) = 1 - (1/2) H(1/3, 2/3) / H(1/3, 2/3) = 0.5; V = 2hc / (h + c) = 0.47870.
    reference = dict(zip("123456", "aaabbb", strict=True))
    predicted = dict(zip("123456", "xxyyyy", strict=True))
    found = agreement(predicted, reference)
    assert found.ari == pytest.approx(12 / 37)
    assert found.homogeneity == pytest.approx(0.45915, abs=1e-4)
    assert found.completeness == pytest.approx(0.5)
    assert found.v_measure == pytest.approx(0.47870, abs=1e-4)
    assert (found.groups, found.reference_groups, found.documents) == (2, 2, 6)
    same = agreement({"1": "p", "2": "p", "3": "q"}, {"1": "a", "2": "a", "3": "b"})  # names do not matter
    assert (same.ari, same.v_measure, same.homogeneity, same.completeness) == (1.0, 1.0, 1.0, 1.0)
    # All in one group against two equal halves: every pair agrees by chance only, ARI 0.
    assert agreement({"1": "p", "2": "p", "3": "p", "4": "p"}, dict(zip("1234", "aabb", strict=True))).ari == 0.0


def test_ecbplus_subtopics() -> None:
    assert ecbplus_subtopic("36_1ecb") == "36ecb"
    assert ecbplus_subtopic("36_1ecbplus", "36") == "36ecbplus"
    assert ecbplus_subtopic("36_1ecbplus", "37") is None
    assert ecbplus_subtopic("raid-1") is None
    assert ecbplus_subtopics({"1_2ecb": "1", "1_3ecbplus": "1"}) == {"1_2ecb": "1ecb", "1_3ecbplus": "1ecbplus"}
    assert ecbplus_subtopics({"1_2ecb": "1", "raid-1": "raid"}) is None


def test_kmeans_needs_the_number_of_topics() -> None:
    texts = {d["doc_id"]: d["text"] for d in TOPIC_DOCUMENTS}
    assert predicted_topics(texts, method="kmeans", n_topics=2) == {"hack-1": "p1", "raid-1": "p2", "raid-2": "p2"}
    assert predicted_topics(texts, n_topics=2) == {"hack-1": "p1", "raid-1": "p2", "raid-2": "p2"}  # tree cut
    assert set(predicted_topics(texts, method="kmeans", n_topics=1).values()) == {"p1"}
    with pytest.raises(InputError, match="needs --n-topics"):
        predicted_topics(texts, method="kmeans")
    with pytest.raises(InputError, match="--topic-method must be one of"):
        predicted_topics(texts, method="dbscan")
    with pytest.raises(InputError, match="--n-topics must be at least 1"):
        predicted_topics(texts, method="kmeans", n_topics=0)


def test_topics_file_format(tmp_path: Path) -> None:
    path = tmp_path / "topics.tsv"
    path.write_text("# doc_id\tgroup\n\nraid-1\tR\nraid-2\tR\nraid-2\tR\nhack-1\tH\nextra\tX\n", encoding="utf-8")
    assert read_topics_file(path, {"raid-1", "raid-2", "hack-1"}) == {
        "raid-1": "R", "raid-2": "R", "hack-1": "H", "extra": "X"}  # a repeated line and extra documents: fine
    path.write_text("raid-1\tR\nraid-2 R\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"topics.tsv:2: expected doc_id<TAB>group .* got 1 field"):
        read_topics_file(path)
    path.write_text("raid-1\tR\tx\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"topics.tsv:1: .* got 3 field"):
        read_topics_file(path)
    path.write_text("raid-1\tR\n# c\nraid-1\tH\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"topics.tsv:3: document raid-1 is in group 'H' here and in 'R' on line 1"):
        read_topics_file(path)
    path.write_text("raid-1\tR\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"topics.tsv: 2 document\(s\) of the mentions to cluster have no group "
                                         r"\(e.g. hack-1\)"):
        read_topics_file(path, {"raid-1", "raid-2", "hack-1"})
    with pytest.raises(InputError, match="no such file"):
        read_topics_file(tmp_path / "none.tsv")


def test_cluster_with_a_topics_file_and_write_topics(dataset: Path, tmp_path: Path) -> None:
    topics = tmp_path / "topics.tsv"
    topics.write_text("raid-1\tA\nraid-2\tB\nhack-1\tB\n", encoding="utf-8")  # a group of one document is fine
    written = tmp_path / "used.tsv"
    summary = cluster_dataset(dataset, tmp_path / "c.jsonl", method="lemma", topics=topics, write_topics=written)
    assert summary.scope == "predicted-topic" and summary.groups == 2
    assert read_clusters(tmp_path / "c.jsonl") == {"raid-1-attack": "A/event/attack", "raid-2-attack": "B/event/attack",
                                                   "hack-1-attack": "B/event/attack"}
    assert written.read_text(encoding="utf-8").splitlines()[1:] == ["hack-1\tB", "raid-1\tA", "raid-2\tB"]
    assert summary.topic_agreement is not None and summary.topic_agreement.ari == pytest.approx(-0.5)
    assert summary.subtopic_agreement is None  # not ECB+ ids
    # What --write-topics wrote reads back as --topics, to the same groups.
    again = cluster_dataset(dataset, tmp_path / "c2.jsonl", method="lemma", topics=written)
    assert read_clusters(tmp_path / "c2.jsonl") == read_clusters(tmp_path / "c.jsonl") and again.groups == 2


def test_predicted_topics_report_their_agreement(dataset: Path, tmp_path: Path) -> None:
    written = tmp_path / "used.tsv"
    summary = cluster_dataset(dataset, tmp_path / "c.jsonl", method="singletons", scope="predicted-topic",
                              topic_method="kmeans", n_topics=2, write_topics=written)
    assert summary.topic_agreement is not None and summary.topic_agreement.ari == 1.0
    assert read_topics_file(written) == {"hack-1": "p1", "raid-1": "p2", "raid-2": "p2"}
    gold = cluster_dataset(dataset, tmp_path / "c.jsonl", method="singletons", write_topics=written)
    assert gold.topic_agreement is None  # --scope topic: the gold topics themselves, written as they are
    assert read_topics_file(written) == {"hack-1": "hack", "raid-1": "raid", "raid-2": "raid"}


@pytest.mark.parametrize(("options", "message"), [
    ({"scope": "topic", "topics": "T"}, "cannot be used with --scope topic"),
    ({"scope": "corpus", "topics": "T"}, "cannot be used with --scope corpus"),
    ({"topics": "T", "topic_threshold": 0.5}, "--topic-threshold: how --scope predicted-topic groups documents; "
                                              "not with --topics FILE"),
    ({"topics": "T", "n_topics": 3}, "--n-topics: .* not with --topics FILE"),
    ({"scope": "corpus", "topic_method": "kmeans"}, "--topic-method: .* not with --scope corpus"),
    ({"scope": "predicted-topic", "topic_method": "kmeans"}, "needs --n-topics"),
    ({"scope": "predicted-topic", "n_topics": 2, "topic_threshold": 0.5}, "give one or the other"),
    ({"topics": "T", "write_topics": "T"}, "--write-topics"),
])
def test_bad_topic_options_fail_before_anything_is_read(dataset: Path, tmp_path: Path, options: dict[str, object],
                                                         message: str) -> None:
    topics = tmp_path / "t.tsv"
    topics.write_text("raid-1\tA\n", encoding="utf-8")  # would be an error too (documents missing), if read
    options = {k: topics if v == "T" else v for k, v in options.items()}
    with pytest.raises(InputError, match=message):
        cluster_dataset(dataset, tmp_path / "c.jsonl", method="lemma", **options)  # type: ignore[arg-type]
    assert not (tmp_path / "c.jsonl").exists()


def test_missing_documents_in_the_topics_file(dataset: Path, tmp_path: Path) -> None:
    topics = tmp_path / "t.tsv"
    topics.write_text("raid-1\tA\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"t.tsv: 2 document\(s\) .* \(e.g. hack-1\)"):
        cluster_dataset(dataset, tmp_path / "c.jsonl", method="lemma", topics=topics)
    assert not (tmp_path / "c.jsonl").exists()


def _same(texts: Sequence[str]) -> Any:
    import numpy as np

    return np.ones((len(texts), 4), dtype=np.float32) / 2.0  # every pair: similarity 1


def _apart(texts: Sequence[str]) -> Any:
    import numpy as np

    return np.eye(len(texts), dtype=np.float32)  # every pair: similarity 0


def _refused(texts: Sequence[str]) -> Any:
    raise AssertionError("the encoder was asked for")


def test_default_grouping_is_the_mean_of_encoder_and_tfidf_similarities() -> None:
    texts = {d["doc_id"]: d["text"] for d in TOPIC_DOCUMENTS}
    # Encoder similarity 1 everywhere: distance = (1 - TF-IDF similarity) / 2 <= 0.5, under the 0.64 cut.
    assert set(predicted_topics(texts, embed=_same).values()) == {"p1"}
    # Encoder similarity 0: distance >= 0.5 + (1 - 0.5 * TF-IDF): nothing merges at 0.64 ...
    assert len(set(predicted_topics(texts, embed=_apart).values())) == 3
    # ... while TF-IDF alone (the former default) merges the two raids and never asks for the encoder.
    assert predicted_topics(texts, method="agglomerative-tfidf", embed=_refused) == {
        "hack-1": "p1", "raid-1": "p2", "raid-2": "p2"}
    assert predicted_topics(texts, method="kmeans", n_topics=2, embed=_refused) == {
        "hack-1": "p1", "raid-1": "p2", "raid-2": "p2"}
    assert predicted_topics({"only": "one document"}, embed=_refused) == {"only": "p1"}
    assert (default_topic_threshold(), default_topic_threshold("agglomerative-tfidf")) == (
        DEFAULT_TOPIC_THRESHOLD, TFIDF_TOPIC_THRESHOLD)


def test_only_predicted_topics_ask_for_the_encoder(dataset: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("corefsearch.cluster.topics.document_embeddings", _refused)
    for options in ({"scope": "topic"}, {"scope": "corpus"},
                    {"scope": "predicted-topic", "topic_method": "agglomerative-tfidf"}):
        cluster_dataset(dataset, tmp_path / "c.jsonl", method="lemma", **options)
    with pytest.raises(AssertionError, match="the encoder was asked for"):
        cluster_dataset(dataset, tmp_path / "c.jsonl", method="lemma", scope="predicted-topic")


def test_tfidf_method_and_threshold_through_cluster(dataset: Path, tmp_path: Path) -> None:
    summary = cluster_dataset(dataset, tmp_path / "c.jsonl", method="lemma", scope="predicted-topic",
                              topic_method="agglomerative-tfidf", topic_threshold=0.8)
    assert summary.groups == 2
    with pytest.raises(InputError, match="agglomerative, agglomerative-tfidf, kmeans"):
        cluster_dataset(dataset, tmp_path / "c.jsonl", method="lemma", scope="predicted-topic", topic_method="x")


def test_document_embeddings_of_a_model_folder(tiny_base: Path) -> None:
    import numpy as np

    vectors = document_embeddings(["gunmen attacked a bank", "hackers", ""], encoder=str(tiny_base))
    assert vectors.shape == (3, 32) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert topic_encoder(str(tiny_base)) is topic_encoder(str(tiny_base))  # loaded once a process
    texts = {d["doc_id"]: d["text"] for d in TOPIC_DOCUMENTS}
    grouped = predicted_topics(texts, embed=lambda t: document_embeddings(t, encoder=str(tiny_base)))
    assert sorted(grouped) == ["hack-1", "raid-1", "raid-2"]
