"""Options that do what they say on any corpus: ``--mention-type`` on generic
corpora, ``--split-by corpus``, ``--sentences newline|spacy`` with every mention kept, progress
lines of long training runs, and ``train retriever --dev-max-queries/--threads``."""

from __future__ import annotations

import io
import json
import re
import sys
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import reader_args, retriever_args
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.base.nlp import sentence_spans
from corefsearch.base.segmentation import keep_mentions_whole, line_spans, sentence_units
from corefsearch.cli import app
from corefsearch.datasets.build import BuildOptions, build_dataset
from corefsearch.datasets.generic import read_generic
from corefsearch.training import DEFAULT_LOG_EVERY, TrainingProgress, resolve_log_every

runner = CliRunner(env={"COLUMNS": "250"})
pytestmark = pytest.mark.usefixtures("one_thread")  # the tiny models run on one torch thread


def succeeds(*args: object) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    return result


def fails(*args: object) -> str:
    """Run the CLI, expect one clean error line; return what it printed to stderr."""
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return " ".join(result.stderr.split())


def build_fails(tmp_path: Path, source_format: str, *options: str) -> str:
    """``build-dataset`` of an empty input folder (beside, not around, --out) that must fail."""
    folder = tmp_path / "input"
    folder.mkdir(exist_ok=True)
    return fails("build-dataset", folder, "--format", source_format, "--out", tmp_path / "ds", *options)


# --- a small corpus with events and entities, document splits and line breaks -----------------------

DOCUMENTS = [
    ("d1", "train", "DAYTON, Ohio (AP)\nThe Great Miami River overflowed its levees on Tuesday. "
                    "Mayor Nan Whaley ordered an evacuation.\nHundreds of residents left their homes."),
    ("d2", "train", "Dayton cleans up\nThe flood left thousands without power. Whaley thanked the National Guard."),
    ("d3", "test", "A magnitude 6.4 earthquake struck northern California on Sunday. The quake damaged a bridge."),
    ("d4", "test", "EUREKA, Calif.\nSunday's earthquake was felt in Eureka. Residents said the quake lasted "
                   "20 seconds."),
    ("d5", "dev", "Fire destroyed the old textile mill in Leeds on Monday."),
    ("d6", "dev", "Firefighters said the blaze started in the boiler room of the mill."),
]

# (mention_id, doc_id, phrase, cluster_id, type); each phrase occurs once in its document.
MENTIONS = [
    ("overflowed", "d1", "overflowed", "dayton-flood", "event"),
    ("evacuation", "d1", "evacuation", "evacuation", "event"),
    ("flood", "d2", "flood", "dayton-flood", "event"),
    ("whaley-1", "d1", "Mayor Nan Whaley", "whaley", "entity"),
    ("whaley-2", "d2", "Whaley", "whaley", "entity"),
    ("earthquake-1", "d3", "earthquake", "ca-quake", "event"),
    ("quake-1", "d3", "The quake", "ca-quake", "event"),
    ("earthquake-2", "d4", "earthquake", "ca-quake", "event"),
    ("quake-2", "d4", "the quake", "ca-quake", "event"),
    ("california-1", "d3", "northern California", "california", "entity"),
    ("california-2", "d4", "Calif.", "california", "entity"),
    ("fire", "d5", "Fire", "leeds-fire", "event"),
    ("blaze", "d6", "blaze", "leeds-fire", "event"),
]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records),
                    encoding="utf-8")
    return path


def mention_records(documents: list[tuple[str, str | None, str]],
                    mentions: list[tuple[str, str, str, str, str]]) -> list[dict[str, Any]]:
    texts = {doc_id: text for doc_id, _, text in documents}
    records = []
    for mention_id, doc_id, phrase, cluster_id, kind in mentions:
        text = texts[doc_id]
        assert text.count(phrase) == 1, (mention_id, phrase)
        start = text.index(phrase)
        records.append({"mention_id": mention_id, "doc_id": doc_id, "start": start,
                        "end": start + len(phrase.rstrip()), "cluster_id": cluster_id, "type": kind})
    return records


def write_corpus(folder: Path, documents: list[tuple[str, str | None, str]] = DOCUMENTS,
                 mentions: list[tuple[str, str, str, str, str]] = MENTIONS, with_split: bool = True) -> Path:
    write_jsonl(folder / "corpus.jsonl",
                [{"doc_id": doc_id, "text": text, **({"split": split} if with_split and split else {})}
                 for doc_id, split, text in documents])
    write_jsonl(folder / "mentions.jsonl", mention_records(documents, mentions))
    return folder


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus")


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def queries_by_split(dataset: Path) -> dict[str, set[str]]:
    return {split: {q["id"] for q in read_lines(dataset / "queries" / f"{split}.jsonl")}
            for split in ("train", "dev", "test")}


def passage_texts(dataset: Path, doc_id: str) -> list[str]:
    return [p["text"] for p in read_lines(dataset / "passages.jsonl") if p["doc_id"] == doc_id]


def manifest(dataset: Path) -> dict[str, Any]:
    return json.loads((dataset / "manifest.json").read_text(encoding="utf-8"))


# --- --mention-type -------------------------------------------------------------------------------


def test_mention_type_selects_the_mentions_of_a_generic_corpus(corpus: Path, tmp_path: Path) -> None:
    types = {m[0]: m[4] for m in MENTIONS}
    for mention_type, expected in (("entity", {"entity"}), ("event", {"event"}), (None, {"event", "entity"}),
                                   ("all", {"event", "entity"})):
        out = tmp_path / f"ds-{mention_type}"
        option = [] if mention_type is None else ["--mention-type", mention_type]
        succeeds("build-dataset", corpus, "--format", "generic", "--out", out, *option)
        clusters = read_lines(out / "clusters.jsonl")
        assert {c["type"] for c in clusters} == expected
        in_passages = {m["mention_id"] for p in read_lines(out / "passages.jsonl") for m in p["mentions"]}
        assert in_passages == {mid for mid, kind in types.items() if kind in expected}
        queries = set().union(*queries_by_split(out).values())
        assert queries and {types[q] for q in queries} == expected
        assert manifest(out)["options"]["source"]["mention_type"] == (mention_type or "all")
    # The entity dataset holds the same passages: mentions of the other type leave the text alone.
    assert passage_texts(tmp_path / "ds-entity", "d1") == passage_texts(tmp_path / "ds-event", "d1")


def test_mention_type_without_such_mentions_is_an_error(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "events", mentions=[m for m in MENTIONS if m[4] == "event"])
    out = tmp_path / "ds"
    message = fails("build-dataset", corpus, "--format", "generic", "--out", out, "--mention-type", "entity")
    assert "mentions.jsonl: no mention has type entity" in message and "9 event mention(s)" in message
    assert not out.exists()
    message = fails("build-dataset", corpus, "--format", "generic", "--out", out, "--mention-type", "events")
    assert "--mention-type must be one of event, entity, all, got 'events'" in message


@pytest.mark.parametrize("source_format", ["wec", "coresearch"])
def test_mention_type_entity_is_refused_for_event_only_formats(source_format: str, tmp_path: Path) -> None:
    message = build_fails(tmp_path, source_format, "--mention-type", "entity")
    assert f"--mention-type entity: {source_format} holds event mentions only" in message


# --- --split-by ----------------------------------------------------------------------------------


def test_split_by_corpus_keeps_the_documents_splits(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    succeeds("build-dataset", corpus, "--format", "generic", "--out", out, "--split-by", "corpus")
    assert queries_by_split(out) == {
        "train": {"overflowed", "flood", "whaley-1", "whaley-2"},
        "dev": {"fire", "blaze"},
        "test": {"earthquake-1", "quake-1", "earthquake-2", "quake-2", "california-1", "california-2"}}
    document_split = {doc_id: split for doc_id, split, _ in DOCUMENTS}
    for passage in read_lines(out / "passages.jsonl"):
        assert passage["split"] == document_split[passage["doc_id"]]
    clusters = {c["cluster_id"]: c["split"] for c in read_lines(out / "clusters.jsonl")}
    assert clusters == {"dayton-flood": "train", "evacuation": "train", "whaley": "train", "ca-quake": "test",
                        "california": "test", "leeds-fire": "dev"}
    qrels = (out / "qrels" / "dev.txt").read_text().split("\n")
    assert qrels[:2] == ["fire 0 d6-0 1", "blaze 0 d5-0 1"]
    source = manifest(out)["options"]["source"]
    assert source["split_by"] == "corpus" and source["sentences"] == "spacy"

    # --splits keeps only the documents of those splits, as for ECB+.
    only_test = tmp_path / "test-only"
    succeeds("build-dataset", corpus, "--format", "generic", "--out", only_test, "--split-by", "corpus",
             "--splits", "test")
    assert {p["doc_id"] for p in read_lines(only_test / "passages.jsonl")} == {"d3", "d4"}


def test_split_by_clusters_ignores_the_documents_splits(corpus: Path, tmp_path: Path) -> None:
    plain = write_corpus(tmp_path / "plain", with_split=False)
    for name, folder in (("with", corpus), ("without", plain)):
        succeeds("build-dataset", folder, "--format", "generic", "--out", tmp_path / name, "--seed", "3")
    for name in ("passages.jsonl", "clusters.jsonl", "queries/train.jsonl", "queries/test.jsonl", "qrels/dev.txt"):
        assert (tmp_path / "with" / name).read_bytes() == (tmp_path / "without" / name).read_bytes(), name
    assert manifest(tmp_path / "with")["options"]["source"]["split_by"] == "clusters"


def test_split_by_corpus_needs_a_split_on_every_document(corpus: Path, tmp_path: Path) -> None:
    plain = write_corpus(tmp_path / "plain", with_split=False)
    out = tmp_path / "ds"
    message = fails("build-dataset", plain, "--format", "generic", "--out", out, "--split-by", "corpus")
    assert f"{plain / 'corpus.jsonl'}:1: document d1 has no field 'split'" in message
    assert "--split-by clusters" in message and not out.exists()
    # One document without a split among documents with one: the same error, at its line.
    lines = (corpus / "corpus.jsonl").read_text().splitlines()
    record = json.loads(lines[3])
    del record["split"]
    lines[3] = json.dumps(record)
    (corpus / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    message = fails("build-dataset", corpus, "--format", "generic", "--out", out, "--split-by", "corpus")
    assert f"{corpus / 'corpus.jsonl'}:4: document d4 has no field 'split'" in message


@pytest.mark.parametrize("split_by", ["corpus", "clusters"])
def test_a_bad_split_field_names_its_line(corpus: Path, tmp_path: Path, split_by: str) -> None:
    lines = (corpus / "corpus.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["split"] = "validation"
    lines[1] = json.dumps(record)
    (corpus / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    message = fails("build-dataset", corpus, "--format", "generic", "--out", tmp_path / "ds", "--split-by", split_by)
    assert (f"{corpus / 'corpus.jsonl'}:2: document d2: field 'split' must be one of train, dev, test, "
            "got 'validation'") in message


def test_a_cluster_across_splits_gives_each_query_its_documents_split(tmp_path: Path) -> None:
    documents = [(doc_id, "dev" if doc_id == "d2" else split, text) for doc_id, split, text in DOCUMENTS]
    corpus = write_corpus(tmp_path / "corpus", documents=documents)
    out = tmp_path / "ds"
    with pytest.warns(UserWarning, match=r"2 cluster\(s\) have mentions in documents of different splits"):
        build_dataset(read_generic(corpus, split_by="corpus"), out, BuildOptions())
    splits = queries_by_split(out)
    assert {"overflowed", "whaley-1"} <= splits["train"] and {"flood", "whaley-2"} <= splits["dev"]
    # The qrels keep the relevant passage in the other split; the cluster is listed under its first split (a tie).
    assert "overflowed 0 d2-1 1" in (out / "qrels" / "train.txt").read_text().splitlines()
    clusters = {c["cluster_id"]: c["split"] for c in read_lines(out / "clusters.jsonl")}
    assert clusters["dayton-flood"] == "train" and clusters["whaley"] == "train"


def test_split_by_is_refused_where_it_cannot_apply(tmp_path: Path) -> None:
    message = build_fails(tmp_path, "ecbplus", "--split-by", "clusters")
    assert "--split-by clusters: ecbplus comes with its own split" in message
    message = build_fails(tmp_path, "wec", "--split-by", "corpus")
    assert "--split-by corpus: wec documents carry no split" in message
    message = build_fails(tmp_path, "generic", "--split-by", "documents")
    assert "--split-by must be one of clusters, corpus, got 'documents'" in message


# --- --sentences and mentions at sentence boundaries ---------------------------------------------


def test_line_breaks_bound_sentences(corpus: Path, tmp_path: Path) -> None:
    spacy, newline = tmp_path / "spacy", tmp_path / "newline"
    succeeds("build-dataset", corpus, "--format", "generic", "--out", spacy)
    succeeds("build-dataset", corpus, "--format", "generic", "--out", newline, "--sentences", "newline")
    # The dateline and the headline are passages of their own, not glued to the next sentence.
    assert passage_texts(spacy, "d1") == ["DAYTON, Ohio (AP)", "The Great Miami River overflowed its levees on "
                                          "Tuesday.", "Mayor Nan Whaley ordered an evacuation.",
                                          "Hundreds of residents left their homes."]
    assert passage_texts(newline, "d1") == ["DAYTON, Ohio (AP)", "The Great Miami River overflowed its levees on "
                                            "Tuesday. Mayor Nan Whaley ordered an evacuation.",
                                            "Hundreds of residents left their homes."]
    assert passage_texts(spacy, "d2")[0] == "Dayton cleans up"
    assert manifest(spacy)["options"]["source"]["sentences"] == "spacy"
    assert manifest(newline)["options"]["source"]["sentences"] == "newline"
    # spaCy alone (what the generic format did before) merged the dateline into the first sentence.
    text = DOCUMENTS[0][2]
    alone = next(iter(sentence_spans([text])))
    assert text[alone[0][0]:alone[0][1]].startswith("DAYTON, Ohio (AP)\nThe Great Miami River")


def test_a_mention_cut_by_a_sentence_boundary_is_kept(tmp_path: Path) -> None:
    text = ("Police arrested suspect No. 1 in the robbery on Friday. He was charged on Saturday.\n"
            "Suspect No. 2 is still at large.")
    documents = [("robbery", None, text)]
    mentions = [("suspect-1", "robbery", "suspect No. 1", "suspect-1", "entity"),
                ("arrested", "robbery", "arrested", "arrest", "event"),
                ("charged", "robbery", "charged", "charge", "event"),
                ("he", "robbery", "He", "suspect-1", "entity"),
                ("suspect-2", "robbery", "Suspect No. 2", "suspect-2", "entity")]
    corpus = write_corpus(tmp_path / "corpus", documents, mentions)
    # spaCy's sentencizer ends a sentence after "No.": inside both suspects' mentions.
    cut = [text[s:e] for s, e in next(iter(sentence_spans([text])))]
    assert cut[0] == "Police arrested suspect No." and "Suspect No." in cut
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = build_dataset(read_generic(corpus), tmp_path / "ds", BuildOptions(split_ratios=(0, 0, 1)))
    assert not [w for w in caught if "passage boundary" in str(w.message)]
    assert summary.mentions == 5 and summary.mentions_dropped == 0 and summary.splits["test"].queries == 2
    assert passage_texts(tmp_path / "ds", "robbery") == [
        "Police arrested suspect No. 1 in the robbery on Friday.", "He was charged on Saturday.",
        "Suspect No. 2 is still at large."]
    passages = read_lines(tmp_path / "ds" / "passages.jsonl")
    for passage in passages:
        for mention in passage["mentions"]:
            phrase = {m[0]: m[2] for m in mentions}[mention["mention_id"]]
            assert passage["text"][mention["start"]:mention["end"]] == phrase


def test_a_mention_across_a_line_break_joins_the_lines(tmp_path: Path) -> None:
    text = "The river rose overnight.\nThe Great Miami\nRiver overflowed its levees.\nHundreds fled."
    documents = [("flood", None, text)]
    mentions = [("river", "flood", "Great Miami\nRiver", "river", "entity"),
                ("overflowed", "flood", "overflowed", "flood", "event")]
    corpus = write_corpus(tmp_path / "corpus", documents, mentions)
    for mode in ("newline", "spacy"):
        documents_read = list(read_generic(corpus, sentences=mode))
        units = [text[s:e] for s, e in documents_read[0].units]
        assert units == ["The river rose overnight.", "The Great Miami\nRiver overflowed its levees.", "Hundreds fled."]


def test_line_spans_and_units() -> None:
    text = "  Headline \r\n\r\nFirst sentence. Second one.\n\n\tLast line\u2028after a separator"
    assert [text[s:e] for s, e in line_spans(text)] == ["Headline", "First sentence. Second one.", "Last line",
                                                       "after a separator"]
    lf = text.replace("\r\n", "\n")
    assert [lf[s:e] for s, e in sentence_units([lf])[0]] == [text[s:e] for s, e in sentence_units([text])[0]]
    assert [text[s:e] for s, e in sentence_units([text], "spacy")[0]] == [
        "Headline", "First sentence.", "Second one.", "Last line", "after a separator"]
    assert sentence_units(["", " \n "], "newline") == [[], []]
    with pytest.raises(InputError, match="--sentences must be one of spacy, newline"):
        sentence_units([text], "paragraph")


def test_keep_mentions_whole() -> None:
    units = [(0, 10), (11, 20), (20, 30), (32, 40)]
    assert keep_mentions_whole(units, []) == units
    assert keep_mentions_whole(units, [(2, 5), (33, 40)]) == units  # inside units: nothing changes
    assert keep_mentions_whole(units, [(8, 12)]) == [(0, 20), (20, 30), (32, 40)]
    assert keep_mentions_whole(units, [(8, 12), (15, 33)]) == [(0, 40)]
    assert keep_mentions_whole(units, [(19, 21)]) == [(0, 10), (11, 30), (32, 40)]  # touching units joined
    assert keep_mentions_whole(units, [(30, 35)]) == [(0, 10), (11, 20), (20, 30), (30, 40)]  # from white space
    assert keep_mentions_whole(units, [(31, 34)]) == [(0, 10), (11, 20), (20, 30), (31, 40)]  # widened


def test_sentences_is_refused_for_formats_with_their_own_sentences(tmp_path: Path) -> None:
    message = build_fails(tmp_path, "ecbplus", "--sentences", "newline")
    assert "--sentences applies to --format generic and text only" in message
    message = build_fails(tmp_path, "generic", "--sentences", "lines")
    assert "--sentences must be one of spacy, newline, got 'lines'" in message


# --- progress lines of long training runs, --threads, --dev-max-queries ------------------------------

# The tiny corpus, random BERT and run of the retriever and reader tests: conftest.py's fixtures.

PROGRESS_LINE = re.compile(r"^step (\d+)/(\d+) \(epoch (\d+)/(\d+)\): loss \d+\.\d{4}, \d+\.\d\d steps/s, "
                           r"ETA (\d+ days?, )?\d+:\d\d:\d\d$")


def progress_steps(messages: list[str]) -> list[int]:
    return [int(match.group(1)) for m in messages if (match := PROGRESS_LINE.match(m))]


class _Stream(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


def test_progress_lines_by_default_only_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", _Stream(terminal=True))
    assert resolve_log_every(None) == 0 and resolve_log_every(7) == 7
    monkeypatch.setattr(sys, "stderr", _Stream(terminal=False))
    assert resolve_log_every(None) == DEFAULT_LOG_EVERY and resolve_log_every(0) == 0

    messages: list[str] = []
    with TrainingProgress(total=120, completed=10, log=messages.append) as progress:  # resumed at step 10
        for step in range(11, 121):
            progress.advance(1 + step // 60, 2, 1.0 / step)
    assert progress_steps(messages) == [50, 100, 120]  # every 50 steps, and the last
    assert messages[0].startswith("step 50/120 (epoch 1/2): loss 0.0200, ")
    assert messages[-1].endswith("ETA 0:00:00")


def test_train_retriever_logs_progress_lines(tiny_base: Path, tiny_dataset: Path, tmp_path: Path) -> None:
    from corefsearch.dense.train import train_retriever

    messages: list[str] = []
    summary = train_retriever(tiny_dataset, tmp_path / "model", retriever_args(tiny_base, epochs=1, max_steps=5,
                                                                          log_every=2), log=messages.append)
    assert summary.total_steps == 5
    assert progress_steps(messages) == [2, 4, 5]
    assert all(PROGRESS_LINE.match(m).group(2) == "5" for m in messages if PROGRESS_LINE.match(m))  # type: ignore[union-attr]
    quiet: list[str] = []
    train_retriever(tiny_dataset, tmp_path / "quiet", retriever_args(tiny_base, epochs=1, max_steps=3, log_every=0),
                    log=quiet.append)
    assert quiet and not progress_steps(quiet)


def test_train_retriever_cli_dev_max_queries_threads_and_log_lines(tiny_base: Path, tiny_dataset: Path,
                                                                    tmp_path: Path) -> None:
    import torch

    dev_queries = len(read_lines(tiny_dataset / "queries" / "dev.jsonl"))
    assert dev_queries > 3
    torch.set_num_threads(2)
    out = tmp_path / "model"
    common = ["--base-model", tiny_base, "--pooling", "mean", "--epochs", "1", "--batch-size", "8", "--lr", "1e-3",
              "--max-query-len", "24", "--max-passage-len", "32", "--hard-negatives", "0", "--device", "cpu"]
    # Under CliRunner stderr is not a terminal: by default a line every 50 steps and at the last.
    result = succeeds("train", "retriever", tiny_dataset, "--out", out, *common, "--max-steps", "4",
                      "--dev-max-queries", "3", "--threads", "1")
    lines = result.stderr.splitlines()
    assert progress_steps(lines) == [4] and "step 4/4 (epoch 1/1)" in result.stderr
    assert torch.get_num_threads() == 1
    record = json.loads((out / "training_args.json").read_text())
    assert record["counts"]["dev_queries"] == 3 and record["options"]["dev_max_queries"] == 3
    assert "threads" not in record["options"]  # how the run goes, not what it computes

    result = succeeds("train", "retriever", tiny_dataset, "--out", tmp_path / "every", *common, "--max-steps", "4",
                      "--log-every", "1")
    assert progress_steps(result.stderr.splitlines()) == [1, 2, 3, 4]
    record = json.loads((tmp_path / "every" / "training_args.json").read_text())
    assert record["counts"]["dev_queries"] == min(dev_queries, 500)

    for option, value, message in (("--threads", "0", "--threads must be at least 1, got 0"),
                                   ("--log-every", "-5", "--log-every must not be negative, got -5"),
                                   ("--dev-max-queries", "0", "--dev-max-queries must be at least 1, got 0")):
        assert message in fails("train", "retriever", tiny_dataset, "--out", tmp_path / "bad", *common, option, value)
    assert not (tmp_path / "bad").exists()


def test_train_reader_logs_progress_lines_and_takes_threads(tiny_base: Path, tiny_dataset: Path, tiny_run: Path,
                                                            tmp_path: Path) -> None:
    import torch

    from corefsearch.reader.train import ReaderTrainingArguments, train_reader

    torch.set_num_threads(2)
    messages: list[str] = []
    args = replace(reader_args(tiny_base), max_steps=3, log_every=2, threads=1, dev_max_queries=2)
    assert isinstance(args, ReaderTrainingArguments)
    summary = train_reader(tiny_dataset, tiny_run, tmp_path / "reader", args, log=messages.append)
    assert summary.total_steps == 3 and progress_steps(messages) == [2, 3]
    assert torch.get_num_threads() == 1
    record = json.loads((tmp_path / "reader" / "training_args.json").read_text())
    assert "threads" not in record["options"] and "log_every" not in record["options"]
    assert record["counts"]["dev_queries"] == 2

