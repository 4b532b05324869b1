"""The contrastive mention encoder's pieces (Hsu & Horwood 2022): mention inputs read from a
dataset, the encoder and its save/load, the contrastive loss, training pairs, and agglomerative
clustering (all pairs, and over a kNN graph).

A tiny random BERT with a word-level vocabulary is built here (as in test_dense_train.py)."""

from __future__ import annotations

import json
import math
import random
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import save_tiny_bert
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import pdist

from corefsearch.base.artefacts import DATASET
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.models import CLUSTERER_CONFIG
from corefsearch.cluster.agglomerative import (
    canonical_labels,
    cluster_dense,
    cluster_knn,
    condensed_mask,
    distinct_rows,
    knn_edges,
    linkage_tree,
    pair_distances,
)
from corefsearch.cluster.inputs import ENTITY_END, ENTITY_START, MentionRecord, encoder_input, mention_records
from corefsearch.cluster.loss import contrastive_loss, cosine_distance
from corefsearch.cluster.model import HEAD_WEIGHTS, ClustererConfig, MentionEncoder
from corefsearch.cluster.pairs import MentionPair, positive_pairs, training_pairs

pytestmark = pytest.mark.usefixtures("one_thread_each_test")

FILLER = [f"w{i}" for i in range(200)]

# --- a hand-made dataset ---------------------------------------------------------------------------------

# doc -> (topic, [(passage N, text, [(mention id, mention text, cluster)])]); written in FILE_ORDER below.
DOCS: dict[str, tuple[str | None, list[tuple[int, str, list[tuple[str, str, str]]]]]] = {
    "d1": ("t1", [(0, "A fire broke out in Leeds.", [("m1", "fire", "c1")]),
                  (1, "The old mill was destroyed.", [("m3", "destroyed", "c2")]),
                  (2, "Police said the blaze started at night.", [("m2", "blaze", "c1")])]),
    "d2": ("t1", [(0, "Fire crews fought the blaze for hours.", [("m4", "blaze", "c1")])]),
    "d3": ("t2", [(2, "The judge sentenced him on Friday.", [("m5", "sentenced", "c3")]),
                  (0, "A court jailed the man.", [("m6", "jailed", "c3")]),
                  (1, "He had robbed a bank.", [])]),
    "x1": (None, [(0, "Nothing happened in the quiet town.", [])]),
    "d4": (None, [(0, "Markets fell sharply on Monday.", [("m7", "fell", "c4")])]),
}
FILE_ORDER = [("d1", 0), ("d1", 1), ("d1", 2), ("d2", 0), ("d3", 2), ("d3", 0), ("x1", 0), ("d3", 1), ("d4", 0)]
CLUSTERS = [("c1", "train", ["m1", "m2", "m4"]), ("c2", "train", ["m3"]), ("c3", "train", ["m5", "m6"]),
            ("c4", "dev", ["m7"])]


def passage_record(doc_id: str, number: int) -> dict[str, Any]:
    topic, passages = DOCS[doc_id]
    text, mentions = next((t, m) for n, t, m in passages if n == number)
    record: dict[str, Any] = {"id": f"{doc_id}-{number}", "doc_id": doc_id, "title": "", "text": text,
                              "mentions": [{"mention_id": mid, "start": text.index(word),
                                            "end": text.index(word) + len(word), "cluster_id": cluster,
                                            "type": "event"} for mid, word, cluster in mentions]}
    if topic is not None:
        record["topic"] = topic
    return record


def write_dataset(root: Path, clusters: list[tuple[str, str, list[str]]] = CLUSTERS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").write_text(json.dumps({"kind": DATASET.kind}), encoding="utf-8")
    (root / "passages.jsonl").write_text("".join(json.dumps(passage_record(d, n)) + "\n" for d, n in FILE_ORDER),
                                         encoding="utf-8")
    (root / "clusters.jsonl").write_text(
        "".join(json.dumps({"cluster_id": c, "split": s, "type": "event", "mention_ids": ids}) + "\n"
                for c, s, ids in clusters), encoding="utf-8")
    return root


def words() -> list[str]:
    import re

    found: dict[str, None] = {}
    for _, passages in DOCS.values():
        for _, text, _ in passages:
            for token in re.findall(r"\w+|[^\w\s]", text.lower()):
                found[token] = None
    return [*found, *FILLER]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-wide BERT with random weights and a word-level vocabulary."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), words(), seed=0, max_positions=160)


@pytest.fixture(scope="module")
def encoder(tiny_base: Path) -> MentionEncoder:
    import torch

    torch.manual_seed(1)
    return MentionEncoder.from_base(str(tiny_base), ClustererConfig(mlp_hidden=16, mlp_out=8, dropout=0.0))


def record(sentence: str, mention: str, context: str, occurrence: int = 0) -> MentionRecord:
    start = -1
    for _ in range(occurrence + 1):
        start = sentence.index(mention, start + 1)
    return MentionRecord("m", "c", "d", None, "d-0", mention, start, start + len(mention), sentence, context)


# --- inputs ----------------------------------------------------------------------------------------------


def test_mention_records_read_the_split_with_the_documents_first_two_sentences(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "ds")
    records = list(mention_records(root, "train"))
    # Released as soon as a document's head is read; the single-passage document d2 comes last.
    assert [r.mention_id for r in records] == ["m1", "m3", "m2", "m5", "m6", "m4"]
    by_id = {r.mention_id: r for r in records}
    assert by_id["m2"] == MentionRecord("m2", "c1", "d1", "t1", "d1-2", "blaze", 16, 21,
                                        "Police said the blaze started at night.",
                                        "A fire broke out in Leeds. The old mill was destroyed.")
    # d3's passages are out of order in the file, with another document between them: N decides.
    assert by_id["m5"].context == by_id["m6"].context == "A court jailed the man. He had robbed a bank."
    assert by_id["m4"].context == "Fire crews fought the blaze for hours."
    assert {r.topic for r in records} == {"t1", "t2"}
    for r in records:
        assert r.sentence[r.start:r.end] == r.text
    dev = list(mention_records(root, "dev"))
    assert [(r.mention_id, r.topic, r.cluster_id) for r in dev] == [("m7", None, "c4")]


def test_mention_records_refuse_clusters_naming_unknown_mentions(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "ds", [*CLUSTERS, ("c9", "train", ["m99"])])
    with pytest.raises(InputError, match=r"names 1 mention\(s\) that no passage .* m99"):
        list(mention_records(root, "train"))
    with pytest.raises(InputError, match="split 'test' has no mentions"):
        list(mention_records(write_dataset(tmp_path / "ok"), "test"))
    with pytest.raises(MissingArtefactError, match="not a corefsearch dataset"):
        list(mention_records(tmp_path / "nowhere", "train"))


def test_encoder_input_is_context_then_marked_sentence(encoder: MentionEncoder) -> None:
    tokenizer = encoder.tokenizer
    r = record("Police said the blaze started at night.", "blaze", "A fire broke out in Leeds.")
    item = encoder_input(tokenizer, r, 128)
    tokens = tokenizer.convert_ids_to_tokens(item.input_ids)
    assert tokens == ["[CLS]", "a", "fire", "broke", "out", "in", "leeds", ".", "[SEP]", "police", "said", "the",
                      ENTITY_START, "blaze", ENTITY_END, "started", "at", "night", ".", "[SEP]"]
    assert tokens[item.mention_start:item.mention_end] == ["blaze"]
    # A literal "[E]" in the text does not move the mention.
    tricky = record("the [E] fire at the fire", "fire", "", occurrence=1)
    item = encoder_input(tokenizer, tricky, 128)
    tokens = tokenizer.convert_ids_to_tokens(item.input_ids)
    assert tokens[item.mention_start - 1:item.mention_end + 1] == [ENTITY_START, "fire", ENTITY_END]
    assert tokens[item.mention_start - 3:item.mention_start - 1] == ["at", "the"]


def test_long_inputs_lose_the_context_end_first_then_sentence_edges_never_the_mention(
        encoder: MentionEncoder) -> None:
    tokenizer = encoder.tokenizer
    context = " ".join(FILLER[:100])
    sentence = " ".join(FILLER[100:110]) + " blaze " + " ".join(FILLER[110:120])
    item = encoder_input(tokenizer, record(sentence, "blaze", context), 40)
    tokens = tokenizer.convert_ids_to_tokens(item.input_ids)
    assert len(tokens) == 40
    # The whole sentence (20 words, the mention, 2 markers) stays; the context keeps its first 40-3-23 words.
    assert tokens[1:15] == FILLER[:14] and tokens[15] == "[SEP]"
    assert tokens[16:] == [*FILLER[100:110], ENTITY_START, "blaze", ENTITY_END, *FILLER[110:120], "[SEP]"]
    # A sentence longer than the budget: no context, a window centred on the mention.
    sentence = " ".join(FILLER[:80]) + " blaze " + " ".join(FILLER[80:160])
    item = encoder_input(tokenizer, record(sentence, "blaze", context), 24)
    tokens = tokenizer.convert_ids_to_tokens(item.input_ids)
    assert tokens == ["[CLS]", "[SEP]", *FILLER[71:80], ENTITY_START, "blaze", ENTITY_END, *FILLER[80:89], "[SEP]"]
    assert tokens[item.mention_start:item.mention_end] == ["blaze"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(left=st.integers(0, 120), mention=st.integers(1, 4), right=st.integers(0, 120), context=st.integers(0, 120),
       max_length=st.integers(12, 128))
def test_encoder_input_fits_and_keeps_the_mention(encoder: MentionEncoder, left: int, mention: int, right: int,
                                                  context: int, max_length: int) -> None:
    rng = random.Random(left * 7 + right)
    pick = lambda n: [rng.choice(FILLER) for _ in range(n)]  # noqa: E731
    left_words, mention_words, right_words = pick(left), pick(mention), pick(right)
    sentence = " ".join([*left_words, *mention_words, *right_words])
    start = len(" ".join(left_words)) + (1 if left_words else 0)
    mention_text = " ".join(mention_words)
    r = MentionRecord("m", "c", "d", None, "d-0", mention_text, start, start + len(mention_text), sentence,
                      " ".join(pick(context)))
    item = encoder_input(encoder.tokenizer, r, max_length)
    tokens = encoder.tokenizer.convert_ids_to_tokens(item.input_ids)
    assert len(tokens) <= max_length
    assert tokens[item.mention_start - 1] == ENTITY_START and tokens[item.mention_end] == ENTITY_END
    assert tokens[item.mention_start:item.mention_end] == mention_words
    kept_left = tokens[tokens.index("[SEP]") + 1:item.mention_start - 1]
    assert kept_left == left_words[len(left_words) - len(kept_left):]
    if len(tokens) < max_length:  # nothing was cut
        assert len(kept_left) == left and len(tokens) == context + left + mention + right + 5


# --- the encoder -----------------------------------------------------------------------------------------


def test_encode_gives_unit_vectors_of_cls_and_mention_halves(encoder: MentionEncoder, tmp_path: Path) -> None:
    records = list(mention_records(write_dataset(tmp_path / "ds"), "train"))
    vectors = encoder.encode(records, batch_size=4)
    assert vectors.shape == (6, 16) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Batching and padding change nothing.
    np.testing.assert_allclose(encoder.encode(records[:1], batch_size=1)[0], vectors[0], atol=1e-5)
    np.testing.assert_allclose(encoder.encode(records[::-1], batch_size=6)[::-1], vectors, atol=1e-5)
    # Another mention of the same sentence and context: another vector.
    sentence = "Police said the blaze started at night."
    a, b = encoder.encode([record(sentence, "blaze", "x"), record(sentence, "night", "x")])
    assert float(a @ b) < 0.9999
    assert encoder.dimension == 16


def test_save_load_round_trip_gives_the_same_vectors(encoder: MentionEncoder, tmp_path: Path) -> None:
    records = list(mention_records(write_dataset(tmp_path / "ds"), "train"))
    encoder.config.threshold = 0.35
    try:
        encoder.save(tmp_path / "model")
    finally:
        encoder.config.threshold = None
    folder = tmp_path / "model"
    assert {"config.json", "model.safetensors", "tokenizer.json", HEAD_WEIGHTS, CLUSTERER_CONFIG} <= \
        {p.name for p in folder.iterdir()}
    saved = json.loads((folder / CLUSTERER_CONFIG).read_text(encoding="utf-8"))
    assert saved["threshold"] == 0.35 and saved["start_marker"] == ENTITY_START and saved["mlp_out"] == 8
    loaded = MentionEncoder.load(folder)
    assert loaded.config.threshold == 0.35
    assert loaded.tokenizer.tokenize(f"the {ENTITY_START}fire{ENTITY_END}") == ["the", ENTITY_START, "fire",
                                                                                ENTITY_END]
    np.testing.assert_allclose(loaded.encode(records), encoder.encode(records), atol=1e-6)


def test_load_refuses_folders_that_are_not_mention_encoders(encoder: MentionEncoder, tiny_base: Path,
                                                            tmp_path: Path) -> None:
    with pytest.raises(MissingArtefactError, match="no such mention encoder folder"):
        MentionEncoder.load(tmp_path / "nowhere")
    with pytest.raises(MissingArtefactError, match="is not a mention encoder .*train clusterer"):
        MentionEncoder.load(tiny_base)
    folder = tmp_path / "model"
    encoder.save(folder)
    config = json.loads((folder / CLUSTERER_CONFIG).read_text(encoding="utf-8"))
    (folder / CLUSTERER_CONFIG).write_text(json.dumps({**config, "tau": 0.3}), encoding="utf-8")
    with pytest.raises(InputError, match="unknown key.*tau"):
        MentionEncoder.load(folder)
    (folder / CLUSTERER_CONFIG).write_text(json.dumps({**config, "threshold": "0.3"}), encoding="utf-8")
    with pytest.raises(InputError, match="threshold"):
        MentionEncoder.load(folder)
    (folder / CLUSTERER_CONFIG).write_text(json.dumps(config), encoding="utf-8")
    (folder / HEAD_WEIGHTS).write_bytes(b"not safetensors")
    with pytest.raises(InputError, match="the head does not load"):
        MentionEncoder.load(folder)


def test_a_few_contrastive_steps_pull_coreferent_mentions_together(tiny_base: Path, tmp_path: Path) -> None:
    import torch

    torch.manual_seed(3)
    model = MentionEncoder.from_base(str(tiny_base), ClustererConfig(mlp_hidden=16, mlp_out=8, dropout=0.0))
    records = {r.mention_id: r for r in mention_records(write_dataset(tmp_path / "ds"), "train")}
    clusters = {"c1": ["m1", "m2", "m4"], "c2": ["m3"], "c3": ["m5", "m6"]}
    pairs = training_pairs(clusters, {m: r.topic for m, r in records.items()}, negatives_per_positive=2, seed=0)
    labels = torch.tensor([p.label for p in pairs])

    def loss() -> torch.Tensor:
        first = model.forward([records[p.first] for p in pairs])
        second = model.forward([records[p.second] for p in pairs])
        return contrastive_loss(first, second, labels, margin=0.5)

    model.train(True)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    before = float(loss().detach())
    for _ in range(15):
        optimiser.zero_grad()
        value = loss()
        value.backward()
        optimiser.step()
    assert float(loss().detach()) < 0.5 * before


# --- the loss --------------------------------------------------------------------------------------------


def test_contrastive_loss_matches_the_formula_by_hand() -> None:
    import torch

    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [2.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[0.0, 1.0], [0.0, 3.0], [1.0, 1.0], [1.0, 1.0]])
    labels = torch.tensor([1, 0, 1, 0])
    d = 1 - 1 / math.sqrt(2)  # 0.2929: 45°
    np.testing.assert_allclose(cosine_distance(a, b).numpy(), [1.0, 1.0, d, d], atol=1e-6)
    # y=1: d²; y=0: max(0, m - d)²  (m = 0.5: a pair at distance 1 is past the margin)
    expected = [1.0, 0.0, d ** 2, (0.5 - d) ** 2]
    np.testing.assert_allclose(contrastive_loss(a, b, labels, 0.5, "none").numpy(), expected, atol=1e-6)
    assert float(contrastive_loss(a, b, labels, 0.5)) == pytest.approx(sum(expected) / 4, abs=1e-6)
    assert float(contrastive_loss(a, b, labels, 0.5, "sum")) == pytest.approx(sum(expected), abs=1e-6)
    # A margin of 1.2 reaches the orthogonal negative: (1.2 - 1)² = 0.04.
    assert float(contrastive_loss(a[1:2], b[1:2], labels[1:2], 1.2)) == pytest.approx(0.04, abs=1e-6)
    with pytest.raises(InputError, match="--margin must be positive"):
        contrastive_loss(a, b, labels, 0.0)


# --- training pairs ------------------------------------------------------------------------------------


def test_positive_pairs_are_all_pairs_or_a_seeded_sample_of_a_large_cluster() -> None:
    ids = [f"m{i:02d}" for i in range(6)]
    assert positive_pairs(ids, 100, random.Random(0)) == [(a, b) for i, a in enumerate(ids) for b in ids[i + 1:]]
    big = [f"m{i:03d}" for i in range(200)]
    for cap in (30, 15_000):  # rejection sampling, and sampling from the listed pairs
        sample = positive_pairs(big, cap, random.Random(5))
        assert len(sample) == len(set(sample)) == cap and all(a < b for a, b in sample)
        assert sample == positive_pairs(big, cap, random.Random(5))
    assert positive_pairs(big, 30, random.Random(6)) != positive_pairs(big, 30, random.Random(5))


def test_training_pairs_mix_topic_and_hard_negatives_at_the_ratio() -> None:
    clusters = {f"c{c:02d}": [f"c{c:02d}m{i}" for i in range(4)] for c in range(12)}  # 6 positives each
    topics = {m: ("A" if int(m[1:3]) < 6 else "B") for ids in clusters.values() for m in ids}
    neighbours = {"c00m0": ["c00m1", "c11m0", "c10m1", "c01m2", "c02m0"]}  # c00m1: its own cluster, not a negative
    pairs = training_pairs(clusters, topics, neighbours, negatives_per_positive=2, max_positives_per_cluster=100,
                           hard_fraction=0.5, seed=3)
    positives = [p for p in pairs if p.label == 1]
    negatives = [p for p in pairs if p.label == 0]
    assert len(positives) == 72 and len(negatives) == 144
    assert all(p.first[:3] == p.second[:3] for p in positives)
    assert all(p.first[:3] != p.second[:3] for p in negatives)
    assert len({frozenset((p.first, p.second)) for p in pairs}) == len(pairs)
    # c00m0 is the first mention of three positives; their hard slots take its neighbours in order.
    assert [p.second for p in negatives if p.first == "c00m0"] == ["c11m0", "c10m1", "c01m2"]
    # Every other negative is within the anchor's topic.
    assert [(p.first, p.second) for p in negatives if topics[p.first] != topics[p.second]] == \
        [("c00m0", "c11m0"), ("c00m0", "c10m1")]
    assert pairs == training_pairs(clusters, topics, neighbours, 2, 100, 0.5, seed=3)
    assert pairs != training_pairs(clusters, topics, neighbours, 2, 100, 0.5, seed=4)
    half = training_pairs(clusters, topics, negatives_per_positive=0.5, seed=0)
    assert sum(p.label == 0 for p in half) == 36
    # Without topics the pool is every mention; a cluster alone gives no negatives.
    anywhere = training_pairs({"x": ["a", "b"], "y": ["c"]}, negatives_per_positive=1)
    assert anywhere == [MentionPair("a", "b", 1), MentionPair("a", "c", 0)]
    assert training_pairs({"x": ["a", "b"]}, negatives_per_positive=3) == [MentionPair("a", "b", 1)]


def test_training_pairs_refuse_bad_options() -> None:
    with pytest.raises(InputError, match="negatives-per-positive"):
        training_pairs({"c": ["a", "b"]}, negatives_per_positive=-1)
    with pytest.raises(InputError, match="mention a is in clusters c and d"):
        training_pairs({"c": ["a", "b"], "d": ["a"]})


# --- clustering ----------------------------------------------------------------------------------------


def at_angles(degrees: list[float]) -> np.ndarray:
    radians = np.radians(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def partition(labels: np.ndarray) -> set[frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for i, label in enumerate(labels.tolist()):
        groups.setdefault(label, set()).add(i)
    return {frozenset(g) for g in groups.values()}


@pytest.mark.parametrize("method", ["dense", "knn"])
def test_hand_made_points_give_the_expected_partition_at_each_threshold(method: str) -> None:
    vectors = at_angles([0, 2, 5, 60, 62, 180])
    run = (lambda v, tau: cluster_dense(v, tau)) if method == "dense" else (lambda v, tau: cluster_knn(v, tau, 10))
    # within the first group: d(0°,2°) = 0.00061, d(2°,5°) = 0.00137, the average of {0°,2°} to 5° = 0.0026
    assert partition(run(vectors, 0.001)) == {frozenset({0, 1}), frozenset({2}), frozenset({3, 4}), frozenset({5})}
    assert partition(run(vectors, 0.01)) == {frozenset({0, 1, 2}), frozenset({3, 4}), frozenset({5})}
    assert partition(run(vectors, 0.6)) == {frozenset({0, 1, 2, 3, 4}), frozenset({5})}
    assert run(vectors, 0.6).tolist() == [0, 0, 0, 0, 0, 1]


def test_knn_clustering_counts_a_missing_edge_as_distance_one() -> None:
    # A–B 38°, B–C 42°, A–C 80°. With k=1 the graph has A–B and B–C only: A–C counts as distance 1,
    # so {A,B}–C averages (1 + (1 − cos 42°)) / 2 = 0.6284 instead of the true 0.5414.
    vectors = at_angles([0, 38, 80])
    joined = (1 + (1 - math.cos(math.radians(42)))) / 2
    assert cluster_dense(vectors, 0.6).tolist() == [0, 0, 0]
    assert cluster_knn(vectors, 0.6, k=2).tolist() == [0, 0, 0]
    assert cluster_knn(vectors, joined - 1e-4, k=1).tolist() == [0, 0, 1]
    assert cluster_knn(vectors, joined + 1e-4, k=1).tolist() == [0, 0, 0]
    with pytest.raises(InputError, match="below 1"):
        cluster_knn(vectors, 1.0, k=1)


def test_knn_clustering_equals_all_pairs_clustering_when_k_covers_every_pair() -> None:
    rng = np.random.default_rng(11)
    for _ in range(60):
        n, d = int(rng.integers(2, 45)), int(rng.integers(2, 10))
        centres = rng.normal(size=(max(1, n // 4), d))
        vectors = centres[rng.integers(0, len(centres), n)] + rng.normal(scale=0.35, size=(n, d))
        for tau in (0.02, 0.1, 0.3, 0.6, 0.95):
            dense = cluster_dense(vectors, tau)
            assert cluster_knn(vectors, tau, k=n).tolist() == dense.tolist()
            assert cluster_knn(vectors, tau, k=n - 1).tolist() == dense.tolist()


def test_a_shared_lemma_takes_the_bonus_off_the_pair_distance() -> None:
    vectors = at_angles([0, 30, 60, 61])
    plain = pair_distances(vectors)
    assert np.allclose(plain, pdist(vectors, metric="cosine"))
    labels = ["run", "run", "say", "run"]
    closer = pair_distances(vectors, labels, 0.05)
    same = np.array([labels[i] == labels[j] for i in range(4) for j in range(i + 1, 4)])
    assert np.allclose(closer[same], plain[same])  # the others 0.05 further (the tree is cut 0.05 higher)
    assert np.allclose(closer[~same], plain[~same] + 0.05)
    assert np.array_equal(pair_distances(vectors, labels, 0.0), plain)
    # 0° and 30° (distance 0.134) join at τ 0.1 only with the lemma bonus
    assert partition(cluster_dense(vectors, 0.1)) == {frozenset({0}), frozenset({1}), frozenset({2, 3})}
    assert partition(cluster_dense(vectors, 0.1, labels, 0.05)) == {frozenset({0, 1}), frozenset({2, 3})}


def test_knn_clustering_with_a_lemma_bonus_equals_all_pairs_clustering_when_k_covers_every_pair() -> None:
    rng = np.random.default_rng(5)
    for _ in range(40):
        n, d = int(rng.integers(2, 30)), int(rng.integers(2, 8))
        vectors = rng.normal(size=(max(1, n // 3), d))[rng.integers(0, max(1, n // 3), n)]
        vectors = vectors + rng.normal(scale=0.4, size=(n, d))
        labels = [str(x) for x in rng.integers(0, 4, n)]
        for tau, bonus in ((0.1, 0.1), (0.3, 0.2), (0.6, 0.05)):
            dense = cluster_dense(vectors, tau, labels, bonus)
            assert cluster_knn(vectors, tau, n, labels, bonus).tolist() == dense.tolist()


def test_a_mask_of_linked_pairs_equal_to_label_equality_gives_the_same_tree_and_clusters() -> None:
    rng = np.random.default_rng(8)
    for _ in range(30):
        n, d = int(rng.integers(2, 30)), int(rng.integers(2, 8))
        vectors = rng.normal(size=(max(1, n // 3), d))[rng.integers(0, max(1, n // 3), n)]
        vectors = vectors + rng.normal(scale=0.4, size=(n, d))
        labels = [str(x) for x in rng.integers(0, 4, n)]
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if labels[i] == labels[j]]
        mask = condensed_mask(n, pairs)
        assert mask.tolist() == [labels[i] == labels[j] for i in range(n) for j in range(i + 1, n)]
        assert np.array_equal(linkage_tree(vectors, linked=mask, bonus=0.2), linkage_tree(vectors, labels, 0.2))
        for tau, bonus in ((0.1, 0.1), (0.3, 0.2), (0.6, 0.05)):
            dense = cluster_dense(vectors, tau, labels, bonus)
            assert cluster_dense(vectors, tau, bonus=bonus, linked=mask).tolist() == dense.tolist()
            reversed_pairs = np.asarray([(j, i) for i, j in pairs], dtype=np.int64).reshape(-1, 2)
            assert cluster_knn(vectors, tau, n, bonus=bonus, linked=reversed_pairs).tolist() == dense.tolist()


def test_a_linked_pair_earns_the_bonus_whatever_its_labels() -> None:
    vectors = at_angles([0, 30, 60, 61])  # 0° and 30°: distance 0.134
    linked = condensed_mask(4, [(0, 1), (2, 3)])
    assert np.allclose(pair_distances(vectors, bonus=0.05, linked=linked)[~linked],
                       pair_distances(vectors)[~linked] + 0.05)
    expected = {frozenset({0, 1}), frozenset({2, 3})}
    assert partition(cluster_dense(vectors, 0.1, bonus=0.05, linked=linked)) == expected
    assert partition(cluster_knn(vectors, 0.1, 3, bonus=0.05, linked=[(1, 0)])) == expected
    assert partition(cluster_dense(vectors, 0.1, bonus=0.05, linked=condensed_mask(4, []))) == \
        partition(cluster_dense(vectors, 0.1))
    # Identical vectors are one node of the kNN graph: an edge is flagged by its nodes' first rows.
    copies = at_angles([0, 0, 30])
    assert partition(cluster_knn(copies, 0.1, 2, bonus=0.05, linked=[(0, 2)])) == {frozenset({0, 1, 2})}
    assert partition(cluster_knn(copies, 0.1, 2, bonus=0.05, linked=[(1, 2)])) == {frozenset({0, 1}),
                                                                                   frozenset({2})}
    with pytest.raises(ValueError, match="not both"):
        cluster_dense(vectors, 0.1, ["a"] * 4, 0.05, linked)
    with pytest.raises(ValueError, match="6 pairs"):
        pair_distances(vectors, bonus=0.05, linked=np.zeros(5, dtype=bool))
    with pytest.raises(ValueError, match="two different rows"):
        condensed_mask(4, [(1, 1)])


def test_knn_edges_are_each_pair_once_with_exact_similarities() -> None:
    vectors = np.random.default_rng(2).normal(size=(50, 8))
    a, b, sims = knn_edges(vectors, 5)
    assert (a < b).all() and len(set(zip(a.tolist(), b.tolist(), strict=True))) == len(a)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(sims, np.einsum("ij,ij->i", unit[a], unit[b]), atol=1e-6)
    degree = np.bincount(np.r_[a, b], minlength=50)
    assert (degree >= 5).all()


def test_knn_clustering_of_20k_mentions_keeps_memory_far_below_all_pairs() -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4000, 32))
    vectors = (centres[rng.integers(0, 4000, 20_000)] + rng.normal(scale=0.2, size=(20_000, 32))).astype(np.float32)
    tracemalloc.start()
    labels = cluster_knn(vectors, 0.2, k=10)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 150 * 2 ** 20  # the all-pairs distances alone would be 1.6 GB
    assert labels.shape == (20_000,) and 2000 < labels.max() + 1 < 20_000


def test_above_the_exact_size_the_inverted_file_finds_the_same_tight_clusters(monkeypatch: Any) -> None:
    import corefsearch.cluster.agglomerative as agglomerative

    rng = np.random.default_rng(5)
    centres = rng.normal(size=(60, 24))
    truth = rng.integers(0, 60, 900)
    vectors = centres[truth] + rng.normal(scale=0.05, size=(900, 24))
    exact = cluster_knn(vectors, 0.1, k=40)
    monkeypatch.setattr(agglomerative, "EXACT_UNTIL", 100)
    approximate = cluster_knn(vectors, 0.1, k=40)
    assert approximate.tolist() == exact.tolist()
    assert exact.max() + 1 == len(set(truth.tolist()))  # each centre's mentions make one cluster
    a, b, _ = knn_edges(vectors, 20)
    assert (np.bincount(np.r_[a, b], minlength=900) >= 20).all()  # every vector found its neighbours


def test_canonical_labels_and_bad_vectors() -> None:
    assert canonical_labels([7, 3, 7, 9]).tolist() == [0, 1, 0, 2]
    assert cluster_dense(np.ones((1, 3)), 0.5).tolist() == [0]
    assert cluster_knn(np.ones((1, 3)), 0.5, 3).tolist() == [0]
    with pytest.raises(InputError, match="mention vector 1 is zero"):
        cluster_dense(np.array([[1.0, 0.0], [0.0, 0.0]]), 0.5)
    with pytest.raises(InputError, match="between 0 and 2"):
        cluster_dense(np.eye(2), 3.0)


def test_identical_vectors_are_merged_first_and_weigh_as_many_mentions() -> None:
    rng = np.random.default_rng(23)
    for _ in range(40):
        distinct = rng.normal(size=(int(rng.integers(2, 15)), 6))
        vectors = distinct[rng.integers(0, len(distinct), int(rng.integers(2, 40)))]  # copies of a few rows
        n = len(vectors)
        for tau in (0.05, 0.3, 0.7):
            # copies never split, and the weighted linkage is all-pairs average linkage over every copy
            assert cluster_knn(vectors, tau, k=n).tolist() == cluster_dense(vectors, tau).tolist()


def test_distinct_rows_keep_the_order_of_first_appearance() -> None:
    matrix = np.array([[1, 0], [0, 1], [1, 0], [2, 2], [0, 1]], dtype=np.float32)
    rows, copy_of, weights = distinct_rows(matrix)
    assert rows.tolist() == [[1, 0], [0, 1], [2, 2]]
    assert copy_of.tolist() == [0, 1, 0, 2, 1] and weights.tolist() == [2, 2, 1]
