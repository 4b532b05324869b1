"""The coreference metrics (MUC, B³, CEAF-e, LEA, CoNLL F1): the metric papers' worked examples,
properties, the reference scorer's handling of twinless mentions and singletons, and agreement
with the independent ``scorch`` package on random partitions."""

from __future__ import annotations

import random

import pytest
from scorch import scores as scorch_scores

from corefsearch.evaluate import coref
from corefsearch.evaluate.coref import (
    b_cubed,
    ceaf_e,
    clusters_of,
    drop_singletons,
    lea,
    muc,
    score_clusters,
    score_partitions,
)

# The running example of Pradhan et al. (2014, Fig. 1) that Moosavi & Strube (2016, §4) score with LEA:
# key {a,b,c},{d,e,f,g}; response {a,b},{c,d},{f,g,h,i} (e is missed, h and i are twinless).
KEY = [set("abc"), set("defg")]
RESPONSE = [set("ab"), set("cd"), set("fghi")]


def close(score: object, recall: float, precision: float) -> None:
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    assert (score.recall, score.precision, score.f1) == pytest.approx((recall, precision, f1), abs=1e-12)  # type: ignore[attr-defined]


def test_lea_worked_example_of_moosavi_and_strube() -> None:
    # Recall = (3·(1/3) + 4·(1/6)) / (3+4) ≈ 0.24; precision = (2·1 + 2·0 + 4·(1/6)) / (2+2+4) ≈ 0.33; F1 ≈ 0.28
    score = lea(KEY, RESPONSE)
    close(score, (3 * 1 / 3 + 4 * 1 / 6) / 7, (2 * 1 + 2 * 0 + 4 * 1 / 6) / 8)
    assert round(score.recall, 2) == 0.24 and round(score.precision, 2) == 0.33 and round(score.f1, 2) == 0.28


def test_muc_b_cubed_ceaf_on_the_same_example_with_twinless_mentions() -> None:
    # MUC: key {a,b,c} → {a,b},{c}: 1 link of 2; {d,e,f,g} → {d},{e},{f,g}: 1 of 3 (e, missing, is a part);
    # response {a,b}: 1 of 1, {c,d}: 0 of 1, {f,g,h,i} → {f,g},{h},{i}: 1 of 3 (h, i twinless).
    close(muc(KEY, RESPONSE), 2 / 5, 2 / 5)
    # B³: recall (4/3 + 1/3 + 1/4 + 4/4) / 7, precision (4/2 + 1/2 + 1/2 + 4/4) / 8
    close(b_cubed(KEY, RESPONSE), (4 / 3 + 1 / 3 + 1 / 4 + 1) / 7, (2 + 0.5 + 0.5 + 1) / 8)
    # CEAF-e: best alignment {a,b,c}–{a,b} (φ4 = 4/5) and {d,e,f,g}–{f,g,h,i} (φ4 = 4/8)
    close(ceaf_e(KEY, RESPONSE), (0.8 + 0.5) / 2, (0.8 + 0.5) / 3)
    scores = score_clusters(KEY, RESPONSE)
    assert scores.conll_f1 == pytest.approx((scores.muc.f1 + scores.b_cubed.f1 + scores.ceaf_e.f1) / 3)
    counts = (scores.key_mentions, scores.response_mentions, scores.key_clusters, scores.response_clusters)
    assert counts == (7, 8, 2, 3)


def test_muc_examples_of_vilain_et_al() -> None:
    # Key A-B-C-D, response A-B and C-D: one of the three key links is missing, no wrong link.
    close(muc([set("ABCD")], [set("AB"), set("CD")]), 2 / 3, 1.0)
    # The other way round: every key link found, one of the three response links wrong.
    close(muc([set("AB"), set("CD")], [set("ABCD")]), 1.0, 2 / 3)
    # Key A-B-C-D, response A-B, B-C... as one chain A-B-C plus the missing D: 2 of 3 links.
    close(muc([set("ABCD")], [set("ABC")]), 2 / 3, 1.0)


def test_ceaf_alignment_is_one_to_one() -> None:
    # Two response clusters cannot both align with the one key cluster: φ4({a,b,c,d},{a,b}) = 2/3 is taken once.
    close(ceaf_e([set("abcd")], [set("ab"), set("cd")]), (2 / 3) / 1, (2 / 3) / 2)


def test_lea_singletons_are_self_links() -> None:
    close(lea([{"a"}, set("bc")], [{"a"}, set("bc")]), 1.0, 1.0)
    # key singleton {a} merged into {a,b,c}: unresolved; the response's 3 links hold 1 correct one
    close(lea([{"a"}, set("bc")], [set("abc")]), (1 * 0 + 2 * 1) / 3, (3 * (1 / 3)) / 3)
    # a twinless response singleton is a wrong self-link
    close(lea([set("bc")], [set("bc"), {"x"}]), 1.0, 2 / 3)


def random_partition(rng: random.Random, mentions: list[str], max_clusters: int) -> dict[str, str]:
    return {mention: f"c{rng.randrange(max_clusters)}" for mention in mentions}


@pytest.mark.parametrize("singletons", ["keep", "drop"])
def test_identical_partitions_score_one_everywhere(singletons: str) -> None:
    rng = random.Random(7)
    for _ in range(50):
        mentions = [f"m{i}" for i in range(rng.randrange(2, 40))]
        key = random_partition(rng, mentions, rng.randrange(1, len(mentions)))
        if all(len(c) == 1 for c in clusters_of(key)):  # MUC has no links to score
            continue
        response = {mention: f"other-{cluster}" for mention, cluster in key.items()}  # cluster ids do not matter
        scores = score_partitions(key, response, singletons)
        for score in scores.metrics().values():
            assert (score.recall, score.precision, score.f1) == pytest.approx((1.0, 1.0, 1.0))
        assert scores.conll_f1 == pytest.approx(1.0)


def test_all_singletons_response_finds_no_link() -> None:
    key = {"a": "1", "b": "1", "c": "1", "d": "2", "e": "2"}
    response = {mention: mention for mention in key}
    scores = score_partitions(key, response)
    assert scores.muc.recall == 0.0 and scores.muc.f1 == 0.0
    assert scores.lea.recall == 0.0 and scores.lea.precision == 0.0
    assert scores.b_cubed.precision == 1.0 and scores.b_cubed.recall == pytest.approx((3 * 1 / 3 + 2 * 1 / 2) / 5)
    # without singletons nothing of the response is left: every metric is 0
    dropped = score_partitions(key, response, "drop")
    assert dropped.response_mentions == 0 and dropped.conll_f1 == 0.0 and dropped.lea.f1 == 0.0


def test_twinless_and_missing_mentions_follow_the_reference_scorer() -> None:
    key = {"a": "1", "b": "1"}
    twinless = score_partitions(key, {"a": "x", "b": "x", "z": "x"})
    close(twinless.b_cubed, 1.0, (2 / 3 + 2 / 3 + 0) / 3)  # a, b: 2 of their 3; twinless z: 0
    close(twinless.muc, 1.0, 1 / 2)  # {a,b,z} is split in two by the key
    missing = score_partitions({"a": "1", "b": "1", "c": "1"}, {"a": "x", "b": "x"})
    close(missing.muc, 1 / 2, 1.0)
    close(missing.b_cubed, (2 * 2 / 3) / 3, 1.0)


def test_drop_removes_singletons_of_both_sides() -> None:
    key = {"a": "1", "b": "1", "c": "2"}
    response = {"a": "x", "b": "x", "c": "y", "d": "z"}
    kept = score_partitions(key, response, "keep")
    dropped = score_partitions(key, response, "drop")
    assert kept.b_cubed.precision == pytest.approx(3 / 4) and kept.key_mentions == 3
    assert (dropped.key_mentions, dropped.response_mentions) == (2, 2)
    assert dropped.conll_f1 == pytest.approx(1.0) and dropped.lea.f1 == pytest.approx(1.0)
    assert drop_singletons([{"a"}, {"b", "c"}]) == [frozenset({"b", "c"})]


def test_not_a_partition_and_unknown_option() -> None:
    with pytest.raises(ValueError, match="two clusters"):
        b_cubed([{"a", "b"}, {"b"}], [{"a"}])
    with pytest.raises(ValueError, match="keep or drop"):
        score_clusters([], [], "remove")


def scorch_triple(metric: object, key: list[set[str]], response: list[set[str]]) -> tuple[float, float, float]:
    return tuple(float(value) for value in metric(key, response))  # type: ignore[operator]


def harmonic_mean_of_two(values: tuple[float, float]) -> float:
    recall, precision = (float(value) for value in values)
    return 2 * recall * precision / (recall + precision) if recall + precision else 0.0


@pytest.mark.parametrize("singletons", ["keep", "drop"])
def test_agrees_with_scorch_on_random_partitions(singletons: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """MUC, B³ and CEAF-e equal scorch's on 300 seeded random key/response pairs that share only
    part of their mentions (missing and twinless mentions on both sides), to 1e-6."""
    # scorch's F1 is statistics.harmonic_mean, which raises on CEAF's numpy zeros (no overlap at all):
    # its recall and precision are used as they are, its F1 through the same formula without that flaw.
    monkeypatch.setattr(scorch_scores, "harmonic_mean", harmonic_mean_of_two)
    rng = random.Random(2024 if singletons == "keep" else 2025)
    for _ in range(300):
        universe = [f"m{i}" for i in range(rng.randrange(1, 30))]
        key_mentions = [m for m in universe if rng.random() < 0.85]
        response_mentions = [m for m in universe if rng.random() < 0.85]
        key = random_partition(rng, key_mentions, rng.randrange(1, 12))
        response = random_partition(rng, response_mentions, rng.randrange(1, 12))
        ours = score_partitions(key, response, singletons)
        key_clusters = [set(c) for c in clusters_of(key)]
        response_clusters = [set(c) for c in clusters_of(response)]
        if singletons == "drop":
            key_clusters = [c for c in key_clusters if len(c) > 1]
            response_clusters = [c for c in response_clusters if len(c) > 1]
        for score, metric in ((ours.muc, scorch_scores.muc), (ours.b_cubed, scorch_scores.b_cubed),
                              (ours.ceaf_e, scorch_scores.ceaf_e)):
            expected = scorch_triple(metric, key_clusters, response_clusters)
            assert (score.recall, score.precision, score.f1) == pytest.approx(expected, abs=1e-6), (key, response)
        if key_clusters and response_clusters:
            assert ours.conll_f1 == pytest.approx(scorch_scores.conll2012(key_clusters, response_clusters), abs=1e-6)


def test_sparse_alignment_of_large_components_equals_scorch(monkeypatch: pytest.MonkeyPatch) -> None:
    """CEAF-e components too large for a dense matrix are aligned over their overlapping pairs only
    (the sparse solver); forced on every component, it gives scorch's (dense Kuhn-Munkres) values."""
    monkeypatch.setattr(coref, "DENSE_CELLS", 0)
    monkeypatch.setattr(scorch_scores, "harmonic_mean", harmonic_mean_of_two)
    rng = random.Random(99)
    for _ in range(200):
        universe = [f"m{i}" for i in range(rng.randrange(1, 40))]
        key = random_partition(rng, [m for m in universe if rng.random() < 0.9], rng.randrange(1, 10))
        response = random_partition(rng, [m for m in universe if rng.random() < 0.9], rng.randrange(1, 10))
        ours = ceaf_e(clusters_of(key), clusters_of(response))
        expected = scorch_triple(scorch_scores.ceaf_e, [set(c) for c in clusters_of(key)],
                                 [set(c) for c in clusters_of(response)])
        assert (ours.recall, ours.precision, ours.f1) == pytest.approx(expected, abs=1e-6), (key, response)


# --- twinless mentions: key and response over different mention sets ------------------------------------------


def test_twinless_mentions_on_both_sides_by_hand() -> None:
    """Key {a,b,c}; response {a,b,x}, {y}: c has no twin (recall), x and y none (precision).

    Singletons kept: MUC R = (3 − |{a,b},{c}|) / 2 = 1/2, P = ((3 − |{a,b},{x}|) + 0) / (2 + 0) = 1/2;
    B³ R = (2²/3) / 3 = 4/9, P = (2²/3 + 0) / 4 = 1/3; CEAF-e φ4({a,b,c},{a,b,x}) = 4/6: R = 2/3 / 1,
    P = 2/3 / 2; LEA R = 3 · (1 of 3 links) / 3 = 1/3, P = (3 · 1/3 + 1 · 0) / 4 = 1/4 ({y}: a wrong self-link).
    Singletons dropped ({y} goes): MUC as kept, B³ P = (4/3) / 3 = 4/9, CEAF-e P = 2/3, LEA P = 1/3."""
    key, response = [set("abc")], [set("abx"), {"y"}]
    kept = score_clusters(key, response, "keep")
    close(kept.muc, 1 / 2, 1 / 2)
    close(kept.b_cubed, 4 / 9, 1 / 3)
    close(kept.ceaf_e, 2 / 3, 1 / 3)
    close(kept.lea, 1 / 3, 1 / 4)
    dropped = score_clusters(key, response, "drop")
    close(dropped.muc, 1 / 2, 1 / 2)
    close(dropped.b_cubed, 4 / 9, 4 / 9)
    close(dropped.ceaf_e, 2 / 3, 2 / 3)
    close(dropped.lea, 1 / 3, 1 / 3)
    # no mention in common: nothing is found and nothing is right
    nothing = score_clusters([set("ab"), {"c"}], [set("xy"), {"z"}])
    assert all(score.f1 == 0.0 for score in nothing.metrics().values())


def lea_by_links(key: list[set[str]], response: list[set[str]]) -> tuple[float, float]:
    """LEA straight from its definition, over explicit sets of links (pairs; a singleton's self-link)."""
    def links(cluster: set[str]) -> set[frozenset[str]]:
        return {frozenset({m}) for m in cluster} if len(cluster) == 1 else {
            frozenset({a, b}) for a in cluster for b in cluster if a < b}

    def side(clusters: list[set[str]], other: list[set[str]]) -> float:
        found = set().union(*(links(c) for c in other)) if other else set()
        total = sum(len(c) for c in clusters)
        return sum(len(c) * len(links(c) & found) / len(links(c)) for c in clusters) / total if total else 0.0

    return side(key, response), side(response, key)


@pytest.mark.parametrize("singletons", ["keep", "drop"])
def test_twinless_sets_agree_with_scorch_and_lea_by_links(singletons: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Key and response drawn from a shared pool plus mentions of their own (key-only mentions without a twin,
    response-only twinless ones), in every proportion (response inside the key, key inside the response,
    nothing shared): MUC, B³, CEAF-e equal scorch's, LEA equals its definition over sets of links."""
    monkeypatch.setattr(scorch_scores, "harmonic_mean", harmonic_mean_of_two)
    rng = random.Random(31 if singletons == "keep" else 32)
    for trial in range(300):
        shared = [f"m{i}" for i in range(rng.randrange(0, 15))]
        key_only = [f"k{i}" for i in range(rng.randrange(0, 8) if trial % 3 else 0)]
        response_only = [f"r{i}" for i in range(rng.randrange(0, 8) if trial % 4 else 0)]
        key = random_partition(rng, shared + key_only, rng.randrange(1, 10))
        response = random_partition(rng, shared + response_only, rng.randrange(1, 10))
        ours = score_partitions(key, response, singletons)
        key_clusters = [set(c) for c in clusters_of(key) if singletons == "keep" or len(c) > 1]
        response_clusters = [set(c) for c in clusters_of(response) if singletons == "keep" or len(c) > 1]
        if key_clusters and response_clusters:
            for score, metric in ((ours.muc, scorch_scores.muc), (ours.b_cubed, scorch_scores.b_cubed),
                                  (ours.ceaf_e, scorch_scores.ceaf_e)):
                expected = scorch_triple(metric, key_clusters, response_clusters)
                assert (score.recall, score.precision, score.f1) == pytest.approx(expected, abs=1e-9), (key, response)
        recall, precision = lea_by_links(key_clusters, response_clusters)
        assert (ours.lea.recall, ours.lea.precision) == pytest.approx((recall, precision), abs=1e-12), (key, response)
