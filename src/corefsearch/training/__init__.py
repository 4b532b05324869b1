"""Training: one loop for every trainer (``loop``), the task interface it drives (``task``), the
options every trainer shares (``arguments``: the :class:`TrainingArguments` base and the checks of
their values), the start of every run and its summary (``run``: ``start_run``, :class:`TrainingSummary`),
the pieces every run shares (``common``), and the working folder of a retriever run that makes it
resumable (``checkpoint``). See ``task`` and ``run`` for how a trainer plugs in.

The names other modules import are re-exported here (``from corefsearch.training import adamw``).
Importing this package stays cheap: torch is imported only when a function needs it.
"""

from corefsearch.training.arguments import (
    TrainingArguments,
    all_at_least_one,
    finite_positive,
    not_negative,
    one_of,
    positive,
)
from corefsearch.training.common import (
    DEFAULT_LOG_EVERY,
    Log,
    StepBoundary,
    TrainingProgress,
    adamw,
    claim_work_dir,
    default_log,
    differences,
    epoch_rng,
    resolve_log_every,
    seed_everything,
    set_threads,
    stderr_is_terminal,
)
from corefsearch.training.loop import DEV_CURVE_FILE, LoopOptions, LoopResult, train_loop
from corefsearch.training.run import TRAINING_ARGS_FILE, Run, TrainingSummary, run_record, start_run
from corefsearch.training.task import TrainingTask

__all__ = [
    "DEFAULT_LOG_EVERY",
    "DEV_CURVE_FILE",
    "Log",
    "LoopOptions",
    "LoopResult",
    "TRAINING_ARGS_FILE",
    "Run",
    "StepBoundary",
    "TrainingArguments",
    "TrainingProgress",
    "TrainingSummary",
    "TrainingTask",
    "adamw",
    "all_at_least_one",
    "claim_work_dir",
    "default_log",
    "differences",
    "epoch_rng",
    "finite_positive",
    "not_negative",
    "one_of",
    "positive",
    "resolve_log_every",
    "run_record",
    "seed_everything",
    "set_threads",
    "start_run",
    "stderr_is_terminal",
    "train_loop",
]
