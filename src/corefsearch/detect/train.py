"""Train the mention detector (``corefsearch train detector``): BIO tagging per type on a dataset's gold
mentions, on the shared training loop (checkpoints, Ctrl-C, resume, the best dev epoch kept).

The training and dev passages are those annotated in full (:func:`annotated_passages`): the passages of
the split that hold a gold mention. A dataset that keeps only some of its mentions would teach the
detector to skip the others, so it is refused: ECB+ must be built with ``--validated-only --chains all``
(the validated sentences, where every mention is annotated, and all chains, singletons included), and
the mention types trained must be in the dataset. Each step takes ``batch_size`` passages (a seeded
shuffle per epoch); the loss is the token cross-entropy of every type's tags. After each epoch the dev
passages are detected and the strict mention F1 over all types picks the epoch kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import write_manifest
from corefsearch.base.errors import InputError
from corefsearch.base.model_card import write_model_card
from corefsearch.base.schema import Passage
from corefsearch.datasets.dataset import Dataset
from corefsearch.detect.arguments import DetectorTrainingArguments
from corefsearch.detect.model import MentionDetector
from corefsearch.evaluate.mentions import score_detection
from corefsearch.io.outputs import Output, model_input, writes_outputs
from corefsearch.training import (
    TRAINING_ARGS_FILE,
    Log,
    LoopResult,
    Run,
    TrainingSummary,
    TrainingTask,
    epoch_rng,
    start_run,
)
from corefsearch.training.loop import metrics_text

if TYPE_CHECKING:
    import torch

SELECTION_METRIC = "mention F1"


@dataclass
class DetectorExtras:
    train_passages: int
    dev_passages: int
    train_mentions: dict[str, int] = field(default_factory=dict)


@dataclass
class Annotated:
    """Passages annotated in full, with their gold spans ``(start, end, type)`` of the types trained."""

    passages: list[Passage]
    spans: list[list[tuple[int, int, str]]]


def check_fully_annotated(dataset: Dataset, types: list[str]) -> None:
    """Refuse a dataset whose gold mentions are not all the mentions of its passages (see the module docstring)."""
    options = dataset.manifest.get("options") or {}
    source = options.get("source") or {}
    fmt, kept = source.get("format"), source.get("mention_type")
    rebuild = f"rebuild it with `corefsearch build-dataset ... --mention-type all --out {dataset.root} --overwrite`"
    if kept not in (None, "all") and any(t != kept for t in types):
        raise InputError(f"{dataset.root} keeps {kept} mentions only, so it cannot teach {', '.join(types)} mentions; "
                         f"train with --mention-type {kept}, or {rebuild}")
    if fmt == "ecbplus" and not (source.get("validated_only") and source.get("chains") == "all"):
        raise InputError(f"{dataset.root}: ECB+ annotates every mention only in its validated sentences, and the "
                         "default keeps cross-document chains only; rebuild it with `corefsearch build-dataset "
                         f"--format ecbplus --validated-only --chains all --mention-type all --out {dataset.root} "
                         "--overwrite`")


def annotated_passages(dataset: Dataset, split: str, types: list[str]) -> Annotated:
    """The passages of ``split`` that hold a gold mention (of any type), with their gold spans of ``types``.
    A dataset whose passages carry no split takes the documents whose seeded hash falls in the split's share."""
    found = Annotated([], [])
    for passage in dataset.passages():
        if not passage.mentions or _split_of(passage) != split:
            continue
        found.passages.append(passage)
        found.spans.append(sorted({(m.start, m.end, m.type) for m in passage.mentions if m.type in types}))
    return found


def _split_of(passage: Passage) -> str:
    if passage.split is not None:
        return passage.split
    import hashlib

    share = int.from_bytes(hashlib.sha256(passage.doc_id.encode()).digest()[:8], "big") / 2 ** 64
    return "train" if share < 0.8 else "dev" if share < 0.9 else "test"


def dev_f1(detector: MentionDetector, dev: Annotated, batch_size: int) -> dict[str, float]:
    """Strict mention F1 (all types, and per type) of ``detector`` on the dev passages."""
    found = detector.detect([p.text for p in dev.passages], batch_size=batch_size)
    gold = {p.id: spans for p, spans in zip(dev.passages, dev.spans, strict=True)}
    predicted = {p.id: [(s, e, k) for s, e, k, _ in spans] for p, spans in zip(dev.passages, found, strict=True)}
    scores = score_detection(gold, predicted, None, detector.config.types)["strict"]
    return {SELECTION_METRIC: round(scores["all"].f1, 6), "P": round(scores["all"].precision, 6),
            "R": round(scores["all"].recall, 6),
            **{f"{kind} F1": round(scores[kind].f1, 6) for kind in detector.config.types}}


def _outputs(a: dict[str, Any]) -> list[Output]:
    args = a["args"] or DetectorTrainingArguments()
    return [Output(a["out"], "--out", "dir",
                   {"DATASET": a["dataset_dir"], "--base-model": model_input(args.base_model)})]


@writes_outputs(_outputs)
def train_detector(dataset_dir: Path, out: Path, args: DetectorTrainingArguments | None = None, *,
                   overwrite: bool = False, log: Log | None = None,
                   on_step: Callable[[int, float], None] | None = None) -> TrainingSummary[DetectorExtras]:
    """Train a mention detector on the fully annotated train passages of ``dataset_dir`` (dev picks the epoch)."""
    args = args or DetectorTrainingArguments()
    run, dataset = start_run(args, out, overwrite=overwrite, log=log, open_inputs=lambda: Dataset(dataset_dir))
    types = args.types()
    check_fully_annotated(dataset, types)
    train = annotated_passages(dataset, "train", types)
    if not any(train.spans):
        raise InputError(f"{dataset.passages_path}: no train passage holds a gold {' or '.join(types)} mention; a "
                         "detector learns from annotated passages (a dataset of plain documents has none)")
    dev = annotated_passages(dataset, "dev", types)
    if not dev.passages:
        run.log(f"{dataset.root} has no annotated dev passages: the epochs are not scored and the last is kept.")
    run.claim(dataset, {})
    detector = MentionDetector.from_base(args.base_model, args.detector_config(), run.device)
    steps = math.ceil(len(train.passages) / args.batch_size)
    counts = {kind: sum(1 for spans in train.spans for span in spans if span[2] == kind) for kind in types}
    run.log(f"{len(train.passages):,} annotated train passages ({', '.join(f'{n:,} {k}' for k, n in counts.items())} "
            f"mentions), {len(dev.passages):,} dev passages: {steps:,} steps per epoch.")
    task = DetectorTask(detector, args, train, dev if dev.passages else None, steps, run)
    result = run.train(task, on_step)
    return run.summary(result, DetectorExtras(len(train.passages), len(dev.passages), counts))


class DetectorTask(TrainingTask):
    """The detector as a :class:`~corefsearch.training.task.TrainingTask` (see the module docstring)."""

    selection_metric = SELECTION_METRIC

    def __init__(self, detector: MentionDetector, args: DetectorTrainingArguments, train: Annotated,
                 dev: Annotated | None, steps_per_epoch: int, run: Run) -> None:
        self.detector, self.args, self.train, self.dev = detector, args, train, dev
        self.steps_per_epoch, self.run = steps_per_epoch, run

    @property
    def has_dev(self) -> bool:
        return self.dev is not None

    def parameter_groups(self) -> list[tuple[torch.nn.Module, float]]:
        return [(self.detector.model, self.args.lr), (self.detector.head, self.args.head_lr)]

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        order = list(range(len(self.train.passages)))
        epoch_rng(self.args.seed, epoch).shuffle(order)
        size = self.args.batch_size
        return [order[i:i + size] for i in range(0, len(order), size)]

    def loss(self, batch: list[int]) -> torch.Tensor:
        windows = self.detector.windows([self.train.passages[i].text for i in batch])
        return self.detector.loss(windows, [self.train.spans[i] for i in batch])

    def dev_metrics(self) -> dict[str, float]:
        assert self.dev is not None
        return dev_f1(self.detector, self.dev, self.args.encode_batch_size)

    def baseline(self) -> dict[str, Any] | None:
        metrics = self.dev_metrics()
        self.run.log(f"Before training: dev {metrics_text(metrics)}.")
        return metrics

    def weights(self) -> dict[str, Any]:
        return {"weights": self.detector.state()}

    def load_weights(self, saved: dict[str, Any]) -> None:
        self.detector.load_state(saved["weights"])

    def save(self, folder: Path, result: LoopResult) -> None:
        record = self.run.finished_record(
            counts={"train_passages": len(self.train.passages),
                    "dev_passages": len(self.dev.passages) if self.dev else 0,
                    "steps_per_epoch": result.steps_per_epoch, "total_steps": result.total_steps},
            best_epoch=result.best_epoch, selection_metric=SELECTION_METRIC if self.has_dev else None)
        self.detector.save(folder)
        write_manifest(folder / TRAINING_ARGS_FILE, record)

        write_model_card(folder, self.args, record, result.dev_curve, self.run.manifest, name=str(self.run.out))
