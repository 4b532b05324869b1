"""Helpers of the `corefsearch serve` tests (test_serve_api.py, test_serve_browser.py): a tiny
random reader saved as `train reader` saves one, a real uvicorn server on a free port in a
thread, and a test query of the ECB+ subset."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

from tiny_models import frequent_words, make_tiny_bert

from corefsearch.datasets.dataset import Dataset
from corefsearch.schema import Query


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
