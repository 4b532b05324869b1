"""The readers: windows and spans, the heads, training, save/load, and re-ranking through the CLI.

Tiny random BERTs on the tiny news corpus (helpers.py; fixtures in conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    PASSAGES,
    Interrupt,
    a_query,
    assert_same_model,
    corpus_words,
    flat,
    reader_args,
    tiny_reader,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.base.windows import query_window
from corefsearch.cli import app
from corefsearch.datasets.dataset import Dataset
from corefsearch.io.read import read_jsonl
from corefsearch.io.trec import read_run, write_run
from corefsearch.reader.batches import epoch_examples
from corefsearch.reader.inputs import pair_windows, tokenize_passage, window_starts
from corefsearch.reader.loss import example_loss
from corefsearch.reader.read import Reader
from corefsearch.reader.spans import top_spans
from corefsearch.reader.train import train_reader
from corefsearch.training.checkpoint import work_dir_for

runner = CliRunner()
# The tiny news corpus and random BERT of helpers.py / conftest.py, on one torch thread.
pytestmark = pytest.mark.usefixtures("one_thread")


# --- span decoding ---------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 30), st.integers(1, 12), st.integers(1, 8), st.integers(0, 10_000))
def test_top_spans_never_end_before_start_nor_exceed_the_limit(windows: int, length: int, max_span_len: int,
                                                               k: int, seed: int) -> None:
    import torch

    generator = torch.Generator().manual_seed(seed)
    start_logits = torch.randn(windows, length, generator=generator)
    end_logits = torch.randn(windows, length, generator=generator)
    n_tokens = torch.randint(0, length + 1, (windows,), generator=generator)
    starts, ends, scores = top_spans(start_logits, end_logits, n_tokens, max_span_len, k)
    assert starts.shape == ends.shape == scores.shape
    for w in range(windows):
        for s, e in zip(starts[w].tolist(), ends[w].tolist(), strict=True):
            assert e >= s
            assert e - s < max_span_len
            if n_tokens[w] > 0:
                assert e < n_tokens[w]
        if n_tokens[w] > 0:  # the best span is the true maximum of start + end over the valid spans
            n = int(n_tokens[w])
            best = max(float(start_logits[w, s] + end_logits[w, e]) for s in range(n)
                       for e in range(s, min(n, s + max_span_len)))
            assert float(scores[w, 0]) == pytest.approx(best, abs=1e-5)
        else:
            assert float(scores[w, 0]) == float("-inf")


def test_window_starts_cover_the_passage_without_gaps() -> None:
    assert window_starts(5, 10, 4) == [0]
    assert window_starts(25, 10, 8) == [0, 8, 16]
    assert window_starts(25, 10, 20) == [0, 10, 20]  # a stride longer than a window is cut to the window
    with pytest.raises(InputError, match="no room"):
        window_starts(10, 0, 4)


# --- windows map spans back to characters ----------------------------------------------------------------

WORDS = ["fire", "blaze", "mill", "leeds", "strike", "the", "rail", "unknownword", "flood", "dayton"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from([" ", "  ", ", ", ". ", " - ", "\n"])),
                min_size=1, max_size=60),
       st.integers(0, 10_000), st.integers(24, 64), st.integers(1, 40), st.booleans())
def test_windows_map_spans_back_to_exact_characters(tiny_base: Path, pieces: list[tuple[str, str]], pick: int,
                                                    max_length: int, stride: int, markers: bool) -> None:
    tokenizer = _tokenizer(tiny_base)
    text = "".join(word + gap for word, gap in pieces).rstrip()
    starts, position = [], 0
    for word, gap in pieces:
        starts.append((position, position + len(word)))
        position += len(word) + len(gap)
    start, end = starts[pick % len(starts)]
    query = query_window(tokenizer, text, start, end, 12, (1, 2) if markers else None)
    assert len(query.ids) <= 12
    passage = tokenize_passage(tokenizer, text)
    windows = pair_windows(tokenizer, query, [passage], max_length, stride)
    seen: set[int] = set()
    begin = 0
    for window in windows:
        assert len(window.input_ids) <= max_length
        assert window.input_ids[window.query_mention[0]] == query.ids[query.mention_first]
        # Every window token is a token of the passage at the same characters.
        begin = passage.offsets.index(window.offsets[0]) if window.offsets else begin
        for i in range(len(window.offsets)):
            assert window.char_span(i, i) == passage.offsets[begin + i]
            assert window.input_ids[window.passage_start + i] == passage.ids[begin + i]
            seen.add(begin + i)
    assert seen == set(range(len(passage.ids)))  # no token is left out
    # The mention (a whole word) maps to tokens and back to exactly its characters in some window.
    covering = [w for w in windows if w.token_span(start, end) is not None]
    assert covering
    for window in covering:
        first, last = window.token_span(start, end)  # type: ignore[misc]
        assert window.char_span(first, last) == (start, end)
        assert text[slice(*window.char_span(first, last))] == text[start:end]


_TOKENIZERS: dict[Path, Any] = {}


def _tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    if folder not in _TOKENIZERS:
        _TOKENIZERS[folder] = AutoTokenizer.from_pretrained(str(folder))
    return _TOKENIZERS[folder]


# --- heads ---------------------------------------------------------------------------------------------


def test_integrated_head_pairwise_features_have_the_right_shapes(tiny_base: Path) -> None:
    model = tiny_reader(tiny_base, "integrated")
    reader = Reader(model)
    windows = reader.windows(a_query(), PASSAGES)
    assert len(windows) > len(PASSAGES)  # the long passage is read in several windows
    output = model.forward(windows)
    width = model.model.config.hidden_size
    w = len(windows)
    g_i = model.query_mention_vectors(output, windows)
    assert g_i.shape == (w, 2 * width)
    starts, ends, _ = top_spans(output.start_logits, output.end_logits, output.n_tokens, 10, 3)
    g_j = model.span_vectors(output, starts, ends)
    assert g_j.shape == (w, 3, 2 * width)
    assert model.head.pair[0].in_features == 6 * width  # [g_i ; g_j ; g_i ∘ g_j]
    assert model.head.mention[0].in_features == 2 * width
    assert model.coreference_scores(g_i, g_j).shape == (w, 3)
    # g_j of a span is its first and last token vectors in the sequence.
    row, k = 1, 2
    first = output.hidden[row, output.passage_start[row] + starts[row, k]]
    assert g_j[row, k, :width].tolist() == first.tolist()


@pytest.mark.parametrize("head", ["dpr", "integrated"])
def test_read_scores_sorts_and_marks_spans_inside_the_text(tiny_base: Path, head: str) -> None:
    reader = Reader(tiny_reader(tiny_base, head), batch_size=2)
    hits = reader.read(a_query(), PASSAGES)
    assert sorted(h.passage_id for h in hits) == ["p1", "p2", "p3"]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    texts = dict(PASSAGES)
    for hit in hits:
        assert 0 <= hit.start < hit.end <= len(texts[hit.passage_id])
        assert hit.text == texts[hit.passage_id][hit.start:hit.end]
    # Batching does not change the scores.
    again = Reader(reader.model, batch_size=16).read(a_query(), PASSAGES)
    assert [h.score for h in again] == pytest.approx([h.score for h in hits], abs=1e-5)


def test_span_scores_give_the_read_hits_and_score_the_marked_span_as_read_does(tiny_base: Path) -> None:
    reader = Reader(tiny_reader(tiny_base, "integrated"), batch_size=2)
    hits = {h.passage_id: h for h in reader.read(a_query(), PASSAGES)}
    items = [(pid, text, [(hits[pid].start, hits[pid].end), (0, len(text.split()[0]))]) for pid, text in PASSAGES]
    scores, read = reader.span_scores(a_query(), items)
    assert [(h.passage_id, h.start, h.end) for h in read] == [(pid, hits[pid].start, hits[pid].end)
                                                              for pid, _ in PASSAGES]
    assert [h.score for h in read] == pytest.approx([hits[pid].score for pid, _ in PASSAGES], abs=1e-5)
    # The reader's own span, given, scores what the reader gave its passage.
    for (pid, _), (own, _other) in zip(PASSAGES, scores, strict=True):
        assert own == pytest.approx(hits[pid].score, abs=1e-5)
    with pytest.raises(ValueError, match="DPR head"):
        Reader(tiny_reader(tiny_base, "dpr")).span_scores(a_query(), items)


@pytest.mark.parametrize("head", ["dpr", "integrated"])
def test_save_load_round_trip_gives_identical_scores(tiny_base: Path, tmp_path: Path, head: str) -> None:
    reader = Reader(tiny_reader(tiny_base, head))
    before = reader.read(a_query(), PASSAGES)
    reader.model.save(tmp_path / "reader")
    loaded = Reader.load(tmp_path / "reader", device="cpu")
    after = loaded.read(a_query(), PASSAGES)
    assert [(h.passage_id, h.score, h.start, h.end) for h in after] == [
        (h.passage_id, h.score, h.start, h.end) for h in before]
    assert loaded.config == reader.config
    assert (tmp_path / "reader" / "reader_head.safetensors").is_file()


def test_load_rejects_a_folder_that_is_not_a_reader(tmp_path: Path) -> None:
    from corefsearch.base.errors import MissingArtefactError

    with pytest.raises(MissingArtefactError, match="not a reader"):
        Reader.load(tmp_path)


# --- training -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head", ["dpr", "integrated"])
def test_a_few_steps_lower_the_loss(tiny_base: Path, tiny_dataset: Path, tiny_run: Path, head: str) -> None:
    import torch

    from corefsearch.reader.train import _load_data
    from corefsearch.training import adamw

    args = reader_args(tiny_base, head=head)
    data = _load_data(Dataset(tiny_dataset), [tiny_run], args, log=lambda _: None)
    examples = epoch_examples(data, args, 1)[:6]
    assert examples and all(len(e.negatives) == 5 for e in examples)
    for example in examples:  # negatives are retrieved and not of the query's cluster
        assert example.positive in data.relevant[example.query.id]
        assert not set(example.negatives) & data.relevant[example.query.id]
    reader = Reader(tiny_reader(tiny_base, head))

    def mean_loss() -> float:
        reader.model.train(False)
        with torch.no_grad():
            return sum(float(example_loss(reader, e, data.passages)) for e in examples) / len(examples)

    before = mean_loss()
    optimizer = adamw([(module, 1e-3) for module in reader.model.modules()], 0.0)
    for _ in range(8):
        reader.model.train()
        optimizer.zero_grad()
        loss = sum(example_loss(reader, e, data.passages) for e in examples) / len(examples)
        loss.backward()
        optimizer.step()
    after = mean_loss()
    assert after < before * 0.8, (before, after)


def test_train_reader_writes_a_loadable_reader(tiny_base: Path, tiny_dataset: Path, tiny_run: Path,
                                              tmp_path: Path) -> None:
    out = tmp_path / "reader"
    summary = train_reader(tiny_dataset, tiny_run, out, reader_args(tiny_base), log=lambda _: None)
    assert summary.steps_run == summary.total_steps > 0
    curve = json.loads((out / "dev_curve.json").read_text())
    assert [e["epoch"] for e in curve] == [0, 1] and "MRR@10" in curve[1]
    assert curve[0]["note"] == "untrained" and "retriever MRR@10" in curve[0]
    # The epoch with the best dev MRR@10 is kept; the untrained reader (epoch 0) unless epoch 1 beats it.
    assert summary.best_epoch == max(curve, key=lambda e: e["MRR@10"])["epoch"]
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["head"] == "integrated"
    assert record["counts"]["train_queries"] == summary.extras.train_queries
    assert not work_dir_for(out).exists()
    Reader.load(out, device="cpu")
    with pytest.raises(InputError, match="already exists"):
        train_reader(tiny_dataset, tiny_run, out, reader_args(tiny_base), log=lambda _: None)


def test_ctrl_c_mid_step_then_rerun_ends_with_the_uninterrupted_reader(tiny_base: Path, tiny_dataset: Path,
                                                                       tiny_run: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader's resume test (the loop's contract is test_training_loop.py's): Ctrl-C inside step
    4 (two examples a step: the 8th example loss is its second), then the same command again, ends
    with the very same folder."""
    import corefsearch.reader.train as train

    args = reader_args(tiny_base, epochs=2, dev_max_queries=3)
    whole = tmp_path / "whole"
    train_reader(tiny_dataset, tiny_run, whole, args, log=lambda _: None)

    resumed = tmp_path / "resumed"
    monkeypatch.setattr(train, "example_loss", Interrupt(train.example_loss, 8))
    with pytest.raises(KeyboardInterrupt):
        train_reader(tiny_dataset, tiny_run, resumed, args, log=lambda _: None)
    monkeypatch.undo()
    assert work_dir_for(resumed).exists() and not resumed.exists()
    messages: list[str] = []
    summary = train_reader(tiny_dataset, tiny_run, resumed, args, log=messages.append)
    assert summary.resumed_from_step == 3 and summary.steps_run == summary.total_steps - 3
    assert any(m.startswith("Resuming the interrupted run") for m in messages)
    assert_same_model(resumed, whole)


def test_train_reader_needs_train_queries_in_the_run(tiny_base: Path, tiny_dataset: Path, tmp_path: Path) -> None:
    from corefsearch.io.trec import RunRow

    run = tmp_path / "other.trec"
    write_run(run, [RunRow("not-a-query", "x", 1, 1.0, "t")])
    with pytest.raises(InputError, match="no train query"):
        train_reader(tiny_dataset, run, tmp_path / "out", reader_args(tiny_base), log=lambda _: None)


# --- search and query with a reader, through the CLI ---------------------------------------------------------


@pytest.fixture(scope="module")
def trained_reader(tiny_base: Path, tiny_dataset: Path, tiny_run: Path, tmp_path_factory: pytest.TempPathFactory
                   ) -> Path:
    out = tmp_path_factory.mktemp("trained") / "reader"
    train_reader(tiny_dataset, tiny_run, out, reader_args(tiny_base, dev_max_queries=2), log=lambda _: None)
    return out


def test_search_with_a_reader_writes_the_run_and_its_spans(tiny_dataset: Path, tiny_index: Path,
                                                           trained_reader: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.trec"
    queries = tiny_dataset / "queries" / "dev.jsonl"
    result = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries", str(queries), "--out", str(out),
                                 "--k", "12", "--query-format", "mention", "--reader", str(trained_reader),
                                 "--rerank-k", "4", "--device", "cpu", "--rerank-fusion", "reader"])
    assert result.exit_code == 0, result.output
    run = read_run(out)  # the reader's order (explicitly: the reader may have recorded rrf, see test_reader_train.py)
    spans = [record for _, record in read_jsonl(Path(str(out) + ".spans.jsonl"))]
    texts = {p.id: p.text for p in Dataset(tiny_dataset).passages()}
    for qid, scores in run.items():
        ranked = sorted(scores, key=lambda pid: -scores[pid])
        mine = [s for s in spans if s["qid"] == qid]
        assert len(mine) == min(4, len(ranked))  # a span for each re-ranked passage
        # The re-ranked passages come first, in the reader's order.
        assert [s["passage_id"] for s in sorted(mine, key=lambda s: -s["score"])] == ranked[:len(mine)]
        for span in mine:
            assert span["text"] == texts[span["passage_id"]][span["start"]:span["end"]]
    meta = json.loads(Path(str(out) + ".meta.json").read_text())
    assert meta["reader"]["rerank_k"] == 4 and meta["tag"].endswith("+reader-integrated")
    # The spans file is what `evaluate --spans` reads.
    scored = runner.invoke(app, ["evaluate", str(out), "--qrels", str(tiny_dataset / "qrels" / "dev.txt"),
                                 "--spans", str(out) + ".spans.jsonl", "--dataset", str(tiny_dataset),
                                 "--output-format", "json"])
    assert scored.exit_code == 0, scored.output
    metrics = next(iter(json.loads(scored.stdout).values()))
    assert 0 <= metrics["EM"] <= metrics["F1"] <= 1
    fused = tmp_path / "fused.trec"
    result = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries", str(queries), "--out", str(fused),
                                 "--k", "12", "--query-format", "mention", "--reader", str(trained_reader),
                                 "--rerank-k", "4", "--rerank-fusion", "rrf", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert json.loads(Path(str(fused) + ".meta.json").read_text())["tag"].endswith("+reader-integrated-rrf")
    assert read_run(fused).keys() == run.keys()


def test_query_with_a_reader_shows_the_span(tiny_index: Path, trained_reader: Path) -> None:
    result = runner.invoke(app, ["query", "--index", str(tiny_index), "--mention", "blaze", "--context",
                                 "Firefighters fought the blaze through the night.", "--query-format", "mention",
                                 "--reader", str(trained_reader), "--rerank-k", "5", "--k", "2", "--json",
                                 "--device", "cpu"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["reader"] == str(trained_reader)
    assert len(answer["hits"]) == 2
    for hit in answer["hits"]:
        assert hit["span"]["text"] == hit["text"][hit["span"]["start"]:hit["span"]["end"]]
    table = runner.invoke(app, ["query", "--index", str(tiny_index), "--mention", "blaze", "--query-format",
                                "mention", "--reader", str(trained_reader), "--device", "cpu"])
    assert table.exit_code == 0, table.output
    assert "Reader:" in table.output


def test_reader_errors_are_clear(tiny_dataset: Path, tiny_index: Path, tmp_path: Path) -> None:
    queries = tiny_dataset / "queries" / "dev.jsonl"
    not_a_reader = tmp_path / "not-a-reader"  # a folder beside the run: a run inside an input is refused
    not_a_reader.mkdir()
    result = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries", str(queries), "--out",
                                 str(tmp_path / "r.trec"), "--reader", str(not_a_reader)])
    assert result.exit_code == 1
    assert "error:" in flat(result.output) and "not a reader" in flat(result.output)
    assert not (tmp_path / "r.trec").exists()
    result = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries", str(queries), "--out",
                                 str(tmp_path / "r.trec"), "--spans-out", str(tmp_path / "s.jsonl")])
    assert result.exit_code == 1 and "--reader" in flat(result.output)
    result = runner.invoke(app, ["train", "reader", str(tiny_dataset), "--run", str(tmp_path / "missing.trec"),
                                 "--out", str(tmp_path / "m")])
    assert result.exit_code == 1 and "no such run file" in flat(result.output)


def test_corpus_words_cover_the_passages() -> None:
    assert "blaze" in corpus_words()


def test_rerank_orders_by_the_reader_or_fuses_with_the_retriever() -> None:
    from corefsearch.base.schema import Hit
    from corefsearch.reader.read import ReaderHit
    from corefsearch.reader.rerank import order_reranked

    retrieved = [Hit(pid, 10.0 - i) for i, pid in enumerate("abcde")]
    read = [ReaderHit("c", 3.0, 0, 1, "x"), ReaderHit("a", 2.0, 0, 1, "x"), ReaderHit("b", -1.0, 0, 1, "x")]
    by_reader = order_reranked(read, retrieved, 3)
    assert [h.passage_id for h in by_reader] == ["c", "a", "b", "d", "e"]
    assert [h.score for h in by_reader] == [3.0, 2.0, -1.0, -2.0, -3.0]
    # RRF: a = 1/62 + 1/61, c = 1/61 + 1/63, b = 1/63 + 1/62.
    fused = order_reranked(read, retrieved, 3, fusion="rrf")
    assert [h.passage_id for h in fused] == ["a", "c", "b", "d", "e"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
