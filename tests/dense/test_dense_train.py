"""Retriever training (``corefsearch train retriever``) with a tiny randomly initialised BERT
built here: marker tokens, the in-batch loss and its mask, examples and hard negatives, the
output folder, the dev curve, and resuming an interrupted run. No downloads."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from helpers import Interrupt, assert_same_model, build_tiny_dataset, retriever_args
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.base.models import MENTION_END, MENTION_START
from corefsearch.base.schema import Query
from corefsearch.dense.examples import (
    TrainingExample,
    epoch_examples,
    layout_batch,
    mine_hard_negatives,
)
from corefsearch.dense.loss import in_batch_nll
from corefsearch.dense.model import BiEncoder, RetrieverConfig
from corefsearch.dense.train import train_retriever
from corefsearch.training.checkpoint import work_dir_for

# The tiny news corpus and random BERT of helpers.py / conftest.py, on one torch thread.
pytestmark = pytest.mark.usefixtures("one_thread")



def query(qid: str, cluster: str, passage_id: str) -> Query:
    return Query(qid, passage_id, "The blaze spread.", 4, 9, "blaze", cluster)


# --- markers --------------------------------------------------------------------------------------


def test_markers_are_special_tokens_that_survive_save_and_load(tiny_base: Path, tmp_path: Path) -> None:
    model = BiEncoder.from_base(str(tiny_base), RetrieverConfig(max_query_len=24, max_passage_len=32), "cpu")
    for encoder in (model.query_encoder, model.passage_encoder):
        tokenizer = encoder.tokenizer
        ids = tokenizer.convert_tokens_to_ids([MENTION_START, MENTION_END])
        assert tokenizer.unk_token_id not in ids and len(set(ids)) == 2
        assert encoder.model.get_input_embeddings().num_embeddings == len(tokenizer)
        # Never split, never lower-cased, even when glued to words.
        tokens = tokenizer.tokenize(f"the {MENTION_START}fire{MENTION_END} destroyed")
        assert tokens == ["the", MENTION_START, "fire", MENTION_END, "destroyed"]
        assert all(tokenizer.added_tokens_decoder[i].special for i in ids)
    q = Query("q", "p", "A fire destroyed the old textile mill in Leeds.", 2, 6, "fire", "leeds-fire")
    marked = model.query_encoder.query_input_ids(q.text, q.start, q.end, 24)
    fire = model.query_encoder.tokenizer.convert_tokens_to_ids("fire")
    start_id, end_id = model.query_encoder.marker_ids
    assert marked[marked.index(start_id) + 1] == fire and marked[marked.index(fire) + 1] == end_id

    model.save(tmp_path / "model")
    loaded = BiEncoder.load(tmp_path / "model")
    for before, after in ((model.query_encoder, loaded.query_encoder), (model.passage_encoder, loaded.passage_encoder)):
        assert after.tokenizer.convert_tokens_to_ids([MENTION_START, MENTION_END]) == \
            before.tokenizer.convert_tokens_to_ids([MENTION_START, MENTION_END])
        assert after.tokenizer.tokenize(f"a{MENTION_START}fire{MENTION_END}") == ["a", MENTION_START, "fire",
                                                                                   MENTION_END]
        assert len(after.tokenizer) == len(before.tokenizer)
        assert all(after.tokenizer.added_tokens_decoder[i].special for i in after.marker_ids)
    assert loaded.query_encoder.query_input_ids(q.text, q.start, q.end, 24) == marked


# --- the loss and its mask -----------------------------------------------------------------------------


def test_masked_passages_do_not_change_the_loss_and_unmasked_duplicates_do() -> None:
    import torch

    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    passages = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    positive = torch.tensor([0, 1])
    base = in_batch_nll(queries, passages, positive, torch.zeros(2, 2, dtype=torch.bool))
    expected = -torch.log_softmax(torch.tensor([2.0, 0.0]), 0)[0]
    assert base.item() == pytest.approx(expected.item())

    # A third passage, a copy of query 0's positive (the same cluster): masked for query 0 it
    # changes nothing; as a negative it raises the loss.
    extra = torch.cat([passages, passages[:1]])
    masked = torch.tensor([[False, False, True], [False, False, False]])
    row1 = -torch.log_softmax(torch.tensor([0.0, 2.0, 0.0]), 0)[1]  # for query 1 the copy is a negative
    assert in_batch_nll(queries, extra, positive, masked).item() == pytest.approx((expected + row1).item() / 2)
    only_row0 = in_batch_nll(queries[:1], extra, positive[:1], masked[:1])
    assert only_row0.item() == pytest.approx(expected.item())
    unmasked = in_batch_nll(queries[:1], extra, positive[:1], torch.zeros(1, 3, dtype=torch.bool))
    assert unmasked.item() > only_row0.item() + 0.5
    # The positive is never masked, whatever the mask says.
    assert in_batch_nll(queries, passages, positive, torch.ones(2, 2, dtype=torch.bool)).item() == pytest.approx(0.0)


def test_batch_layout_deduplicates_passages_and_masks_same_cluster_ones() -> None:
    q1, q2, q3 = query("q1", "A", "a0"), query("q2", "A", "a1"), query("q3", "B", "b0")
    relevant = {"q1": ["a1", "a2"], "q2": ["a0", "a2"], "q3": ["b1"]}
    # "x" holds a mention of cluster A although the qrels do not list it (e.g. a passage outside the qrels split).
    clusters = {"a0": frozenset("A"), "a1": frozenset("A"), "a2": frozenset("A"), "b1": frozenset("B"),
                "x": frozenset({"A", "C"}), "n": frozenset()}
    batch = [TrainingExample(q1, "a1", "n"), TrainingExample(q2, "a2", "x"), TrainingExample(q3, "b1", "a2")]
    layout = layout_batch(batch, relevant, clusters)
    assert layout.passage_ids == ["a1", "n", "a2", "x", "b1"]  # a2 once although it occurs twice
    assert layout.positive_index == [0, 2, 4]
    column = {pid: i for i, pid in enumerate(layout.passage_ids)}
    masked = [{pid for pid in layout.passage_ids if layout.mask[row][column[pid]]} for row in range(3)]
    assert masked[0] == {"a2", "x"}          # relevant (qrels) and same cluster (mentions)
    assert masked[1] == {"a1", "x"}          # a1 is q2's own passage
    assert masked[2] == set()                # cluster B: every other passage is a negative


def test_epoch_examples_are_seeded_and_capped() -> None:
    queries = [query(f"q{i}", "A", f"p{i}") for i in range(5)]
    relevant = {q.id: [f"r{q.id}{j}" for j in range(4)] for q in queries}
    negatives = {"q0": ["n1", "n2"]}
    every = epoch_examples(queries, relevant, negatives, None, seed=1, epoch=1)
    assert len(every) == 20 and {(e.query.id, e.positive) for e in every} == {
        (q, p) for q, ps in relevant.items() for p in ps}
    assert {e.hard_negative for e in every if e.query.id == "q0"} <= {"n1", "n2"}
    assert all(e.hard_negative is None for e in every if e.query.id != "q0")
    capped = epoch_examples(queries, relevant, negatives, 1, seed=1, epoch=1)
    assert len(capped) == 5 and len({e.query.id for e in capped}) == 5
    assert capped == epoch_examples(queries, relevant, negatives, 1, seed=1, epoch=1)
    assert [e.positive for e in capped] != [e.positive for e in epoch_examples(queries, relevant, negatives, 1,
                                                                                 seed=1, epoch=2)]


def test_hard_negative_mining_skips_relevant_and_own_passages() -> None:
    class Hit:
        def __init__(self, passage_id: str) -> None:
            self.passage_id = passage_id

    class FakeSearcher:
        def search(self, queries: list[Query], k: int) -> Any:
            for q in queries:
                yield q, [Hit(p) for p in ["r1", q.passage_id, "n1", "r2", "n2", "n3"]][:k]

    mined = mine_hard_negatives([query("q", "A", "own")], {"q": ["r1", "r2"]}, FakeSearcher(), depth=2)
    assert mined == {"q": ["n1", "n2", "n3"]}  # deeper than `depth`: split filtering happens later


# --- training runs ----------------------------------------------------------------------------------


def test_training_lowers_the_loss_and_writes_a_loadable_model(tiny_base: Path, tiny_dataset: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "retriever"
    messages: list[str] = []
    summary = train_retriever(tiny_dataset, out, retriever_args(tiny_base, epochs=4), log=messages.append)
    assert summary.steps_per_epoch == 6 and summary.total_steps == 24 and summary.steps_run == 24
    curve = json.loads((out / "dev_curve.json").read_text())
    assert [e["epoch"] for e in curve] == [0, 1, 2, 3, 4]
    assert curve[0]["loss"] is None and curve[-1]["step"] == 24
    for entry in curve:
        assert {"epoch", "step", "loss", "MRR@10", "R@100"} <= set(entry)
        assert 0 <= entry["MRR@10"] <= 1 and 0 <= entry["R@100"] <= 1
    losses = [e["loss"] for e in curve[1:]]
    assert losses[-1] < losses[0] * 0.8, losses
    assert summary.best_epoch == max(curve[1:], key=lambda e: e["MRR@10"])["epoch"]

    for name in ("query_encoder", "passage_encoder"):
        assert (out / name / "model.safetensors").exists() and (out / name / "tokenizer.json").exists()
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["epochs"] == 4 and record["options"]["base_model"] == str(tiny_base)
    assert record["passages_sha256"].startswith("sha256:") and record["versions"]["torch"]
    assert record["counts"]["examples_per_epoch"] == 48 and record["best_epoch"] == summary.best_epoch
    assert not work_dir_for(out).exists()
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())

    model = BiEncoder.load(out)
    assert model.config.markers and not model.config.shared_encoder
    q = Query("q", "p", "A fire destroyed the old textile mill in Leeds.", 2, 6, "fire", "leeds-fire")
    assert model.query_encoder.encode_queries([q], 24).shape == (1, 32)

    with pytest.raises(InputError, match="--overwrite"):
        train_retriever(tiny_dataset, out, retriever_args(tiny_base, epochs=4))


def test_ctrl_c_mid_step_then_rerun_ends_with_the_uninterrupted_model(tiny_base: Path, tiny_dataset: Path,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The retriever's resume test (the loop's contract is test_training_loop.py's): Ctrl-C inside
    step 5 (after its forward pass), then the same command again, ends with the very same folder."""
    import corefsearch.dense.loss as loss

    args = retriever_args(tiny_base, epochs=2)
    whole = train_retriever(tiny_dataset, tmp_path / "whole", args, log=lambda _: None)

    out = tmp_path / "resumed"
    monkeypatch.setattr(loss, "in_batch_nll", Interrupt(loss.in_batch_nll, 5))
    with pytest.raises(KeyboardInterrupt):
        train_retriever(tiny_dataset, out, args, log=lambda _: None)
    monkeypatch.undo()
    assert not out.exists() and (work_dir_for(out) / "checkpoint.pt").exists()

    messages: list[str] = []
    summary = train_retriever(tiny_dataset, out, args, log=messages.append)
    assert summary.resumed_from_step == 4 and summary.steps_run == whole.total_steps - 4 == 8
    assert any(m.startswith("Resuming the interrupted run") and "from step 4 of 12" in m for m in messages)
    assert [e["step"] for e in summary.dev_curve] == [e["step"] for e in whole.dev_curve] == [0, 6, 12]
    assert_same_model(out, tmp_path / "whole")
    assert not work_dir_for(out).exists()


def test_without_dev_queries_the_last_epoch_is_kept(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory,
                                                     tmp_path: Path) -> None:
    dataset = build_tiny_dataset(tmp_path_factory, (1, 0, 0))
    messages: list[str] = []
    summary = train_retriever(dataset, tmp_path / "model", retriever_args(tiny_base, epochs=2, shared_encoder=True,
                                                                     pooling="cls", max_steps=3),
                              log=messages.append)
    assert any("No dev queries" in m for m in messages)
    assert summary.best_epoch == 1 and summary.total_steps == 3
    assert [set(e) for e in summary.dev_curve] == [{"epoch", "step", "loss", "seconds"}]
    model = BiEncoder.load(tmp_path / "model")
    assert model.config.shared_encoder and model.config.pooling == "cls"


@pytest.mark.java
def test_bm25_hard_negatives_from_the_index(tiny_base: Path, tiny_dataset: Path, tmp_path: Path) -> None:
    from corefsearch.sparse.index import build_lucene_index

    build_lucene_index(tiny_dataset, tmp_path / "index")
    out = tmp_path / "model"
    summary = train_retriever(tiny_dataset, out, retriever_args(tiny_base, epochs=1, hard_negatives=3),
                              index=tmp_path / "index")
    record = json.loads((out / "training_args.json").read_text())
    assert record["index"] == str((tmp_path / "index").resolve())
    # BM25 finds few non-relevant passages in so small a corpus (the query is the mention and its
    # named entities), but some.
    assert 1 <= record["counts"]["queries_with_hard_negatives"] <= summary.extras.train_queries == 16


def test_cli_trains_and_prints_the_dev_curve(tiny_base: Path, tiny_dataset: Path, tmp_path: Path) -> None:
    from corefsearch.cli import app

    runner = CliRunner(env={"COLUMNS": "250"})
    out = tmp_path / "model"
    result = runner.invoke(app, ["train", "retriever", str(tiny_dataset), "--out", str(out), "--base-model",
                                 str(tiny_base), "--epochs", "1", "--batch-size", "8", "--lr", "1e-3",
                                 "--max-query-len", "24", "--max-passage-len", "32", "--positives-per-query", "1",
                                 "--device", "cpu", "--no-markers", "--pooling", "mean"])
    assert result.exit_code == 0, result.output
    assert "MRR@10" in result.output and "R@100" in result.output and "Kept epoch 1" in result.output
    assert math.isfinite(json.loads((out / "dev_curve.json").read_text())[1]["loss"])
    assert not BiEncoder.load(out).config.markers
    again = runner.invoke(app, ["train", "retriever", str(tiny_dataset), "--out", str(out)])
    assert again.exit_code == 1 and "--overwrite" in again.output and "Traceback" not in again.output


def test_re_mined_negatives_change_only_when_the_encoder_changes(tiny_base: Path, tiny_dataset: Path) -> None:
    import torch

    from corefsearch.datasets.dataset import Dataset
    from corefsearch.dense.examples import read_relevant
    from corefsearch.dense.train import mine_dense_negatives

    dataset = Dataset(tiny_dataset)
    queries = dataset.queries("train")
    relevant = read_relevant(dataset.qrels_path("train"))
    passages = [p for p in dataset.passages() if p.split in ("train", None)]
    ids, titles, texts = [p.id for p in passages], [p.title for p in passages], [p.text for p in passages]
    torch.manual_seed(0)
    model = BiEncoder.from_base(str(tiny_base), RetrieverConfig(pooling="mean", max_query_len=24,
                                                                max_passage_len=32))

    def mine() -> dict[str, list[str]]:
        return mine_dense_negatives(model, queries, relevant, ids, titles, texts, 3, 24, 32)

    first = mine()
    assert first == mine()  # the same weights, the same candidates
    for query in queries:
        assert len(first[query.id]) == 3 and query.passage_id not in first[query.id]
        assert not set(first[query.id]) & set(relevant[query.id])
    with torch.no_grad():
        for parameter in model.query_encoder.model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)
    assert mine() != first


def test_refreshed_negatives_are_kept_so_a_resumed_run_ends_with_the_uninterrupted_model(
        tiny_base: Path, tiny_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import corefsearch.dense.loss as loss

    args = retriever_args(tiny_base, epochs=3, hard_negatives=3, refresh_negatives=True)
    messages: list[str] = []
    whole = train_retriever(tiny_dataset, tmp_path / "whole", args, log=messages.append)
    assert [m.split(":")[0] for m in messages if "re-mining" in m] == ["Epoch 2", "Epoch 3"]
    out = tmp_path / "resumed"
    monkeypatch.setattr(loss, "in_batch_nll", Interrupt(loss.in_batch_nll, 9))  # inside epoch 2 (6 steps each)
    with pytest.raises(KeyboardInterrupt):
        train_retriever(tiny_dataset, out, args, log=lambda _: None)
    monkeypatch.undo()
    assert (work_dir_for(out) / "hard_negatives_epoch2.json").exists()
    summary = train_retriever(tiny_dataset, out, args, log=lambda _: None)
    assert summary.resumed_from_step == 8 and summary.total_steps == whole.total_steps == 18
    assert_same_model(out, tmp_path / "whole")
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["refresh_negatives"] is True
    with pytest.raises(InputError, match="--refresh-negatives re-mines the hard negatives"):
        train_retriever(tiny_dataset, tmp_path / "x", retriever_args(tiny_base, hard_negatives=0,
                                                                      refresh_negatives=True))
