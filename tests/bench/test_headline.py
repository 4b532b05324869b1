"""bench/headline.py's scoring of whole documents on the validated sentences: the response's lines of the
sentences both datasets hold, renumbered to the validated dataset's passages; a sentence repeated in one document
left out (which copy was validated cannot be told)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import bench_module


@pytest.fixture(scope="module")
def headline() -> Any:
    return bench_module("headline")


def a_dataset(root: Path, sentences: dict[str, list[str]]) -> Path:
    root.mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"kind": "corefsearch-dataset"}), encoding="utf-8")
    lines = [{"id": f"{doc}-{n}", "doc_id": doc, "title": "", "text": text, "mentions": []}
             for doc, texts in sentences.items() for n, text in enumerate(texts)]
    (root / "passages.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return root


def test_whole_document_lines_are_kept_on_the_validated_sentences_and_renumbered(headline: Any,
                                                                                 tmp_path: Path) -> None:
    whole = a_dataset(tmp_path / "whole", {"d1": ["Intro.", "A fire broke out.", "More text.", "It burned."],
                                           "d2": ["Same.", "Same.", "The blaze."]})
    validated = a_dataset(tmp_path / "validated", {"d1": ["A fire broke out.", "It burned."],
                                                   "d2": ["Same.", "The blaze."]})
    lines = [("d1-0", 0, 5), ("d1-1", 2, 6), ("d1-3", 3, 9), ("d2-0", 0, 4), ("d2-1", 0, 4), ("d2-2", 4, 9)]
    clusters = tmp_path / "clusters.jsonl"
    clusters.write_text("".join(json.dumps({"mention_id": f"{p}:{s}-{e}", "cluster_id": "c", "passage_id": p,
                                            "doc_id": p.split("-")[0], "start": s, "end": e}) + "\n"
                                for p, s, e in lines), encoding="utf-8")
    out = headline.validated_only(clusters, whole, validated, tmp_path / "kept.jsonl")
    kept = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(k["mention_id"], k["passage_id"]) for k in kept] == [("d1-1:2-6", "d1-0"), ("d1-3:3-9", "d1-1"),
                                                                  ("d2-2:4-9", "d2-1")]
