"""corefsearch cluster --method lemma-heuristic: the rule of Ahmed et al. (2023) on hand-made mentions, its
transitive closure, blocks and pair counts, and a run on a tiny dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import partition, read_clusters, write_jsonl
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.cluster.heuristic import (
    LemmaContext,
    blocks_of,
    heuristic_clusters,
    jaccard,
    lemma_occurs,
    linked,
    pair_counts,
)
from corefsearch.cluster.run import cluster_dataset
from corefsearch.datasets.build import BuildOptions, build_dataset
from corefsearch.datasets.generic import read_generic

runner = CliRunner(env={"COLUMNS": "250"})
SHARED = frozenset({"bank", "dallas", "gunman"})


def context(lemma: str, text: str | None = None, sentence: frozenset[str] = SHARED) -> LemmaContext:
    return LemmaContext(lemma, text if text is not None else lemma, sentence)


# --- the rule --------------------------------------------------------------------------------------------


def test_the_lemma_of_one_occurs_in_the_other_either_way() -> None:
    attacked, attack = context("attack", "attacked"), context("attack", "the attack")
    assert lemma_occurs(attacked, attack) and lemma_occurs(attack, attacked)
    # Only one way round: "fire" occurs in "set fire to", "set" nowhere in the other.
    set_fire, fire = context("set", "set fire to"), context("fire", "fire")
    assert lemma_occurs(set_fire, fire) and lemma_occurs(fire, set_fire)
    # One lemma in the other (a substring test, as their code): "kill" in "killing".
    assert lemma_occurs(context("kill", "slew"), context("killing", "killings"))
    assert not lemma_occurs(context("attack", "attacked"), context("raid", "raided"))
    assert not lemma_occurs(context("", "x"), context("y", "xyz"))  # an empty lemma occurs nowhere


def test_a_multi_word_mention_is_matched_by_its_head_lemma_and_its_words() -> None:
    took_place = context("take", "took place")  # the head of "took place" is "took"
    assert linked(took_place, context("take", "taking"))
    assert linked(took_place, context("place", "place"))  # "place" occurs in its text
    assert not linked(took_place, context("happen", "happened"))


def test_a_multi_word_mention_s_lemma_is_its_longest_word_s() -> None:
    from corefsearch.base.nlp import head_and_sentence_lemmas

    text = "The quake took place on Monday and the bank was robbed."
    spans = [(text.index("took place"), text.index("took place") + len("took place")),
             (text.index("robbed"), text.index("robbed") + len("robbed"))]
    (found,) = head_and_sentence_lemmas([text], [spans], lemma="longest")
    assert [lemma for lemma, _ in found] == ["place", "rob"]  # "place" (5 letters) over "took" (the head)
    (heads,) = head_and_sentence_lemmas([text], [spans])
    assert heads[0][0] == "take" and heads[1][0] == "rob"
    assert found[0][1] == heads[0][1] and "quake" in found[0][1] and "the" not in found[0][1]


def test_jaccard_of_the_sentence_sets() -> None:
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert jaccard(set(), set()) == 0.0


def test_the_sentence_overlap_threshold_is_strict() -> None:
    # 1 shared lemma of 20: Jaccard exactly 0.05, not above it; of 19: 0.0526, above it.
    a = context("attack", sentence=frozenset({"attack", *(f"a{i}" for i in range(10))}))
    b20 = context("attack", sentence=frozenset({"attack", *(f"b{i}" for i in range(9))}))
    b19 = context("attack", sentence=frozenset({"attack", *(f"b{i}" for i in range(8))}))
    assert jaccard(a.sentence, b20.sentence) == pytest.approx(0.05)
    assert not linked(a, b20) and linked(a, b19)
    assert linked(a, b20, overlap=0.04) and not linked(a, b19, overlap=0.06)
    # 0 turns the filter off: sentences without a shared word still link.
    apart = context("attack", sentence=frozenset({"x"}))
    assert not linked(a, apart) and linked(a, apart, overlap=0)
    assert not linked(context("attack"), context("raid"), overlap=0)  # the lemma condition still holds


# --- closure, blocks and pairs ---------------------------------------------------------------------------


def test_links_are_closed_transitively_within_groups_and_types() -> None:
    contexts = {
        "a": context("set", "set fire to", frozenset({"x"})),
        "b": context("fire", "fire", SHARED | {"x"}),
        "c": context("fired", "fired"),  # "fire" occurs in "fired"; "set" and "fired" in neither of a, c
        "d": context("burn", "burned"),
        "e": context("fire", "fire"),  # an entity: never with the events
        "f": context("fire", "fire"),  # another group
    }
    groups = {m: "g1" for m in contexts} | {"f": "g2"}
    types = {m: "event" for m in contexts} | {"e": "entity"}
    result = heuristic_clusters(contexts, groups, types)
    assert not linked(contexts["a"], contexts["c"], overlap=0)
    assert result.pairs == [("a", "b"), ("b", "c")]
    assert partition(result.assignment) == {frozenset({"a", "b", "c"}), frozenset({"d"}), frozenset({"e"}),
                                            frozenset({"f"})}
    assert result.assignment["a"] == "g1/event/1-set" and result.assignment["d"] == "g1/event/2-burn"
    assert result.assignment["e"] == "g1/entity/1-fire" and result.assignment["f"] == "g2/event/1-fire"


def test_pair_counts_give_recall_and_the_share_kept() -> None:
    blocks = blocks_of(["a", "b", "c", "d"], {m: "g" for m in "abcd"}, {m: "event" for m in "abcd"})
    assert blocks == {"g/event": ["a", "b", "c", "d"]}
    counts = pair_counts([("a", "b"), ("c", "d")], blocks, {"a": "x", "b": "x", "c": "x", "d": "y"})
    assert (counts.total, counts.kept, counts.coreferent, counts.found) == (6, 2, 3, 1)
    assert counts.recall == pytest.approx(1 / 3) and counts.kept_share == pytest.approx(1 / 3)


# --- a tiny dataset ---------------------------------------------------------------------------------------

FLU = ("Officials of the football league announced a new schedule for the coming season after a weekend attack "
       "of flu kept many players, coaches and referees at home in several cities across the northern region.")
DOCUMENTS = [
    {"doc_id": "raid-1", "topic": "raid", "text": "Gunmen attacked a bank in Dallas on Monday."},
    {"doc_id": "raid-2", "topic": "raid", "text": "The attack on the Dallas bank left two guards wounded."},
    {"doc_id": "raid-3", "topic": "raid", "text": "Police said the attackers fled the Dallas bank."},
    {"doc_id": "raid-4", "topic": "raid", "text": FLU},
    {"doc_id": "hack-1", "topic": "hack", "text": "Hackers launched an attack on a Berlin hospital network."},
]
MENTIONS = [("raid-1-attacked", "raid-1", "attacked", "raid", "event"),
            ("raid-2-attack", "raid-2", "attack", "raid", "event"),
            ("raid-3-attackers", "raid-3", "attackers", "gunmen", "entity"),
            ("raid-4-attack", "raid-4", "attack", "flu", "event"),
            ("hack-1-attack", "hack-1", "attack", "hack", "event")]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("heuristic")
    texts = {d["doc_id"]: d["text"] for d in DOCUMENTS}
    write_jsonl(folder / "corpus.jsonl", DOCUMENTS)
    write_jsonl(folder / "mentions.jsonl", [
        {"mention_id": m, "doc_id": d, "start": texts[d].index(w), "end": texts[d].index(w) + len(w),
         "cluster_id": c, "type": t} for m, d, w, c, t in MENTIONS])
    out = folder / "ds"
    build_dataset(read_generic(folder), out, BuildOptions(split_ratios=(0.0, 0.0, 1.0)), source_name=str(folder))
    return out


@pytest.mark.parametrize(("scope", "overlap", "expected"), [
    # raid-4's long sentence shares only "attack" with the others (Jaccard below 0.05); the entity stays apart.
    ("topic", None, {frozenset({"raid-1-attacked", "raid-2-attack"}), frozenset({"raid-4-attack"}),
                     frozenset({"raid-3-attackers"}), frozenset({"hack-1-attack"})}),
    ("topic", 0.0, {frozenset({"raid-1-attacked", "raid-2-attack", "raid-4-attack"}),
                    frozenset({"raid-3-attackers"}), frozenset({"hack-1-attack"})}),
    ("corpus", None, {frozenset({"raid-1-attacked", "raid-2-attack", "hack-1-attack"}),
                      frozenset({"raid-4-attack"}), frozenset({"raid-3-attackers"})}),
])
def test_cluster_lemma_heuristic(dataset: Path, tmp_path: Path, scope: str, overlap: float | None,
                                 expected: set[frozenset[str]]) -> None:
    summary = cluster_dataset(dataset, tmp_path / "c.jsonl", method="lemma-heuristic", scope=scope,
                              sentence_overlap=overlap)
    assert partition(read_clusters(tmp_path / "c.jsonl")) == expected
    assert summary.sentence_overlap == (0.05 if overlap is None else overlap)
    assert summary.pairs_total == (3 if scope == "topic" else 6)  # raid: 3 events, hack: 1; the entity alone


def test_cli_lemma_heuristic(dataset: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["cluster", str(dataset), "--out", str(tmp_path / "c.jsonl"), "--method",
                                 "lemma-heuristic", "--sentence-overlap", "0"])
    assert result.exit_code == 0, result.output
    assert "at sentence overlap J 0 (linked 3 of 3 pairs within groups and types)" in " ".join(result.output.split())
    assert read_clusters(tmp_path / "c.jsonl")["raid-4-attack"] == "raid/event/1-attack"


def test_sentence_overlap_only_with_the_heuristic(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    result = runner.invoke(app, ["cluster", str(dataset), "--out", str(out), "--method", "lemma",
                                 "--sentence-overlap", "0.1"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "--sentence-overlap: only with --method lemma-heuristic" in " ".join(result.output.split())
    with pytest.raises(InputError, match="--sentence-overlap must be at least 0 and below 1"):
        cluster_dataset(dataset, out, method="lemma-heuristic", sentence_overlap=1.0)
    with pytest.raises(InputError, match="only with --method lemma-heuristic"):  # checked before reading
        cluster_dataset(tmp_path / "missing", out, method="singletons", sentence_overlap=0.1, mentions="predicted")
    assert not out.exists()
