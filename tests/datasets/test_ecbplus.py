"""The ECB+ reader on the vendored corpus (data/ecbplus/), checked against the facts in
data/README.md and against an independent reading of the XML."""

from __future__ import annotations

import collections
import io
import shutil
import tarfile
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from helpers import NewsCorpus

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Document
from corefsearch.datasets.ecbplus import (
    SENTENCES_CSV,
    is_dateline,
    read_ecbplus,
    read_validated_sentences,
    topic_split,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "ecbplus"
TARBALL = DATA / "ECBplus.tar.gz"
TEST_TOPICS = range(36, 46)


def _extract(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.12 and patched 3.10/3.11
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)


@pytest.fixture(scope="module")
def corpus() -> dict[str, Document]:
    """The whole tarball, all mention types, parsed once."""
    return {doc.doc_id: doc for doc in read_ecbplus(TARBALL, mention_type="all")}


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ecbplus")
    _extract(TARBALL, root)
    return root


@pytest.fixture(scope="module")
def raw(extracted: Path) -> dict[str, dict]:
    """An independent reading of the XML: sentences, tokens and cross-document mentions."""
    docs: dict[str, dict] = {}
    for file in sorted((extracted / "ECB+").glob("*/*.xml")):
        root = ET.parse(file).getroot()
        tokens = {t.get("t_id"): (int(t.get("sentence")), (t.text or "").strip()) for t in root.iter("token")}
        markables = {m.get("m_id"): m for m in root.find("Markables")}
        mentions = {}
        for rel in root.iter("CROSS_DOC_COREF"):
            for source in rel.iter("source"):
                markable = markables[source.get("m_id")]
                mentions[source.get("m_id")] = ([a.get("t_id") for a in markable.iter("token_anchor")],
                                                rel.get("note"), markable.tag)
        docs[file.stem] = {"topic": int(file.parent.name), "tokens": tokens,
                           "sentences": {s for s, _ in tokens.values()}, "mentions": mentions}
    return docs


def _of(corpus: dict[str, Document], kind: str, topics: range | None = None) -> list:
    return [m for doc_id, d in corpus.items() for m in d.mentions
            if m.type == kind and (topics is None or int(doc_id.split("_")[0]) in topics)]


# --- corpus facts ------------------------------------------------------------------------


def test_documents_and_topics(corpus: dict[str, Document]) -> None:
    assert len(corpus) == 982
    topics = {int(doc_id.split("_")[0]) for doc_id in corpus}
    assert topics == set(range(1, 46)) - {15, 17}
    assert sum(doc_id.endswith("ecbplus") for doc_id in corpus) == 502


def test_documents_are_sorted_by_topic_then_file(corpus: dict[str, Document]) -> None:
    ids = list(corpus)
    assert ids == sorted(ids, key=lambda i: (int(i.split("_")[0]), i + ".xml"))
    assert ids[0] == "1_10ecb"


def test_sentences_account_for_the_dropped_urls(corpus: dict[str, Document], raw: dict[str, dict]) -> None:
    # 16,314 sentences in the XML = 15,812 units + the URL sentence 0 of the 502 ecbplus files.
    assert sum(len(doc["sentences"]) for doc in raw.values()) == 16_314
    units = sum(len(d.units) for d in corpus.values())
    urls = sum(doc_id.endswith("ecbplus") for doc_id in corpus)
    assert (units, urls) == (15_812, 502)
    assert units + urls == 16_314
    for doc_id, doc in corpus.items():
        assert len(doc.units) == len(raw[doc_id]["sentences"]) - doc_id.endswith("ecbplus")
        # Units are exactly the lines of the text.
        lines, start = [], 0
        for line in doc.text.split("\n"):
            lines.append((start, start + len(line)))
            start += len(line) + 1
        assert doc.units == lines
        assert "http" not in doc.text.split("\n")[0]


def test_cross_document_chains(corpus: dict[str, Document]) -> None:
    events, entities = _of(corpus, "event"), _of(corpus, "entity")
    assert len(events) == 7_286
    assert len({m.cluster_id for m in events}) == 1_217
    assert len(entities) == 10_570
    assert len({m.cluster_id for m in entities}) == 1_095


def test_mention_type_selects_the_same_mentions(corpus: dict[str, Document]) -> None:
    first = next(read_ecbplus(TARBALL, mention_type="event"))
    assert first.mentions == [m for m in corpus[first.doc_id].mentions if m.type == "event"]
    assert {m.type for m in first.mentions} == {"event"}


def test_test_split_facts(corpus: dict[str, Document]) -> None:
    docs = [d for d in corpus.values() if d.split == "test"]
    assert len(docs) == 210
    urls = sum(d.doc_id.endswith("ecbplus") for d in docs)
    assert sum(len(d.units) for d in docs) + urls == 3_719
    events = _of(corpus, "event", TEST_TOPICS)
    assert len(events) == 1_604
    docs_of = collections.defaultdict(set)
    for m in events:
        docs_of[m.cluster_id].add(m.doc_id)
    assert len(docs_of) == 265
    assert sum(len(d) >= 2 for d in docs_of.values()) == 205


def test_splits_per_document(corpus: dict[str, Document]) -> None:
    dev = {2, 5, 12, 18, 21, 23, 34, 35}
    for doc_id, doc in corpus.items():
        topic = int(doc_id.split("_")[0])
        expected = "test" if topic >= 36 else "dev" if topic in dev else "train"
        assert doc.split == expected == topic_split(topic), doc_id
    counts = collections.Counter(d.split for d in corpus.values())
    assert counts == {"train": 575, "dev": 197, "test": 210}


def test_mentions_match_their_anchor_tokens(corpus: dict[str, Document], raw: dict[str, dict]) -> None:
    gaps = 0
    for doc_id, doc in corpus.items():
        tokens, expected = raw[doc_id]["tokens"], raw[doc_id]["mentions"]
        assert len(doc.mentions) == len(expected)
        for m in doc.mentions:
            m_id = m.mention_id.removeprefix(f"{doc_id}_")
            anchors, chain, tag = expected[m_id]
            ids = [int(t) for t in anchors]
            if ids != list(range(ids[0], ids[-1] + 1)):
                gaps += 1  # gapped mention: the span runs from first to last token
            words = [tokens[str(t)][1] for t in range(min(ids), max(ids) + 1)]
            assert doc.text[m.start:m.end] == " ".join(w for w in words if w), m.mention_id
            assert m.cluster_id == chain
            assert m.type == ("event" if tag.startswith(("ACTION_", "NEG_ACTION_")) else "entity")
            assert m.doc_id == doc_id
            m.validate(doc.text)
    assert gaps == 52
    ids = [m.mention_id for d in corpus.values() for m in d.mentions]
    assert len(ids) == len(set(ids))


def test_whitespace_tokens_are_dropped(corpus: dict[str, Document]) -> None:
    assert not any("\t" in d.text or "  " in d.text or "\n\n" in d.text for d in corpus.values())
    assert corpus["2_5ecbplus"].title == "Ellen DeGeneres Set As Oscars Host For 2014 Academy Awards"
    # A thin space inside a token ("7 ½") is kept: it is not at the token's edge.
    assert "first 7\u2009½ minutes" in corpus["31_10ecbplus"].text


def test_titles(corpus: dict[str, Document]) -> None:
    doc = corpus["36_1ecbplus"]
    assert doc.title == "Warren Jeffs Found Guilty on Sexual Assault Charges"
    assert doc.text.split("\n")[0] == doc.title
    assert "ibtimes" not in doc.text
    assert corpus["43_3ecb"].title == "ATI a potent weapon for AMD in clash with Intel"
    # Most ECB (not ECB+) files have no headline: sentence 0 is the lead sentence.
    assert corpus["1_10ecb"].title.startswith("Perennial party girl Tara Reid checked herself")
    # A dateline before the headline is skipped, and stays in the text as a unit.
    doc = corpus["9_3ecbplus"]
    assert doc.text.startswith("April 27 , 2009\nBiologists Call on Obama Administration")
    assert doc.title.startswith("Biologists Call on Obama Administration")
    assert corpus["20_3ecbplus"].title == "Strong earthquake jolts southern Iran , felt in Oman"
    skipped = sum(d.title != d.text.split("\n")[0] for d in corpus.values())
    assert skipped == 62
    assert corpus["9_2ecbplus"].title == "Obama overturns Bush endangered species rule"


def test_dateline_detector() -> None:
    for line in ("April 27 , 2009", "Posted 11 / 27 / 2005 7 : 21 AM", "8 : 24am :", "7 : 32 p . m . ET",
                 "21 July 2013 Last updated at 11 : 11 GMT"):
        assert is_dateline(line), line
    for line in ("Ten dead in southern Iran quake", "5 . 9 Earthquake Jolts Iran", "Deputy Sheriff",
                 "Jan 05 , 2011 Saints place RB", ""):
        assert not is_dateline(line), line


# --- validated sentences -----------------------------------------------------------------


def test_sentences_csv_names_documents_within_topics(raw: dict[str, dict]) -> None:
    validated = read_validated_sentences(DATA / SENTENCES_CSV)
    assert sum(len(s) for s in validated.values()) == 1_840
    assert len(validated) == 976
    for doc_id, sentences in validated.items():
        assert sentences <= raw[doc_id]["sentences"], doc_id
        if doc_id.endswith("ecbplus"):
            assert 0 not in sentences  # the URL is never a validated sentence


@pytest.fixture(scope="module")
def test_topics_folder(extracted: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Topics 36-45 in the vendored layout (XML folder with the CSV beside it)."""
    root = tmp_path_factory.mktemp("ecbplus-test")
    for topic in TEST_TOPICS:
        shutil.copytree(extracted / "ECB+" / str(topic), root / "ECB+" / str(topic))
    shutil.copy(DATA / SENTENCES_CSV, root / SENTENCES_CSV)
    return root


def test_validated_only(test_topics_folder: Path, corpus: dict[str, Document]) -> None:
    docs = list(read_ecbplus(test_topics_folder, validated_only=True))
    assert len(docs) == 210
    assert sum(len(d.mentions) for d in docs) == 1_197
    # Four test documents have no validated sentence (hence 206 in some preprocessed releases).
    assert sorted(d.doc_id for d in docs if not d.units) == [
        "36_7ecbplus", "44_13ecbplus", "44_1ecbplus", "44_9ecbplus"]
    for doc in docs:
        full = corpus[doc.doc_id]
        assert doc.text == full.text and doc.title == full.title
        assert set(doc.units) <= set(full.units)
        for m in doc.mentions:
            assert m.type == "event"
            assert any(s <= m.start and m.end <= e for s, e in doc.units)


def test_validated_only_finds_the_csv_beside_the_tarball() -> None:
    first = next(read_ecbplus(TARBALL, validated_only=True))
    assert first.doc_id == "1_10ecb"
    assert 0 < len(first.units) < 5


def test_missing_sentences_csv(tmp_path: Path) -> None:
    archive = _tiny_tarball(tmp_path, {"ECB+/1/1_1ecb.xml": _MINIMAL})
    with pytest.raises(InputError, match=r"ECBplus_coreference_sentences\.csv.*--sentences-csv"):
        list(read_ecbplus(archive, validated_only=True))
    with pytest.raises(InputError, match="--sentences-csv"):
        list(read_ecbplus(archive, validated_only=True, sentences_csv=tmp_path / "nope.csv"))


# --- folder input ------------------------------------------------------------------------


def test_folder_gives_the_same_documents(extracted: Path, corpus: dict[str, Document]) -> None:
    assert list(read_ecbplus(extracted, mention_type="all")) == list(corpus.values())


def test_folder_of_topic_folders(test_topics_folder: Path, corpus: dict[str, Document]) -> None:
    docs = list(read_ecbplus(test_topics_folder / "ECB+", mention_type="entity"))
    expected = [d for d in corpus.values() if d.split == "test"]
    assert [d.doc_id for d in docs] == [d.doc_id for d in expected]
    assert docs[0].mentions == [m for m in expected[0].mentions if m.type == "entity"]


# --- errors ------------------------------------------------------------------------------

_MINIMAL = (b'<Document doc_name="1_1ecb.xml"><token t_id="1" sentence="0" number="0">Hi</token>'
            b'<Markables/><Relations/></Document>')


def _tiny_tarball(tmp_path: Path, members: dict[str, bytes]) -> Path:
    archive = tmp_path / "tiny.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


def test_corrupt_xml_member(tmp_path: Path) -> None:
    archive = _tiny_tarball(tmp_path, {"ECB+/1/1_1ecb.xml": _MINIMAL,
                                       "ECB+/1/1_2ecb.xml": b'<Document><token t_id="1"'})
    with pytest.raises(InputError, match=r"ECB\+/1/1_2ecb\.xml: malformed XML"):
        list(read_ecbplus(archive))


def test_tiny_document(tmp_path: Path) -> None:
    [doc] = read_ecbplus(_tiny_tarball(tmp_path, {"ECB+/1/1_1ecb.xml": _MINIMAL}))
    assert (doc.doc_id, doc.text, doc.title, doc.split) == ("1_1ecb", "Hi", "Hi", "train")
    assert (doc.units, doc.mentions) == ([(0, 2)], [])


def test_bad_paths(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("not ECB+")
    for path in (text, tmp_path / "missing.tar.gz", tmp_path):
        with pytest.raises(InputError, match=str(path.name)):
            list(read_ecbplus(path))
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(TARBALL.read_bytes()[:5000])
    with pytest.raises(InputError, match="broken.tar.gz"):
        list(read_ecbplus(broken))
    with pytest.raises(InputError, match="mention type"):
        list(read_ecbplus(TARBALL, mention_type="events"))


# --- --chains all: every gold mention (intra-document chains and singletons too) ---------------


def _chain_kind(cluster_id: str) -> str:
    return cluster_id.split("_")[0] if cluster_id.startswith(("INTRA_", "SINGLETON_")) else "CROSS"


def test_chains_all_adds_intra_document_chains_and_singletons(ecbplus_subset: Path) -> None:
    cross = {d.doc_id: d for d in read_ecbplus(ecbplus_subset, mention_type="all")}
    every = {d.doc_id: d for d in read_ecbplus(ecbplus_subset, mention_type="all", chains="all")}
    assert list(every) == list(cross)
    # An independent reading of the XML: each event/entity markable on tokens outside the URL
    # sentence, with the chain it should get.
    expected: dict[str, str] = {}
    for file in sorted((ecbplus_subset / "ECB+").glob("*/*.xml")):
        root = ET.parse(file).getroot()
        doc_id = file.stem
        sentence = {t.get("t_id"): int(t.get("sentence")) for t in root.iter("token") if (t.text or "").strip()}
        chain: dict[str, str] = {}
        for rel in root.iter("INTRA_DOC_COREF"):
            for source in rel.iter("source"):
                chain[source.get("m_id")] = f"INTRA_{doc_id}_{rel.find('target').get('m_id')}"
        for rel in root.iter("CROSS_DOC_COREF"):
            for source in rel.iter("source"):
                chain[source.get("m_id")] = rel.get("note")
        for markable in root.find("Markables"):
            anchors = [sentence.get(a.get("t_id")) for a in markable.iter("token_anchor")]
            if markable.tag.startswith("UNKNOWN") or not any(
                    s is not None and not (doc_id.endswith("ecbplus") and s == 0) for s in anchors):
                continue
            m_id = markable.get("m_id")
            expected[f"{doc_id}_{m_id}"] = chain.get(m_id, f"SINGLETON_{doc_id}_{m_id}")
    got = {m.mention_id: m.cluster_id for d in every.values() for m in d.mentions}
    assert got == expected
    for doc_id, doc in every.items():
        assert doc.text == cross[doc_id].text and doc.units == cross[doc_id].units
        # Every cross-document mention of the default reading is kept, unchanged.
        assert [m for m in doc.mentions if _chain_kind(m.cluster_id) == "CROSS"] == cross[doc_id].mentions
        for m in doc.mentions:
            m.validate(doc.text)
    mentions = [m for d in every.values() for m in d.mentions]
    assert len({m.mention_id for m in mentions}) == len(mentions)
    kinds = collections.Counter(_chain_kind(m.cluster_id) for m in mentions)
    assert kinds == {"CROSS": 845, "SINGLETON": 1223, "INTRA": 20}
    members = collections.defaultdict(list)
    for m in mentions:
        members[m.cluster_id].append(m)
    # Cluster ids are unique across the corpus: a singleton has one mention, an intra-document
    # chain lies in one document, and neither reuses a cross-document chain id.
    assert all(len(ms) == 1 for cid, ms in members.items() if cid.startswith("SINGLETON_"))
    intra = {cid: ms for cid, ms in members.items() if cid.startswith("INTRA_")}
    assert intra and all(len({m.doc_id for m in ms}) == 1 and cid.startswith(f"INTRA_{ms[0].doc_id}_")
                         for cid, ms in intra.items())
    assert {cid for d in cross.values() for m in d.mentions for cid in [m.cluster_id]} == {
        cid for cid in members if _chain_kind(cid) == "CROSS"}
    # --mention-type still selects by the markable's own tag.
    events = [m for d in read_ecbplus(ecbplus_subset, chains="all") for m in d.mentions]
    assert events == [m for d in every.values() for m in d.mentions if m.type == "event"]
    assert collections.Counter(_chain_kind(m.cluster_id) for m in events) == {
        "CROSS": 404, "SINGLETON": 668, "INTRA": 8}


def test_chains_all_matches_the_published_statistics(test_topics_folder: Path) -> None:
    # Barhom et al. (2019), Table 1, ECB+ test split (validated sentences, singletons included):
    # 1,780 event mentions in 805 chains, 2,055 entity mentions in 608 chains.
    docs = list(read_ecbplus(test_topics_folder, mention_type="all", validated_only=True, chains="all"))
    for kind, mentions, chains in (("event", 1_780, 805), ("entity", 2_055, 608)):
        of_kind = [m for d in docs for m in d.mentions if m.type == kind]
        assert (len(of_kind), len({m.cluster_id for m in of_kind})) == (mentions, chains), kind
    # The cross-document mentions are those of the default reading (1,197 events).
    default = sum(len(d.mentions) for d in read_ecbplus(test_topics_folder, validated_only=True))
    events = [m for d in docs for m in d.mentions if m.type == "event"]
    assert sum(_chain_kind(m.cluster_id) == "CROSS" for m in events) == default == 1_197
    for doc in docs:
        for m in doc.mentions:
            assert any(s <= m.start and m.end <= e for s, e in doc.units)


def test_chains_all_on_the_whole_corpus(corpus: dict[str, Document]) -> None:
    docs = list(read_ecbplus(TARBALL, mention_type="all", chains="all"))
    mentions = [m for d in docs for m in d.mentions]
    assert len({m.mention_id for m in mentions}) == len(mentions)
    for kind, total, clusters in (("event", 15_003, 8_877), ("entity", 17_294, 7_657)):
        of_kind = [m for m in mentions if m.type == kind]
        assert (len(of_kind), len({m.cluster_id for m in of_kind})) == (total, clusters), kind
    # All 185 INTRA_DOC_COREF relations of the release give a chain (409 sources), and none of
    # their sources is also a CROSS_DOC_COREF source.
    intra = [m for m in mentions if m.cluster_id.startswith("INTRA_")]
    assert (len(intra), len({m.cluster_id for m in intra})) == (409, 185)
    cross = [m for m in mentions if _chain_kind(m.cluster_id) == "CROSS"]
    assert cross == [m for d in corpus.values() for m in d.mentions]


def test_chains_must_be_known() -> None:
    with pytest.raises(InputError, match="--chains must be one of cross-document, all"):
        next(read_ecbplus(TARBALL, chains="intra"))


def test_chains_all_dataset_keeps_the_search_queries(ecbplus_subset: Path, subset_dataset: Path,
                                                     tmp_path: Path) -> None:
    import json

    from corefsearch.datasets.build import BuildOptions, build_dataset

    out = tmp_path / "all"
    build_dataset(read_ecbplus(ecbplus_subset, chains="all"), out, BuildOptions(splits=("test",)),
                  source_name=str(ecbplus_subset))
    def passages(root: Path) -> list[dict]:
        return [json.loads(line) for line in (root / "passages.jsonl").read_text().splitlines()]

    # The same passages; each keeps its cross-document mentions and gains the others.
    old_passages, new_passages = passages(subset_dataset), passages(out)
    assert [{k: v for k, v in p.items() if k != "mentions"} for p in new_passages] == [
        {k: v for k, v in p.items() if k != "mentions"} for p in old_passages]
    for old_passage, new_passage in zip(old_passages, new_passages, strict=True):
        kept = [m for m in new_passage["mentions"] if _chain_kind(m["cluster_id"]) == "CROSS"]
        assert kept == old_passage["mentions"]
    assert sum(len(p["mentions"]) for p in new_passages) > sum(len(p["mentions"]) for p in old_passages)

    def queries(root: Path) -> dict[str, dict]:
        lines = (root / "queries" / "test.jsonl").read_text().splitlines()
        return {q["id"]: q for q in map(json.loads, lines)}

    def qrels(root: Path) -> dict[str, set[str]]:
        relevant = collections.defaultdict(set)
        for line in (root / "qrels" / "test.txt").read_text().splitlines():
            qid, _, pid, _ = line.split()
            relevant[qid].add(pid)
        return relevant

    before, after = queries(subset_dataset), queries(out)
    # Every query of the default dataset is there, with the same relevant passages; the new ones
    # come from intra-document chains only (a singleton has no other passage to find).
    assert {qid: after[qid] for qid in before} == before
    assert {_chain_kind(after[qid]["cluster_id"]) for qid in set(after) - set(before)} == {"INTRA"}
    old, new = qrels(subset_dataset), qrels(out)
    assert {qid: new[qid] for qid in old} == old
    clusters = [json.loads(line) for line in (out / "clusters.jsonl").read_text().splitlines()]
    assert len({c["cluster_id"] for c in clusters}) == len(clusters)
    assert sum(c["cluster_id"].startswith("SINGLETON_") for c in clusters) == 668


def test_cli_chains_option(ecbplus_subset: Path, news_corpus: NewsCorpus, tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from corefsearch.cli import app

    runner = CliRunner(env={"COLUMNS": "250"})
    result = runner.invoke(app, ["build-dataset", str(news_corpus.folder), "--format", "generic", "--chains", "all",
                                 "--out", str(tmp_path / "generic")])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "--chains applies to --format ecbplus only" in result.output
    assert not (tmp_path / "generic").exists()
    for chains in (None, "all"):
        out = tmp_path / f"ecbplus-{chains}"
        args = ["build-dataset", str(ecbplus_subset), "--format", "ecbplus", "--splits", "test", "--out", str(out)]
        result = runner.invoke(app, args + (["--chains", chains] if chains else []))
        assert result.exit_code == 0, result.output
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["options"]["source"]["chains"] == (chains or "cross-document")
    result = runner.invoke(app, ["build-dataset", str(ecbplus_subset), "--format", "ecbplus", "--chains", "intra",
                                 "--out", str(tmp_path / "bad")])
    assert result.exit_code == 1 and "--chains must be one of" in result.output
