"""Typer options from dataclass fields (``corefsearch.cli.fields``): each ``train`` command offers the
fields of its arguments dataclass, with their names, defaults and help; a flag shows no type in ``--help``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest
import typer
from typer.testing import CliRunner

from corefsearch.cli import app
from corefsearch.cli.fields import option_fields, options_from
from corefsearch.cluster.arguments import ClustererTrainingArguments
from corefsearch.dense.arguments import RetrieverTrainingArguments
from corefsearch.detect.arguments import DetectorTrainingArguments
from corefsearch.reader.arguments import ReaderTrainingArguments

runner = CliRunner(env={"COLUMNS": "250"})
COMMANDS = {"retriever": RetrieverTrainingArguments, "reader": ReaderTrainingArguments,
            "clusterer": ClustererTrainingArguments, "detector": DetectorTrainingArguments}
# The options of each command that are no training argument (written by hand in cli/train.py).
OWN = {"retriever": {"dataset", "out", "index", "overwrite"}, "reader": {"dataset", "run", "out", "overwrite"},
       "clusterer": {"dataset", "out", "overwrite"}, "detector": {"dataset", "out", "overwrite"}}


def click_command(*path: str) -> Any:
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return command


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_train_command_offers_the_fields_of_its_arguments(name: str) -> None:
    cls = COMMANDS[name]
    params = {p.name: p for p in click_command("train", name).params}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    offered = {n for n, f in fields.items() if f.metadata.get("cli", True) is not False}
    assert set(params) - OWN[name] == offered
    for option in offered:
        f, param = fields[option], params[option]
        assert param.default == f.default, option
        assert param.help == f.metadata["help"], option
        declared = f.metadata.get("option")
        assert param.opts == ([declared] if declared else ["--" + option.replace("_", "-")]), option
    assert cls().validate() is None  # the defaults the command line passes are valid


def test_a_training_run_gets_what_the_command_line_says(monkeypatch: pytest.MonkeyPatch) -> None:
    got: dict[str, Any] = {}

    def fake_train(dataset: Any, out: Any, args: Any, **kwargs: Any) -> None:
        got.update(args=args, overwrite=kwargs["overwrite"])
        raise typer.Exit(0)

    monkeypatch.setattr("corefsearch.cluster.train.train_clusterer", fake_train)
    result = runner.invoke(app, ["train", "clusterer", "data", "--out", "m", "--epochs", "7", "--remine-negatives",
                                 "--lemma-weights", "0,0.5", "--overwrite"])
    assert result.exit_code == 0, result.output
    assert got["args"] == ClustererTrainingArguments(epochs=7, remine_negatives=True, lemma_weights="0,0.5")
    assert got["overwrite"] is True


@dataclass
class Toy:
    size: int = field(default=3, metadata={"help": "How many."})
    mode: str = field(default="fast", metadata={"help": "Which way.", "choices": ("fast", "slow")})
    weights: dict[str, float] | None = field(default=None, metadata={
        "help": "name=w,...", "type": str | None, "parse": lambda text: {
            k: float(v) for k, v in (part.split("=") for part in text.split(","))} if text else None})
    quiet: bool = field(default=False, metadata={"help": "Say less.", "option": "--quiet"})
    secret: int = field(default=1, metadata={"help": "Not shown.", "hidden": True})
    internal: int = field(default=9, metadata={"cli": False})


def toy_app(seen: list[Any]) -> typer.Typer:
    toy = typer.Typer()

    @toy.command()
    @options_from(Toy, into="toy", order=("quiet",))
    def run(name: Annotated[str, typer.Argument(help="A name.")], toy: Toy, loud: bool = False) -> None:
        seen.append((name, toy, loud))

    @toy.command()
    def other() -> None:
        """A second command, so that `run` keeps its name."""

    return toy


def test_options_from_builds_the_dataclass_from_the_options() -> None:
    seen: list[Any] = []
    toy = toy_app(seen)
    result = runner.invoke(toy, ["run", "x", "--size", "5", "--mode", "slow", "--weights", "a=1,b=0.5", "--quiet",
                                 "--secret", "2", "--loud"])
    assert result.exit_code == 0, result.output
    assert seen == [("x", Toy(size=5, mode="slow", weights={"a": 1.0, "b": 0.5}, quiet=True, secret=2), True)]
    assert runner.invoke(toy, ["run", "x"]).exit_code == 0 and seen[-1] == ("x", Toy(), False)
    bad = runner.invoke(toy, ["run", "x", "--mode", "medium"])
    assert bad.exit_code == 2 and "medium" in bad.output
    assert runner.invoke(toy, ["run", "x", "--internal", "3"]).exit_code == 2  # not an option
    shown = runner.invoke(toy, ["run", "--help"]).output
    assert "--secret" not in shown and "--internal" not in shown
    assert shown.index("--quiet") < shown.index("--size") < shown.index("--mode")  # `order` first


def test_a_field_needs_help_or_cli_false() -> None:
    @dataclass
    class Bare:
        size: int = 3

    with pytest.raises(TypeError, match=r"Bare.size has no help"):
        option_fields(Bare)
    with pytest.raises(TypeError, match=r"Toy has no option field nope"):
        option_fields(Toy, order=("nope",))


@pytest.mark.parametrize("path", [(), ("train", "retriever"), ("search",), ("evaluate",)])
def test_flags_show_no_type_in_help(path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "--help" in result.output and "<bool>" not in result.output
    if path == ("train", "retriever"):
        assert "<int>" in result.output  # options that take a value still show their type


def _args_classes() -> dict[tuple[str, ...], tuple[type, set[str]]]:
    """Each command whose options are one ``*Args`` dataclass: the class and the parameters written by hand
    (the positional arguments and the shared ``--ray`` options)."""
    from corefsearch.cli.cluster import ClusterArgs
    from corefsearch.cli.data import AddArgs, BuildArgs
    from corefsearch.cli.detect import DetectArgs
    from corefsearch.cli.evaluate import EvaluateArgs
    from corefsearch.cli.index import IndexArgs

    ray = {"ray", "ray_workers", "ray_cpus_per_worker"}
    return {("index",): (IndexArgs, {"dataset", *ray}), ("cluster",): (ClusterArgs, {"dataset", *ray}),
            ("detect",): (DetectArgs, {"dataset", *ray}), ("build-dataset",): (BuildArgs, {"input_path"}),
            ("add",): (AddArgs, {"dataset"}), ("evaluate",): (EvaluateArgs, {"runs"})}


@pytest.mark.parametrize("path", [("index",), ("cluster",), ("detect",), ("build-dataset",), ("add",), ("evaluate",)])
def test_each_command_offers_the_fields_of_its_args(path: tuple[str, ...]) -> None:
    cls, own = _args_classes()[path]
    params = {p.name: p for p in click_command(*path).params}
    fields = {f.name: f for f in option_fields(cls)}
    assert set(params) - own == set(fields)
    for name, f in fields.items():
        assert params[name].help == f.metadata["help"], name
        assert params[name].default == (None if f.default is dataclasses.MISSING else f.default), name
        declared = f.metadata.get("option")
        assert params[name].opts == ([declared] if declared else ["--" + name.replace("_", "-")]), name


@dataclass
class Indexes:
    index: list[str] | None = field(default=None, metadata={"help": "Repeatable.", "metavar": "INDEX"})


def test_metavar_names_the_value_in_help() -> None:
    seen: list[Any] = []
    toy = typer.Typer()

    @toy.command()
    @options_from(Indexes, into="indexes")
    def run(indexes: Indexes) -> None:
        seen.append(indexes)

    shown = runner.invoke(toy, ["--help"]).output
    assert "INDEX" in shown and "<list" not in shown
    assert runner.invoke(toy, ["--index", "a", "--index", "b"]).exit_code == 0
    assert seen == [Indexes(index=["a", "b"])]
