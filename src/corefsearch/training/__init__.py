"""Training: one loop for every trainer (``loop.py``), the task interface it drives (``task.py``),
and the pieces every run shares (``common.py``). See ``task.py`` for how a trainer plugs in.

The names other modules import are re-exported here (``from corefsearch.training import adamw``).
Importing this package stays cheap: torch is imported only when a function needs it.
"""

from corefsearch.training.common import (
    DEFAULT_LOG_EVERY,
    Log,
    StepBoundary,
    TrainingProgress,
    adamw,
    claim_work_dir,
    default_log,
    differences,
    resolve_log_every,
    seed_everything,
    set_threads,
    stderr_is_terminal,
)
from corefsearch.training.loop import DEV_CURVE_FILE, LoopOptions, LoopResult, train_loop
from corefsearch.training.task import TrainingTask

__all__ = [
    "DEFAULT_LOG_EVERY",
    "DEV_CURVE_FILE",
    "Log",
    "LoopOptions",
    "LoopResult",
    "StepBoundary",
    "TrainingProgress",
    "TrainingTask",
    "adamw",
    "claim_work_dir",
    "default_log",
    "differences",
    "resolve_log_every",
    "seed_everything",
    "set_threads",
    "stderr_is_terminal",
    "train_loop",
]
