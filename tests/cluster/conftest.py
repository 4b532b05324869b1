"""The mention-encoder tests (test_cluster_encoder.py, test_mention_encoder.py) run each test on one
torch thread (function scope: the module fixtures that build models run on torch's default); every test here
groups documents (``--scope predicted-topic``) with a bag-of-words stand-in for the default encoder."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from helpers import one_torch_thread


@pytest.fixture
def one_thread_each_test() -> Iterator[None]:
    with one_torch_thread():
        yield


def bag_of_words_embeddings(texts: Sequence[str]) -> Any:
    """A stand-in for the default encoder's document vectors (``topics.document_embeddings``): L2-normalised
    counts of the lower-cased words, hashed into 64 dimensions -- deterministic, and no model to load."""
    import zlib

    import numpy as np

    vectors = np.zeros((len(texts), 64), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in re.findall(r"[a-z]+", text.lower()):
            vectors[row, zlib.crc32(word.encode()) % 64] += 1.0
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


@pytest.fixture(autouse=True)
def no_topic_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--scope predicted-topic`` embeds documents with all-MiniLM-L6-v2; these tests use a bag of words instead
    (tests that want a real model pass ``embed`` or call ``document_embeddings`` with a tiny one)."""
    monkeypatch.setattr("corefsearch.cluster.topics.document_embeddings", bag_of_words_embeddings)
