"""The options every trainer shares: one :class:`TrainingArguments` base that each trainer's
arguments subclass (as sentence-transformers' trainers subclass its ``TrainingArguments``).

The base holds the fields of the loop and the run (epochs, batch size, learning rate, weight decay,
warm-up, seed, max steps, device, precision, threads, progress lines, checkpoints, the base model) with their
checks in :meth:`TrainingArguments.validate`, and turns them into what the loop takes
(:meth:`~TrainingArguments.loop_options`) and into the options a run is recorded by
(:meth:`~TrainingArguments.recorded_options`). A trainer's subclass adds only its own fields and
checks, overrides the defaults that differ (``epochs: int = 5``), and names its ``kind``.

Every option is checked once, here, where it enters the library; what runs afterwards (the start
of the run, the loop, the progress lines) takes it as valid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from corefsearch.base.checks import all_at_least_one, not_negative
from corefsearch.base.errors import InputError
from corefsearch.base.models import check_device
from corefsearch.base.precision import PRECISION_HELP, check_precision
from corefsearch.training.loop import LoopOptions

if TYPE_CHECKING:
    from corefsearch.base.model_card import BaseModel, CardText


@dataclass
class TrainingArguments:
    """The options of every ``corefsearch train ...`` command, with the defaults the trainers share.

    Each field's ``metadata`` holds its ``--help`` text (and, where it differs, its option name): the
    command line is generated from the fields (``corefsearch.cli.fields``)."""

    base_model: str | None = field(default=None, metadata={  # None: the bundled all-MiniLM-L6-v2
        "help": "Hugging Face model name or folder (default: the bundled all-MiniLM-L6-v2)."})
    epochs: int = field(default=3, metadata={"help": "Training epochs."})
    batch_size: int = field(default=16, metadata={"help": "What one optimizer step takes."})  # see the trainer
    lr: float = field(default=2e-5, metadata={"help": "AdamW learning rate."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    # fraction of the steps with a linearly rising learning rate, then linear decay
    warmup: float = field(default=0.1, metadata={"help": "Linear warm-up, as a fraction of the steps."})
    seed: int = field(default=13, metadata={"help": "Random seed."})
    max_steps: int | None = field(default=None, metadata={"help": "Stop after N optimizer steps in all."})
    device: str = field(default="auto", metadata={"help": "auto | cpu | cuda"})
    # auto: bf16 on a GPU that has it, fp32 on the CPU
    precision: str = field(default="auto", metadata={"help": PRECISION_HELP})
    threads: int | None = field(default=None, metadata={  # None: torch's default
        "help": "CPU threads of the model (torch.set_num_threads; default: torch's, one per core)."})
    log_every: int | None = field(default=None, metadata={  # None: 50 when stderr is not a terminal
        "help": "Log a line (step, loss, steps/s, ETA) every N steps (0: never; default: 50 when stderr is not a "
                "terminal, e.g. under nohup, where the progress bar does not show)."})
    checkpoint_every: int = field(default=500, metadata={  # 0: only at epoch ends (and on Ctrl-C)
        "help": "Also checkpoint every N steps (0: at epoch ends only)."})

    #: What the run trains (``retriever``, ``reader``, ``clusterer``): the run record's kind
    #: ``corefsearch-KIND-training`` and the summary's ``kind``.
    kind: ClassVar[str] = "model"
    #: Fields that change how a run goes, not what it computes: they are left out of the recorded
    #: options, so a run resumes under other values of them.
    run_only: ClassVar[tuple[str, ...]] = ("device", "precision", "threads", "log_every", "checkpoint_every")
    #: The order of the recorded options (``training_args.json``); fields not named follow in
    #: declaration order. The trainers name theirs to keep their model folders as they were.
    options_order: ClassVar[tuple[str, ...]] = ()

    #: Options that act only when dev scores the epochs: a card of a run without dev leaves them out.
    dev_options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def unused_options(cls, record: Mapping[str, Any]) -> set[str]:
        """The options of ``record`` (a ``training_args.json``) that took no effect, by the rules every trainer
        shares: ``max_steps`` that did not stop the run early, ``epochs`` when ``max_steps`` stopped it before
        its last epoch began, a ``warmup`` that came to no warm-up step (the loop's ``int(warmup × total
        steps)``), and ``dev_options`` without dev scores. A trainer adds its own rules. A count an older
        record lacks keeps its option listed."""
        options: Mapping[str, Any] = record.get("options") or {}
        counts: Mapping[str, Any] = record.get("counts") or {}
        unused: set[str] = set()
        steps_per_epoch, total_steps, epochs = (count(counts.get("steps_per_epoch")),
                                                count(counts.get("total_steps")), count(options.get("epochs")))
        planned = steps_per_epoch * epochs if steps_per_epoch is not None and epochs is not None else None
        max_steps = options.get("max_steps")
        if max_steps is None or (planned is not None and max_steps >= planned):  # the loop stops early only below
            unused.add("max_steps")
        if steps_per_epoch is not None and epochs is not None and total_steps is not None \
                and total_steps <= steps_per_epoch * (epochs - 1):
            unused.add("epochs")  # max_steps stopped the run before its last epoch began
        warmup = options.get("warmup")
        if isinstance(warmup, (int, float)) and warmup > 0 and total_steps is not None \
                and int(warmup * total_steps) == 0:
            unused.add("warmup")
        if not scored_on_dev(record):
            unused |= set(cls.dev_options)
        return unused

    @classmethod
    def options_in_effect(cls, record: Mapping[str, Any]) -> dict[str, Any]:
        """The options of ``record`` that took effect, by name (what its model card lists)."""
        unused = cls.unused_options(record)
        return {name: value for name, value in sorted((record.get("options") or {}).items()) if name not in unused}

    @classmethod
    def card_text(cls, record: Mapping[str, Any], base: BaseModel, folder_name: str) -> CardText:
        """What the model card says of this kind of model (``corefsearch.base.model_card``)."""
        raise NotImplementedError(f"{cls.__name__} writes no model card")

    def validate(self) -> None:
        """Refuse any invalid option with one line naming it; a subclass adds its own checks after
        ``super().validate()``."""
        all_at_least_one({"--epochs": self.epochs, "--batch-size": self.batch_size, "--max-steps": self.max_steps,
                          "--threads": self.threads})
        rates = self.learning_rates()
        if not all(rate > 0 for rate in rates.values()):  # also refuses NaN
            raise InputError(f"{' and '.join(rates)} must be positive, got {' and '.join(map(str, rates.values()))}")
        not_negative({"--weight-decay": self.weight_decay, "--checkpoint-every": self.checkpoint_every,
                      "--log-every": self.log_every})
        if not 0 <= self.warmup < 1:
            raise InputError(f"--warmup is a fraction of the steps in [0, 1), got {self.warmup}")

        check_device(self.device)
        check_precision(self.precision)

    def learning_rates(self) -> dict[str, float]:
        """The learning rates by option (a trainer with a head adds ``--head-lr``)."""
        return {"--lr": self.lr}

    def loop_options(self, overwrite: bool = False) -> LoopOptions:
        """How the training loop runs these arguments (``overwrite``: replace an existing ``OUT``)."""
        return LoopOptions(epochs=self.epochs, weight_decay=self.weight_decay, warmup=self.warmup,
                           max_steps=self.max_steps, checkpoint_every=self.checkpoint_every,
                           log_every=self.log_every, overwrite=overwrite)

    def recorded_options(self) -> dict[str, Any]:
        """The options that identify the run (all but ``run_only``), in ``options_order``."""
        options = {name: value for name, value in asdict(self).items() if name not in self.run_only}
        named = [name for name in self.options_order if name in options]
        return {name: options[name] for name in [*named, *(name for name in options if name not in named)]}


def override(name: str, default: Any, **metadata: Any) -> Any:
    """A subclass's field ``name`` with another default (and, given, other metadata such as its help),
    the base field's metadata kept: ``epochs: int = override("epochs", 5)``."""
    return field(default=default, metadata={**TrainingArguments.__dataclass_fields__[name].metadata, **metadata})


def count(value: Any) -> int | None:
    """``value`` when it is a count (an int, not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def unreached(limit: Any, used: Any) -> bool:
    """A limit (None: no limit) that ``used``, what the run used under it, never reached."""
    return limit is None or (count(used) is not None and used < limit)


def scored_on_dev(record: Mapping[str, Any]) -> bool:
    """Whether dev scored the epochs of a run (the trainers record a selection metric only then)."""
    return record.get("selection_metric") is not None


# --- the checks the trainers' arguments share (counts: ``corefsearch.base.checks``) ---------------------------


def positive(options: Mapping[str, float]) -> None:
    """``{option: value}``: each value > 0 (NaN refused)."""
    for option, value in options.items():
        if not value > 0:
            raise InputError(f"{option} must be positive, got {value}")


def one_of(option: str, value: str, choices: Sequence[str], why: str = "") -> None:
    """``value`` is one of ``choices``; ``why`` (e.g. `` (what it picks)``) follows the choices in the message."""
    if value not in choices:
        raise InputError(f"{option} must be one of {', '.join(choices)}{why}, got {value!r}")


def finite_positive(option: str, value: float) -> None:
    """``0 < value < inf`` (NaN refused)."""
    if not 0 < value < math.inf:
        raise InputError(f"{option} must be a positive number, got {value}")
