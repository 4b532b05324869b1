"""Corrupted or mismatched artefacts and valid but extreme input: each a
one-line error naming the file and what to run (exit 1, no traceback, nothing written), or, for
extreme input, a run that goes through and says what it did (a warning). Also Java exceptions,
messages printed whole when stderr is not a terminal, options refused before any work, and
training without dev queries.

Tiny random BERTs and datasets come from helpers.py and conftest.py."""

from __future__ import annotations

import json
import random
import shutil
import string
import warnings
from pathlib import Path
from typing import Any

import pytest
import typer
from helpers import build_tiny_dataset
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.cli.app import user_errors
from corefsearch.datasets.dataset import Dataset

# No COLUMNS: error lines must come out whole at rich's default width when stderr is not a terminal.
runner = CliRunner()
java = pytest.mark.java

# The tiny models, corpora and datasets of the dense tests (conftest.py), on one torch thread.
pytestmark = pytest.mark.usefixtures("one_thread")


def fails(*args: object) -> str:
    """Run the CLI, expect exit 1 with one error line on stderr and nothing else; return that line."""
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output and "\tat " not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def succeeds(*args: object) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output and "\tat " not in result.output, result.output
    assert result.exit_code == 0, result.output
    return result


def copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


def queries_of(subset_dataset: Path) -> Path:
    return subset_dataset / "queries" / "test.jsonl"


# --- manifests and configurations that are not JSON, or not ours ------------------------------------


def test_dataset_manifest_not_json(subset_dataset: Path, tmp_path: Path) -> None:
    dataset = copy(subset_dataset, tmp_path / "dataset")
    (dataset / "manifest.json").write_text('{"kind": "corefsearch-dataset",\n "counts": {', encoding="utf-8")
    message = fails("index", dataset, "--out", tmp_path / "index")
    assert f"{dataset / 'manifest.json'}:2: not a valid dataset manifest" in message
    assert "corefsearch build-dataset" in message and "--overwrite" in message
    assert not (tmp_path / "index").exists()
    (dataset / "manifest.json").write_text("[1, 2]", encoding="utf-8")
    assert "a JSON list where an object is expected" in fails("index", dataset, "--out", tmp_path / "index")


@java
def test_lucene_manifest_not_json(subset_index: Path, subset_dataset: Path, tmp_path: Path) -> None:
    index = copy(subset_index, tmp_path / "index")
    (index / "lucene" / "manifest.json").write_bytes(b"\x00\x01 not json")
    for args in (("query", "--index", index, "--mention", "earthquake"),
                 ("search", "--index", index, "--queries", queries_of(subset_dataset), "--out", tmp_path / "r.txt")):
        message = fails(*args)
        assert str(index / "lucene" / "manifest.json") in message
        assert f"corefsearch index DATASET --out {index} --overwrite" in message
    assert not (tmp_path / "r.txt").exists()


def test_dense_manifest_not_json(subset_dataset: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "index" / "dense" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"kind": "corefsearch-dense-index", "passages": }', encoding="utf-8")
    message = fails("search", "--index", tmp_path / "index", "--queries", queries_of(subset_dataset),
                    "--out", tmp_path / "run.txt", "--retriever", "dense")
    assert f"{manifest}:1: not a valid dense index manifest" in message and "--dense --encoder MODEL" in message
    assert not (tmp_path / "run.txt").exists()


def retriever_folder(base: Path, out: Path) -> Path:
    from corefsearch.dense.model import BiEncoder, RetrieverConfig

    BiEncoder.from_base(str(base), RetrieverConfig(pooling="mean", max_query_len=24, max_passage_len=32),
                        "cpu").save(out)
    return out


def reader_folder(base: Path, out: Path) -> Path:
    import torch

    from corefsearch.reader.model import CrossEncoderReader, ReaderConfig

    torch.manual_seed(1)
    config = ReaderConfig(head="integrated", max_length=48, max_query_len=16, doc_stride=8, hidden=16)
    CrossEncoderReader.from_base(str(base), config).save(out)
    return out


def edit_json(path: Path, **changes: Any) -> None:
    record = json.loads(path.read_text(encoding="utf-8"))
    record.update(changes)
    path.write_text(json.dumps(record), encoding="utf-8")


def test_retriever_configs_broken_or_with_unknown_keys(tiny_base: Path, small_dataset: Path, tmp_path: Path) -> None:
    model = retriever_folder(tiny_base, tmp_path / "retriever")
    index_args = ("index", small_dataset, "--out", tmp_path / "index", "--dense", "--device", "cpu", "--encoder")
    config = model / "corefsearch_retriever.json"
    original = config.read_text(encoding="utf-8")
    edit_json(config, poolling="cls")  # a typo must not be dropped silently
    message = fails(*index_args, model)
    assert f"{config}: unknown key(s) poolling in the retriever configuration" in message
    assert "corefsearch train retriever" in message
    edit_json(config, poolling=None)
    config.write_text(original.replace('"max_query_len": 24', '"max_query_len": "24"'), encoding="utf-8")
    assert f"{config}: max_query_len is \"24\", expected a int" in fails(*index_args, model)
    config.write_text(original[:-10], encoding="utf-8")
    assert f"{config}:" in fails(*index_args, model)
    config.write_text(original, encoding="utf-8")
    encoder_config = model / "query_encoder" / "corefsearch_encoder.json"
    encoder_config.write_text("pooling: mean", encoding="utf-8")
    assert f"{encoder_config}:1: not a valid corefsearch encoder configuration" in fails(*index_args, model)
    assert not (tmp_path / "index").exists()


@java
def test_reader_config_and_head_broken(tiny_base: Path, subset_index: Path, subset_dataset: Path,
                                       tmp_path: Path) -> None:
    reader = reader_folder(tiny_base, tmp_path / "reader")
    query = ("query", "--index", subset_index, "--mention", "earthquake", "--reader", reader, "--device", "cpu")
    config = reader / "corefsearch_reader.json"
    original = config.read_text(encoding="utf-8")
    edit_json(config, heads=2)
    message = fails(*query)
    assert f"{config}: unknown key(s) heads in the reader configuration" in message
    assert "corefsearch train reader" in message
    config.write_text(original.replace('"head": "integrated"', '"head": "crf"'), encoding="utf-8")
    assert f"{config}: --head must be one of dpr, integrated, got 'crf'" in fails(*query)
    config.write_text(original, encoding="utf-8")
    head = reader / "reader_head.safetensors"
    head.write_bytes(head.read_bytes()[:200])
    message = fails(*query)
    assert f"{head}: the reader's head does not load" in message


def test_training_args_json_broken_in_a_model_folder(tiny_base: Path, small_dataset: Path, tmp_path: Path) -> None:
    # Every JSON file of a model folder is checked before transformers reads the folder.
    model = copy(tiny_base, tmp_path / "model")
    (model / "training_args.json").write_text("{", encoding="utf-8")
    message = fails("index", small_dataset, "--out", tmp_path / "index", "--dense", "--encoder", model,
                    "--device", "cpu")
    assert f"{model / 'training_args.json'}:1: not a valid JSON file of the model folder" in message


# --- weights ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "truncated", "shapes"])
def test_weights_that_do_not_load(damage: str, tiny_base: Path, small_dataset: Path, tmp_path: Path) -> None:
    model = copy(tiny_base, tmp_path / "model")
    weights = model / "model.safetensors"
    if damage == "garbage":
        weights.write_bytes(bytes(random.Random(0).randrange(256) for _ in range(4096)))
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:3000])
    else:
        edit_json(model / "config.json", hidden_size=64, intermediate_size=128)
    message = fails("index", small_dataset, "--out", tmp_path / "index", "--dense", "--encoder", model,
                    "--device", "cpu")
    assert message.startswith(f"error: {model}: cannot load the model: ")
    if damage == "shapes":
        assert "do not fit its config.json" in message
    else:
        assert "not a readable safetensors file" in message
    assert not (tmp_path / "index").exists()


# --- a reader where a retriever goes, and the reverse -----------------------------------------------------


@java
def test_reader_given_as_encoder_and_retriever_as_reader(tiny_base: Path, small_dataset: Path, subset_index: Path,
                                                         tmp_path: Path) -> None:
    reader = reader_folder(tiny_base, tmp_path / "reader")
    retriever = retriever_folder(tiny_base, tmp_path / "retriever")
    message = fails("index", small_dataset, "--out", tmp_path / "index", "--dense", "--encoder", reader,
                    "--device", "cpu")
    assert f"{reader} is a reader (from `corefsearch train reader`), not a retriever" in message
    assert not (tmp_path / "index").exists()
    message = fails("query", "--index", subset_index, "--mention", "earthquake", "--reader", retriever,
                    "--device", "cpu")
    assert f"{retriever} is a retriever (from `corefsearch train retriever`), not a reader" in message


# --- damaged indexes ----------------------------------------------------------------------------------------


@java
@pytest.mark.parametrize("damage", ["no-segments", "truncated-segment"])
def test_damaged_lucene_index(damage: str, subset_index: Path, subset_dataset: Path, tmp_path: Path) -> None:
    index = copy(subset_index, tmp_path / "index")
    folder = index / "lucene" / "index"
    if damage == "no-segments":
        for segments in folder.glob("segments_*"):
            segments.unlink()
    else:
        victim = max((p for p in folder.iterdir() if p.suffix in (".tim", ".fdt", ".doc")),
                     key=lambda p: p.stat().st_size)
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    why = "IndexNotFoundException: no segments" if damage == "no-segments" else "CorruptIndexException"
    run = tmp_path / "run.txt"
    for args in (("search", "--index", index, "--queries", queries_of(subset_dataset), "--out", run),
                 ("query", "--index", index, "--mention", "earthquake")):
        message = fails(*args)
        assert f"the Lucene index {folder}" in message and why in message
        assert f"--out {index} --overwrite`" in message
        assert "lockFactory" not in message  # Lucene's folder description cut to the path
    assert not run.exists()


def test_truncated_faiss_file(small_dataset: Path, tiny_model: Path, tmp_path: Path) -> None:
    from corefsearch.dense.indexing import build_dense_index

    build_dense_index(small_dataset, tmp_path / "index", str(tiny_model), device="cpu")
    faiss_file = tmp_path / "index" / "dense" / "faiss.index"
    faiss_file.write_bytes(faiss_file.read_bytes()[:1000])
    queries = small_dataset / "queries" / "test.jsonl"
    message = fails("search", "--index", tmp_path / "index", "--queries", queries, "--out", tmp_path / "run.txt",
                    "--retriever", "dense", "--device", "cpu")
    assert f"{faiss_file}: not a readable FAISS index, truncated or damaged" in message
    assert f"--dense --encoder {tiny_model.resolve()} --out {tmp_path / 'index'} --overwrite`" in message
    assert not (tmp_path / "run.txt").exists()


# --- queries whose passages are not in the index -------------------------------------------------------


@java
def test_queries_whose_passages_are_not_in_the_index(subset_index: Path, subset_dataset: Path,
                                                     tmp_path: Path) -> None:
    records = [json.loads(line) for line in queries_of(subset_dataset).read_text(encoding="utf-8").splitlines()]
    some, foreign = tmp_path / "some.jsonl", tmp_path / "foreign.jsonl"
    some.write_text("".join(json.dumps({**r, "passage_id": "elsewhere-0"} if i < 3 else r) + "\n"
                            for i, r in enumerate(records)), encoding="utf-8")
    foreign.write_text("".join(json.dumps({**r, "passage_id": f"elsewhere-{i}"}) + "\n"
                               for i, r in enumerate(records)), encoding="utf-8")
    result = succeeds("search", "--index", subset_index, "--queries", some, "--out", tmp_path / "some.txt",
                      "--query-format", "mention")
    assert f"warning: {some}: 3 of {len(records)} queries name a passage that is not in the index" in result.stderr
    assert {line.split()[0] for line in (tmp_path / "some.txt").read_text().splitlines()} <= {r["id"] for r in records}
    message = fails("search", "--index", subset_index, "--queries", foreign, "--out", tmp_path / "foreign.txt",
                    "--query-format", "mention")
    assert f"none of the passages of its {len(records)} queries is in the index {subset_index}" in message
    assert not (tmp_path / "foreign.txt").exists()


# --- valid but extreme input ------------------------------------------------------------------------------


def many_words(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(string.ascii_lowercase) for _ in range(9)) for _ in range(n)]


@java
def test_query_with_thousands_of_distinct_terms(subset_index: Path, subset_dataset: Path, tmp_path: Path) -> None:
    """Over Lucene's default maxClauseCount (1,024): searched in full, with a warning, never a
    Java stack trace and a run that silently lacks the query (Anserini's worker threads print and
    swallow exceptions)."""
    records = [json.loads(line) for line in queries_of(subset_dataset).read_text(encoding="utf-8").splitlines()]
    big = dict(records[0])
    filler = " ".join(many_words(3000))
    big.update(id="huge", text=f"{filler} {big['text']}", start=big["start"] + len(filler) + 1,
               end=big["end"] + len(filler) + 1)
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps(r) + "\n" for r in [*records[:5], big]), encoding="utf-8")
    run = tmp_path / "run.txt"
    result = succeeds("search", "--index", subset_index, "--queries", queries, "--out", run,
                      "--query-format", "context", "--k", "20")
    assert "1 BM25 query has more than 1,024 distinct terms" in result.stderr and "huge" in result.stderr
    ranked = [line.split() for line in run.read_text().splitlines()]
    assert sum(row[0] == "huge" for row in ranked) == 20
    # The query's own words are what it finds: the same top passage as the query without the filler.
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({**records[0], "id": "plain"}) + "\n", encoding="utf-8")
    succeeds("search", "--index", subset_index, "--queries", plain, "--out", tmp_path / "plain.txt",
             "--query-format", "context", "--k", "20")
    assert next(r[2] for r in ranked if r[0] == "huge") == (tmp_path / "plain.txt").read_text().split()[2]
    # The single-query path too.
    result = succeeds("query", "--index", subset_index, "--mention", big["mention"], "--context", big["text"],
                      "--query-format", "context", "--json")
    assert len(json.loads(result.stdout)["hits"]) == 10
    assert "1 BM25 query has more than 1,024 distinct terms" in result.stderr


@java
def test_a_java_trace_in_a_worker_thread_is_an_error(subset_index: Path) -> None:
    """Anserini's SearchCollection prints a query's failure in a worker thread and returns
    normally, leaving the query out of the run. Put Lucene's clause limit back to its default
    and search a query over it: the printed trace must become one error line."""
    from pyserini.pyclass import autoclass

    from corefsearch.sparse.java_errors import LUCENE_DEFAULT_MAX_CLAUSES, raise_clause_limit
    from corefsearch.sparse.search import BM25Options, BM25Searcher

    searcher = BM25Searcher(subset_index, BM25Options(threads=2))
    limit = raise_clause_limit()  # what every search sets (once per JVM)
    lucene = autoclass("org.apache.lucene.search.IndexSearcher")
    lucene.setMaxClauseCount(LUCENE_DEFAULT_MAX_CLAUSES)
    try:
        with pytest.raises(InputError) as raised:
            searcher.search_batch([" ".join(many_words(1500)), "earthquake"], ["huge", "small"], 10, [None, None])
    finally:
        lucene.setMaxClauseCount(limit)
    message = str(raised.value)
    assert message.startswith(f"BM25 search failed in Anserini on the Lucene index {searcher.index_dir} for some "
                              "of 2 queries (1 without results) (IndexSearcher$TooManyClauses: maxClauseCount is set "
                              "to 1024); nothing was written")
    assert "\n" not in message
    hits = searcher.search_batch([" ".join(many_words(1500)), "earthquake"], ["huge", "small"], 10, [None, None])
    assert len(hits["small"]) == 10


@java
def test_java_exceptions_become_one_line() -> None:
    from pyserini.pyclass import autoclass

    from corefsearch.sparse.java import ensure_java
    from corefsearch.sparse.java_errors import java_errors

    ensure_java()
    integer = autoclass("java.lang.Integer")
    expected = r"^parsing failed \(NumberFormatException: For input string: \"x\"\); fix it$"
    with pytest.raises(InputError, match=expected), java_errors("parsing failed", "fix it"):
        integer.parseInt("x")

    # One the library did not translate still comes out as one line, exit 1, through the CLI's handler.
    command = typer.Typer()

    @command.command()
    @user_errors
    def parse() -> None:
        integer.parseInt("not a number")

    result = runner.invoke(command, [])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip() == ('error: Lucene (Java) failed: NumberFormatException: For input string: '
                                     '"not a number"')


def test_sentences_of_a_text_over_spacy_limit() -> None:
    from corefsearch.base.nlp import sentence_spans, sentencizer

    limit = sentencizer().max_length
    line = "The Great Miami River overflowed its levees in Dayton. Mayor Nan Whaley spoke on Tuesday.\n"
    text = line * (limit // len(line) + 200)
    assert len(text) > limit
    with pytest.warns(UserWarning, match=rf"a text of {len(text):,} characters is longer than spaCy's limit"):
        spans = next(iter(sentence_spans([text])))
    one = next(iter(sentence_spans([line])))
    assert spans == [(start + i * len(line), end + i * len(line))
                     for i in range(text.count("\n")) for start, end in one]


def test_named_entities_in_pieces_have_the_offsets_of_the_whole_text() -> None:
    from corefsearch.base.nlp import entities, ner_pipeline

    text = " ".join(f"Mayor Nan Whaley visited Dayton, Ohio, on day {i}." for i in range(60))
    whole = next(iter(entities([text])))
    nlp = ner_pipeline()
    limit = nlp.max_length
    nlp.max_length = 700  # the same code path as a text over 1,000,000 characters, faster
    try:
        with pytest.warns(UserWarning, match="longer than spaCy's limit of 700"):
            pieces = next(iter(entities([text])))
    finally:
        nlp.max_length = limit
    assert pieces == whole and len(whole) >= 120
    assert all(text[start:end] in ("Nan Whaley", "Dayton", "Ohio") or text[start:end].startswith("day")
               for start, end, _ in pieces)


def test_cut_points_prefer_line_then_sentence_ends() -> None:
    from corefsearch.base.nlp import cut_points

    assert cut_points("aaaa\nbbbb cc. dd ee", 12) == [5, 14, 19]
    assert cut_points("x" * 25, 10) == [10, 20, 25]
    assert cut_points("short", 10) == [5]


def test_build_dataset_with_a_one_megabyte_document(tmp_path: Path) -> None:
    sentence = "Rescuers searched the rubble of the collapsed mall in Savar for survivors on Thursday. "
    text = sentence * (1_050_000 // len(sentence))
    target = text.index("collapsed", len(text) - 500)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "corpus.jsonl").write_text(json.dumps({"doc_id": "savar", "text": text}) + "\n"
                                         + json.dumps({"doc_id": "dhaka", "text": "The mall collapse killed many."})
                                         + "\n", encoding="utf-8")
    mentions = [{"mention_id": "m1", "doc_id": "savar", "start": 36, "end": 45, "cluster_id": "rana"},
                {"mention_id": "m2", "doc_id": "savar", "start": target, "end": target + 9, "cluster_id": "rana"},
                {"mention_id": "m3", "doc_id": "dhaka", "start": 9, "end": 17, "cluster_id": "rana"}]
    (corpus / "mentions.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mentions), encoding="utf-8")
    result = succeeds("build-dataset", corpus, "--format", "generic", "--out", tmp_path / "ds",
                      "--split-ratios", "0,0,1")
    assert "longer than spaCy's limit of 1,000,000" in result.stderr
    passages = list(Dataset(tmp_path / "ds").passages())
    # One passage a sentence, across the cuts, and every mention kept inside its passage.
    assert sum(p.doc_id == "savar" for p in passages) == text.count(". ")
    assert all(len(p.text) == len(sentence) - 1 for p in passages if p.doc_id == "savar")
    savar = [p for p in passages if p.doc_id == "savar"]
    found = [(i, m.start, p.text[m.start:m.end]) for i, p in enumerate(savar) for m in p.mentions]
    assert found == [(0, 36, "collapsed"), (target // len(sentence), 36, "collapsed")]
    assert [p.text[m.start:m.end] for p in passages if p.doc_id == "dhaka" for m in p.mentions] == ["collapse"]


# --- training without dev queries --------------------------------------------------------------------------


def test_train_reader_with_a_run_without_dev_queries(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory,
                                                     tmp_path: Path) -> None:
    from corefsearch.io.trec import RunRow, write_run

    dataset = build_tiny_dataset(tmp_path_factory, (4, 2, 0))
    passage_ids = [p.id for p in Dataset(dataset).passages()]
    rows = []
    for query in Dataset(dataset).queries("train"):  # train queries only: the run holds no dev query
        order = [pid for pid in passage_ids if pid != query.passage_id]
        rows += [RunRow(query.id, pid, rank, 100.0 - rank, "all") for rank, pid in enumerate(order, 1)]
    run = tmp_path / "train.trec"
    write_run(run, rows)
    result = succeeds("train", "reader", dataset, "--run", run, "--out", tmp_path / "reader",
                      "--base-model", tiny_base, "--epochs", "1", "--batch-size", "2", "--negatives", "3",
                      "--max-length", "48", "--max-query-len", "16", "--doc-stride", "8", "--hidden", "16",
                      "--max-steps", "2", "--device", "cpu")
    assert "holds no dev queries" in result.stderr
    assert "Kept epoch 1" in " ".join(result.stdout.split())
    curve = json.loads((tmp_path / "reader" / "dev_curve.json").read_text())
    assert [entry["epoch"] for entry in curve] == [1] and "MRR@10" not in curve[0]


def test_train_retriever_with_an_empty_dev_split(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory,
                                                 tmp_path: Path) -> None:
    dataset = build_tiny_dataset(tmp_path_factory, (1, 0, 0))
    assert not Dataset(dataset).queries("dev")
    result = succeeds("train", "retriever", dataset, "--out", tmp_path / "retriever", "--base-model", tiny_base,
                      "--epochs", "1", "--batch-size", "8", "--pooling", "mean", "--max-query-len", "24",
                      "--max-passage-len", "32", "--hard-negatives", "0", "--max-steps", "2", "--device", "cpu")
    assert "No dev queries" in result.stderr
    assert (tmp_path / "retriever" / "corefsearch_retriever.json").exists()


# --- messages printed whole ------------------------------------------------------------------------------


def test_long_error_lines_are_not_wrapped(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*[f"a-rather-long-folder-name-{i}" for i in range(6)]) / "dataset"
    result = runner.invoke(app, ["index", str(deep), "--out", str(tmp_path / "index")])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) > 200, lines
    assert f"{deep} is not a corefsearch dataset" in lines[0]


def test_long_warning_lines_are_not_wrapped(tmp_path: Path) -> None:
    from corefsearch.cli.app import _show_warning, err_console

    message = "x" * 150 + " " + str(tmp_path / ("y" * 120))
    with err_console.capture() as captured:
        _show_warning(UserWarning(message), UserWarning, "f.py", 1)
    assert captured.get() == f"warning: {message}\n"


# --- options refused before any work -----------------------------------------------------------------------


@pytest.mark.parametrize(("args", "expected"), [
    (("--dense", "--encoder", "default", "--batch-size", "0"), "--batch-size must be at least 1, got 0"),
    (("--dense", "--encoder", "default", "--chunk-size", "-5"), "--chunk-size must be at least 1, got -5"),
    (("--dense", "--encoder", "default", "--faiss", "ivf"), "--faiss must be one of flat, hnsw, ivfpq"),
    (("--dense", "--encoder", "default", "--device", "tpu"), "--device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
    (("--dense", "--encoder", "default", "--shard", "3/2"), "--shard I/N"),
    (("--dense", "--merge-shards", "0"), "--merge-shards takes the number of shards N (at least 1), got 0"),
    (("--threads", "0"), "--threads must be at least 1, got 0"),
])
def test_index_options(args: tuple[str, ...], expected: str, small_dataset: Path, tmp_path: Path) -> None:
    assert expected in fails("index", small_dataset, "--out", tmp_path / "index", *args)
    assert not (tmp_path / "index").exists()


@pytest.mark.parametrize(("args", "expected"), [
    (("--k", "0"), "--k must be at least 1, got 0"),
    (("--threads", "-1"), "--threads must be at least 1, got -1"),
    (("--retriever", "dense", "--device", "gpu"), "--device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
    (("--retriever", "splade"), "--retriever must be one of bm25, dense, hybrid"),
    (("--query-format", "title"), "--query-format must be one of"),
    (("--retriever", "hybrid", "--fusion", "max"), "--fusion must be one of rrf, interpolate"),
    (("--retriever", "hybrid", "--alpha", "nan"), "--alpha must be between 0 and 1"),
    (("--reader", "READER", "--rerank-k", "0"), "--rerank-k must be at least 1, got 0"),
    (("--reader", "READER", "--device", "metal"), "--device must be auto, cpu, cuda or cuda:N"),
])
def test_search_options(args: tuple[str, ...], expected: str, small_dataset: Path, tmp_path: Path) -> None:
    args = tuple(str(tmp_path / "reader") if a == "READER" else a for a in args)
    message = fails("search", "--index", tmp_path / "index", "--queries", small_dataset / "queries" / "test.jsonl",
                    "--out", tmp_path / "run.txt", *args)
    assert expected in message
    assert not (tmp_path / "run.txt").exists()


@pytest.mark.parametrize(("command", "args", "expected"), [
    ("reader", ("--weight-decay", "-0.1"), "--weight-decay must not be negative, got -0.1"),
    ("reader", ("--weight-decay", "nan"), "--weight-decay must not be negative, got nan"),
    ("reader", ("--device", "tpu"), "--device must be auto, cpu, cuda or cuda:N"),
    ("reader", ("--head", "crf"), "--head must be one of dpr, integrated"),
    ("retriever", ("--weight-decay", "nan"), "--weight-decay must not be negative, got nan"),
    ("retriever", ("--device", "tpu"), "--device must be auto, cpu, cuda or cuda:N"),
    ("retriever", ("--pooling", "max"), "--pooling must be one of cls, mean"),
])
def test_train_options(command: str, args: tuple[str, ...], expected: str, small_dataset: Path,
                       tmp_path: Path) -> None:
    run = ("--run", tmp_path / "run.trec") if command == "reader" else ()
    assert expected in fails("train", command, small_dataset, *run, "--out", tmp_path / "model", *args)
    assert not (tmp_path / "model").exists()


def test_build_options_refuse_non_finite_ratios(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        message = fails("build-dataset", tmp_path, "--format", "generic", "--out", tmp_path / "ds",
                        "--split-ratios", "nan,0,1")
    assert "--split-ratios takes finite numbers, got 'nan,0,1'" in message
