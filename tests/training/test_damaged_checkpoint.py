"""A damaged or tampered file in the working folder of an interrupted training run (``.OUT.training/``):
resuming it is a one-line error that names the file and says what to do (delete the folder, or
rerun with ``--overwrite``, which discards it and starts again), never a traceback.

The run is `corefsearch train retriever` on the tiny news corpus with a tiny random BERT
(the tiny_base and tiny_dataset fixtures of tests/conftest.py), stopped by a Ctrl-C in its eighth
step (epoch 2): its folder holds
``run.json``, ``checkpoint.pt`` (weights, optimizer, scheduler, random states, progress) and
``best.pt``. Each test damages a copy of that folder and reruns the same command.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import retriever_args
from typer.testing import CliRunner

from corefsearch.cli import app
from corefsearch.training.checkpoint import UnusableWorkFile, WorkDir, work_dir_for

torch = pytest.importorskip("torch")

runner = CliRunner()

TRAIN_OPTIONS = ["--pooling", "mean", "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--warmup", "0",
                 "--max-query-len", "24", "--max-passage-len", "32", "--hard-negatives", "0", "--seed", "7",
                 "--device", "cpu", "--dev-max-queries", "3", "--checkpoint-every", "0", "--threads", "1"]
REMEDY = "cannot be resumed: delete that folder to start the run again, or rerun with --overwrite to discard it"


def train(dataset: Path, base: Path, out: Path, *extra: str) -> Any:
    return runner.invoke(app, ["train", "retriever", str(dataset), "--out", str(out), "--base-model", str(base),
                               *TRAIN_OPTIONS, *extra])


class CtrlC:
    """Wraps the in-batch loss; its ``at``-th call raises KeyboardInterrupt, as Ctrl-C would."""

    def __init__(self, func: Any, at: int) -> None:
        self.func, self.at, self.calls = func, at, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return self.func(*args, **kwargs)


@pytest.fixture(scope="module")
def interrupted(tiny_base: Path, tiny_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working folder of a run interrupted in its eighth step (12 in all, 6 an epoch)."""
    import corefsearch.dense.loss as dense_loss

    out = tmp_path_factory.mktemp("interrupted") / "model"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dense_loss, "in_batch_nll", CtrlC(dense_loss.in_batch_nll, 8))
        result = train(tiny_dataset, tiny_base, out)
    assert result.exit_code == 130, result.output
    work = work_dir_for(out)
    assert {p.name for p in work.iterdir()} == {"run.json", "checkpoint.pt", "best.pt"}
    return work


@pytest.fixture
def resumable(interrupted: Path, tmp_path: Path) -> Path:
    """``OUT`` of a copy of the interrupted run (its working folder beside it)."""
    out = tmp_path / "model"
    shutil.copytree(interrupted, work_dir_for(out))
    return out


def one_error_line(result: Any) -> str:
    """The command failed with exit 1 and said why in one line, without a traceback."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def edited_checkpoint(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """A damage: ``checkpoint.pt`` loaded, changed by ``edit`` and saved again (a well-formed file
    whose content does not fit the run)."""

    def damage(path: Path) -> None:
        state = torch.load(path, weights_only=True)
        edit(state)
        torch.save(state, path)

    return damage


class UnsafeGlobal:
    """Pickles as a call of ``os.system``: what the safe loader must refuse without running it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def first_parameter_state(state: dict[str, Any]) -> dict[str, Any]:
    return state["optimizer"]["state"][next(iter(state["optimizer"]["state"]))]


def first_weight_name(state: dict[str, Any]) -> str:
    return next(iter(state["models"][0]))


DAMAGES: dict[str, tuple[str, Callable[[Path], None], str]] = {
    # name: (file, damage, what the message says about it)
    # Seeded bytes, not os.urandom: random bytes now and then unpickle far enough to fail otherwise.
    "garbage": ("checkpoint.pt", lambda path: path.write_bytes(random.Random(7).randbytes(4096)),
                "not a checkpoint of this training (refused by torch's safe loader"),
    "truncated": ("checkpoint.pt", lambda path: path.write_bytes(path.read_bytes()[:path.stat().st_size // 2]),
                  "not a checkpoint of this training (RuntimeError: PytorchStreamReader failed reading zip archive"),
    "empty": ("checkpoint.pt", lambda path: path.write_bytes(b""),
              "the file ends too early: truncated or empty"),
    "not-a-mapping": ("checkpoint.pt", lambda path: torch.save([1, 2, 3], path), "it holds a list"),
    "without-optimizer": ("checkpoint.pt", edited_checkpoint(lambda state: state.pop("optimizer")), "no optimizer"),
    "weights-of-another-shape": (
        "checkpoint.pt", edited_checkpoint(lambda state: state["models"][0].update(
            {first_weight_name(state): torch.zeros(3, 3)})),
        "the weights do not fit this run's model (models[0]."),
    "optimizer-state-of-another-shape": (
        "checkpoint.pt", edited_checkpoint(lambda state: first_parameter_state(state).update(exp_avg=torch.zeros(5))),
        "does not fit this run (optimizer: parameter 0: exp_avg is a tensor of shape (5,)"),
    "scheduler-counter-not-a-number": (
        "checkpoint.pt", edited_checkpoint(lambda state: state["scheduler"].update(last_epoch="seven")),
        "does not fit this run (scheduler: last_epoch is 'seven', not a whole number)"),
    "random-state-cut-short": (
        "checkpoint.pt", edited_checkpoint(lambda state: state["rng"].update(torch=torch.zeros(3, dtype=torch.uint8))),
        "does not fit this run (random generators' states:"),
    "progress-beyond-the-run": (
        "checkpoint.pt", edited_checkpoint(lambda state: state["progress"].update(global_step=500)),
        "does not fit this run (progress: epoch 2, step 500 lie outside this run (2 epoch(s) of 6 steps, 12 in all))"),
    "best-weights-garbage": ("best.pt", lambda path: path.write_bytes(b"PK\x03\x04" + random.Random(8).randbytes(100)),
                             "not a checkpoint of this training"),
    "run-record-not-utf8": ("run.json", lambda path: path.write_bytes(b"\xff\xfe{\x00"), "not JSON ("),
    "run-record-not-an-object": ("run.json", lambda path: path.write_text("[1, 2]\n"),
                                 "not a run record (it holds a list)"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_file_of_an_interrupted_run_is_a_one_line_error_saying_what_to_do(
        damage: str, resumable: Path, tiny_base: Path, tiny_dataset: Path) -> None:
    name, make_damage, why = DAMAGES[damage]
    work = work_dir_for(resumable)
    make_damage(work / name)
    message = one_error_line(train(tiny_dataset, tiny_base, resumable))
    assert message.startswith(f"error: {work / name}: "), message
    assert why in message and message.endswith(f"the interrupted run in {work} {REMEDY}"), message
    assert not resumable.exists() and (work / name).exists()  # nothing discarded without --overwrite


def test_an_unsafe_pickle_in_the_checkpoint_is_refused_unrun(resumable: Path, tiny_base: Path, tiny_dataset: Path,
                                                              tmp_path: Path) -> None:
    marker = tmp_path / "the-pickle-ran"
    checkpoint = work_dir_for(resumable) / "checkpoint.pt"
    torch.save({"models": UnsafeGlobal(marker)}, checkpoint)
    message = one_error_line(train(tiny_dataset, tiny_base, resumable))
    assert message.startswith(f"error: {checkpoint}: not a checkpoint of this training (refused by torch's safe "
                              "loader: "), message
    assert "system" in message and REMEDY in message
    assert not marker.exists()


def test_overwrite_discards_a_damaged_checkpoint_and_trains_from_the_beginning(
        resumable: Path, tiny_base: Path, tiny_dataset: Path) -> None:
    work = work_dir_for(resumable)
    (work / "checkpoint.pt").write_bytes(random.Random(7).randbytes(4096))
    result = train(tiny_dataset, tiny_base, resumable, "--overwrite")
    assert result.exit_code == 0, result.output
    assert f"Discarding the checkpoint of the interrupted run in {work}" in result.stderr
    assert "Resuming" not in result.stderr and "step 12/12" in result.stderr
    assert (resumable / "dev_curve.json").exists() and not work.exists()


def test_overwrite_discards_a_run_whose_record_is_damaged(resumable: Path, tiny_base: Path,
                                                          tiny_dataset: Path) -> None:
    work = work_dir_for(resumable)
    (work / "run.json").write_text("{\"kind\": ")
    result = train(tiny_dataset, tiny_base, resumable, "--overwrite", "--max-steps", "2")
    assert result.exit_code == 0, result.output
    assert f"Discarding the interrupted run in {work} ({work / 'run.json'}: not JSON (" in result.stderr
    assert "Resuming" not in result.stderr and resumable.exists()


def test_the_undamaged_copy_resumes(resumable: Path, tiny_base: Path, tiny_dataset: Path) -> None:
    result = train(tiny_dataset, tiny_base, resumable)
    assert result.exit_code == 0, result.output
    assert "Resuming the interrupted run" in result.stderr and "from step 7 of 12" in result.stderr


@pytest.mark.parametrize("content", [b"\xff\xfe not UTF-8", b"{\"q1\": 5}", b"[\"p1\"]"])
def test_damaged_hard_negatives_are_mined_again(tmp_path: Path, content: bytes,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import corefsearch.dense.train as dense_train
    from corefsearch.dense.train import _hard_negative_candidates

    work = WorkDir(tmp_path / "model")
    work.create()
    (work.path / "hard_negatives.json").write_bytes(content)
    monkeypatch.setattr(dense_train, "mine_in_child", lambda *args: {"q1": ["p7", "p9"]})
    messages: list[str] = []
    args = retriever_args(tmp_path, hard_negatives=2)
    mined = _hard_negative_candidates(work, [], {}, args, tmp_path / "index", messages.append)
    assert mined == {"q1": ["p7", "p9"]} == work.read_json("hard_negatives.json")
    assert len(messages) == 1 and messages[0].startswith(f"{work.path / 'hard_negatives.json'}: ")
    assert messages[0].endswith("; mining the hard negatives again.")


def test_read_json_names_a_damaged_file(tmp_path: Path) -> None:
    work = WorkDir(tmp_path / "model")
    work.create()
    (work.path / "run.json").write_text("{")
    with pytest.raises(UnusableWorkFile, match=r"run\.json: not JSON \(Expecting property name"):
        work.read_json("run.json")
    assert work.read_json("absent.json") is None
