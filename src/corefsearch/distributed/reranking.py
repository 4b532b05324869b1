"""``search --reader --ray``: a reader's re-ranking on a Ray cluster.

Retrieval runs in the driver; the queries are cut into contiguous blocks, each re-ranked by an
actor that loaded the reader once (``rerank.rerank_hits``, as the local path), and the results
come back in query order (``ray.util.ActorPool.map``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.progress import track
from corefsearch.distributed.session import (
    RayOptions,
    blocks,
    carried,
    plan_workers,
    ray_session,
    uncarried,
    worker_errors,
)
from corefsearch.reader.rerank import rerank_hits

if TYPE_CHECKING:
    from corefsearch.base.schema import Hit, Query
    from corefsearch.reader.rerank import ReaderOptions


class ReaderWorker:
    """A Ray actor: loads the reader once, then re-ranks blocks of queries with ``rerank_hits``."""

    def __init__(self, options: ReaderOptions, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.reader = carried(lambda: replace(options, threads=options.threads or threads).load())

    def rerank(self, block: list[tuple[Query, list[Hit], dict[str, dict[str, Any]]]], rerank_k: int,
               fusion: str) -> tuple[str | None, Any]:
        def run() -> list[tuple[list[Any], list[Any]]]:
            reader = uncarried(self.reader)
            return [rerank_hits(reader, query, hits, texts, rerank_k, fusion) for query, hits, texts in block]

        return carried(run)


def rerank_on_ray(reader: ReaderOptions, retrieved: Sequence[tuple[Query, list[Hit]]],
                  texts: dict[str, dict[str, Any]], fusion: str, ray_options: RayOptions
                  ) -> tuple[list[tuple[list[Any], list[Any]]], int]:
    """``rerank_hits`` of every query of ``retrieved``, in order, computed on the Ray cluster; and the
    number of workers. Each block carries its queries, their top ``rerank_k`` hits and those texts.
    ``ray_options`` were checked where they entered (``pipeline.search_to_run``)."""
    options = replace(reader, model=Path(reader.model).resolve())
    with ray_session(ray_options) as ray, worker_errors():
        from ray.util import ActorPool

        workers = plan_workers(ray, ray_options, reader.device)
        options = replace(options, device=workers.device)
        actor = ray.remote(ReaderWorker).options(num_cpus=workers.cpus, num_gpus=workers.gpus)
        parts = blocks(len(retrieved), workers.workers)
        pool = ActorPool([actor.remote(options, ray_options.threads)
                                   for _ in range(min(workers.workers, len(parts)))])
        work = []
        for part in parts:
            block = []
            for query, hits in (retrieved[i] for i in part):
                head = hits[:reader.rerank_k]
                block.append((query, hits, {h.passage_id: {"text": texts[h.passage_id]["text"]} for h in head}))
            work.append(block)
        results: list[tuple[list[Any], list[Any]]] = []
        done = pool.map(lambda worker, block: worker.rerank.remote(block, reader.rerank_k, fusion), work)
        for part, answer in track(zip(parts, done, strict=True), "Re-ranking (Ray)", total=len(parts)):
            pairs = uncarried(answer)
            assert len(pairs) == len(part)
            results.extend(pairs)
    return results, workers.workers
