"""Shared fixtures: a small hand-written news corpus (generic format), a subset of the vendored
ECB+ corpus (test topics 36 and 37), and one dataset and one Lucene index built from that
subset once per session, so that the tests that start the JVM share its cost."""

from __future__ import annotations

import atexit
import os
import random
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    NEWS_DOCUMENTS,
    NewsCorpus,
    build_tiny_dataset,
    corpus_words,
    frequent_words,
    make_tiny_bert,
    news_mention_records,
    one_torch_thread,
    save_tiny_bert,
    write_jsonl,
    write_small_dataset,
)

# No progress bars in test output.
os.environ["COREFSEARCH_QUIET"] = "1"
# No shipped models, whatever the package ships: each test behaves as it is written (a command given no model
# refuses, as when none is shipped); the tests of the shipped models point this at folders of their own.
os.environ["COREFSEARCH_SHIPPED_DIR"] = tempfile.mkdtemp(prefix="corefsearch-no-shipped-")
atexit.register(shutil.rmtree, os.environ["COREFSEARCH_SHIPPED_DIR"], True)

ROOT = Path(__file__).resolve().parents[1]
ECBPLUS_TARBALL = ROOT / "data" / "ecbplus" / "ECBplus.tar.gz"
SUBSET_TOPICS = ("36", "37")

# --- a small realistic corpus in the generic format (helpers.py) ----------------------------


@pytest.fixture
def news_corpus(tmp_path: Path) -> NewsCorpus:
    folder = tmp_path / "news"
    mentions = news_mention_records()
    write_jsonl(folder / "corpus.jsonl", NEWS_DOCUMENTS)
    write_jsonl(folder / "mentions.jsonl", mentions)
    return NewsCorpus(folder, {d["doc_id"]: d for d in NEWS_DOCUMENTS}, {m["mention_id"]: m for m in mentions})


# --- ECB+ subset, dataset and Lucene index, built once per session -----------------------------


@pytest.fixture(scope="session")
def ecbplus_subset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ECB+ XML folder (``ECB+/<topic>/*.xml``) holding only topics 36 and 37 of the tarball."""
    root = tmp_path_factory.mktemp("ecbplus-subset")
    with tarfile.open(ECBPLUS_TARBALL, "r:gz") as archive:
        for member in archive:
            parts = member.name.split("/")
            if member.isfile() and len(parts) == 3 and parts[1] in SUBSET_TOPICS and parts[2].endswith(".xml"):
                handle = archive.extractfile(member)
                assert handle is not None
                target = root / "ECB+" / parts[1] / parts[2]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(handle.read())
    return root


@pytest.fixture(scope="session")
def subset_dataset(ecbplus_subset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ECB+ test-split dataset of topics 36-37: sentence passages, event mentions."""
    from corefsearch.datasets.build import BuildOptions, build_dataset
    from corefsearch.datasets.ecbplus import read_ecbplus

    out = tmp_path_factory.mktemp("subset") / "dataset"
    build_dataset(read_ecbplus(ecbplus_subset), out, BuildOptions(splits=("test",)),
                  source_name=str(ecbplus_subset))
    return out


@pytest.fixture(scope="session")
def subset_index(subset_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Lucene index of ``subset_dataset``, with the fields of field-weighted BM25 (starts the JVM)."""
    from corefsearch.sparse.index import build_lucene_index

    out = tmp_path_factory.mktemp("subset-index")
    build_lucene_index(subset_dataset, out, fields=True)
    return out


# --- tiny random models and corpora (builders in helpers.py) ----------------------------------------


@pytest.fixture(scope="module")
def one_thread() -> Any:
    """Tiny models run fastest on one thread (and several threads crawl when the CPU is shared)."""
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-wide BERT with random weights and a word-level vocabulary of the tiny news corpus."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), corpus_words(), seed=0, max_positions=128)


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four training events and two dev events (a seeded cluster split)."""
    return build_tiny_dataset(tmp_path_factory, (4, 2, 0))


@pytest.fixture(scope="module")
def tiny_run(tiny_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of every train and dev query over every other passage, in a seeded random order
    (the reader does not care which retriever made it)."""
    from corefsearch.datasets.dataset import Dataset
    from corefsearch.io.trec import RunRow, write_run

    dataset = Dataset(tiny_dataset)
    passage_ids = [p.id for p in dataset.passages()]
    rng = random.Random(3)
    rows = []
    for split in ("train", "dev"):
        for query in dataset.queries(split):
            order = [pid for pid in passage_ids if pid != query.passage_id]
            rng.shuffle(order)
            rows += [RunRow(query.id, pid, rank, 100.0 - rank, "shuffled") for rank, pid in enumerate(order, 1)]
    out = tmp_path_factory.mktemp("run") / "train.trec"
    write_run(out, rows)
    return out


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 96 sentence passages (24 documents of 4 sentences), 8 event clusters."""
    return write_small_dataset(tmp_path_factory.mktemp("small"))


@pytest.fixture(scope="session")
def tiny_model(subset_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT with the ECB+ subset's frequent words."""
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), frequent_words(subset_dataset), seed=0)
