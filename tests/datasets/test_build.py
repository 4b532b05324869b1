"""build_dataset: passages, queries, qrels, splits, distractors, manifest and atomicity, on a
hand-written news corpus (generic format) and on the vendored ECB+ corpus."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Document, Mention
from corefsearch.datasets.build import BuildOptions, build_dataset
from corefsearch.datasets.ecbplus import read_ecbplus
from corefsearch.datasets.generic import read_generic

ECBPLUS_TARBALL = Path(__file__).resolve().parents[2] / "data" / "ecbplus" / "ECBplus.tar.gz"
ALL_TEST = (0.0, 0.0, 1.0)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def qrels_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def sentences_of(text: str) -> list[str]:
    # The news texts separate their sentences by single spaces and every sentence ends in '.'.
    return [s if s.endswith(".") else s + "." for s in text.split(". ")]


def build_news(corpus: Any, out: Path, passage: str = "sentence", **options: Any) -> Any:
    documents = read_generic(corpus.folder, passage="document" if passage == "document" else "sentence")
    return build_dataset(documents, out, BuildOptions(passage=passage, split_ratios=ALL_TEST, **options))


def check_passage_mentions(passages: list[dict[str, Any]], corpus: Any) -> None:
    for passage in passages:
        for mention in passage["mentions"]:
            original = corpus.mentions[mention["mention_id"]]
            assert passage["text"][mention["start"]:mention["end"]] == corpus.mention_text(mention["mention_id"])
            assert mention["cluster_id"] == original["cluster_id"]


# --- passages ---------------------------------------------------------------------------------


def test_sentence_passages(news_corpus: Any, tmp_path: Path) -> None:
    summary = build_news(news_corpus, tmp_path / "ds")
    passages = read_jsonl(tmp_path / "ds" / "passages.jsonl")
    expected = [(f"{doc_id}-{i}", sentence) for doc_id, doc in news_corpus.documents.items()
                for i, sentence in enumerate(sentences_of(doc["text"]))]
    assert [(p["id"], p["text"]) for p in passages] == expected
    assert len(passages) == 11 == summary.passages
    assert {p["id"]: p["title"] for p in passages}["flood-2-1"] == "Dayton cleans up"
    assert {p["id"]: p["title"] for p in passages}["quake-2-0"] == ""
    contained = {p["id"]: sorted(m["mention_id"] for m in p["mentions"]) for p in passages}
    assert contained["flood-1-1"] == ["flooding", "overflowed"]
    assert contained["quake-2-0"] == ["aftershocks", "rattled"]
    assert contained["flood-1-0"] == [] and contained["quake-1-0"] == ["earthquake"]
    check_passage_mentions(passages, news_corpus)
    assert summary.documents == 4 and summary.mentions == 11 and summary.clusters == 5


def test_window_passages(news_corpus: Any, tmp_path: Path) -> None:
    build_news(news_corpus, tmp_path / "ds", passage="window", window=3)
    passages = {p["id"]: p for p in read_jsonl(tmp_path / "ds" / "passages.jsonl")}
    # One passage per sentence: the sentence with its neighbours (fewer at the document's edges).
    expected = {}
    for doc_id, doc in news_corpus.documents.items():
        sentences = sentences_of(doc["text"])
        for i in range(len(sentences)):
            expected[f"{doc_id}-{i}"] = " ".join(sentences[max(0, i - 1):i + 2])
    assert {pid: p["text"] for pid, p in passages.items()} == expected
    contained = {pid: sorted(m["mention_id"] for m in p["mentions"]) for pid, p in passages.items()}
    assert contained["flood-2-0"] == ["flood"]
    assert contained["flood-2-2"] == ["evacuated-2", "flood"]
    assert contained["flood-1-3"] == ["deployed", "evacuated"]
    check_passage_mentions(list(passages.values()), news_corpus)


def test_document_passages(news_corpus: Any, tmp_path: Path) -> None:
    build_news(news_corpus, tmp_path / "ds", passage="document")
    passages = read_jsonl(tmp_path / "ds" / "passages.jsonl")
    assert [(p["id"], p["doc_id"], p["title"], p["text"]) for p in passages] == [
        (f"{doc_id}-0", doc_id, doc.get("title", ""), doc["text"]) for doc_id, doc in news_corpus.documents.items()]
    assert [len(p["mentions"]) for p in passages] == [4, 2, 2, 3]
    for passage in passages:
        for mention in passage["mentions"]:  # document passages keep the document's own offsets
            original = news_corpus.mentions[mention["mention_id"]]
            assert (mention["start"], mention["end"]) == (original["start"], original["end"])
    check_passage_mentions(passages, news_corpus)


def test_mention_across_sentences_is_dropped_with_a_warning(tmp_path: Path) -> None:
    text = "Storms hit the coast. Flooding followed."
    doc = Document("d1", text, units=[(0, 21), (22, len(text))],
                   mentions=[Mention("m1", "d1", 7, 29, "c1"), Mention("m2", "d1", 0, 6, "c1")])
    with pytest.warns(UserWarning, match="1 mention"):
        summary = build_dataset([doc], tmp_path / "ds", BuildOptions(split_ratios=ALL_TEST))
    assert summary.mentions == 1 and summary.mentions_dropped == 1
    passages = read_jsonl(tmp_path / "ds" / "passages.jsonl")
    assert [[m["mention_id"] for m in p["mentions"]] for p in passages] == [["m2"], []]


# --- queries and qrels ------------------------------------------------------------------------

SENTENCE_QRELS = """\
overflowed 0 flood-2-1 1
flooding 0 flood-2-1 1
evacuated 0 flood-2-2 1
flood 0 flood-1-1 1
evacuated-2 0 flood-1-2 1
earthquake 0 quake-1-1 1
earthquake 0 quake-2-1 1
quake 0 quake-1-0 1
quake 0 quake-2-1 1
earthquake-2 0 quake-1-0 1
earthquake-2 0 quake-1-1 1
""".splitlines()


def test_queries_and_qrels_of_sentence_passages(news_corpus: Any, tmp_path: Path) -> None:
    summary = build_news(news_corpus, tmp_path / "ds")
    queries = read_jsonl(tmp_path / "ds" / "queries" / "test.jsonl")
    # Every mention of a cluster found in >= 2 passages: not the singleton "deployed", and not
    # "aftershocks"/"rattled", whose cluster has two mentions but in a single sentence.
    assert sorted(q["id"] for q in queries) == sorted(
        ["overflowed", "flooding", "evacuated", "flood", "evacuated-2", "earthquake", "quake", "earthquake-2"])
    passages = {p["id"]: p for p in read_jsonl(tmp_path / "ds" / "passages.jsonl")}
    for query in queries:
        assert query["text"] == passages[query["passage_id"]]["text"]
        assert query["text"][query["start"]:query["end"]] == query["mention"] == news_corpus.mention_text(query["id"])
        assert query["cluster_id"] == news_corpus.mentions[query["id"]]["cluster_id"]
    assert {q["id"]: q["passage_id"] for q in queries}["flood"] == "flood-2-1"
    assert sorted(qrels_lines(tmp_path / "ds" / "qrels" / "test.txt")) == sorted(SENTENCE_QRELS)
    assert summary.splits["test"].queries == 8 and summary.splits["test"].relevant_pairs == 11
    assert summary.splits["test"].clusters == 3


def test_window_qrels_leave_out_passages_with_only_the_query_mention(news_corpus: Any, tmp_path: Path) -> None:
    build_news(news_corpus, tmp_path / "ds", passage="window", window=3)
    qrels = defaultdict(set)
    for line in qrels_lines(tmp_path / "ds" / "qrels" / "test.txt"):
        qid, _, pid, relevance = line.split()
        assert relevance == "1"
        qrels[qid].add(pid)
    # "flood" is in flood-2-0, -1 and -2; -0 and -2 hold no other mention of its cluster.
    assert qrels["flood"] == {"flood-1-0", "flood-1-1", "flood-1-2"}
    # "overflowed" and "flooding" share a sentence: windows holding "flooding" are relevant to
    # "overflowed", but not its own (home) window flood-1-1.
    assert qrels["overflowed"] == {"flood-1-0", "flood-1-2", "flood-2-0", "flood-2-1", "flood-2-2"}
    assert qrels["evacuated-2"] == {"flood-1-1", "flood-1-2", "flood-1-3"}
    queries = {q["id"]: q for q in read_jsonl(tmp_path / "ds" / "queries" / "test.jsonl")}
    assert queries["flood"]["passage_id"] == "flood-2-1"
    for qid, relevant in qrels.items():
        assert queries[qid]["passage_id"] not in relevant


def test_document_qrels(news_corpus: Any, tmp_path: Path) -> None:
    build_news(news_corpus, tmp_path / "ds", passage="document")
    assert sorted(qrels_lines(tmp_path / "ds" / "qrels" / "test.txt")) == sorted([
        "overflowed 0 flood-2-0 1", "flooding 0 flood-2-0 1", "flood 0 flood-1-0 1",
        "evacuated 0 flood-2-0 1", "evacuated-2 0 flood-1-0 1",
        "earthquake 0 quake-2-0 1", "quake 0 quake-2-0 1", "earthquake-2 0 quake-1-0 1"])
    queries = read_jsonl(tmp_path / "ds" / "queries" / "test.jsonl")
    assert len(queries) == 8
    for query in queries:  # the whole document is the query's context
        assert query["text"] == news_corpus.documents[query["passage_id"][:-2]]["text"]
        assert query["text"][query["start"]:query["end"]] == news_corpus.mention_text(query["id"])


# --- splits -----------------------------------------------------------------------------------


def storm_documents(n_clusters: int) -> Iterator[Document]:
    """Two one-sentence reports of each of ``n_clusters`` storms; one cluster per storm."""
    for i in range(n_clusters):
        for side, verb in (("a", "made landfall"), ("b", "came ashore")):
            text = f"Hurricane number {i} {verb} near Port {i} on Monday."
            start = text.index(verb)
            yield Document(f"storm-{i}-{side}", text, units=[(0, len(text))],
                           mentions=[Mention(f"m{i}{side}", f"storm-{i}-{side}", start, start + len(verb),
                                             f"storm-{i:02d}")])


def cluster_splits(dataset: Path) -> dict[str, str]:
    return {c["cluster_id"]: c["split"] for c in read_jsonl(dataset / "clusters.jsonl")}


def test_seeded_split_is_deterministic_and_follows_ratios(tmp_path: Path) -> None:
    options = {"split_ratios": (0.5, 0.25, 0.25), "seed": 7}
    first = build_dataset(storm_documents(20), tmp_path / "a", BuildOptions(**options))
    build_dataset(storm_documents(20), tmp_path / "b", BuildOptions(**options))
    build_dataset(storm_documents(20), tmp_path / "c", BuildOptions(split_ratios=(0.5, 0.25, 0.25), seed=8))
    splits = cluster_splits(tmp_path / "a")
    assert splits == cluster_splits(tmp_path / "b")
    assert splits != cluster_splits(tmp_path / "c")
    assert [list(splits.values()).count(s) for s in ("train", "dev", "test")] == [10, 5, 5]
    assert {s: (c.clusters, c.queries) for s, c in first.splits.items()} == {
        "train": (10, 20), "dev": (5, 10), "test": (5, 10)}
    for split in ("train", "dev", "test"):
        queries = read_jsonl(tmp_path / "a" / "queries" / f"{split}.jsonl")
        assert {splits[q["cluster_id"]] for q in queries} == {split}
        qids = {line.split()[0] for line in qrels_lines(tmp_path / "a" / "qrels" / f"{split}.txt")}
        assert qids == {q["id"] for q in queries}


def test_all_clusters_in_test(news_corpus: Any, tmp_path: Path) -> None:
    summary = build_news(news_corpus, tmp_path / "ds")
    assert set(cluster_splits(tmp_path / "ds").values()) == {"test"}
    for split in ("train", "dev"):
        assert (tmp_path / "ds" / "queries" / f"{split}.jsonl").read_text() == ""
        assert (tmp_path / "ds" / "qrels" / f"{split}.txt").read_text() == ""
        assert summary.splits[split].queries == 0


def test_bad_options_are_input_errors(news_corpus: Any, tmp_path: Path) -> None:
    for options in (BuildOptions(passage="paragraph"), BuildOptions(window=0),
                    BuildOptions(split_ratios=(0, 0, 0)), BuildOptions(splits=("validation",))):
        with pytest.raises(InputError):
            build_dataset(read_generic(news_corpus.folder), tmp_path / "ds", options)
        assert not (tmp_path / "ds").exists()


@pytest.fixture(scope="module")
def ecbplus_documents() -> list[Document]:
    return list(read_ecbplus(ECBPLUS_TARBALL))


def test_ecbplus_test_split(ecbplus_documents: list[Document], tmp_path: Path) -> None:
    summary = build_dataset(ecbplus_documents, tmp_path / "ds", BuildOptions(splits=("test",)))
    out = tmp_path / "ds"
    # data/README.md: the test topics 36-45 hold 210 documents and 3,598 units (sentences kept).
    assert summary.documents == 210
    assert summary.passages == 3598
    passages = read_jsonl(out / "passages.jsonl")
    assert len(passages) == 3598
    doc_ids = {p["doc_id"] for p in passages}
    assert len(doc_ids) == 210
    assert {int(doc_id.split("_")[0]) for doc_id in doc_ids} == set(range(36, 46))
    assert sorted(p.name for p in (out / "queries").iterdir()) == ["test.jsonl"]
    assert sorted(p.name for p in (out / "qrels").iterdir()) == ["test.txt"]

    # An independent count: a query per mention of each cluster found in >= 2 sentences.
    homes: dict[str, set[tuple[str, int]]] = defaultdict(set)
    mentions: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for doc in ecbplus_documents:
        if doc.split != "test":
            continue
        for m in doc.mentions:
            unit = next(i for i, (s, e) in enumerate(doc.units) if s <= m.start and m.end <= e)
            homes[m.cluster_id].add((doc.doc_id, unit))
            mentions[m.cluster_id].append((doc.doc_id, unit))
    expected_queries = sum(len(mentions[c]) for c in homes if len(homes[c]) >= 2)
    expected_pairs = sum(len(set(mentions[c][:i] + mentions[c][i + 1:]) - {home})
                         for c in homes if len(homes[c]) >= 2 for i, home in enumerate(mentions[c]))
    assert summary.mentions == 1604  # data/README.md: test event mentions
    assert summary.clusters == 265
    queries = read_jsonl(out / "queries" / "test.jsonl")
    assert len(queries) == expected_queries == summary.splits["test"].queries == 1556  # README: 1,556 test queries
    assert summary.splits["test"].relevant_pairs == expected_pairs

    own = {q["id"]: q["passage_id"] for q in queries}
    relevant: dict[str, set[str]] = defaultdict(set)
    for line in qrels_lines(out / "qrels" / "test.txt"):
        qid, _, pid, _ = line.split()
        relevant[qid].add(pid)
    assert set(relevant) == set(own)  # every query has something to find
    assert not [qid for qid, pids in relevant.items() if own[qid] in pids]


# --- distractors ------------------------------------------------------------------------------

DISTRACTORS = [
    {"doc_id": "wire-1", "title": "Markets", "text": "Stocks closed higher on Thursday after a volatile session."},
    {"doc_id": "wire-2", "text": "The city council approved a new budget. It includes money for parks."},
]


def test_distractors_add_passages_without_mentions(news_corpus: Any, tmp_path: Path) -> None:
    distractors = tmp_path / "distractors.jsonl"
    distractors.write_text("".join(json.dumps(r) + "\n" for r in DISTRACTORS), encoding="utf-8")
    plain = build_news(news_corpus, tmp_path / "plain")
    summary = build_dataset(read_generic(news_corpus.folder), tmp_path / "ds", BuildOptions(split_ratios=ALL_TEST),
                            distractors=[distractors])
    assert summary.distractor_passages == 2
    assert summary.passages == plain.passages + 2
    passages = read_jsonl(tmp_path / "ds" / "passages.jsonl")
    assert [(p["id"], p["title"], p["text"], p["mentions"]) for p in passages[-2:]] == [
        ("wire-1-0", "Markets", DISTRACTORS[0]["text"], []), ("wire-2-0", "", DISTRACTORS[1]["text"], [])]
    for name in ("queries/test.jsonl", "qrels/test.txt", "clusters.jsonl"):
        assert (tmp_path / "ds" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["counts"]["distractor_passages"] == 2


def test_distractor_id_clashing_with_a_passage_id(news_corpus: Any, tmp_path: Path) -> None:
    distractors = tmp_path / "distractors.jsonl"
    distractors.write_text(json.dumps(DISTRACTORS[0]) + "\n"
                           + json.dumps({"doc_id": "quake-2", "text": "Another story."}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"distractors\.jsonl:2: passage id quake-2-0 occurs twice"):
        build_dataset(read_generic(news_corpus.folder), tmp_path / "ds", BuildOptions(), distractors=[distractors])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["distractors.jsonl", "news"]


def _documents_with_ids(*specs: tuple[str, int]) -> list[Document]:
    """One document per (doc_id, number of sentences); the first document holds two mentions of one cluster,
    in two passages, so that the dataset has queries."""
    documents = []
    for number, (doc_id, sentences) in enumerate(specs):
        text = " ".join(f"Sentence {i} of {doc_id}." for i in range(sentences))
        units, start = [], 0
        for i in range(sentences):
            end = start + len(f"Sentence {i} of {doc_id}.")
            units.append((start, end))
            start = end + 1
        mentions = [Mention(f"m{number}-{i}", doc_id, units[i][0], units[i][0] + 8, "c1")
                    for i in range(min(2, sentences))] if number == 0 else []
        documents.append(Document(doc_id, text, units=units, mentions=mentions))
    return documents


def test_documents_whose_ids_differ_only_in_white_space_clash(tmp_path: Path) -> None:
    documents = _documents_with_ids(("first", 2), ("a b", 2), ("a_b", 3))
    with pytest.raises(InputError, match=r"document 3 \(a_b\): passage id a_b-0 occurs twice"):
        build_dataset(documents, tmp_path / "ds", BuildOptions(split_ratios=ALL_TEST))
    assert not (tmp_path / "ds").exists()


def test_ids_that_look_like_passage_ids_do_not_clash(tmp_path: Path) -> None:
    # x-1 has the passage x-1-0; x has the passages x-0 and x-1: no id is given twice. A document
    # without text gives no passage, so another document with its id is no clash either.
    documents = _documents_with_ids(("x", 2), ("x-1", 1), ("x-1-0", 1), ("empty", 0), ("empty", 1))
    summary = build_dataset(documents, tmp_path / "ds", BuildOptions(split_ratios=ALL_TEST))
    ids = [p["id"] for p in read_jsonl(tmp_path / "ds" / "passages.jsonl")]
    assert ids == ["x-0", "x-1", "x-1-0", "x-1-0-0", "empty-0"]
    assert summary.passages == 5


# --- manifest and atomicity -------------------------------------------------------------------


def test_manifest(news_corpus: Any, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    build_dataset(read_generic(news_corpus.folder), out, BuildOptions(split_ratios=ALL_TEST, seed=5),
                  source_name="news")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["kind"] == "corefsearch-dataset" and manifest["format_version"] == 1
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert sorted(manifest["checksums"]) == files
    for name, checksum in manifest["checksums"].items():
        assert checksum == "sha256:" + hashlib.sha256((out / name).read_bytes()).hexdigest()
    assert manifest["options"] == {"passage": "sentence", "window": 3, "split_ratios": [0.0, 0.0, 1.0],
                                   "seed": 5, "splits": ["train", "dev", "test"], "source": {}}
    counts = manifest["counts"]
    assert (counts["documents"], counts["passages"], counts["mentions"], counts["clusters"]) == (4, 11, 11, 5)
    assert counts["splits"]["test"] == {"clusters": 3, "queries": 8, "relevant_pairs": 11}
    assert counts["splits"]["train"] == {"clusters": 0, "queries": 0, "relevant_pairs": 0}


@pytest.mark.parametrize("error", [RuntimeError("disk read error"), KeyboardInterrupt()])
def test_failed_build_leaves_nothing(news_corpus: Any, tmp_path: Path, error: BaseException) -> None:
    def documents() -> Iterator[Document]:
        source = read_generic(news_corpus.folder)
        yield next(source)
        yield next(source)
        raise error

    out = tmp_path / "out" / "ds"
    with pytest.raises(type(error)):
        build_dataset(documents(), out, BuildOptions())
    assert not out.exists()
    assert not out.parent.exists()  # no hidden partial folder either, nor the folder made for it


def test_existing_output_needs_overwrite(news_corpus: Any, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="already exists"):
        build_dataset(read_generic(news_corpus.folder), out, BuildOptions())
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    build_dataset(read_generic(news_corpus.folder), out, BuildOptions(), overwrite=True)
    assert not (out / "notes.txt").exists() and (out / "manifest.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "news"]
