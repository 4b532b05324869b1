"""``detect --ray``: mention detection on a Ray cluster.

``detect.run.detect_dataset`` streams the dataset's shards as it does locally; each shard's passages
are cut into contiguous blocks that actors (each with the detector loaded once) detect, and the
mentions come back in the passages' order, so the file written is the local one. The detect wing does
not know of Ray: it takes a detection strategy, and :class:`RayDetection` is this one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.detect.detectors import HEURISTIC, load_detector
from corefsearch.distributed.session import (
    RayOptions,
    blocks,
    carried,
    plan_workers,
    ray_session,
    uncarried,
    worker_errors,
)


class DetectorWorker:
    """A Ray actor: loads the detector once, then detects blocks of passage texts."""

    def __init__(self, reference: str, device: str, backend: str, types: list[str] | None, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.detector = carried(lambda: load_detector(reference, device, backend, types))

    def types(self) -> tuple[str | None, Any]:
        return carried(lambda: list(uncarried(self.detector).types))

    def detect(self, texts: list[str], batch_size: int) -> tuple[str | None, Any]:
        return carried(lambda: uncarried(self.detector).detect(texts, batch_size))


class PoolDetector:
    """The detector interface over a pool of :class:`DetectorWorker` actors."""

    def __init__(self, pool: Any, workers: int, types: list[str]) -> None:
        self.pool, self.workers, self.types = pool, workers, types

    def detect(self, texts: list[str], batch_size: int = 64) -> list[list[tuple[int, int, str, float]]]:
        found: list[list[tuple[int, int, str, float]]] = []
        parts = blocks(len(texts), self.workers)
        for answer in self.pool.map(lambda worker, part: worker.detect.remote([texts[i] for i in part], batch_size),
                                    parts):
            found.extend(uncarried(answer))
        return found


@dataclass
class RayDetection:
    """The detection strategy of ``detect --ray``: the detector loaded on the actors of the Ray cluster of
    ``options``, giving the mentions the local path gives."""

    options: RayOptions
    option: str = "--ray"  # what errors name

    def validate(self) -> None:
        self.options.validate()

    @contextmanager
    def open(self, reference: str, device: str, backend: str, types: list[str] | None) -> Iterator[PoolDetector]:
        where = reference if reference == HEURISTIC else str(Path(reference).resolve())
        with ray_session(self.options) as ray, worker_errors():
            from ray.util import ActorPool

            workers = plan_workers(ray, self.options, device)
            actor = ray.remote(DetectorWorker).options(num_cpus=workers.cpus, num_gpus=workers.gpus)
            actors = [actor.remote(where, workers.device, backend, types, self.options.threads)
                      for _ in range(workers.workers)]
            kinds = uncarried(ray.get(actors[0].types.remote()))
            yield PoolDetector(ActorPool(actors), workers.workers, kinds)
