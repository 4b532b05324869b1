"""The model card's rules on their own (no training): which options a card lists, where the base
model's licence comes from, and that the metadata parses back with the Hub's card classes. The
cards of real training runs are checked in test_interop.py and test_cluster_encoder.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import ModelCard

from corefsearch.base.model_card import describe_base_model, model_card, write_model_card
from corefsearch.cluster.arguments import ClustererTrainingArguments
from corefsearch.dense.arguments import RetrieverTrainingArguments
from corefsearch.reader.arguments import ReaderTrainingArguments
from corefsearch.training import TrainingArguments

TRAINERS: dict[str, type[TrainingArguments]] = {"retriever": RetrieverTrainingArguments,
                                                "reader": ReaderTrainingArguments,
                                                "clusterer": ClustererTrainingArguments}


def options_in_effect(kind: str, record: dict[str, Any]) -> dict[str, Any]:
    return TRAINERS[kind].options_in_effect(record)


def record(options: dict[str, Any], counts: dict[str, Any] | None = None, *, dev: bool = True,
           **extra: Any) -> dict[str, Any]:
    return {"options": options, "counts": counts or {}, "dataset": "/home/me/work/ecb-events",
            "passages_sha256": "sha256:abc", "device": "cpu", "created": "2025-01-01",
            "versions": {"corefsearch": "0.1.0"}, "best_epoch": 1 if dev else None,
            "selection_metric": "MRR@10" if dev else None, **extra}


def test_a_retriever_without_an_index_lists_no_hard_negatives() -> None:
    options = {"hard_negatives": 20, "epochs": 2, "lr": 1e-5}
    assert "hard_negatives" not in options_in_effect("retriever", record(options, index=None))
    with_index = record(options, index="/home/me/work/idx")
    assert options_in_effect("retriever", with_index)["hard_negatives"] == 20
    card = model_card(TRAINERS["retriever"], "/home/me/models/r", with_index, [])
    assert "BM25 hard negatives from the Lucene index `idx`" in card and "/home/me" not in card
    # An index and 0 hard negatives: the index was not used.
    card = model_card(RetrieverTrainingArguments, "r", record({**options, "hard_negatives": 0},
                                                              index="/home/me/work/idx"), [])
    assert "| hard_negatives | 0 |" in card and "Lucene index" not in card


def test_limits_are_listed_only_when_the_run_reached_them() -> None:
    counts = {"steps_per_epoch": 10, "total_steps": 20, "dev_queries": 40, "examples_per_epoch": 30,
              "relevant_pairs": 30}
    options = {"epochs": 2, "max_steps": 50, "dev_max_queries": 500, "positives_per_query": 3, "warmup": 0.1}
    shown = options_in_effect("retriever", record(options, counts))
    assert shown == {"epochs": 2, "warmup": 0.1}
    assert "max_steps" not in options_in_effect("retriever", record({**options, "max_steps": 20}, counts))
    capped = {**counts, "dev_queries": 500, "examples_per_epoch": 25}
    shown = options_in_effect("retriever", record({**options, "max_steps": 15}, {**capped, "total_steps": 15}))
    assert shown["max_steps"] == 15 and shown["dev_max_queries"] == 500 and shown["positives_per_query"] == 3
    # max_steps inside the first epoch: the other epochs never began; 0.1 × 5 steps is no warm-up step.
    shown = options_in_effect("retriever", record({**options, "max_steps": 5}, {**counts, "total_steps": 5}))
    assert "epochs" not in shown and "warmup" not in shown and shown["max_steps"] == 5
    assert options_in_effect("retriever", record({**options, "warmup": 0.0}, counts))["warmup"] == 0.0  # asked for none


def test_dev_options_are_left_out_without_dev_queries() -> None:
    options = {"dev_max_queries": 200, "dev_rerank_k": 50, "head": "integrated", "hidden": 128, "top_spans": 5}
    assert set(options_in_effect("reader", record(options, dev=False))) == {"head", "hidden", "top_spans"}
    assert set(options_in_effect("reader", record(options, {"dev_queries": 12}))) == {
        "head", "hidden", "top_spans", "dev_rerank_k"}
    options = {"scope": "topic", "margin": 0.5}
    assert set(options_in_effect("clusterer", record(options, dev=False))) == {"margin"}


def test_a_dpr_reader_lists_no_option_of_the_integrated_head() -> None:
    options = {"head": "dpr", "hidden": 128, "top_spans": 5, "max_span_len": 10, "max_train_queries": 100}
    shown = options_in_effect("reader", record(options, {"train_queries": 80}))
    assert shown == {"head": "dpr", "max_span_len": 10}
    assert options_in_effect("reader", record(options, {"train_queries": 100}))["max_train_queries"] == 100


def test_a_clusterer_without_negatives_lists_no_hard_negative_neighbours() -> None:
    options = {"negatives_per_positive": 0, "hard_negatives_k": 10, "max_positives_per_cluster": 200}
    shown = options_in_effect("clusterer", record(options, {"positive_pairs": 300, "coreferent_pairs": 4000}))
    assert shown == {"negatives_per_positive": 0, "max_positives_per_cluster": 200}
    shown = options_in_effect("clusterer", record({**options, "negatives_per_positive": 3.0},
                                                  {"positive_pairs": 300, "coreferent_pairs": 300}))
    assert shown == {"negatives_per_positive": 3.0, "hard_negatives_k": 10}


def base_folder(path: Path, card: str | None) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}", encoding="utf-8")
    if card is not None:
        (path / "README.md").write_text(card, encoding="utf-8")
    return path


def test_the_licence_is_the_base_models_and_unknown_when_no_card_gives_it(tmp_path: Path) -> None:
    licensed = base_folder(tmp_path / "my-bert", "---\nlicense: mit\n---\n# A BERT\n")
    card = model_card(TRAINERS["reader"], str(tmp_path / "out" / "reader"),
                      record({"base_model": str(licensed), "head": "dpr"}), [])
    data = ModelCard(card).data
    assert data.license == "mit" and data.base_model is None  # a local folder: no hub id to link
    assert "| base_model | my-bert |" in card and str(tmp_path) not in card
    custom = base_folder(tmp_path / "custom", "---\nlicense: other\nlicense_name: acme-1\nlicense_link: LICENSE\n---\n")
    data = ModelCard(model_card(ReaderTrainingArguments, "reader",
                                record({"base_model": str(custom), "head": "dpr"}), [])).data
    assert (data.license, data.license_name, data.license_link) == ("other", "acme-1", "LICENSE")
    for readme in (None, "no front matter\n", "---\n- a list\n---\n", "---\ntags: [x]\n---\n"):
        bare = base_folder(tmp_path / f"bare{len(list(tmp_path.iterdir()))}", readme)
        card = model_card(TRAINERS["clusterer"], "m", record({"base_model": str(bare)}), [])
        assert ModelCard(card).data.license == "unknown" and "set it to the base model's" in card


def test_a_base_model_in_the_hugging_face_cache_is_named_by_its_hub_id(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    snapshot = base_folder(tmp_path / "hub" / "models--acme--tiny-bert" / "snapshots" / "0123abcd",
                           "---\nlicense: cc-by-4.0\n---\n")
    (tmp_path / "hub" / "models--acme--tiny-bert" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny-bert" / "refs" / "main").write_text("0123abcd", encoding="utf-8")
    base = describe_base_model(str(snapshot))
    assert (base.name, base.hub_id, base.license) == ("acme/tiny-bert", "acme/tiny-bert", "cc-by-4.0")
    # A hub name: its card is read from the cache when it is there, and nothing is downloaded when not.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert describe_base_model("acme/tiny-bert").license == "cc-by-4.0"
    missing = describe_base_model("acme/not-cached")
    assert (missing.hub_id, missing.license) == ("acme/not-cached", "unknown")


def test_a_written_card_loads_with_the_hubs_card_classes(tmp_path: Path) -> None:
    folder = tmp_path / ".reader.assembling"
    folder.mkdir()
    manifest = {"options": {"passage": "sentence", "source": {"format": "generic", "input": "/home/me/corpus"}}}
    path = write_model_card(folder, TRAINERS["reader"], record({"base_model": None, "head": "integrated"},
                                                     run="/home/me/runs/bm25.trec"), [], manifest,
                            name=str(tmp_path / "models" / "ecb reader"))
    card = ModelCard.load(path)
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-ranking"
    assert card.data.license == "apache-2.0" and card.data.datasets == ["ecb-events"]
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    text = path.read_text(encoding="utf-8")
    assert "/home/me" not in text and str(tmp_path) not in text
    assert "--reader 'ecb reader'" in text and 'CrossEncoderReader.load("ecb reader")' in text
    assert "Source corpus: `corpus` (format generic)" in text and "the run `bm25.trec`" in text
