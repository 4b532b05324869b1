"""What a trainer hands the training loop (``loop.py``): a :class:`TrainingTask`.

The loop owns everything about *running* a training: the epochs and optimizer steps, AdamW with
linear warm-up and decay, gradient clipping, the progress bar and progress lines, checkpoints
(every ``checkpoint_every`` steps, at every epoch's end and on Ctrl-C, always of the last
completed step: see :class:`~corefsearch.training.common.StepBoundary`), resuming from them,
the dev evaluation after each epoch, keeping the best epoch's weights, the dev curve, and the
atomic writing of ``OUT``. A task says only *what* is trained:

===========================  ===========================================================================
``steps_per_epoch``          optimizer steps in one epoch (the same for every epoch)
``parameter_groups()``       ``[(module, learning rate), ...]``: what AdamW updates, in a fixed order
                             (also the modules the loop clips and puts in train mode)
``epoch_batches(epoch)``     the epoch's batches (1-based epoch), a function of the seed and the epoch
                             only: a resumed run regenerates them and skips those already done
``loss(batch)``              the batch's loss (a scalar tensor with a graph); or override
``backward(batch)``          to run the backward passes itself (gradient accumulation), returning the
                             step's loss as a float
``has_dev``                  whether there is a dev set; without one every epoch is "the best", so the
                             last epoch's weights are kept
``selection_metric``         the key of ``dev_metrics()`` that picks the epoch (higher is better
                             unless ``greater_is_better`` is False)
``dev_metrics()``            ``{name: value}`` on the dev set (called only when ``has_dev``); may switch
                             the modules to eval mode, the loop switches them back
``baseline()``               the dev curve's epoch-0 entry: the dev metrics of the starting weights
                             (default: ``dev_metrics()`` before training), which the loop keeps when no
                             epoch beats them; a task may add a note or a reference; None: no epoch 0
``weights()``                the trainable state as ``{key: tensors}`` (kept in ``checkpoint.pt``
                             beside the optimizer, scheduler, RNG states and progress, and in
                             ``best.pt``); ``load_weights(saved)`` restores it from either file
``save(folder, result)``     write the finished model (the best epoch's weights are loaded) and its
                             records into ``folder``; the loop adds ``dev_curve.json`` and renames
                             ``folder`` to ``OUT``
===========================  ===========================================================================

The trainer function does what comes before the loop, through ``run.py``: its arguments subclass
:class:`~corefsearch.training.arguments.TrainingArguments` (the shared options and their checks);
``start_run`` checks them, sets the threads, opens the inputs, refuses an existing ``OUT`` and
resolves the device; the trainer reads its data; ``Run.claim`` claims the working folder (a rerun
with other options is refused, one with the same options resumes) and seeds; the trainer builds the
model and its task; ``Run.train(task)`` runs the loop and ``Run.summary`` turns the returned
:class:`LoopResult` into the :class:`~corefsearch.training.run.TrainingSummary` the CLI prints.
The tasks of today: ``dense/train.py`` (the retriever: in-batch NLL, dev MRR@10 of exact search),
``reader/train.py`` (the readers: span + selection cross-entropy accumulated query by query, dev
MRR@10 of re-ranking) and ``cluster/train.py`` (the contrastive mention encoder: its
``epoch_batches`` shuffles the mention pairs with a generator seeded by seed and epoch,
``dev_metrics`` clusters the dev mentions and returns ``{"CoNLL F1": ...}``); checkpoints, Ctrl-C,
resume and the choice of the best epoch behave the same for all three.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from corefsearch.training.loop import LoopResult


class TrainingTask(ABC):
    """What is trained (see the module docstring); ``train_loop`` runs it."""

    #: Optimizer steps per epoch.
    steps_per_epoch: int
    #: The ``dev_metrics()`` key that picks the best epoch.
    selection_metric: str = "score"
    greater_is_better: bool = True
    #: Set by the loop for fp16 training (``GradScaler.scale``); a task that overrides
    #: :meth:`backward` back-propagates ``self.scaled(loss)``.
    loss_scale: Callable[[torch.Tensor], torch.Tensor] | None = None

    @property
    @abstractmethod
    def has_dev(self) -> bool:
        """Whether there is a dev set (without one the last epoch is kept)."""

    @abstractmethod
    def parameter_groups(self) -> list[tuple[torch.nn.Module, float]]:
        """``(module, learning rate)`` pairs for AdamW, in a fixed order."""

    @abstractmethod
    def epoch_batches(self, epoch: int) -> Sequence[Any]:
        """The batches of ``epoch`` (1-based): the same for the same seed and epoch."""

    @abstractmethod
    def loss(self, batch: Any) -> torch.Tensor:
        """The loss of one batch."""

    def backward(self, batch: Any) -> float:
        """Back-propagate one batch's loss (the gradients were zeroed); return the loss."""
        loss = self.loss(batch)
        self.scaled(loss).backward()
        return float(loss.detach())

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` as it is back-propagated: scaled for fp16 training (``loss_scale``), else as it is."""
        return loss if self.loss_scale is None else self.loss_scale(loss)

    def dev_metrics(self) -> dict[str, float]:
        """The dev metrics of the model as it is now (only called when ``has_dev``)."""
        raise TypeError(f"{type(self).__name__} has a dev set (has_dev) but does not define dev_metrics()")

    def baseline(self) -> dict[str, Any] | None:
        """The dev curve's epoch-0 entry beyond epoch/step/loss/seconds: the starting weights' dev metrics (the
        loop keeps those weights when no epoch beats their ``selection_metric``), or None for no epoch 0."""
        return self.dev_metrics()

    @abstractmethod
    def weights(self) -> dict[str, Any]:
        """The trainable state (CPU tensors under the task's own keys)."""

    @abstractmethod
    def load_weights(self, saved: dict[str, Any]) -> None:
        """Restore what ``weights()`` returned (``saved`` may hold other keys too)."""

    @abstractmethod
    def save(self, folder: Path, result: LoopResult) -> None:
        """Write the trained model and its records into ``folder`` (it becomes ``OUT``)."""
