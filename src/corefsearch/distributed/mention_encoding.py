"""``cluster --method encoder --ray``: the mention encoder's encoding on a Ray cluster.

The driver tokenises and batches the mentions (``MentionEncoder.plan``); contiguous blocks of
batches go to actors that loaded the encoder once, and the vectors are put back in the mentions'
order. The cluster wing does not know of Ray: ``cluster.run.cluster_dataset`` takes a
``MentionEncoding`` strategy, and :class:`RayMentionEncoding` is this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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

if TYPE_CHECKING:
    import numpy as np

    from corefsearch.cluster.inputs import MentionRecord
    from corefsearch.cluster.model import MentionEncoder


class MentionWorker:
    """A Ray actor: loads the mention encoder once, then encodes blocks of batches of tokenised mentions."""

    def __init__(self, folder: str, device: str, threads: int, backend: str | None = None) -> None:
        import torch

        from corefsearch.cluster.model import MentionEncoder

        torch.set_num_threads(threads)
        self.encoder = carried(lambda: MentionEncoder.load(Path(folder), device, backend))

    def encode(self, batches: list[list[Any]]) -> tuple[str | None, Any]:
        return carried(lambda: uncarried(self.encoder).encode_batches(batches))


def encode_mentions_on_ray(encoder: MentionEncoder, folder: Path, records: Sequence[MentionRecord],
                           batch_size: int, device: str, ray_options: RayOptions) -> np.ndarray:
    """``encoder.encode(records, batch_size)`` with the forward passes on the Ray cluster: the same
    plan (tokenised and batched here), contiguous blocks of its batches per call, the vectors put
    back in the records' order. ``ray_options`` were checked where they entered (``cluster_dataset``
    validates its ``MentionEncoding``)."""
    plan = encoder.plan(records, batch_size)
    with ray_session(ray_options) as ray, worker_errors():
        from ray.util import ActorPool

        workers = plan_workers(ray, ray_options, device)
        actor = ray.remote(MentionWorker).options(num_cpus=workers.cpus, num_gpus=workers.gpus)
        parts = blocks(len(plan.batches), workers.workers)
        pool = ActorPool([actor.remote(str(Path(folder).resolve()), workers.device, ray_options.threads,
                                       encoder.backend) for _ in range(min(workers.workers, len(parts)))])
        work = [[[plan.inputs[i] for i in plan.batches[b]] for b in part] for part in parts]
        outputs: list[np.ndarray] = []
        for answer in track(pool.map(lambda worker, block: worker.encode.remote(block), work),
                            "Encoding mentions (Ray)", total=len(parts)):
            outputs.extend(uncarried(answer))
    encoder.last_unique_inputs = len(plan.inputs)
    return plan.assemble(outputs, encoder.dimension)


@dataclass
class RayMentionEncoding:
    """The ``MentionEncoding`` of ``cluster --method encoder --ray`` (see
    ``corefsearch.cluster.run.cluster_dataset``): the mentions encoded on the Ray cluster of
    ``options``, to the vectors the local path gives."""

    options: RayOptions
    option: str = "--ray"  # what errors name

    def validate(self) -> None:
        self.options.validate()

    def encode(self, encoder: MentionEncoder, folder: Path, records: Sequence[MentionRecord], batch_size: int,
               device: str) -> np.ndarray:
        return encode_mentions_on_ray(encoder, folder, records, batch_size, device, self.options)
