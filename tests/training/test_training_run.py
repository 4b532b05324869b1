"""What the three trainers share before and after the loop (``corefsearch.training.arguments`` and
``corefsearch.training.run``): the :class:`TrainingArguments` base and its checks, each trainer's
defaults, the recorded options, ``start_run`` and ``Run.claim`` (the run record, leftover runs,
the seed), and the one printer of a :class:`TrainingSummary`. No model is trained here."""

from __future__ import annotations

import io
import json
import math
import random
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.cli.report import print_training_summary
from corefsearch.cluster.train import ClustererExtras, ClustererTrainingArguments
from corefsearch.dense.train import RetrieverExtras, RetrieverTrainingArguments
from corefsearch.reader.train import ReaderExtras, ReaderTrainingArguments
from corefsearch.training import (
    LoopOptions,
    Run,
    TrainingArguments,
    TrainingSummary,
    seed_everything,
    start_run,
)
from corefsearch.training.checkpoint import RUN_FILE

TRAINERS = (RetrieverTrainingArguments, ReaderTrainingArguments, ClustererTrainingArguments)

# --- the arguments ----------------------------------------------------------------------------------------------


SHARED_ERRORS = [
    ({"epochs": 0}, "--epochs must be at least 1, got 0"),
    ({"batch_size": 0}, "--batch-size must be at least 1, got 0"),
    ({"max_steps": 0}, "--max-steps must be at least 1, got 0"),
    ({"threads": 0}, "--threads must be at least 1, got 0"),
    ({"weight_decay": -0.1}, "--weight-decay must not be negative, got -0.1"),
    ({"weight_decay": math.nan}, "--weight-decay must not be negative, got nan"),
    ({"checkpoint_every": -1}, "--checkpoint-every must not be negative, got -1"),
    ({"log_every": -5}, "--log-every must not be negative, got -5"),
    ({"warmup": 1.0}, r"--warmup is a fraction of the steps in \[0, 1\), got 1.0"),
    ({"device": "tpu"}, "--device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
]


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize(("changes", "message"), SHARED_ERRORS)
def test_every_trainer_inherits_the_shared_checks(trainer: type, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=f"^{message}$"):
        replace(trainer(), **changes).validate()


def test_the_learning_rate_check_names_every_learning_rate_of_the_trainer() -> None:
    with pytest.raises(InputError, match=r"^--lr must be positive, got 0.0$"):
        RetrieverTrainingArguments(lr=0.0).validate()
    for trainer in (ReaderTrainingArguments, ClustererTrainingArguments):
        with pytest.raises(InputError, match=r"^--lr and --head-lr must be positive, got 3e-05 and nan$"):
            trainer(lr=3e-5, head_lr=math.nan).validate()


@pytest.mark.parametrize(("trainer", "changes", "message"), [
    (RetrieverTrainingArguments, {"pooling": "max"}, "--pooling must be one of cls, mean, got 'max'"),
    (RetrieverTrainingArguments, {"dev_max_queries": 0}, "--dev-max-queries must be at least 1, got 0"),
    (RetrieverTrainingArguments, {"hard_negatives": -1}, "--hard-negatives must not be negative, got -1"),
    (ReaderTrainingArguments, {"head": "x"}, "--head must be one of dpr, integrated, got 'x'"),
    (ReaderTrainingArguments, {"span_weight": math.inf}, "--span-weight must be a positive number, got inf"),
    (ReaderTrainingArguments, {"negatives": 0}, "--negatives must be at least 1, got 0"),
    (ClustererTrainingArguments, {"scope": "corpus"}, "--scope must be one of topic, predicted-topic"),
    (ClustererTrainingArguments, {"margin": 0.0}, "--margin must be positive, got 0.0"),
    (ClustererTrainingArguments, {"encode_batch_size": 0}, "--encode-batch-size must be at least 1, got 0"),
])
def test_each_trainer_adds_its_own_checks(trainer: type, changes: dict[str, Any], message: str) -> None:
    trainer().validate()
    with pytest.raises(InputError, match=f"^{message}"):
        replace(trainer(), **changes).validate()


@dataclass
class ToyArguments(TrainingArguments):
    """A fourth trainer's arguments: one field of its own, one default changed."""

    epochs: int = 7
    width: int = 4
    kind = "toy"

    def validate(self) -> None:
        super().validate()
        if self.width < 2:
            raise InputError(f"--width must be at least 2, got {self.width}")


def test_a_new_trainer_gets_the_shared_fields_checks_and_loop_options() -> None:
    args = ToyArguments(max_steps=9, checkpoint_every=3, log_every=0)
    assert (args.epochs, args.lr, args.seed, args.width) == (7, 2e-5, 13, 4)
    with pytest.raises(InputError, match="--epochs must be at least 1"):
        ToyArguments(epochs=0).validate()
    with pytest.raises(InputError, match="--width must be at least 2"):
        ToyArguments(width=1).validate()
    assert args.loop_options(overwrite=True) == LoopOptions(epochs=7, weight_decay=0.01, warmup=0.1, max_steps=9,
                                                            checkpoint_every=3, log_every=0, overwrite=True)
    # How the run goes is not what identifies it: the run-only fields are not recorded.
    assert list(args.recorded_options()) == ["base_model", "epochs", "batch_size", "lr", "weight_decay", "warmup",
                                             "seed", "max_steps", "width"]


# The order of the options in training_args.json, as the trainers wrote it before the base class.
RECORDED = {
    RetrieverTrainingArguments: "base_model shared_encoder markers pooling epochs batch_size lr weight_decay warmup "
                                "max_query_len max_passage_len hard_negatives refresh_negatives positives_per_query "
                                "seed max_steps "
                                "dev_max_queries",
    ReaderTrainingArguments: "head base_model markers epochs batch_size lr head_lr weight_decay warmup negatives "
                             "negatives_from span_weight ranking_loss max_length max_query_len doc_stride "
                             "max_span_len hidden top_spans seed max_steps max_train_queries dev_max_queries "
                             "dev_rerank_k",
    ClustererTrainingArguments: "base_model objective epochs batch_size lr head_lr weight_decay warmup margin "
                                "negatives_per_positive max_positives_per_cluster hard_negatives_k remine_negatives "
                                "scope lemma_weights mlp_hidden "
                                "mlp_out max_length seed max_steps",
}


@pytest.mark.parametrize("trainer", TRAINERS)
def test_recorded_options_keep_each_trainers_order_without_the_run_only_fields(trainer: type) -> None:
    assert list(trainer().recorded_options()) == RECORDED[trainer].split()
    assert set(trainer.options_order) <= {f.name for f in fields(trainer)}  # no misspelt name


# --- start_run and claim -----------------------------------------------------------------------------------------


@dataclass
class FakeDataset:
    root: Path
    manifest: dict[str, Any] = field(default_factory=lambda: {"checksums": {"passages.jsonl": "sha256:p"}})

    @property
    def passages_path(self) -> Path:
        return self.root / "passages.jsonl"


def started(args: TrainingArguments, out: Path, overwrite: bool = False, messages: list[str] | None = None
            ) -> Run:
    log = messages.append if messages is not None else (lambda _: None)
    run, opened = start_run(args, out, overwrite=overwrite, log=log, open_inputs=lambda: "inputs")
    assert opened == "inputs"
    return run


def test_start_run_checks_the_arguments_before_anything_else(tmp_path: Path) -> None:
    opened: list[bool] = []
    with pytest.raises(InputError, match="--epochs must be at least 1"):
        start_run(ToyArguments(epochs=0), tmp_path / "out", overwrite=False, log=None,
                  open_inputs=lambda: opened.append(True))
    assert not opened
    with pytest.raises(MissingArtefactError, match="--base-model ./nope: no such model folder"):
        start_run(ToyArguments(base_model="./nope"), tmp_path / "out", overwrite=False, log=None,
                  open_inputs=lambda: opened.append(True))
    assert not opened and not any(tmp_path.iterdir())


def test_start_run_refuses_an_existing_out_unless_overwrite(tmp_path: Path) -> None:
    import torch

    out = tmp_path / "model"
    out.mkdir()
    with pytest.raises(InputError, match="already exists .*use --overwrite to retrain it"):
        started(ToyArguments(device="cpu"), out)
    threads = torch.get_num_threads()
    try:
        run = started(ToyArguments(device="cpu", threads=1), out, overwrite=True)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert (run.out, run.device, run.overwrite) == (out, "cpu", True) and run.work.path == tmp_path / ".model.training"
    assert not run.work.exists()  # nothing is written before the claim


def test_claim_records_the_run_and_seeds(tmp_path: Path) -> None:
    args = ToyArguments(device="cpu", seed=5)
    run = started(args, tmp_path / "out")
    random.seed(0)
    run.claim(FakeDataset(tmp_path), {"extra_sha256": "sha256:e"})
    drawn = random.random()
    seed_everything(5)
    assert drawn == random.random()
    record = json.loads((run.work.path / RUN_FILE).read_text())
    assert list(record) == ["kind", "corefsearch_version", "options", "dataset", "passages_sha256", "extra_sha256",
                            "versions"]
    assert record["kind"] == "corefsearch-toy-training" and record["options"] == args.recorded_options()
    assert record["dataset"] == str(tmp_path.resolve()) and record["passages_sha256"] == "sha256:p"
    finished = run.finished_record(counts={"steps": 3})
    assert list(finished) == ["kind", "corefsearch_version", "created", *list(record)[2:], "device",
                              "precision", "checkpoint_every", "counts"]
    assert finished["precision"] == "fp32"
    assert (finished["device"], finished["checkpoint_every"], finished["counts"]) == ("cpu", 500, {"steps": 3})


def test_a_leftover_run_is_resumed_under_other_run_only_settings_and_refused_under_other_options(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    dataset = FakeDataset(tmp_path)
    first = started(RetrieverTrainingArguments(device="cpu"), out)
    first.claim(dataset, {})
    first.work.save_checkpoint({"step": 1})  # an interrupted run
    (first.work.path / ".checkpoint.pt.q1w2e3r4.tmp").write_bytes(b"half a checkpoint a killed run was writing")

    messages: list[str] = []
    same = started(RetrieverTrainingArguments(device="cpu", threads=1, log_every=1, checkpoint_every=7), out,
                   messages=messages)
    same.claim(dataset, {})
    assert same.work.has_checkpoint() and not messages  # resumed as it is
    assert sorted(p.name for p in same.work.path.iterdir()) == ["checkpoint.pt", "run.json"]  # temporary cleaned

    with pytest.raises(InputError, match=r"interrupted training run with other settings \(--lr\).*--overwrite"):
        started(RetrieverTrainingArguments(device="cpu", lr=5e-4), out).claim(dataset, {})
    with pytest.raises(InputError, match=r"other settings \(other_sha256\)"):
        started(RetrieverTrainingArguments(device="cpu"), out).claim(dataset, {"other_sha256": "x"})
    assert same.work.has_checkpoint()
    discarded = started(RetrieverTrainingArguments(device="cpu", lr=5e-4), out, overwrite=True, messages=messages)
    discarded.claim(dataset, {})
    assert not discarded.work.has_checkpoint() and any("Discarding the interrupted run" in m for m in messages)


# --- the summary, printed in one place ---------------------------------------------------------------------------


def printed(summary: TrainingSummary[Any]) -> list[str]:
    console = Console(record=True, width=200, file=io.StringIO())
    print_training_summary(summary, console)
    return [line.rstrip() for line in console.export_text().splitlines()]


def summary_of(kind: str, extras: Any, curve: list[dict[str, Any]], **changes: Any) -> TrainingSummary[Any]:
    base = TrainingSummary(kind=kind, out=Path("model"), device="cpu", steps_per_epoch=4, total_steps=8,
                           steps_run=4, train_seconds=2.0, resumed_from_step=4, best_epoch=1, extras=extras,
                           dev_curve=curve)
    return replace(base, **changes)


def test_one_printer_for_every_trainer() -> None:
    lines = printed(summary_of("retriever", RetrieverExtras(16, 48), [
        {"epoch": 0, "step": 0, "loss": None, "MRR@10": 0.1, "R@100": 0.5, "seconds": 0.0},
        {"epoch": 1, "step": 4, "loss": 1.25, "MRR@10": 0.2, "R@100": 0.75, "seconds": 3.2}]))
    assert lines[0].strip() == "Retriever model"
    assert lines[2].split() == ["┃", "epoch", "┃", "step", "┃", "loss", "┃", "MRR@10", "┃", "R@100", "┃", "seconds",
                                "┃"]
    assert [cell.strip() for cell in lines[4].split("│")[1:-1]] == ["0", "0", "–", "0.1000", "0.5000", "0"]
    assert [cell.strip() for cell in lines[5].split("│")[1:-1]] == ["1 *", "4", "1.2500", "0.2000", "0.7500", "3"]
    assert lines[-1] == ("Trained 8 steps (resumed from step 4) on 16 queries (48 examples per epoch); 0.50 s/step "
                         "on cpu. Kept epoch 1; wrote model.")

    reader = [{"epoch": 0, "step": 0, "loss": None, "MRR@10": 0.1, "MRR@10 rrf": 0.2, "retriever MRR@10": 0.25,
               "note": "untrained", "seconds": 0.0},
              {"epoch": 1, "step": 4, "loss": 2.0, "MRR@10": 0.3, "MRR@10 rrf": 0.4, "seconds": 1.0}]
    lines = printed(summary_of("reader", ReaderExtras(6, "rrf", {"reader": 0.3, "rrf": 0.4}), reader,
                               resumed_from_step=None, steps_run=0))
    assert lines[0].strip() == "Reader model" and "MRR@10 rrf" in lines[2]
    assert [cell.strip() for cell in lines[4].split("│")[1:-1]] == ["untrained", "0", "–", "0.1000", "0.2000",
                                                                    "0.2500", "0"]
    assert lines[-2:] == ["Trained 8 steps on 6 queries. Kept epoch 1; wrote model.",
                          "Fusion: rrf (dev MRR@10 0.3000 by the reader's score alone, 0.4000 fused with the run's "
                          "ranks by RRF); `search --reader` uses it unless --rerank-fusion says otherwise."]

    clusterer = [{"epoch": 0, "step": 0, "loss": None, "CoNLL F1": 0.5, "threshold": 0.3, "seconds": 0.0},
                 {"epoch": 1, "step": 4, "loss": 0.1, "CoNLL F1": 0.6, "threshold": 0.15, "seconds": 1.0}]
    lines = printed(summary_of("clusterer", ClustererExtras(8, 15, 0.15), clusterer))
    assert lines[0].strip() == "Mention encoder model" and "CoNLL F1" in lines[2] and "τ" in lines[2]
    assert [cell.strip() for cell in lines[4].split("│")[1:-1]] == ["untrained", "0", "–", "0.5000", "0.3", "0"]
    assert lines[-1] == ("Trained 8 steps (resumed from step 4) on 15 pairs of 8 mentions; 0.50 s/step on cpu. "
                         "Kept epoch 1, τ 0.15; wrote model.")
    lines = printed(summary_of("clusterer", ClustererExtras(8, 15, None), [], best_epoch=None))
    assert lines == ["Trained 8 steps (resumed from step 4) on 15 pairs of 8 mentions; 0.50 s/step on cpu. Kept the "
                     "last epoch, no τ (no dev clusters); wrote model."]
