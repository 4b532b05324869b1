"""Reader inference speed: the windows of a query in a few forward passes (length buckets) or in
one, and the ONNX Runtime backend of the encoder (``corefsearch export-onnx``, ``--backend
onnx|onnx-int8``).

Tiny random BERT readers (helpers.tiny_reader) saved into a folder and exported here."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import pytest
from helpers import PASSAGES, a_query, flat, tiny_reader
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.cli import app
from corefsearch.io.read import read_jsonl
from corefsearch.io.trec import read_run
from corefsearch.reader.inputs import PASS_OVERHEAD_TOKENS, length_buckets
from corefsearch.reader.read import Reader

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")
# Four copies of each passage under other ids: the long one is read in several windows.
MANY = [(f"{pid}-{i}", text) for i in range(4) for pid, text in PASSAGES]
# Windows of very different lengths: one-word sentences next to the long passage's full windows.
SHORT_AND_LONG = ([(f"short-{i}", text) for i, text in enumerate(["Fire.", "Smoke rose.", "Arson?", "Rain fell.",
                                                                  "Blaze out.", "Mill burnt.", "Crews left.",
                                                                  "Night fell."])]
                  + [(f"long-{i}", PASSAGES[2][1]) for i in range(3)])


def described(hits: list) -> list[tuple[str, int, int]]:
    return [(h.passage_id, h.start, h.end) for h in hits]


@pytest.mark.parametrize("head", ["dpr", "integrated"])
def test_one_pass_over_every_window_changes_no_score(tiny_base: Path, head: str) -> None:
    model = tiny_reader(tiny_base, head)
    one_pass = Reader(model)  # the default: all windows of the query at once
    assert one_pass.batch_size is None
    windows = one_pass.windows(a_query(), MANY)
    assert len(windows) > len(MANY)  # the long passages have several windows each
    hits = one_pass.read(a_query(), MANY)
    assert sorted(h.passage_id for h in hits) == sorted(pid for pid, _ in MANY)
    for size in (1, 3, 0):  # one window a pass, small batches, 0 = all again
        other = Reader(model, batch_size=size).read(a_query(), MANY)
        scores = {h.passage_id: h.score for h in other}
        assert [scores[h.passage_id] for h in hits] == pytest.approx([h.score for h in hits], abs=1e-5)
        assert sorted(described(other)) == sorted(described(hits))  # the same span in every passage
    # Without length buckets: one pass padded to the longest window, or batches in length order.
    for size in (None, 3):
        other = Reader(model, batch_size=size, pass_overhead=None).read(a_query(), MANY)
        scores = {h.passage_id: h.score for h in other}
        assert [scores[h.passage_id] for h in hits] == pytest.approx([h.score for h in hits], abs=1e-5)
        assert sorted(described(other)) == sorted(described(hits))


@pytest.mark.parametrize("head", ["dpr", "integrated"])
def test_several_queries_read_together_get_the_scores_and_spans_each_gets_alone(
        tiny_base: Path, head: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    model = tiny_reader(tiny_base, head)
    reader = Reader(model)
    other_query = replace(a_query(), id="q2")
    items = [(a_query(), MANY), (other_query, SHORT_AND_LONG), (a_query(), []), (other_query, MANY[:3])]
    alone = [reader.read(query, passages) for query, passages in items]
    passes = counting_passes(monkeypatch, reader)
    for cap in (None, 7):
        passes.clear()
        together = reader.read_many(items, cap)
        assert len(together) == len(items) and together[2] == []
        for one, both in zip(alone, together, strict=True):
            scores = {h.passage_id: h.score for h in both}
            assert [scores[h.passage_id] for h in one] == pytest.approx([h.score for h in one], abs=1e-5)
            assert sorted(described(both)) == sorted(described(one))
        # No more work (padded tokens + the overhead of a pass) than reading the queries one by one, and
        # never more windows a pass than the cap.
        if cap is None:
            lengths = [[len(w.input_ids) for w in reader.windows(q, p)] for q, p in items if p]
            alone_cost = sum(len(g) * max(ls[i] for i in g) + PASS_OVERHEAD_TOKENS
                             for ls in lengths for g in length_buckets(ls))
            assert sum(len(p) * max(p) + PASS_OVERHEAD_TOKENS for p in passes) <= alone_cost
        else:
            assert max(len(p) for p in passes) <= cap
    assert reader.read_many([]) == []


def search_with_reader(dataset: Path, index: Path, reader: Path, out: Path, *options: str) -> dict:
    """``search`` of the dev queries with ``reader`` (top 8, the top 5 re-ranked) and ``options``; its metadata."""
    result = runner.invoke(app, ["search", "--index", str(index), "--queries", str(dataset / "queries" / "dev.jsonl"),
                                 "--out", str(out), "--k", "8", "--query-format", "mention", "--reader", str(reader),
                                 "--rerank-k", "5", "--device", "cpu", *options])
    assert result.exit_code == 0, result.output
    return json.loads(Path(f"{out}.meta.json").read_text())


def test_search_reads_queries_together_with_the_run_of_one_at_a_time(tiny_dataset: Path, tiny_index: Path,
                                                                    exported: Path, tmp_path: Path) -> None:
    queries = tiny_dataset / "queries" / "dev.jsonl"
    runs = {}
    for size in ("1", "5"):
        out = tmp_path / f"{size}.trec"
        meta = search_with_reader(tiny_dataset, tiny_index, exported, out, "--rerank-batch-queries", size)
        assert meta["reader"]["batch_queries"] == int(size)
        runs[size] = (read_run(out), Path(f"{out}.spans.jsonl").read_text())
    (one_run, one_spans), (five_run, five_spans) = runs["1"], runs["5"]
    assert five_run.keys() == one_run.keys()
    for qid, scores in one_run.items():
        assert five_run[qid].keys() == scores.keys()
        assert [five_run[qid][pid] for pid in scores] == pytest.approx(list(scores.values()), abs=1e-5)
    assert len(five_spans.splitlines()) == len(one_spans.splitlines())
    for bad, message in ((["--rerank-batch-queries", "0"], "--rerank-batch-queries must be at least 1"),):
        result = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries", str(queries), "--out",
                                     str(tmp_path / "bad.trec"), "--reader", str(exported), "--device", "cpu", *bad])
        assert result.exit_code == 1 and message in flat(result.output), result.output
        assert not (tmp_path / "bad.trec").exists()
    result = runner.invoke(app, ["search", "--index", str(tiny_index), "--queries", str(queries), "--out",
                                 str(tmp_path / "bad.trec"), "--rerank-batch-queries", "4"])
    assert result.exit_code == 1 and "--rerank-batch-queries sizes the reader's passes" in flat(result.output)


def counting_passes(monkeypatch: pytest.MonkeyPatch, reader: Reader) -> list[list[int]]:
    """The window lengths of every forward pass ``reader`` makes from now on."""
    passes: list[list[int]] = []
    forward = reader.model.forward

    def counted(batch: list) -> object:
        passes.append([len(w.input_ids) for w in batch])
        return forward(batch)

    monkeypatch.setattr(reader.model, "forward", counted)
    return passes


@pytest.mark.parametrize("head", ["dpr", "integrated"])
def test_windows_of_very_different_lengths_are_read_in_length_buckets(tiny_base: Path, head: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_reader(tiny_base, head)
    reference = Reader(model, batch_size=1).read(a_query(), SHORT_AND_LONG)  # one window a pass
    bucketed = Reader(model)
    assert bucketed.pass_overhead == PASS_OVERHEAD_TOKENS and bucketed.batch_size is None  # the default
    lengths = sorted(len(w.input_ids) for w in bucketed.windows(a_query(), SHORT_AND_LONG))
    assert lengths[-1] >= 2 * lengths[0]  # a one-word sentence next to a full window
    passes = counting_passes(monkeypatch, bucketed)
    hits = bucketed.read(a_query(), SHORT_AND_LONG)
    assert len(passes) > 1  # not one pass padded to the longest window
    assert sorted(n for batch in passes for n in batch) == lengths  # every window read once
    for first, second in itertools.pairwise(passes):  # the short windows together, the long ones together
        assert max(first) <= min(second)
    padded = sum(len(batch) * max(batch) for batch in passes)
    assert padded < len(lengths) * lengths[-1]  # fewer tokens read than one pass padded to the longest
    scores = {h.passage_id: h.score for h in hits}
    assert [scores[h.passage_id] for h in reference] == pytest.approx([h.score for h in reference], abs=1e-5)
    assert sorted(described(hits)) == sorted(described(reference))  # the same span in every passage
    # A batch_size caps every bucket, still without changing a score.
    capped = Reader(model, batch_size=3)
    capped_passes = counting_passes(monkeypatch, capped)
    capped_hits = capped.read(a_query(), SHORT_AND_LONG)
    assert max(len(batch) for batch in capped_passes) <= 3
    assert sorted(n for batch in capped_passes for n in batch) == lengths
    scores = {h.passage_id: h.score for h in capped_hits}
    assert [scores[h.passage_id] for h in reference] == pytest.approx([h.score for h in reference], abs=1e-5)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 120), min_size=1, max_size=9), st.integers(0, 400), st.integers(0, 5))
def test_length_buckets_with_a_cap_are_the_cheapest_capped_cut(lengths: list[int], overhead: int, cap: int) -> None:
    groups = length_buckets(lengths, overhead, cap)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    assert all(len(group) <= (cap or len(lengths)) for group in groups)

    def cost(partition: list[list[int]]) -> int:
        return sum(len(g) * max(lengths[i] for i in g) + overhead for g in partition)

    # Brute force: every cut of the length-sorted windows into passes of at most `cap`.
    ordered = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = math.inf
    for cuts in itertools.product((False, True), repeat=len(lengths) - 1):
        partition, current = [], [ordered[0]]
        for cut, index in zip(cuts, ordered[1:], strict=True):
            if cut:
                partition.append(current)
                current = []
            current.append(index)
        partition.append(current)
        if all(len(group) <= (cap or len(lengths)) for group in partition):
            best = min(best, cost(partition))
    assert cost(groups) == best


@pytest.fixture(scope="module")
def exported(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("onnx-reader") / "reader"
    tiny_reader(tiny_base, "integrated").save(folder)
    result = runner.invoke(app, ["export-onnx", str(folder)])
    assert result.exit_code == 0, result.output
    assert "model.onnx" in flat(result.output) and "model_qint8.onnx" in flat(result.output)
    return folder


def test_export_writes_both_models_and_records_the_weights(exported: Path) -> None:
    from corefsearch.base.onnx_backend import weights_checksum

    record = json.loads((exported / "onnx" / "export.json").read_text())
    assert set(record["files"]) == {"model.onnx", "model_qint8.onnx"}
    assert record["weights_sha256"] == weights_checksum(exported)
    assert record["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]  # a BERT: segments too
    assert record["files"]["model.onnx"]["max_abs_diff"] < 1e-4
    assert not [p.name for p in (exported / "onnx").iterdir() if p.name.startswith(".")]  # no temporaries left


def test_onnx_backend_gives_the_torch_scores_and_spans(exported: Path) -> None:
    torch_hits = Reader.load(exported, backend="torch").read(a_query(), MANY)
    onnx_reader = Reader.load(exported, backend="onnx", threads=1)
    assert type(onnx_reader.model.model).__name__ == "OnnxEncoder"
    onnx_hits = onnx_reader.read(a_query(), MANY)
    scores = {h.passage_id: h.score for h in onnx_hits}
    assert [scores[h.passage_id] for h in torch_hits] == pytest.approx([h.score for h in torch_hits], abs=1e-4)
    assert sorted(described(onnx_hits)) == sorted(described(torch_hits))
    # A cap on the batch reads the same with ONNX Runtime (its dynamic batch and sequence axes).
    capped = Reader.load(exported, backend="onnx", batch_size=2).read(a_query(), MANY)
    assert [h.score for h in capped] == pytest.approx([h.score for h in onnx_hits], abs=1e-5)
    # Length buckets (the default, several passes here) read as one pass does with ONNX Runtime.
    assert len(onnx_reader.passes(onnx_reader.windows(a_query(), SHORT_AND_LONG))) > 1
    bucketed = onnx_reader.read(a_query(), SHORT_AND_LONG)
    one_pass = Reader.load(exported, backend="onnx", pass_overhead=None).read(a_query(), SHORT_AND_LONG)
    scores = {h.passage_id: h.score for h in one_pass}
    assert [scores[h.passage_id] for h in bucketed] == pytest.approx([h.score for h in bucketed], abs=1e-5)
    assert sorted(described(one_pass)) == sorted(described(bucketed))


def test_int8_backend_reads_every_passage_with_finite_scores(exported: Path) -> None:
    texts = dict(MANY)
    hits = Reader.load(exported, backend="onnx-int8").read(a_query(), MANY)
    assert sorted(h.passage_id for h in hits) == sorted(texts)
    assert all(math.isfinite(h.score) for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for hit in hits:
        assert hit.text == texts[hit.passage_id][hit.start:hit.end] and hit.start < hit.end


def test_search_with_the_onnx_backend_writes_the_torch_run(tiny_dataset: Path, tiny_index: Path, exported: Path,
                                                          tmp_path: Path) -> None:
    runs = {}
    for backend in ("torch", "onnx"):
        out = tmp_path / f"{backend}.trec"
        assert search_with_reader(tiny_dataset, tiny_index, exported, out, "--backend", backend)["reader"][
            "backend"] == backend
        spans = {(r["qid"], r["passage_id"]): (r["start"], r["end"]) for _, r in read_jsonl(Path(f"{out}.spans.jsonl"))}
        runs[backend] = (read_run(out), spans)
    (torch_run, torch_spans), (onnx_run, onnx_spans) = runs["torch"], runs["onnx"]
    assert onnx_spans == torch_spans
    assert onnx_run.keys() == torch_run.keys()
    for qid, scores in torch_run.items():
        assert onnx_run[qid].keys() == scores.keys()
        assert [onnx_run[qid][pid] for pid in scores] == pytest.approx(list(scores.values()), abs=1e-4)
    answer = runner.invoke(app, ["query", "--index", str(tiny_index), "--mention", "blaze", "--query-format",
                                 "mention", "--reader", str(exported), "--backend", "onnx-int8", "--k", "3",
                                 "--json", "--device", "cpu"])
    assert answer.exit_code == 0, answer.output
    assert all("span" in hit for hit in json.loads(answer.output)["hits"])


def test_backend_errors_are_one_line(tiny_base: Path, tiny_dataset: Path, tiny_index: Path, exported: Path,
                                     tmp_path: Path) -> None:
    queries = tiny_dataset / "queries" / "dev.jsonl"
    search = ["search", "--index", str(tiny_index), "--queries", str(queries), "--out", str(tmp_path / "r.trec"),
              "--query-format", "mention", "--device", "cpu"]
    # --backend without --reader
    result = runner.invoke(app, [*search, "--backend", "onnx"])
    assert result.exit_code == 1 and "add --reader" in flat(result.output)
    query = ["query", "--index", str(tiny_index), "--mention", "blaze", "--query-format", "mention"]
    result = runner.invoke(app, [*query, "--backend", "onnx"])
    assert result.exit_code == 1 and "add --reader" in flat(result.output)
    result = runner.invoke(app, [*search, "--reader", str(exported), "--backend", "tensorrt"])
    assert result.exit_code == 1 and "--backend must be one of torch, onnx, onnx-int8" in flat(result.output)
    # A reader never exported
    plain = tmp_path / "plain"
    shutil.copytree(exported, plain, ignore=shutil.ignore_patterns("onnx"))
    result = runner.invoke(app, [*search, "--reader", str(plain), "--backend", "onnx"])
    assert result.exit_code == 1
    assert f"run `corefsearch export-onnx {plain}`" in flat(result.output) and "Traceback" not in result.output
    assert not (tmp_path / "r.trec").exists()
    # Exported without int8
    result = runner.invoke(app, ["export-onnx", str(plain), "--no-quantize"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, [*search, "--reader", str(plain), "--backend", "onnx-int8"])
    assert result.exit_code == 1 and "model_qint8.onnx" in flat(result.output)
    # Retrained into the same folder after the export: the export is stale, never used
    import torch

    torch.manual_seed(7)
    retrained = tiny_reader(tiny_base, "integrated")
    with torch.no_grad():
        next(retrained.model.parameters()).add_(0.5)
    retrained.save(plain)
    result = runner.invoke(app, [*search, "--reader", str(plain), "--backend", "onnx"])
    assert result.exit_code == 1 and "exported from other encoder weights" in flat(result.output)
    with pytest.raises(InputError, match="export-onnx"):
        Reader.load(plain, backend="onnx")
    # export-onnx on a folder that is not a reader
    result = runner.invoke(app, ["export-onnx", str(tiny_base)])
    assert result.exit_code == 1 and "is not a reader" in flat(result.output) and "Traceback" not in result.output
    assert not (tiny_base / "onnx" / "model.onnx").exists()
    result = runner.invoke(app, ["export-onnx", str(tmp_path / "missing")])
    assert result.exit_code == 1 and "no such model folder" in flat(result.output)
    # ONNX Runtime runs on the CPU
    from corefsearch.base.onnx_backend import check_backend_device

    with pytest.raises(InputError, match="--backend onnx runs the model on the CPU"):
        check_backend_device("onnx", "cuda")
    check_backend_device("torch", "cuda")
    with pytest.raises(MissingArtefactError, match="not a reader"):
        Reader.load(tmp_path, backend="onnx")
