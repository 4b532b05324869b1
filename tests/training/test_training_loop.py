"""The training loop's contract (``corefsearch.training.loop``), on a toy task: a small regression
network with dropout on random data. The best epoch by the dev metric is kept, a run interrupted
(between steps or in the middle of one) and resumed ends with the weights of an uninterrupted
one, and without a dev set the last epoch is kept."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from corefsearch.training import LoopOptions, LoopResult, TrainingTask, claim_work_dir, seed_everything, train_loop
from corefsearch.training.checkpoint import work_dir_for
from corefsearch.training.common import Log

torch = pytest.importorskip("torch")

N_TRAIN, N_DEV, FEATURES, BATCH = 40, 16, 4, 8  # 5 steps an epoch


def toy_data(seed: int = 7) -> tuple[Any, Any, Any, Any]:
    generator = torch.Generator().manual_seed(seed)
    weights = torch.randn(FEATURES, 1, generator=generator)
    x = torch.randn(N_TRAIN + N_DEV, FEATURES, generator=generator)
    y = x @ weights + 0.1 * torch.randn(N_TRAIN + N_DEV, 1, generator=generator)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


class Interrupted(KeyboardInterrupt):
    pass


class Regression(TrainingTask):
    """Mean squared error of a two-layer network with dropout (so that a resumed run must restore
    the random generators to draw the same masks). ``scores`` scripts the dev metric per epoch
    (epoch 0: the baseline); without it the dev metric is the negative dev MSE."""

    selection_metric = "score"

    def __init__(self, *, dev: bool = True, scores: list[float] | None = None, seed: int = 13,
                 interrupt_at_loss: int | None = None, greater_is_better: bool = True) -> None:
        seed_everything(seed)
        self.model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
        self.x, self.y, self.dev_x, self.dev_y = toy_data()
        self.dev, self.scores, self.seed = dev, scores, seed
        self.interrupt_at_loss, self.loss_calls = interrupt_at_loss, 0
        self.greater_is_better = greater_is_better
        self.steps_per_epoch = N_TRAIN // BATCH
        self.snapshots: dict[int, dict[str, Any]] = {}  # epoch -> the weights its dev metric scored
        self.evaluations = 0
        self.saved_result: LoopResult | None = None

    @property
    def has_dev(self) -> bool:
        return self.dev

    def parameter_groups(self) -> list[tuple[Any, float]]:
        return [(self.model, 0.05)]

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        order = list(range(N_TRAIN))
        random.Random(self.seed * 1_000 + epoch).shuffle(order)
        return [order[i:i + BATCH] for i in range(0, N_TRAIN, BATCH)]

    def loss(self, batch: list[int]) -> Any:
        loss = torch.nn.functional.mse_loss(self.model(self.x[batch]), self.y[batch])
        self.loss_calls += 1
        if self.loss_calls == self.interrupt_at_loss:  # after the forward pass: the dropout masks are drawn
            raise Interrupted
        return loss

    def _score(self, epoch: int) -> dict[str, float]:
        self.snapshots[epoch] = weights_of(self.model)
        if self.scores is not None:
            return {"score": self.scores[epoch], "other": -1.0}
        self.model.eval()
        with torch.no_grad():
            mse = torch.nn.functional.mse_loss(self.model(self.dev_x), self.dev_y)
        return {"score": -round(float(mse), 6), "other": -1.0}

    def baseline(self) -> dict[str, Any] | None:
        return self._score(0)

    def dev_metrics(self) -> dict[str, float]:
        self.evaluations += 1
        return self._score(len(self.snapshots))

    def weights(self) -> dict[str, Any]:
        return {"toy": weights_of(self.model)}

    def load_weights(self, saved: dict[str, Any]) -> None:
        self.model.load_state_dict(saved["toy"])

    def save(self, folder: Path, result: LoopResult) -> None:
        self.saved_result = result
        torch.save(weights_of(self.model), folder / "model.pt")
        (folder / "record.json").write_text(json.dumps({"best_epoch": result.best_epoch}))


def weights_of(model: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def saved_weights(out: Path) -> dict[str, Any]:
    return torch.load(out / "model.pt", weights_only=True)


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def run(task: Regression, out: Path, *, epochs: int = 3, log: Log | None = None,
        on_step: Callable[[int, float], None] | None = None, **options: Any) -> LoopResult:
    work_log = log or (lambda _: None)
    from corefsearch.training.checkpoint import WorkDir

    work = WorkDir(out)
    claim_work_dir(work, {"kind": "toy", "options": {"epochs": epochs, **options}}, False, work_log)
    return train_loop(task, work, out, LoopOptions(epochs=epochs, warmup=0.2, log_every=0, **options),
                      log=work_log, on_step=on_step)


def curve(result_or_out: LoopResult | Path) -> list[dict[str, Any]]:
    entries = (json.loads((result_or_out / "dev_curve.json").read_text()) if isinstance(result_or_out, Path)
               else result_or_out.dev_curve)
    return [{k: v for k, v in entry.items() if k != "seconds"} for entry in entries]


def test_the_epoch_with_the_best_dev_metric_is_kept(tmp_path: Path) -> None:
    messages: list[str] = []
    task = Regression(scores=[0.1, 0.3, 0.9, 0.5])
    result = run(task, tmp_path / "out", log=messages.append)
    assert result.best_epoch == 2 and result.best_score == 0.9
    assert result.total_steps == 15 and result.steps_run == 15 and result.resumed_from_step is None
    # The kept weights are those scored at epoch 2, not the last epoch's.
    assert_same(saved_weights(tmp_path / "out"), task.snapshots[2])
    assert any(not torch.equal(task.snapshots[2][k], task.snapshots[3][k]) for k in task.snapshots[2])
    written = json.loads((tmp_path / "out" / "dev_curve.json").read_text())
    assert [e["epoch"] for e in written] == [0, 1, 2, 3]
    assert [e["score"] for e in written] == [0.1, 0.3, 0.9, 0.5]
    assert [e["step"] for e in written] == [0, 5, 10, 15]
    assert written[0]["loss"] is None and all(e["loss"] > 0 for e in written[1:])
    assert json.loads((tmp_path / "out" / "record.json").read_text()) == {"best_epoch": 2}
    assert "Epoch 2: loss " in messages[1] and messages[1].endswith(", dev score 0.9000, other -1.0000 (best so far).")
    assert not messages[2].endswith("(best so far).")
    assert not work_dir_for(tmp_path / "out").exists()


def test_the_starting_weights_are_kept_when_no_epoch_beats_them(tmp_path: Path) -> None:
    messages: list[str] = []
    task = Regression(scores=[0.6, 0.3, 0.6, 0.5])  # epoch 2 only ties the starting point
    result = run(task, tmp_path / "out", log=messages.append)
    assert result.best_epoch == 0 and result.best_score == 0.6
    assert_same(saved_weights(tmp_path / "out"), task.snapshots[0])
    assert json.loads((tmp_path / "out" / "record.json").read_text()) == {"best_epoch": 0}
    assert not any(m.endswith("(best so far).") for m in messages)
    assert "No epoch beat the starting point's dev score (0.6000): the starting weights are kept." in messages
    # A run interrupted in epoch 2 and resumed keeps them as well.
    interrupted = Regression(scores=[0.6, 0.3, 0.6, 0.5], interrupt_at_loss=8)
    with pytest.raises(Interrupted):
        run(interrupted, tmp_path / "resumed")
    resumed = Regression(scores=[0.6, 0.3, 0.6, 0.5])
    resumed.snapshots = {0: interrupted.snapshots[0], 1: interrupted.snapshots[1]}
    assert run(resumed, tmp_path / "resumed").best_epoch == 0
    assert_same(saved_weights(tmp_path / "resumed"), task.snapshots[0])


def test_a_smaller_is_better_metric_keeps_the_smallest(tmp_path: Path) -> None:
    task = Regression(scores=[0.1, 0.3, 0.05, 0.5], greater_is_better=False)
    assert run(task, tmp_path / "out").best_epoch == 2
    assert_same(saved_weights(tmp_path / "out"), task.snapshots[2])


def test_the_dev_metric_really_tracks_training(tmp_path: Path) -> None:
    """With the real dev metric (negative MSE) training improves on the untrained model."""
    task = Regression()
    result = run(task, tmp_path / "out", epochs=4)
    scores = [e["score"] for e in result.dev_curve]
    assert max(scores[1:]) > scores[0]
    assert result.dev_curve[result.best_epoch]["score"] == max(scores[1:])


@pytest.mark.parametrize(("checkpoint_every", "how", "resumed_from"),
                         [(0, "ctrl-c", 7), (3, "ctrl-c", 7), (0, "ctrl-c mid-step", 6), (4, "ctrl-c mid-step", 6),
                          (3, "crash", 6)])
def test_a_resumed_run_ends_like_an_uninterrupted_one(tmp_path: Path, checkpoint_every: int, how: str,
                                                      resumed_from: int) -> None:
    """The loop's resume contract, which every trainer inherits (each has one test of its own that
    it holds for it). Ctrl-C right after step 7 checkpoints step 7; Ctrl-C in the middle of step 7
    (after its forward pass) checkpoints step 6, the last completed one; a crash (any other error)
    after step 7 leaves the last checkpoint written before it (step 6, by ``checkpoint_every`` 3).
    Rerun, the run ends after the same 15 steps with the same weights and dev curve."""
    whole = Regression()
    run(whole, tmp_path / "whole", checkpoint_every=checkpoint_every)

    out = tmp_path / "resumed"
    work = work_dir_for(out)
    if how == "ctrl-c mid-step":
        with pytest.raises(Interrupted):
            run(Regression(interrupt_at_loss=7), out, checkpoint_every=checkpoint_every)
    else:
        error = Interrupted if how == "ctrl-c" else RuntimeError

        def interrupt(step: int, _loss: float) -> None:
            if step == 7:
                raise error

        with pytest.raises(error):
            run(Regression(), out, checkpoint_every=checkpoint_every, on_step=interrupt)
    assert (work / "checkpoint.pt").exists() and not out.exists()

    messages: list[str] = []
    resumed = Regression()  # a fresh process: other initial weights are overwritten by the checkpoint's
    result = run(resumed, out, checkpoint_every=checkpoint_every, log=messages.append)
    assert result.resumed_from_step == resumed_from and result.steps_run == 15 - resumed_from
    assert any(m.startswith(f"Resuming the interrupted run in {work} from step {resumed_from} of 15") for m in messages)
    assert_same(saved_weights(out), saved_weights(tmp_path / "whole"))
    assert curve(out) == curve(tmp_path / "whole")
    assert not work.exists()


def test_without_a_dev_set_the_last_epoch_is_kept(tmp_path: Path) -> None:
    messages: list[str] = []
    task = Regression(dev=False)
    initial = weights_of(task.model)
    result = run(task, tmp_path / "out", log=messages.append)
    assert result.best_epoch == 3 and result.best_score is None and task.evaluations == 0
    # No epoch 0, no metric: the curve holds the training loss only.
    assert [sorted(e) for e in result.dev_curve] == [["epoch", "loss", "seconds", "step"]] * 3
    assert_same(saved_weights(tmp_path / "out"), weights_of(task.model))
    assert any(not torch.equal(initial[k], task.model.state_dict()[k]) for k in initial)
    assert [m.split(":")[0] for m in messages] == ["Epoch 1", "Epoch 2", "Epoch 3"]
    assert all("dev" not in m and "best" not in m for m in messages)

    # The same run with a dev set whose best epoch is the first ends with other weights.
    first_best = Regression(scores=[0.0, 1.0, 0.5, 0.2])
    run(first_best, tmp_path / "dev")
    assert any(not torch.equal(saved_weights(tmp_path / "dev")[k], saved_weights(tmp_path / "out")[k])
               for k in initial)


def test_max_steps_stops_inside_an_epoch_and_scores_it(tmp_path: Path) -> None:
    messages: list[str] = []
    task = Regression(scores=[0.1, 0.2, 0.3, 0.4])
    result = run(task, tmp_path / "out", log=messages.append, max_steps=7)
    assert result.total_steps == 7 and result.steps_run == 7
    assert [(e["epoch"], e["step"]) for e in result.dev_curve] == [(0, 0), (1, 5), (2, 7)]
    assert result.best_epoch == 2
    assert messages[0] == "--max-steps 7: training stops after 7 of 15 steps (5 per epoch)."
