"""`corefsearch cluster --method encoder` and `corefsearch train clusterer`: a tiny random
BERT (built here, as in test_mention_encoder.py) on a hand-made dataset with topics and train, dev and
test clusters."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import CLUSTER_DOCS as DOCS
from helpers import CLUSTER_MENTIONS as MENTIONS
from helpers import CLUSTER_SPLITS as SPLITS
from helpers import (
    Interrupt,
    assert_same_model,
    cluster_words,
    partition,
    read_clusters,
    save_mention_encoder,
    save_tiny_bert,
)
from helpers import write_cluster_dataset as write_dataset
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.cluster.agglomerative import cluster_dense
from corefsearch.cluster.batches import hard_topic_batches, topic_batches
from corefsearch.cluster.encoder import cluster_vectors, split_records, threshold_grid, threshold_sweep
from corefsearch.cluster.loss import batch_contrastive_loss, contrastive_loss
from corefsearch.cluster.model import ClustererConfig, MentionEncoder
from corefsearch.cluster.run import cluster_dataset
from corefsearch.cluster.train import ClustererTrainingArguments, train_clusterer
from corefsearch.training import seed_everything
from corefsearch.training.checkpoint import work_dir_for

runner = CliRunner(env={"COLUMNS": "250"})
pytestmark = pytest.mark.usefixtures("one_thread_each_test")

def split_ids(split: str) -> set[str]:
    return {m for m, _, _, _, c in MENTIONS if SPLITS[c] == split}


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-wide BERT with random weights and a word-level vocabulary."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), cluster_words(), seed=0, max_positions=160)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data") / "ds")


@pytest.fixture(scope="module")
def model_dir(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained mention encoder saved with τ 0.5."""
    return save_mention_encoder(tiny_base, tmp_path_factory.mktemp("model") / "encoder")


def vectors_of(model_dir: Path, dataset: Path, split: str) -> tuple[list[str], np.ndarray]:
    records = split_records(dataset, split)
    return [r.mention_id for r in records], MentionEncoder.load(model_dir).encode(records)


def test_batches_in_length_order_give_each_mention_its_own_vector_in_input_order(model_dir: Path,
                                                                                   dataset: Path) -> None:
    records = split_records(dataset, "train") + split_records(dataset, "dev")
    encoder = MentionEncoder.load(model_dir)
    lengths = [len(encoder.batch([r])["input_ids"][0]) for r in records]
    assert len(set(lengths)) > 2  # the records differ in length, so the batches are re-ordered
    one_by_one = np.vstack([encoder.encode([r]) for r in records])
    for batch_size in (3, 5, len(records)):
        batched = encoder.encode(records, batch_size=batch_size, progress=True)
        np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    assert encoder.last_unique_inputs == len(records)


def test_identical_inputs_are_encoded_once_and_each_copy_gets_the_vector(model_dir: Path, dataset: Path) -> None:
    from dataclasses import replace

    records = split_records(dataset, "train")
    copies = [replace(r, mention_id=f"copy-{r.mention_id}", doc_id=f"copy-{r.doc_id}") for r in records]
    encoder = MentionEncoder.load(model_dir)
    vectors = encoder.encode(records + copies + records[:2], batch_size=4)
    assert encoder.last_unique_inputs == len(records)
    np.testing.assert_array_equal(vectors[:len(records)], vectors[len(records):2 * len(records)])
    np.testing.assert_array_equal(vectors[:2], vectors[2 * len(records):])
    assert len({v.tobytes() for v in vectors}) == len(records)  # distinct inputs keep distinct vectors


# --- cluster --method encoder --------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["topic", "predicted-topic", "corpus"])
@pytest.mark.parametrize("split", ["train", "test"])
def test_every_scope_writes_a_partition_of_exactly_the_splits_mentions(model_dir: Path, dataset: Path,
                                                                       tmp_path: Path, scope: str,
                                                                       split: str) -> None:
    out, conll = tmp_path / "c.jsonl", tmp_path / "c.conll"
    summary = cluster_dataset(dataset, out, method="encoder", split=split, scope=scope, conll=conll,
                              model=model_dir, device="cpu")
    assignment = read_clusters(out)
    assert set(assignment) == split_ids(split)
    assert summary.threshold == 0.5 and summary.mentions == len(assignment)
    assert summary.clusters == len(set(assignment.values()))
    assert conll.read_text().count("\n") == len(assignment) + 2
    if scope == "topic":  # never across gold topics
        topic = {m: DOCS[d][0] for m, d, _, _, _ in MENTIONS}
        assert all(len({topic[m] for m in cluster}) == 1 for cluster in partition(assignment))


def test_the_partition_is_that_of_average_linkage_on_the_encoders_vectors(model_dir: Path, dataset: Path,
                                                                         tmp_path: Path) -> None:
    ids, vectors = vectors_of(model_dir, dataset, "train")
    distances = 1 - vectors @ vectors.T
    tau = float(np.median(distances[np.triu_indices(len(ids), 1)]))  # some pairs merge, some do not
    expected = partition(dict(zip(ids, cluster_dense(vectors, tau).tolist(), strict=True)))
    assert 1 < len(expected) < len(ids)
    cluster_dataset(dataset, tmp_path / "c.jsonl", method="encoder", split="train", scope="corpus",
                    model=model_dir, threshold=tau, k=len(ids), device="cpu")
    assert partition(read_clusters(tmp_path / "c.jsonl")) == expected  # kNN graph with k ≥ n = all pairs
    cluster_dataset(dataset, tmp_path / "t.jsonl", method="encoder", split="train", scope="topic",
                    model=model_dir, threshold=tau, device="cpu")
    topic = {m: DOCS[d][0] for m, d, _, _, _ in MENTIONS}
    by_topic = {frozenset(c & {m for m in ids if topic[m] == t}) for c in expected for t in ("fire", "court")}
    assert partition(read_clusters(tmp_path / "t.jsonl")) == by_topic - {frozenset()}


def test_corpus_scope_with_few_neighbours_still_partitions_every_mention(model_dir: Path, dataset: Path,
                                                                         tmp_path: Path) -> None:
    cluster_dataset(dataset, tmp_path / "c.jsonl", method="encoder", split="train", scope="corpus",
                    model=model_dir, threshold=0.9, k=1, device="cpu")
    assert set(read_clusters(tmp_path / "c.jsonl")) == split_ids("train")


def test_threshold_sweep_cuts_the_same_partitions_as_clustering_at_each_tau(model_dir: Path, dataset: Path) -> None:
    ids, vectors = vectors_of(model_dir, dataset, "train")
    topic = {m: DOCS[d][0] for m, d, _, _, _ in MENTIONS}
    types = dict.fromkeys(ids, "event")
    swept = threshold_sweep(ids, vectors, topic, types, threshold_grid())
    assert list(swept) == threshold_grid()
    assert threshold_grid()[:3] == [0.025, 0.05, 0.075] and threshold_grid()[-1] == 0.9
    for tau, assignment in swept.items():
        assert assignment == cluster_vectors(ids, vectors, topic, types, tau, "topic")


def cli(*args: object) -> Any:
    return runner.invoke(app, [str(a) for a in args])


def cli_error(*args: object) -> str:
    result = cli(*args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


def test_cli_cluster_encoder_and_its_option_errors(model_dir: Path, dataset: Path, tiny_base: Path,
                                                   tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    result = cli("cluster", dataset, "--out", out, "--method", "encoder", "--model", model_dir, "--threshold", "0.3",
                 "--device", "cpu", "--batch-size", "2")
    assert result.exit_code == 0, result.output
    assert "Clustered 3 mentions into" in result.output and "at τ 0.3" in result.output
    out.unlink()
    assert "--threshold, --k: only with --method encoder" in cli_error(
        "cluster", dataset, "--out", out, "--method", "lemma", "--threshold", "0.3", "--k", "5")
    assert "--model: only with --method encoder" in cli_error(
        "cluster", dataset, "--out", out, "--method", "singletons", "--model", model_dir)
    assert "--method encoder needs --model MODEL_DIR" in cli_error("cluster", dataset, "--out", out, "--method",
                                                                   "encoder")
    assert "--k must be at least 1" in cli_error("cluster", dataset, "--out", out, "--method", "encoder", "--model",
                                                 model_dir, "--k", "0", "--scope", "corpus")
    assert "--scope topic compares every pair within a group, leave --k out" in cli_error(
        "cluster", dataset, "--out", out, "--method", "encoder", "--model", model_dir, "--k", "5")
    assert "must be between 0 and 2" in cli_error("cluster", dataset, "--out", out, "--method", "encoder", "--model",
                                                  model_dir, "--threshold", "3")
    assert "τ must be below 1" in cli_error("cluster", dataset, "--out", out, "--method", "encoder", "--model",
                                            model_dir, "--threshold", "1.2", "--scope", "corpus")
    assert "is not a mention encoder" in cli_error("cluster", dataset, "--out", out, "--method", "encoder",
                                                   "--model", tiny_base)
    untrained = tmp_path / "no-tau"
    MentionEncoder.from_base(str(tiny_base), ClustererConfig(mlp_hidden=4, mlp_out=4)).save(untrained)
    assert "records no threshold" in cli_error("cluster", dataset, "--out", out, "--method", "encoder", "--model",
                                               untrained)
    assert not out.exists()


# --- train clusterer -------------------------------------------------------------------------------------------


def tiny_args(base: Path, **changes: Any) -> ClustererTrainingArguments:
    options: dict[str, Any] = {"base_model": str(base), "objective": "pairs", "epochs": 3, "batch_size": 4,
                               "lr": 1e-3, "head_lr": 1e-3, "mlp_hidden": 16, "mlp_out": 8, "hard_negatives_k": 3,
                               "device": "cpu", "log_every": 0}
    options.update(changes)
    return ClustererTrainingArguments(**options)


def pair_loss(encoder: MentionEncoder, dataset: Path) -> float:
    """The mean contrastive loss (eval mode) over every pair of train mentions."""
    import torch

    records = split_records(dataset, "train")
    vectors = torch.from_numpy(encoder.encode(records))
    first, second = torch.triu_indices(len(records), len(records), 1)
    labels = torch.tensor([int(records[i].cluster_id == records[j].cluster_id)
                           for i, j in zip(first.tolist(), second.tolist(), strict=True)])
    return float(contrastive_loss(vectors[first], vectors[second], labels))


def test_training_lowers_the_loss_and_saves_an_encoder_with_the_dev_threshold(tiny_base: Path, dataset: Path,
                                                                              tmp_path: Path) -> None:
    args = tiny_args(tiny_base)
    messages: list[str] = []
    out = tmp_path / "model"
    summary = train_clusterer(dataset, out, args, log=messages.append)
    # 4 positives and up to 3 negatives each (a topic of two 2-mention clusters runs out of fresh negatives).
    assert summary.extras.train_mentions == 8 and 12 < summary.extras.train_pairs <= 16
    assert summary.steps_per_epoch == 4 and summary.total_steps == 12
    assert any(f"{summary.extras.train_pairs} training pairs (4 positive)" in m for m in messages)
    encoder = MentionEncoder.load(out)
    curve = json.loads((out / "dev_curve.json").read_text())
    assert [e["epoch"] for e in curve] == [0, 1, 2, 3] and curve[0]["note"] == "untrained"
    assert curve[3]["loss"] < curve[1]["loss"]  # the epochs' mean training loss falls
    kept = next(e for e in curve if e["epoch"] == summary.best_epoch)
    assert kept["CoNLL F1"] == max(e["CoNLL F1"] for e in curve[1:])
    assert encoder.config.threshold == kept["threshold"] == summary.extras.threshold
    assert kept["threshold"] in threshold_grid() and 0 < kept["CoNLL F1"] <= 1
    record = json.loads((out / "training_args.json").read_text())
    assert record["threshold"] == summary.extras.threshold and record["options"]["margin"] == 0.5
    assert record["counts"]["dev_mentions"] == 5
    card = (out / "README.md").read_text()
    assert "corefsearch mention encoder" in card and f"τ = {summary.extras.threshold:g}" in card
    assert "--method encoder --model model " in card and str(tmp_path) not in card and str(dataset) not in card
    assert "| scope | topic |" in card and "| hard_negatives_k | 3 |" in card  # dev clusters; negatives drawn
    assert "max_positives_per_cluster" not in card  # 2-mention clusters: 1 pair each, far under the cap
    assert record["counts"]["positive_pairs"] == record["counts"]["coreferent_pairs"] == 4
    # The trained folder drives the cluster command with its own τ.
    result = cli("cluster", dataset, "--out", tmp_path / "c.jsonl", "--method", "encoder", "--model", out,
                 "--split", "dev", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert f"at τ {summary.extras.threshold:g}" in result.output
    assert set(read_clusters(tmp_path / "c.jsonl")) == split_ids("dev")
    with pytest.raises(InputError, match="--overwrite"):
        train_clusterer(dataset, out, args)


def test_ctrl_c_mid_step_then_rerun_ends_with_the_uninterrupted_encoder(tiny_base: Path, dataset: Path,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The clusterer's resume test (the loop's contract is test_training_loop.py's): Ctrl-C inside
    step 3 (after its forward pass), then the same command again, ends with the very same folder."""
    import corefsearch.cluster.loss as loss

    args = tiny_args(tiny_base, epochs=2)
    whole = train_clusterer(dataset, tmp_path / "whole", args)

    out = tmp_path / "resumed"
    monkeypatch.setattr(loss, "contrastive_loss", Interrupt(loss.contrastive_loss, 3))
    with pytest.raises(KeyboardInterrupt):
        train_clusterer(dataset, out, args)
    monkeypatch.undo()
    assert not out.exists() and (work_dir_for(out) / "checkpoint.pt").exists()
    messages: list[str] = []
    summary = train_clusterer(dataset, out, args, log=messages.append)
    assert summary.resumed_from_step == 2 and summary.steps_run == whole.total_steps - 2 == 6
    assert any(m.startswith("Resuming the interrupted run") for m in messages)
    assert_same_model(out, tmp_path / "whole")
    assert MentionEncoder.load(out).config.threshold == summary.extras.threshold == whole.extras.threshold is not None
    assert not work_dir_for(out).exists()


def test_training_lowers_the_loss_and_without_dev_clusters_keeps_the_last_epoch(tiny_base: Path,
                                                                                 tmp_path: Path) -> None:
    no_dev = write_dataset(tmp_path / "ds", {**SPLITS, "quake": "test", "die": "test", "rescue": "test"})
    args = tiny_args(tiny_base, epochs=4, hard_negatives_k=0)
    seed_everything(args.seed)  # the trainer's own initial model
    before = pair_loss(MentionEncoder.from_base(str(tiny_base), args.clusterer_config()), no_dev)
    messages: list[str] = []
    summary = train_clusterer(no_dev, tmp_path / "model", args, log=messages.append)
    assert summary.best_epoch == 4 and summary.extras.threshold is None
    assert any("no dev clusters" in m for m in messages)
    encoder = MentionEncoder.load(tmp_path / "model")
    assert encoder.config.threshold is None
    assert pair_loss(encoder, no_dev) < 0.6 * before


def test_topic_batches_cover_each_train_mention_once_within_one_topic_and_keep_their_number(dataset: Path) -> None:
    records = split_records(dataset, "train")
    topic = {r.mention_id: r.topic for r in records}
    counts = []
    for epoch in (1, 2, 3):
        batches = topic_batches(records, 3, seed=13, epoch=epoch)
        assert sorted(m for b in batches for m in b) == sorted(topic)
        assert all(len({topic[m] for m in b}) == 1 and 1 <= len(b) <= 3 for b in batches)
        counts.append(len(batches))
        assert batches == topic_batches(records, 3, seed=13, epoch=epoch)  # a function of seed and epoch
    assert len(set(counts)) == 1
    assert topic_batches(records, 3, 13, 1) != topic_batches(records, 3, 13, 2)


def test_batch_contrastive_loss_is_the_mean_of_coreferent_pairs_plus_the_mean_of_the_others() -> None:
    import torch

    vectors = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    distances = {(0, 1): 1 - 2 ** -0.5, (0, 2): 1.0, (1, 2): 1 - 2 ** -0.5}
    # clusters a, a, b: one coreferent pair (0, 1); two others, pushed apart while closer than the margin 0.5
    expected = distances[0, 1] ** 2 + ((0.5 - distances[1, 2]) ** 2 + 0.0) / 2
    assert float(batch_contrastive_loss(vectors, ["a", "a", "b"], 0.5)) == pytest.approx(expected, abs=1e-6)
    # No coreferent pair: the others' mean alone.
    assert float(batch_contrastive_loss(vectors, ["a", "b", "c"], 0.5)) == pytest.approx(
        (0.5 - distances[0, 1]) ** 2 / 3 + (0.5 - distances[1, 2]) ** 2 / 3, abs=1e-6)
    # One mention (a topic with a single train mention): zero, and a step over it does not fail.
    alone = torch.tensor([[1.0, 0.0]], requires_grad=True)
    loss = batch_contrastive_loss(alone, ["a"], 0.5)
    loss.backward()
    assert float(loss.detach()) == 0.0 and alone.grad is not None and not bool(alone.grad.any())


def test_topic_batch_objective_trains_on_every_pair_of_a_topics_batch(tiny_base: Path, dataset: Path,
                                                                      tmp_path: Path) -> None:
    import torch

    def topic_loss(encoder: MentionEncoder, data: Path) -> float:
        """The objective (eval mode) over each train topic's mentions as one batch."""
        records = split_records(data, "train")
        vectors = torch.from_numpy(encoder.encode(records))
        losses = [float(batch_contrastive_loss(vectors[[i for i, r in enumerate(records) if r.topic == t]],
                                               [r.cluster_id for r in records if r.topic == t], 0.5))
                  for t in sorted({r.topic for r in records})]
        return sum(losses) / len(losses)

    no_dev = write_dataset(tmp_path / "no-dev", {**SPLITS, "quake": "test", "die": "test", "rescue": "test"})
    args = tiny_args(tiny_base, objective="topic-batch", epochs=6, batch_size=4)
    seed_everything(args.seed)
    before = topic_loss(MentionEncoder.from_base(str(tiny_base), args.clusterer_config()), no_dev)
    summary = train_clusterer(no_dev, tmp_path / "no-dev-model", args)
    assert topic_loss(MentionEncoder.load(tmp_path / "no-dev-model"), no_dev) < 0.6 * before

    messages: list[str] = []
    out = tmp_path / "model"
    summary = train_clusterer(dataset, out, args, log=messages.append)
    records = split_records(dataset, "train")
    assert summary.steps_per_epoch == len(topic_batches(records, 4, args.seed, 1))
    assert any("batches of 4 mentions of one topic" in m for m in messages)
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["objective"] == "topic-batch" and record["counts"]["train_pairs"] == 0
    card = (out / "README.md").read_text()
    assert "| objective | topic-batch |" in card
    assert "hard_negatives_k" not in card and "negatives_per_positive" not in card  # pair options: no effect
    result = cli("train", "clusterer", dataset, "--out", tmp_path / "cli", "--base-model", tiny_base, "--objective",
                 "topic-batch", "--batch-size", "4", "--epochs", "1", "--device", "cpu", "--log-every", "0")
    assert result.exit_code == 0, result.output
    assert "on topic batches of 8 mentions" in result.output
    assert "--objective must be one of pairs, topic-batch" in cli_error(
        "train", "clusterer", dataset, "--out", tmp_path / "m2", "--objective", "triplets")
    assert "--objective topic-batch needs --batch-size of at least 2" in cli_error(
        "train", "clusterer", dataset, "--out", tmp_path / "m2", "--objective", "topic-batch", "--batch-size", "1")


def test_remined_topic_batches_gather_nearest_mentions_partition_each_topic_and_change_only_with_the_vectors(
        model_dir: Path, dataset: Path) -> None:
    records = split_records(dataset, "train")
    topic = {r.mention_id: r.topic for r in records}
    vectors = MentionEncoder.load(model_dir).encode(records)
    batches = hard_topic_batches(records, vectors, 3, seed=13, epoch=2)
    assert sorted(m for b in batches for m in b) == sorted(topic)
    assert all(len({topic[m] for m in b}) == 1 for b in batches)
    assert sorted(map(len, batches)) == sorted(map(len, topic_batches(records, 3, 13, 2)))
    assert hard_topic_batches(records, vectors.copy(), 3, seed=13, epoch=2) == batches  # same vectors, same batches

    # Batches of 2 in a topic of 4: each pairs a mention with its nearest; other vectors, other pairs.
    fire = sorted(m for m, t in topic.items() if t == topic[records[0].mention_id])
    assert len(fire) == 4

    def grouped(pairs_of: list[tuple[int, int]]) -> set[frozenset[str]]:
        unit = np.zeros((len(records), 4), dtype=np.float32)
        for group, (i, j) in enumerate(pairs_of):
            for k in (i, j):
                unit[[r.mention_id for r in records].index(fire[k]), group] = 1.0
        for row, r in enumerate(records):
            if r.mention_id not in fire:
                unit[row, 2 + row % 2] = 1.0
        found = hard_topic_batches(records, unit, 2, seed=13, epoch=2)
        return {frozenset(b) for b in found if set(b) <= set(fire)}

    assert grouped([(0, 3), (1, 2)]) == {frozenset((fire[0], fire[3])), frozenset((fire[1], fire[2]))}
    assert grouped([(0, 1), (2, 3)]) == {frozenset((fire[0], fire[1])), frozenset((fire[2], fire[3]))}


@pytest.mark.parametrize("objective", ["topic-batch", "pairs"])
def test_remine_negatives_mines_each_later_epoch_keeps_it_for_resume_and_round_trips(
        objective: str, tiny_base: Path, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import corefsearch.cluster.loss as loss

    args = tiny_args(tiny_base, objective=objective, epochs=2, batch_size=4, remine_negatives=True)
    messages: list[str] = []
    whole = train_clusterer(dataset, tmp_path / "whole", args, log=messages.append)
    assert [m for m in messages if "re-mining" in m] == [
        m for m in messages if m.startswith("Epoch 2: re-mining the "
                                            + ("topic batches" if objective == "topic-batch" else "hard negatives"))]
    assert len([m for m in messages if "re-mining" in m]) == 1
    record = json.loads((tmp_path / "whole" / "training_args.json").read_text())
    assert record["options"]["remine_negatives"] is True
    assert "| remine_negatives | True |" in (tmp_path / "whole" / "README.md").read_text()

    # Interrupted inside epoch 2: the rerun reads the mined epoch back and ends with the same model.
    out = tmp_path / "resumed"
    step = whole.steps_per_epoch + 2
    loss_name = "batch_contrastive_loss" if objective == "topic-batch" else "contrastive_loss"
    monkeypatch.setattr(loss, loss_name, Interrupt(getattr(loss, loss_name), step))
    with pytest.raises(KeyboardInterrupt):
        train_clusterer(dataset, out, args)
    monkeypatch.undo()
    assert (work_dir_for(out) / "remined_epoch2.json").exists()
    resumed: list[str] = []
    train_clusterer(dataset, out, args, log=resumed.append)
    assert not any("re-mining" in m for m in resumed)
    assert_same_model(out, tmp_path / "whole")

    if objective == "pairs":
        with pytest.raises(InputError, match="--remine-negatives re-mines the pairs' hard negatives"):
            train_clusterer(dataset, tmp_path / "bad", tiny_args(tiny_base, remine_negatives=True, hard_negatives_k=0))
    else:
        result = cli("train", "clusterer", dataset, "--out", tmp_path / "cli", "--base-model", tiny_base,
                     "--batch-size", "4", "--epochs", "2", "--remine-negatives", "--device", "cpu", "--log-every", "0")
        assert result.exit_code == 0, result.output
        assert "re-mining the topic batches" in result.output


def test_cli_train_clusterer_and_its_errors(tiny_base: Path, dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "model"
    result = cli("train", "clusterer", dataset, "--out", out, "--base-model", tiny_base, "--epochs", "1",
                 "--batch-size", "8", "--device", "cpu", "--log-every", "0")
    assert result.exit_code == 0, result.output
    assert "Mention encoder" in result.output
    assert re.search(r"Kept (epoch 1|the starting weights \(no epoch beat them on dev\)), τ", result.output)
    assert MentionEncoder.load(out).config.threshold is not None

    singles = write_dataset(tmp_path / "singles", {c: ("train" if c in ("rise", "rescue") else "test")
                                                   for c in SPLITS})
    assert "no train cluster has two or more mentions" in cli_error(
        "train", "clusterer", singles, "--out", tmp_path / "m2", "--base-model", tiny_base, "--device", "cpu")
    assert "--scope must be one of topic, predicted-topic" in cli_error(
        "train", "clusterer", dataset, "--out", tmp_path / "m2", "--scope", "corpus")
    assert "--margin must be positive" in cli_error("train", "clusterer", dataset, "--out", tmp_path / "m2",
                                                    "--margin", "0")
    assert "--hard-negatives-k must not be negative" in cli_error(
        "train", "clusterer", dataset, "--out", tmp_path / "m2", "--hard-negatives-k", "-1")
    assert "already exists" in cli_error("train", "clusterer", dataset, "--out", out, "--base-model", tiny_base)
    assert not (tmp_path / "m2").exists()


def test_the_lemma_weight_is_chosen_on_dev_saved_with_the_model_and_used_by_cluster(tiny_base: Path,
                                                                                    dataset: Path,
                                                                                    tmp_path: Path) -> None:
    out = tmp_path / "model"
    summary = train_clusterer(dataset, out, tiny_args(tiny_base, epochs=1, lemma_weights="0,0.3"))
    curve = json.loads((out / "dev_curve.json").read_text())
    assert all(e["lemma_weight"] in (0.0, 0.3) for e in curve)
    kept = next(e for e in curve if e["epoch"] == summary.best_epoch)
    encoder = MentionEncoder.load(out)
    assert encoder.config.lemma_weight == kept["lemma_weight"]
    record = json.loads((out / "training_args.json").read_text())
    assert record["options"]["lemma_weights"] == "0,0.3" and record["lemma_weight"] == kept["lemma_weight"]
    # Scored on dev as the sweep scores it: the kept F1 is that of clustering dev at the kept τ and β.
    from corefsearch.cluster.baselines import mention_head_lemmas
    from corefsearch.cluster.mentions import read_split_mentions
    from corefsearch.evaluate.coref import score_partitions

    found = read_split_mentions(dataset, "dev")
    lemmas = mention_head_lemmas(found.mentions, found.passage_texts)
    ids, vectors = vectors_of(out, dataset, "dev")
    topic = {m: DOCS[d][0] for m, d, _, _, _ in MENTIONS}
    key = {m: c for m, _, _, _, c in MENTIONS if m in ids}
    chosen = cluster_vectors(ids, vectors, topic, dict.fromkeys(ids, "event"), kept["threshold"], "topic",
                             lemmas=lemmas, lemma_weight=kept["lemma_weight"])
    assert round(score_partitions(key, chosen).conll_f1, 6) == kept["CoNLL F1"]
    # `cluster` takes the model's β; --lemma-weight overrides it.
    for given, beta in ((None, kept["lemma_weight"]), (0.3, 0.3), (0.0, 0.0)):
        extra = [] if given is None else ["--lemma-weight", given]
        result = cli("cluster", dataset, "--out", tmp_path / "c.jsonl", "--method", "encoder", "--model", out,
                     "--split", "dev", "--device", "cpu", "--threshold", 0.4, *extra)
        assert result.exit_code == 0, result.output
        assert ("lemma weight β 0.3" in result.output) == (beta == 0.3)
        expected = cluster_vectors(ids, vectors, topic, dict.fromkeys(ids, "event"), 0.4, "topic", lemmas=lemmas,
                                   lemma_weight=beta)
        assert partition(read_clusters(tmp_path / "c.jsonl")) == partition(expected)


def test_the_bonus_goes_to_linked_pairs_instead_of_same_lemma_pairs() -> None:
    radians = np.radians([0, 30, 90])  # 0° and 30°: cosine distance 0.134
    vectors = np.stack([np.cos(radians), np.sin(radians)], axis=1)
    ids, groups, types = ["a", "b", "c"], dict.fromkeys("abc", "g"), dict.fromkeys("abc", "event")
    lemmas = {"a": "set", "b": "fire", "c": "fire"}  # a and b: no shared head lemma
    for scope in ("topic", "corpus"):
        alone = cluster_vectors(ids, vectors, groups, types, 0.1, scope, k=2)
        by_lemma = cluster_vectors(ids, vectors, groups, types, 0.1, scope, k=2, lemmas=lemmas, lemma_weight=0.05)
        linked = cluster_vectors(ids, vectors, groups, types, 0.1, scope, k=2, lemma_weight=0.05,
                                 links=[("b", "a")])
        assert partition(alone) == partition(by_lemma) == {frozenset("a"), frozenset("b"), frozenset("c")}
        assert partition(linked) == {frozenset("ab"), frozenset("c")}
    swept = threshold_sweep(ids, vectors, groups, types, [0.1, 0.2], lemma_weight=0.05, links=[("a", "b")])
    assert partition(swept[0.1]) == {frozenset("ab"), frozenset("c")}
    assert swept[0.2] == cluster_vectors(ids, vectors, groups, types, 0.2, "topic", lemma_weight=0.05,
                                         links=[("a", "b")])
    with pytest.raises(ValueError, match="not both"):
        cluster_vectors(ids, vectors, groups, types, 0.1, "topic", lemmas=lemmas, lemma_weight=0.05, links=[])


def test_cluster_with_the_heuristics_evidence_and_its_option_errors(model_dir: Path, dataset: Path,
                                                                     tmp_path: Path) -> None:
    from corefsearch.cluster.heuristic import blocks_of, links, mention_contexts
    from corefsearch.cluster.mentions import read_split_mentions

    out = tmp_path / "c.jsonl"
    result = cli("cluster", dataset, "--out", out, "--method", "encoder", "--model", model_dir, "--split", "dev",
                 "--device", "cpu", "--threshold", 0.3, "--lemma-weight", 2, "--evidence", "lemma-heuristic",
                 "--sentence-overlap", 0)
    assert result.exit_code == 0, result.output
    assert "lemma weight β 2 on the pairs lemma-heuristic links (J 0)" in " ".join(result.output.split())
    found = read_split_mentions(dataset, "dev")
    contexts = mention_contexts(found.mentions, found.passage_texts)
    ids, vectors = vectors_of(model_dir, dataset, "dev")
    topic = {m: DOCS[d][0] for m, d, _, _, _ in MENTIONS if m in ids}
    types = dict.fromkeys(ids, "event")
    linked = links(contexts, blocks_of(ids, topic, types), 0.0)
    assert ("c1-earthquake", "c2-quake") in linked  # "quake" occurs in "earthquake": not the same head lemma
    expected = cluster_vectors(ids, vectors, topic, types, 0.3, "topic", lemma_weight=2.0, links=linked)
    assert partition(read_clusters(out)) == partition(expected)
    assert read_clusters(out)["c1-earthquake"] == read_clusters(out)["c2-quake"]
    out.unlink()
    common = ("cluster", dataset, "--out", out, "--device", "cpu")
    encoder = (*common, "--method", "encoder", "--model", model_dir)
    assert "--evidence: only with --method encoder" in cli_error(*common, "--method", "lemma", "--evidence",
                                                                 "lemma-heuristic")
    assert "--evidence must be one of lemma, lemma-heuristic" in cli_error(*encoder, "--evidence", "rule")
    assert "with --lemma-weight 0 there is none" in cli_error(*encoder, "--evidence", "lemma-heuristic",
                                                              "--lemma-weight", 0)
    assert "records β 0: give --lemma-weight" in cli_error(*encoder, "--evidence", "lemma-heuristic")
    assert "--sentence-overlap: only with --method lemma-heuristic or --method encoder --evidence lemma-heuristic" in \
        cli_error(*encoder, "--sentence-overlap", 0.1)
    assert "must be at least 0 and below 1" in cli_error(*encoder, "--evidence", "lemma-heuristic",
                                                         "--lemma-weight", 0.1, "--sentence-overlap", 1)
    assert "--pair-scorer clusters the scored pairs without it" in cli_error(
        *encoder, "--evidence", "lemma-heuristic", "--pair-scorer", tmp_path / "scorer")
    # Checked before anything is read: a missing dataset and model still give the option's error.
    with pytest.raises(InputError, match="--evidence: only with --method encoder"):
        cluster_dataset(tmp_path / "missing", out, method="singletons", evidence="lemma", mentions="predicted")
    with pytest.raises(InputError, match="--evidence must be one of"):
        cluster_dataset(tmp_path / "missing", out, method="encoder", model=tmp_path / "none", evidence="x",
                        mentions="predicted")
    assert not out.exists()


def test_lemma_weight_options_are_checked(tiny_base: Path, dataset: Path, model_dir: Path, tmp_path: Path) -> None:
    common = ("cluster", dataset, "--out", tmp_path / "c.jsonl", "--device", "cpu")
    assert "--lemma-weight (the cosine distance a shared head lemma takes off a pair) must be between 0 and 2" in \
        cli_error(*common, "--method", "encoder", "--model", model_dir, "--lemma-weight", "3")
    assert "--lemma-weight: only with --method encoder" in cli_error(*common, "--method", "lemma",
                                                                      "--lemma-weight", "0.1")
    train = ("train", "clusterer", dataset, "--out", tmp_path / "m", "--base-model", tiny_base)
    assert "--lemma-weights takes comma-separated numbers" in cli_error(*train, "--lemma-weights", "0,x")
    assert "--lemma-weights names a value twice" in cli_error(*train, "--lemma-weights", "0,0.1,0.1")
    assert "must be between 0 and 2" in cli_error(*train, "--lemma-weights", "0,-0.1")
    assert not (tmp_path / "m").exists() and not (tmp_path / "c.jsonl").exists()
    # A model folder from before the lemma weight reads as β 0.
    older = tmp_path / "older"
    import shutil

    shutil.copytree(model_dir, older)
    config_path = next(older.glob("corefsearch_clusterer.json"))
    config = json.loads(config_path.read_text())
    config.pop("lemma_weight", None)
    config_path.write_text(json.dumps(config))
    assert MentionEncoder.load(older).config.lemma_weight == 0.0
