"""`corefsearch train pair-scorer` and `cluster --method encoder --pair-scorer`: a tiny random BERT (built here)
on the hand-made dataset of test_cluster_encoder.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import CLUSTER_MENTIONS as MENTIONS
from helpers import CLUSTER_SPLITS as SPLITS
from helpers import cluster_words, one_torch_thread, partition, read_clusters, save_mention_encoder, save_tiny_bert
from helpers import write_cluster_dataset as write_dataset
from typer.testing import CliRunner

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.cli import app
from corefsearch.cluster.candidates import assignment_of, candidate_pairs, cluster_scored
from corefsearch.cluster.encoder import split_records
from corefsearch.pair_scorer.arguments import PairScorerTrainingArguments
from corefsearch.pair_scorer.model import PairScorer, PairScorerConfig
from corefsearch.pair_scorer.train import train_pair_scorer, training_sample

runner = CliRunner(env={"COLUMNS": "250"})


@pytest.fixture(autouse=True)
def one_thread_each_test() -> Iterator[None]:
    """Each test on one torch thread (the module fixtures that build models run on torch's default)."""
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), cluster_words(), seed=0, max_positions=160)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data") / "ds")


@pytest.fixture(scope="module")
def encoder_dir(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_mention_encoder(tiny_base, tmp_path_factory.mktemp("encoder") / "encoder")


def tiny_args(base: Path, **changes: object) -> PairScorerTrainingArguments:
    args = PairScorerTrainingArguments(base_model=str(base), epochs=1, batch_size=4, neighbours=2, hidden=8,
                                       max_length=48, device="cpu", log_every=0)
    return replace(args, **changes)


@pytest.fixture(scope="module")
def scorer_dir(tiny_base: Path, dataset: Path, encoder_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scorer") / "scorer"
    summary = train_pair_scorer(dataset, out, tiny_args(tiny_base), encoder=encoder_dir)
    assert summary.kind == "pair-scorer" and summary.total_steps >= 1
    return out


def test_training_runs_an_epoch_and_writes_the_scorer_folder(scorer_dir: Path) -> None:
    for name in ("config.json", "model.safetensors", "pair_scorer_head.safetensors", "corefsearch_pair_scorer.json",
                 "training_args.json", "dev_curve.json", "README.md"):
        assert (scorer_dir / name).is_file(), name
    curve = json.loads((scorer_dir / "dev_curve.json").read_text())
    assert [entry["epoch"] for entry in curve] == [0, 1]
    assert all(0 <= entry["pair F1"] <= 1 for entry in curve)
    record = json.loads((scorer_dir / "training_args.json").read_text())
    assert record["kind"] == "corefsearch-pair-scorer-training"
    assert record["selection_metric"] == "pair F1" and record["dev_clustering"]["linkage"] in ("components", "average")
    config = json.loads((scorer_dir / "corefsearch_pair_scorer.json").read_text())
    assert config["threshold"] == record["threshold"] and 0 <= config["threshold"] < 1
    assert config["neighbours"] == 2 and config["same_lemma"] is True
    assert "pair-scorer" in (scorer_dir / "README.md").read_text()


def test_scores_are_probabilities_and_the_same_in_both_orders(scorer_dir: Path, dataset: Path) -> None:
    records = split_records(dataset, "train")
    scorer = PairScorer.load(scorer_dir)
    pairs = np.array([(i, j) for i in range(len(records)) for j in range(i + 1, len(records))])
    forward = scorer.score(records, pairs, batch_size=3)
    backward = scorer.score(records, pairs[:, ::-1], batch_size=5)
    assert forward.shape == (len(pairs),) and ((forward >= 0) & (forward <= 1)).all()
    np.testing.assert_allclose(forward, backward, atol=1e-5)
    scorer.config.both_orders = False
    one_way = scorer.score(records, pairs)
    assert not np.allclose(one_way, scorer.score(records, pairs[:, ::-1]), atol=1e-7)


def test_candidate_pairs_are_same_lemma_and_nearest_pairs_within_a_block() -> None:
    ids = ["a", "b", "c", "d", "e"]
    groups = {"a": "t1", "b": "t1", "c": "t1", "d": "t2", "e": "t2"}
    types = dict.fromkeys(ids, "event")
    lemmas = {"a": "fire", "b": "burn", "c": "fire", "d": "fire", "e": "x"}
    vectors = np.eye(5, dtype=np.float32)
    vectors[1] = vectors[0] * 0.8 + vectors[1] * 0.6  # b is a's nearest
    pairs = candidate_pairs(ids, groups, types, lemmas=lemmas)
    assert pairs.tolist() == [[0, 2]]  # "d" shares the lemma but not the topic
    knn = candidate_pairs(ids, groups, types, vectors=vectors, k=1)
    assert [0, 1] in knn.tolist() and [3, 4] in knn.tolist() and all(a < b for a, b in knn.tolist())
    extra = candidate_pairs(ids, groups, types, extra=[("c", "b"), ("a", "d")])
    assert extra.tolist() == [[1, 2]]
    with pytest.raises(InputError):
        candidate_pairs(ids, groups, types, k=2)


def test_scored_pairs_cluster_by_components_or_average_linkage() -> None:
    pairs = np.array([[0, 1], [1, 2], [3, 4]])
    probabilities = np.array([0.9, 0.6, 0.2])
    assert cluster_scored(5, pairs, probabilities, 0.5, "components").tolist() == [0, 0, 0, 1, 2]
    # average linkage: {0, 1} first, then {0, 1} to 2 averages (0.6 + 0) / 2 = 0.3, below 0.5
    assert cluster_scored(5, pairs, probabilities, 0.5, "average").tolist() == [0, 0, 1, 2, 3]
    assert cluster_scored(5, pairs, probabilities, 0.25, "average").tolist() == [0, 0, 0, 1, 2]
    assignment = assignment_of(["a", "b", "c"], {"a": "t", "b": "t", "c": "u"}, dict.fromkeys("abc", "event"),
                               np.array([[0, 1]]), np.array([0.7]), 0.5, "components")
    assert assignment["a"] == assignment["b"] != assignment["c"]
    with pytest.raises(InputError):
        cluster_scored(2, pairs[:0], probabilities[:0], 0.5, "single")


def test_training_sample_keeps_every_positive_and_caps_the_negatives() -> None:
    labels = np.array([1, 0, 0, 0, 0, 1, 0, 0, 0, 0])
    chosen = training_sample(labels, 1.0, None, seed=3)
    assert labels[chosen].sum() == 2 and len(chosen) == 4
    assert len(training_sample(labels, 3.0, 3, seed=3)) == 3


def test_cluster_with_the_pair_scorer_partitions_every_mention(scorer_dir: Path, encoder_dir: Path, dataset: Path,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "clusters.jsonl"
    result = runner.invoke(app, ["cluster", str(dataset), "--method", "encoder", "--model", str(encoder_dir),
                                 "--pair-scorer", str(scorer_dir), "--split", "dev", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assignment = read_clusters(out)
    assert set(assignment) == {m for m, _, _, _, c in MENTIONS if SPLITS[c] == "dev"}
    assert sum(len(group) for group in partition(assignment)) == len(assignment)
    # threshold 0: every candidate pair with p > 0 links; the partition only coarsens
    low = tmp_path / "low.jsonl"
    result = runner.invoke(app, ["cluster", str(dataset), "--method", "encoder", "--model", str(encoder_dir),
                                 "--pair-scorer", str(scorer_dir), "--pair-threshold", "0", "--split", "dev",
                                 "--out", str(low)])
    assert result.exit_code == 0, result.output
    assert len(partition(read_clusters(low))) <= len(partition(assignment))


@pytest.mark.parametrize(("argv", "message"), [
    (["--method", "lemma", "--pair-scorer", "X"], "--pair-scorer: only with --method encoder"),
    (["--method", "encoder", "--model", "ENC", "--pair-threshold", "0.5"], "--pair-threshold: only with --pair-scorer"),
    (["--method", "encoder", "--model", "ENC", "--pair-scorer", "SC", "--pair-threshold", "1.5"], "in [0, 1)"),
    (["--method", "encoder", "--model", "ENC", "--pair-scorer", "SC", "--scope", "corpus"], "--scope topic or"),
    (["--method", "encoder", "--model", "ENC", "--pair-scorer", "SC", "--threshold", "0.3"], "--threshold: the"),
    (["--method", "encoder", "--model", "ENC", "--pair-scorer", "SC"], "is not a pair scorer"),
])
def test_cluster_pair_scorer_option_errors(argv: list[str], message: str, dataset: Path, encoder_dir: Path,
                                           tmp_path: Path) -> None:
    argv = [{"ENC": str(encoder_dir), "SC": str(tmp_path)}.get(a, a) for a in argv]
    result = runner.invoke(app, ["cluster", str(dataset), "--out", str(tmp_path / "c.jsonl"), *argv])
    assert result.exit_code != 0 and message in " ".join(result.output.split()), result.output


def test_train_option_errors(tiny_base: Path, dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--encoder"):
        train_pair_scorer(dataset, tmp_path / "a", tiny_args(tiny_base))
    with pytest.raises(InputError, match="no candidate pairs"):
        train_pair_scorer(dataset, tmp_path / "b", tiny_args(tiny_base, neighbours=0, same_lemma=False))
    result = runner.invoke(app, ["train", "pair-scorer", str(dataset), "--out", str(tmp_path / "c"),
                                 "--negatives-per-positive", "-1", "--neighbours", "0"])
    assert result.exit_code != 0 and "--negatives-per-positive" in result.output
    assert not (tmp_path / "c").exists()
    with pytest.raises(MissingArtefactError, match="pair scorer"):
        PairScorer.load(tmp_path)
    with pytest.raises(InputError, match="linkage"):
        PairScorerConfig(linkage="single").validate()


def test_lemma_candidates_follow_the_config(dataset: Path) -> None:
    from corefsearch.cluster.heuristic import blocks_of, links, mention_contexts
    from corefsearch.cluster.mentions import read_split_mentions
    from corefsearch.pair_scorer.model import lemma_candidates

    found = read_split_mentions(dataset, "train")
    groups = {m.mention_id: m.topic or "" for m in found.mentions}
    types = {m.mention_id: m.type for m in found.mentions}
    lemmas, extra = lemma_candidates(PairScorerConfig(same_lemma=False, lemma_heuristic=True), found, groups, types)
    contexts = mention_contexts(found.mentions, found.passage_texts)
    assert lemmas is None and extra == links(contexts, blocks_of(contexts, groups, types))
    lemmas, extra = lemma_candidates(PairScorerConfig(), found, groups, types)
    assert set(lemmas or {}) == set(types) and extra == []
