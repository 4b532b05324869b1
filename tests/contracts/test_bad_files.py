"""Bad input files, reader by reader.

Unreadable input (a folder where a file goes, binary data, bytes that are not UTF-8: ``FILE:LINE``),
accepted variants (a UTF-8 byte order mark, CRLF line ends: the same results as plain files), empty
input (no documents, no mentions, no passages, no results, an empty split) and records of the wrong
structure or type in every file the project reads: one line, exit 1, no traceback, nothing
half-written.
"""

from __future__ import annotations

import gzip
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Document, Mention
from corefsearch.cli import app
from corefsearch.datasets.build import BuildOptions, build_dataset
from corefsearch.datasets.coresearch import read_coresearch
from corefsearch.datasets.dataset import iter_passages, read_queries
from corefsearch.datasets.ecbplus import read_validated_sentences
from corefsearch.datasets.wec import read_wec
from corefsearch.evaluate.spans import read_spans

# A wide console, so that rich does not wrap long temporary paths in the messages.
runner = CliRunner(env={"COLUMNS": "250"})

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"


def fails(*args: object, code: int = 1) -> str:
    """Run the CLI, expect a clean failure; return its message as one line."""
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # one line
    return result.stderr.strip()


def succeeds(*args: object) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    return result


def generic_build(folder: Path, out: Path, *extra: object) -> list[object]:
    return ["build-dataset", folder, "--format", "generic", "--out", out, *extra]


def only_input_left(tmp_path: Path, *names: str) -> None:
    """Nothing was written beside the inputs: no dataset, no hidden partial folder."""
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def dataset_files(root: Path) -> dict[str, bytes]:
    """Every file of a dataset but the manifest (which holds the creation time)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


def as_windows(path: Path) -> None:
    """Rewrite a text file as a Windows tool would save it: a UTF-8 BOM and CRLF line ends."""
    text = path.read_text(encoding="utf-8")
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))


# --- unreadable input -----------------------------------------------------------------------------


def test_folder_where_a_file_is_expected(news_corpus: Any, tmp_path: Path) -> None:
    corpus = news_corpus.folder / "corpus.jsonl"
    corpus.unlink()
    corpus.mkdir()
    message = fails(*generic_build(news_corpus.folder, tmp_path / "ds"))
    assert message == f"error: {corpus}: is a folder, expected a file"
    only_input_left(tmp_path, "news")

    run, qrels = tmp_path / "bm25.run", tmp_path / "qrels.txt"
    run.write_text("q1 Q0 p1 1 3.5 bm25\n", encoding="utf-8")
    qrels.write_text("q1 0 p1 1\n", encoding="utf-8")
    assert fails("evaluate", news_corpus.folder, "--qrels", qrels) == (
        f"error: {news_corpus.folder}: is a folder, expected a file")
    assert fails("evaluate", run, "--qrels", tmp_path) == f"error: {tmp_path}: is a folder, expected a file"
    assert fails("build-dataset", news_corpus.folder, "--format", "wec", "--out", tmp_path / "ds") == (
        f"error: {news_corpus.folder}: is a folder, expected a file")
    with pytest.raises(InputError, match="is a folder, expected a file"):
        read_validated_sentences(tmp_path)
    with pytest.raises(InputError, match="is a folder, expected a file"):
        read_queries(tmp_path)
    # and the reverse: a file where the generic corpus folder goes
    message = fails(*generic_build(run, tmp_path / "ds"))
    assert "the generic format is a folder holding corpus.jsonl and mentions.jsonl" in message
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(("content", "why"), [
    (lambda text: gzip.compress(text), "1: not a text file: this is gzip-compressed data (a gzipped file must be "
                                       "named *.gz)"),
    (lambda text: PNG, "1: not a text file: this is a PNG image"),
    (lambda text: text.replace(b"\n", b"\n\x00\x00\x00\x00", 1), "2: binary data, not text (a NUL byte at column 1)"),
])
def test_binary_data_where_jsonl_is_expected(news_corpus: Any, tmp_path: Path, content: Any, why: str) -> None:
    corpus = news_corpus.folder / "corpus.jsonl"
    corpus.write_bytes(content(corpus.read_bytes()))
    assert fails(*generic_build(news_corpus.folder, tmp_path / "ds")) == f"error: {corpus}:{why}"
    only_input_left(tmp_path, "news")


def test_binary_run_and_qrels(tmp_path: Path) -> None:
    run, qrels = tmp_path / "bm25.run", tmp_path / "qrels.txt"
    run.write_bytes(PNG)
    qrels.write_text("q1 0 p1 1\n", encoding="utf-8")
    assert fails("evaluate", run, "--qrels", qrels) == f"error: {run}:1: not a text file: this is a PNG image"
    run.write_text("q1 Q0 p1 1 3.5 bm25\n", encoding="utf-8")
    qrels.write_bytes(b"q1 0 p1 1\nq1 0 p2\x00 1\n")
    assert fails("evaluate", run, "--qrels", qrels) == (
        f"error: {qrels}:2: binary data, not text (a NUL byte at column 8)")
    # A gzip file whose name says so is read; one whose name says so wrongly is named.
    (tmp_path / "qrels.txt.gz").write_bytes(gzip.compress(b"q1 0 p1 1\n"))
    succeeds("evaluate", run, "--qrels", tmp_path / "qrels.txt.gz")
    (tmp_path / "fake.txt.gz").write_bytes(b"q1 0 p1 1\n")
    assert fails("evaluate", run, "--qrels", tmp_path / "fake.txt.gz") == (
        f"error: {tmp_path / 'fake.txt.gz'}: not gzip data, although its name ends in .gz")


def test_bytes_that_are_not_utf8_name_file_and_line(news_corpus: Any, tmp_path: Path) -> None:
    corpus = news_corpus.folder / "corpus.jsonl"
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = lines[2].replace("earthquake", "séisme")
    column = lines[2].index("é") + 1
    corpus.write_bytes("".join(lines).encode("latin-1"))  # how a Windows-1252 editor would save it
    assert fails(*generic_build(news_corpus.folder, tmp_path / "ds")) == (
        f"error: {corpus}:3: not UTF-8 text (byte 0xe9 at column {column}); save the file as UTF-8")
    only_input_left(tmp_path, "news")

    run, qrels = tmp_path / "bm25.run", tmp_path / "qrels.txt"
    run.write_bytes("q1 Q0 p1 1 3.5 bm25\nq1 Q0 café 2 2.0 bm25\n".encode("latin-1"))
    qrels.write_text("q1 0 p1 1\n", encoding="utf-8")
    assert fails("evaluate", run, "--qrels", qrels) == (
        f"error: {run}:2: not UTF-8 text (byte 0xe9 at column 10); save the file as UTF-8")


def test_bytes_that_are_not_utf8_in_json_and_csv_files(tmp_path: Path) -> None:
    # A JSON list (WEC, CoreSearch) is parsed as a stream of bytes; the line is still found.
    wec = tmp_path / "wec.json"
    records = [{"coref_chain": 1, "doc_id": "Dayton", "mention_context": ["The", "flood"], "tokens_number": [1],
                "tokens_str": "flood", "mention_id": "m1"},
               {"coref_chain": 1, "doc_id": "Flood", "mention_context": ["Le", "déluge"], "tokens_number": [1],
                "tokens_str": "déluge", "mention_id": "m2"}]
    text = json.dumps(records, indent=1, ensure_ascii=False)
    wec.write_bytes(text.encode("latin-1"))
    line = text[:text.index("é")].count("\n") + 1
    with pytest.raises(InputError, match=rf"^{wec}:{line}: not UTF-8 text \(byte 0xe9"):
        list(read_wec(wec))
    csv = tmp_path / "sentences.csv"
    csv.write_bytes("Topic,File,Sentence Number,Sentence\n1,10ecbplus,2,Caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match=rf"^{csv}:2: not UTF-8 text \(byte 0xe9 at column 18\)"):
        read_validated_sentences(csv)


# --- accepted: a byte order mark and CRLF line ends ------------------------------------------------

QRELS = "q1 0 p1 1\nq1 0 p4 1\nq2 0 p2 2\nq2 0 p9 1\nq3 0 p3 1\nq3 0 p8 -1\n"
RUN = ("q1 Q0 p7 1 9.5 bm25\nq1 Q0 p1 2 8.0 bm25\nq1 Q0 p4 3 7.0 bm25\nq2 Q0 p2 1 5.0 bm25\n"
       "q2 Q0 p5 2 4.0 bm25\nq3 Q0 p8 1 3.0 bm25\nq3 Q0 p6 2 2.0 bm25\nq3 Q0 p3 3 1.0 bm25\n")


def evaluate_json(run: Path, qrels: Path) -> dict[str, Any]:
    return json.loads(succeeds("evaluate", run, "--qrels", qrels, "--output-format", "json").stdout)


def test_bom_and_crlf_give_the_same_metrics(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "windows").mkdir()
    for folder in ("plain", "windows"):
        (tmp_path / folder / "qrels.txt").write_text(QRELS, encoding="utf-8")
        (tmp_path / folder / "bm25.run").write_text(RUN, encoding="utf-8")
    expected = evaluate_json(tmp_path / "plain" / "bm25.run", tmp_path / "plain" / "qrels.txt")
    assert expected["bm25"]["MRR@10"] == pytest.approx((1 / 2 + 1 + 1 / 3) / 3)

    qrels, run = tmp_path / "windows" / "qrels.txt", tmp_path / "windows" / "bm25.run"
    qrels.write_bytes(b"\xef\xbb\xbf" + QRELS.encode())  # a BOM only
    assert evaluate_json(tmp_path / "plain" / "bm25.run", qrels) == expected
    as_windows(tmp_path / "plain" / "qrels.txt")  # BOM and CRLF (the BOM is not read as part of "q1")
    assert (tmp_path / "plain" / "qrels.txt").read_bytes().startswith(b"\xef\xbb\xbfq1 0 p1 1\r\n")
    assert evaluate_json(tmp_path / "plain" / "bm25.run", tmp_path / "plain" / "qrels.txt") == expected
    run.write_bytes(RUN.replace("\n", "\r\n").encode())  # CRLF only
    assert evaluate_json(run, qrels) == expected


def test_bom_and_crlf_corpus_builds_the_same_dataset(news_corpus: Any, tmp_path: Path) -> None:
    succeeds(*generic_build(news_corpus.folder, tmp_path / "plain"), "--split-ratios", "0,0,1")
    for name in ("corpus.jsonl", "mentions.jsonl"):
        as_windows(news_corpus.folder / name)
    succeeds(*generic_build(news_corpus.folder, tmp_path / "windows"), "--split-ratios", "0,0,1")
    plain = dataset_files(tmp_path / "plain")
    assert len(plain["queries/test.jsonl"].splitlines()) == 8
    assert dataset_files(tmp_path / "windows") == plain

    # ... and the dataset's own files read the same when a tool has rewritten them so
    queries, passages = tmp_path / "plain" / "queries" / "test.jsonl", tmp_path / "plain" / "passages.jsonl"
    before = (read_queries(queries), list(iter_passages(passages)))
    as_windows(queries)
    as_windows(passages)
    assert (read_queries(queries), list(iter_passages(passages))) == before


def test_bom_in_json_list_files(tmp_path: Path) -> None:
    records = [{"coref_chain": 7, "doc_id": "Dayton", "mention_context": ["The", "1913", "flood"],
                "tokens_number": [2], "tokens_str": "flood", "mention_id": "m1"}]
    plain, bom, gz = tmp_path / "plain.json", tmp_path / "bom.json", tmp_path / "bom.json.gz"
    plain.write_text(json.dumps(records), encoding="utf-8")
    bom.write_bytes(b"\xef\xbb\xbf\r\n" + json.dumps(records, indent=2).replace("\n", "\r\n").encode())
    gz.write_bytes(gzip.compress(bom.read_bytes()))
    expected = list(read_wec(plain))
    assert expected and list(read_wec(bom)) == expected == list(read_wec(gz))


# --- empty input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "\n\n", "\ufeff\r\n"])
def test_corpus_without_documents(news_corpus: Any, tmp_path: Path, content: str) -> None:
    (news_corpus.folder / "corpus.jsonl").write_text(content, encoding="utf-8")
    (news_corpus.folder / "mentions.jsonl").write_text("", encoding="utf-8")
    message = fails(*generic_build(news_corpus.folder, tmp_path / "ds"))
    assert message == f"error: {news_corpus.folder}: holds no documents; nothing to build a dataset from"
    only_input_left(tmp_path, "news")


def test_corpus_without_mentions(news_corpus: Any, tmp_path: Path) -> None:
    # An empty mentions.jsonl: plain documents (a dataset of passages, no queries), said in one line, no warning.
    (news_corpus.folder / "mentions.jsonl").write_text("", encoding="utf-8")
    result = runner.invoke(app, [str(a) for a in generic_build(news_corpus.folder, tmp_path / "ds")])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip().splitlines() == [
        f"{news_corpus.folder / 'mentions.jsonl'} is empty: {news_corpus.folder} is read as plain documents; the "
        "dataset holds its passages, without mentions, queries or qrels"]
    assert (tmp_path / "ds" / "queries" / "test.jsonl").read_text() == ""


def test_corpus_whose_mentions_are_all_dropped(tmp_path: Path) -> None:
    text = "Storms hit the coast. Flooding followed."
    doc = Document("d1", text, units=[(0, 21), (22, len(text))], mentions=[Mention("m1", "d1", 7, 29, "c1")])
    with pytest.raises(InputError, match=r"all 1 cross a passage boundary \(try --passage window or document\)"):
        build_dataset([doc], tmp_path / "ds", BuildOptions())
    assert list(tmp_path.iterdir()) == []


def test_empty_distractors_file(news_corpus: Any, tmp_path: Path) -> None:
    (tmp_path / "distractors.jsonl").write_text("\n", encoding="utf-8")
    distractors = tmp_path / "distractors.jsonl"
    message = fails(*generic_build(news_corpus.folder, tmp_path / "ds"), "--distractors", distractors)
    assert f"{tmp_path / 'distractors.jsonl'}: holds no documents" in message
    only_input_left(tmp_path, "news", "distractors.jsonl")


def _warnings(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning:")]


def test_empty_split_warns_and_names_split_ratios(news_corpus: Any, tmp_path: Path) -> None:
    # 5 clusters, 3 of them with queries: 98% of 5 is all of them, so dev and test get none.
    result = succeeds(*generic_build(news_corpus.folder, tmp_path / "ds"), "--split-ratios", "0.98,0.01,0.01")
    assert _warnings(result) == [
        f"warning: split '{split}' has no queries: too few clusters with queries (3) for --split-ratios "
        f"0.98,0.01,0.01; raise its ratio, or leave it out with --splits train" for split in ("dev", "test")]
    assert (tmp_path / "ds" / "queries" / "dev.jsonl").read_text() == ""
    # A split whose ratio is 0 was asked to be empty: no warning.
    result = succeeds(*generic_build(news_corpus.folder, tmp_path / "ds2"), "--split-ratios", "0,0,1")
    assert _warnings(result) == []


def _sentence_document(doc_id: str, split: str, cluster: str | None) -> Document:
    text = "The river flooded. The flood was severe."
    mentions = [Mention(f"{doc_id}-a", doc_id, 10, 17, cluster), Mention(f"{doc_id}-b", doc_id, 23, 28, cluster)] \
        if cluster else []
    return Document(doc_id, text, units=[(0, 18), (19, len(text))], mentions=mentions, split=split)


def test_empty_fixed_split_warns_and_names_splits(tmp_path: Path) -> None:
    documents = [_sentence_document("t1", "test", "flood"), _sentence_document("d1", "dev", None)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = build_dataset(documents, tmp_path / "ds", BuildOptions(splits=("dev", "test")))
    assert [str(w.message) for w in caught] == [
        "split 'dev' has no queries: no cluster of its documents has mentions in two passages; "
        "leave it out with --splits test"]
    assert summary.splits["test"].queries == 2


def test_dataset_without_any_query_warns(tmp_path: Path) -> None:
    documents = [_sentence_document("d1", "test", None),
                 Document("d2", "A storm hit.", units=[(0, 12)], mentions=[Mention("m", "d2", 2, 7, "c")])]
    with pytest.warns(UserWarning, match=r"the dataset has no queries: no cluster has mentions in two different "
                                         r"passages \(1 mention\(s\) in 1 cluster\(s\)\)"):
        build_dataset(documents, tmp_path / "ds", BuildOptions(splits=("test",)), source_name="storms")


def test_empty_run_and_empty_qrels(tmp_path: Path) -> None:
    run, qrels = tmp_path / "bm25.run", tmp_path / "qrels.txt"
    run.write_text("\n", encoding="utf-8")
    qrels.write_text(QRELS, encoding="utf-8")
    assert fails("evaluate", run, "--qrels", qrels) == (
        f"error: {run}: holds no results (an empty run); write a run with `corefsearch search`")
    run.write_text(RUN, encoding="utf-8")
    qrels.write_text("", encoding="utf-8")
    assert fails("evaluate", run, "--qrels", qrels).startswith(f"error: {qrels}: holds no judgments")


@pytest.mark.java
def test_index_of_a_dataset_without_passages(subset_dataset: Path, tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    shutil.copytree(subset_dataset, dataset)
    (dataset / "passages.jsonl").write_text("", encoding="utf-8")
    message = fails("index", dataset, "--out", tmp_path / "index")
    assert message == (f"error: {dataset / 'passages.jsonl'} holds no passages; rebuild the dataset from a corpus "
                       "with documents (`corefsearch build-dataset`)")
    index = tmp_path / "index"
    assert not index.exists() or list(index.iterdir()) == []  # no index, not even a hidden partial one


# --- wrong structure ------------------------------------------------------------------------------


def test_json_object_where_a_list_is_expected(tmp_path: Path) -> None:
    wec = tmp_path / "wec.json"
    wec.write_text(json.dumps({"mentions": [{"mention_id": "m1"}]}), encoding="utf-8")
    message = fails("build-dataset", wec, "--format", "wec", "--out", tmp_path / "ds")
    assert message == (f"error: {wec}: holds a JSON object, expected a JSON list of mention records "
                       "([{...}, ...])")
    wec.write_text("[]", encoding="utf-8")
    assert fails("build-dataset", wec, "--format", "wec", "--out", tmp_path / "ds") == (
        f"error: {wec}: holds no documents; nothing to build a dataset from")
    wec.write_text("", encoding="utf-8")
    assert fails("build-dataset", wec, "--format", "wec", "--out", tmp_path / "ds") == (
        f"error: {wec}: empty file, expected a JSON list of mention records")
    only_input_left(tmp_path, "wec.json")

    release = tmp_path / "release"
    release.mkdir()
    (release / "Dev_all_passages.json").write_text("[]", encoding="utf-8")
    (release / "Dev_queries.json").write_text("[]", encoding="utf-8")
    clusters = release / "Dev_gold_clusters.json"
    clusters.write_text(json.dumps({"clusterId": 1, "mentionIds": []}), encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{clusters}: holds a JSON object, expected a JSON list of cluster "
                                         r"records"):
        list(read_coresearch(release, splits=("dev",)))
    clusters.write_text(json.dumps([{"clusterId": 1, "mentionIds": []}]), encoding="utf-8")
    passages = release / "Dev_all_passages.json"
    passages.write_text(json.dumps([{"id": "p1", "goldChain": [1], "context": ["A", "flood"]}]), encoding="utf-8")
    with pytest.raises(InputError, match=r"record p1: field 'goldChain' must be a non-empty string or integer, "
                                         r"got \[1\]"):
        list(read_coresearch(release, splits=("dev",)))


GOOD_QUERY = {"id": "q2", "passage_id": "p1", "text": "The flood hit Dayton.", "start": 4, "end": 9,
              "mention": "flood", "cluster_id": "c1", "type": "event"}


@pytest.mark.parametrize(("change", "message"), [
    ({"start": "4"}, "query q2: field 'start' must be an integer, got '4'"),
    ({"start": True}, "query q2: field 'start' must be an integer, got True"),
    ({"end": 9.0}, "query q2: field 'end' must be an integer, got 9.0"),
    ({"text": 3}, "query q2: field 'text' must be a string, got 3"),
    ({"id": None}, "field 'id' must be a non-empty string or integer, got None"),
    ({"id": ["q2"]}, "field 'id' must be a non-empty string or integer, got ['q2']"),
    ({"id": ""}, "field 'id' must be a non-empty string or integer, got ''"),
    ({"cluster_id": {"c": 1}}, "query q2: field 'cluster_id' must be a non-empty string or integer, got {'c': 1}"),
    ({"mention": 5}, "query q2: field 'mention' must be a string, got 5"),
    ({"type": "state"}, "query q2: type must be one of event, entity, got 'state'"),
    ({"text": None}, "query q2: field 'text' must be a string, got None"),
    ({"start": None}, "query q2: field 'start' must be an integer, got None"),
])
def test_query_fields_of_the_wrong_type(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    path = tmp_path / "queries.jsonl"
    path.write_text(json.dumps(GOOD_QUERY | {"id": "q1"}) + "\n" + json.dumps(GOOD_QUERY | change) + "\n",
                    encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_queries(path)
    assert str(err.value) == f"{path}:2: {message}"


@pytest.mark.java
def test_search_with_a_query_of_the_wrong_type(subset_dataset: Path, subset_index: Path, tmp_path: Path) -> None:
    lines = (subset_dataset / "queries" / "test.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    record = json.loads(lines[1])
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join([lines[0], json.dumps(record | {"start": str(record["start"])}), lines[2]]) + "\n",
                       encoding="utf-8")
    message = fails("search", "--index", subset_index, "--queries", queries, "--out", tmp_path / "run.txt")
    assert message == (f"error: {queries}:2: query {record['id']}: field 'start' must be an integer, "
                       f"got '{record['start']}'")
    only_input_left(tmp_path, "queries.jsonl")
    # the same file saved by a Windows tool is searched as it is
    queries.write_text("\n".join(lines) + "\n", encoding="utf-8")
    as_windows(queries)
    succeeds("search", "--index", subset_index, "--queries", queries, "--out", tmp_path / "run.txt")
    assert {line.split()[0] for line in (tmp_path / "run.txt").read_text().splitlines()} == {
        json.loads(line)["id"] for line in lines}


def test_query_lacking_a_field_and_non_json_numbers(tmp_path: Path) -> None:
    path = tmp_path / "queries.jsonl"
    path.write_text(json.dumps({k: v for k, v in GOOD_QUERY.items() if k != "end"}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}:1: query q2 lacks the field 'end'$"):
        read_queries(path)
    path.write_text(json.dumps(GOOD_QUERY | {"start": float("nan")}) + "\n", encoding="utf-8")
    assert "NaN" in path.read_text()  # Python writes it; it is not JSON
    with pytest.raises(InputError, match=rf"^{path}:1: invalid JSON \(NaN is not a JSON number\)$"):
        read_queries(path)


GOOD_PASSAGE = {"id": "p1", "doc_id": "d1", "title": "", "text": "The flood hit Dayton.",
                "mentions": [{"mention_id": "m1", "start": 4, "end": 9, "cluster_id": "c1", "type": "event"}],
                "split": None}


@pytest.mark.parametrize(("change", "message"), [
    ({"mentions": "m1"}, "passage p2: field 'mentions' must be a list, got 'm1'"),
    ({"mentions": ["m1"]}, "passage p2: mentions[0] must be a JSON object, got 'm1'"),
    ({"mentions": [GOOD_PASSAGE["mentions"][0] | {"start": "4"}]},
     "passage p2: mention m1: field 'start' must be an integer, got '4'"),
    ({"mentions": [GOOD_PASSAGE["mentions"][0] | {"end": False}]},
     "passage p2: mention m1: field 'end' must be an integer, got False"),
    ({"mentions": [{"start": 4, "end": 9, "cluster_id": "c1"}]}, "passage p2: mentions[0] lacks the field "
                                                                 "'mention_id'"),
    ({"mentions": [GOOD_PASSAGE["mentions"][0] | {"end": 99}]},
     "passage p2: mention m1 offsets [4, 99) do not fit the text"),
    ({"text": None}, "passage p2: field 'text' must be a string, got None"),
    ({"title": 5}, "passage p2: field 'title' must be a string, got 5"),
    ({"split": "validation"}, "passage p2: split must be one of train, dev, test, got 'validation'"),
    ({"id": 1.5}, "field 'id' must be a non-empty string or integer, got 1.5"),
])
def test_passage_fields_of_the_wrong_type(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    path = tmp_path / "passages.jsonl"
    path.write_text(json.dumps(GOOD_PASSAGE) + "\n" + json.dumps(GOOD_PASSAGE | {"id": "p2"} | change) + "\n",
                    encoding="utf-8")
    with pytest.raises(InputError) as err:
        list(iter_passages(path))
    assert str(err.value) == f"{path}:2: {message}"


def test_generic_fields_of_the_wrong_type(news_corpus: Any, tmp_path: Path) -> None:
    mentions = news_corpus.folder / "mentions.jsonl"
    lines = mentions.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[1])
    for change, why in (({"start": True}, "field 'start' must be an integer, got True"),
                        ({"end": "20"}, "field 'end' must be an integer, got '20'"),
                        ({"cluster_id": 1.5}, "field 'cluster_id' must be a non-empty string or integer, got 1.5")):
        mentions.write_text("\n".join([lines[0], json.dumps(record | change), *lines[2:]]) + "\n", encoding="utf-8")
        message = fails(*generic_build(news_corpus.folder, tmp_path / "ds"))
        assert message == f"error: {mentions}:2: mention {record['mention_id']}: {why}"
    only_input_left(tmp_path, "news")


def test_spans_score_that_is_not_finite(tmp_path: Path) -> None:
    path = tmp_path / "run.spans.jsonl"
    path.write_text('{"qid": "q1", "passage_id": "p1", "start": 0, "end": 3, "text": "The", "score": 1e999}\n',
                    encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}:1: score must be a finite number, got inf$"):
        read_spans(path)
    path.write_text('{"qid": "q1", "passage_id": "p1", "start": 0, "end": 3, "text": "The", "score": -Infinity}\n',
                    encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}:1: invalid JSON \(-Infinity is not a JSON number\)$"):
        read_spans(path)


@pytest.mark.parametrize("score", ["nan", "NaN", "inf", "-inf", "Infinity"])
def test_run_score_that_is_not_finite(tmp_path: Path, score: str) -> None:
    run, qrels = tmp_path / "bm25.run", tmp_path / "qrels.txt"
    run.write_text(f"q1 Q0 p1 1 3.5 bm25\nq1 Q0 p2 2 {score} bm25\n", encoding="utf-8")
    qrels.write_text(QRELS, encoding="utf-8")
    assert fails("evaluate", run, "--qrels", qrels) == f"error: {run}:2: score {score} is not a finite number"


def test_run_listing_a_passage_twice_for_one_query(tmp_path: Path) -> None:
    run, qrels = tmp_path / "bm25.run", tmp_path / "qrels.txt"
    # p1 twice for q1 (ambiguous: which score?); p1 once for each of q1 and q2 is fine
    run.write_text("q1 Q0 p1 1 3.5 bm25\nq2 Q0 p1 1 3.0 bm25\nq1 Q0 p1 2 2.0 bm25\n", encoding="utf-8")
    qrels.write_text(QRELS, encoding="utf-8")
    assert fails("evaluate", run, "--qrels", qrels) == f"error: {run}:3: passage p1 is listed twice for query q1"


@pytest.mark.parametrize("relevance", ["1.5", "yes", "1_0", "", "0x1", "١"])
def test_qrels_relevance_that_is_not_an_integer(tmp_path: Path, relevance: str) -> None:
    run, qrels = tmp_path / "bm25.run", tmp_path / "qrels.txt"
    run.write_text(RUN, encoding="utf-8")
    qrels.write_text(f"q1 0 p1 1\nq1 0 p2 {relevance}\n" if relevance else "q1 0 p1 1\nq1 0 p2 x y\n",
                     encoding="utf-8")
    message = fails("evaluate", run, "--qrels", qrels)
    if relevance:
        assert message == f"error: {qrels}:2: relevance must be an integer, got {relevance!r}"
    else:
        assert message.startswith(f"error: {qrels}:2: expected 4 columns")


def test_qrels_integer_relevance_values(tmp_path: Path) -> None:
    run, qrels = tmp_path / "bm25.run", tmp_path / "qrels.txt"
    run.write_text(RUN, encoding="utf-8")
    qrels.write_text(QRELS, encoding="utf-8")
    expected = evaluate_json(run, qrels)["bm25"]
    # Any integer is a relevance, as for trec_eval: "+2" is 2; -1 (unjudged for infAP) and -3 are not relevant,
    # so only infAP (for which p7 is now judged) may change.
    qrels.write_text(QRELS.replace("q2 0 p2 2", "q2 0 p2 +2") + "q1 0 p7 -3\nq3 0 p3 1\n", encoding="utf-8")
    scores = evaluate_json(run, qrels)["bm25"]
    assert "infAP" in scores and scores.keys() == expected.keys()
    assert {k: v for k, v in scores.items() if k != "infAP"} == {k: v for k, v in expected.items() if k != "infAP"}
    # A pair judged twice the same way is harmless; differently, it is ambiguous.
    qrels.write_text(QRELS + "q1 0 p1 0\n", encoding="utf-8")
    assert fails("evaluate", run, "--qrels", qrels) == (
        f"error: {qrels}:7: passage p1 of query q1 is judged twice, 1 and 0")
