"""Helpers of the `corefsearch serve` tests (test_serve_api.py, test_serve_browser.py): a tiny
random reader saved as `train reader` saves one, a real uvicorn server on a free port in a
thread, a test query of the ECB+ subset, and the subset with a reprint of one query's passage
that nobody annotated (a distractor: the hit the page must call unjudged, not "not relevant")."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

from tiny_models import frequent_words, make_tiny_bert

from corefsearch.datasets.dataset import Dataset
from corefsearch.io.trec import read_qrels
from corefsearch.schema import Query

REPRINT_DOC = "reprint-1"
REPRINT_PASSAGE = "reprint-1-0"  # the reprint's one passage (a distractor is one unit)


def tiny_bert(dataset: Path, folder: Path) -> Path:
    """The 2-layer, 32-wide random BERT of the dense tests, with the dataset's frequent words."""
    return make_tiny_bert(folder, frequent_words(dataset), seed=0)


def tiny_reader(base: Path, folder: Path) -> Path:
    """A randomly initialised integrated reader (markers) on ``base``, saved to ``folder`` the way
    ``corefsearch train reader`` saves one (so ``--reader folder`` loads it)."""
    import torch

    from corefsearch.reader.model import CrossEncoderReader, ReaderConfig

    torch.manual_seed(1)
    config = ReaderConfig(head="integrated", markers=True, max_length=64, max_query_len=24, doc_stride=16, hidden=16)
    CrossEncoderReader.from_base(str(base), config).save(folder)
    return folder


def subset_query(dataset: Path, min_start: int = 10) -> Query:
    """A test query of the subset whose mention is one word that occurs once in its passage, after
    ``min_start`` characters (a selection inside the text, not at its edge)."""
    for query in Dataset(dataset).queries("test"):
        if (query.mention.isalpha() and query.text.count(query.mention) == 1 and query.start >= min_start
                and len(query.text) > 80):
            return query
    raise AssertionError("the ECB+ subset has no such test query")


def query_with_a_relevant_hit(engine: Any, dataset: Path, k: int) -> Query:
    """A test query with a relevant passage in the engine's top ``k`` (no re-ranking)."""
    for candidate in Dataset(dataset).queries("test")[:40]:
        if any(hit.relevant for hit in engine.query(qid=candidate.id, k=k, rerank_k=0).hits):
            return candidate
    raise AssertionError(f"no test query of the subset has a relevant passage in the top {k}")


def subset_with_a_reprint(ecbplus_subset: Path, subset_dataset: Path, folder: Path) -> tuple[Path, Path, Query]:
    """The subset's dataset with one distractor: a reprint of the passage of a test query that has
    at least three relevant passages, never annotated; and its Lucene index. Returns
    ``(dataset, index, query)``: the reprint is the query's top BM25 hit, its relevant passages
    and the other passages of the annotated ECB+ documents come after it."""
    from corefsearch.datasets.build import BuildOptions, build_dataset
    from corefsearch.datasets.ecbplus import read_ecbplus
    from corefsearch.sparse.index import build_lucene_index

    qrels = read_qrels(Dataset(subset_dataset).qrels_path("test"))
    query = next(q for q in Dataset(subset_dataset).queries("test") if len(qrels.get(q.id, {})) >= 3)
    distractors = folder / "distractors.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    distractors.write_text(json.dumps({"doc_id": REPRINT_DOC, "title": "Reprinted", "text": query.text}) + "\n",
                           encoding="utf-8")
    dataset = folder / "dataset"
    build_dataset(read_ecbplus(ecbplus_subset), dataset, BuildOptions(splits=("test",)), distractors=[distractors],
                  source_name=str(ecbplus_subset))
    index = folder / "index"
    build_lucene_index(dataset, index)
    return dataset, index, query


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerThread:
    """``app`` served by uvicorn on 127.0.0.1 at a free port, in a thread, until :meth:`stop`."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)

    def start(self, timeout: float = 60) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
