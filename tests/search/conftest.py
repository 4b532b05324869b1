"""The dense index beside the ECB+ subset's Lucene index that the retriever-interface and engine
tests share (test_retriever_interface.py, test_engine.py): built once per module that uses it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import frequent_words, make_tiny_bert


@pytest.fixture(scope="module")
def both_indexes(subset_index: Path, subset_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the subset's Lucene index with a dense index (tiny random BERT, flat) beside it."""
    from corefsearch.dense.indexing import build_dense_index

    root = tmp_path_factory.mktemp("retriever-interface")
    model = make_tiny_bert(root / "bert", frequent_words(subset_dataset), seed=0)
    index = root / "index"
    shutil.copytree(subset_index / "lucene", index / "lucene")
    build_dense_index(subset_dataset, index, str(model), device="cpu")
    return index


@pytest.fixture(scope="module")
def dense_only(both_indexes: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same dense index without a Lucene index beside it (texts from the dataset's passages file)."""
    index = tmp_path_factory.mktemp("dense-only") / "index"
    shutil.copytree(both_indexes / "dense", index / "dense")
    return index
