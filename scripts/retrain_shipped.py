"""Retrain every shipped model from the vendored data with the recipe of its card, then compare the scores.

    python scripts/retrain_shipped.py [--models NAME,...] [--work work/ship] [--dry-run] [--device auto|cpu|cuda]

For each shipped model (``corefsearch models``; or those of ``--models``) the steps of its card's ``recipe``
(commands joined by ``&&``) run in order as ``python -m corefsearch.cli ...`` subprocesses of the python
running this script, from the repository root, under one progress bar over every step; before each step the
script prints the command and the model's stated budget. Paths of the recipe under ``work/ship/`` move under
``--work``; ``--device`` is added to each ``train`` step. The recipe's last step, ``export-onnx MODEL --ship
src/corefsearch/shipped/NAME --card CARD.json``, writes ``WORK/shipped/NAME`` instead, with the current card
(``WORK/cards/NAME.json``; its date filled in anew): the shipped models are never overwritten. Copy the new
folder over the shipped one (and put the new scores into its card) once the comparison suits you.

Models are retrained in the order detector, mention encoders, retriever, reader (the reader's recipe starts from
the retriever's), and each step is checked again just before it runs, so a step two recipes share (the dataset,
the index, the retriever) runs once. Resumable: a step whose output is complete is skipped with a line saying so
(``build-dataset``: the folder holds its ``manifest.json``; ``train KIND``: its ``corefsearch_KIND.json``; ``index``:
its ``lucene/`` or ``dense/``; the ship step: the card); an interrupted
``build-dataset`` is rebuilt (``--overwrite``) and an interrupted ``train`` resumes from its own checkpoints
(rerunning the same command does). Rerun the script after a failure or Ctrl-C.

At the end, each retrained model is scored by the commands of its kind and compared with its card (model,
metric, card, new, Δ): a ``detector`` by ``detect`` (on a copy of its dataset, ``--backend onnx-int8``) and
``evaluate --mentions`` (strict F1 per type, dev and test); a ``clusterer`` by ``cluster --method encoder`` and
``evaluate --clusters`` (CoNLL F1 on dev within gold topics, on test within gold subtopics and within predicted
topics); a ``retriever`` or ``reader`` by its training's own dev selection (the new folder's ``dev_curve.json`` at
the kept epoch; their test rows are ``bench/headline.py``'s). A card metric that no command here gives is listed
as "not recomputed".

``--dry-run`` prints the plan (steps, budgets, what would be skipped) and runs nothing. Exit status: 0 when
done, 1 when a step failed (rerun to resume), 2 when the plan cannot be made (one line says why).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECIPE_WORK = "work/ship"  # where the cards' recipes put their datasets and models
SHIPPED_PREFIX = "src/corefsearch/shipped/"
KIND_ORDER = ("detector", "clusterer", "retriever", "reader", "pair-scorer")  # the order the models are retrained in
# The stated budget of each model's recipe, in minutes, on 2 CPU cores.
BUDGETS_MIN = {"detector-ecbplus": 5, "event-encoder-ecbplus": 45, "entity-encoder-ecbplus": 45,
               "retriever-ecbplus": 45, "reader-ecbplus": 120}


class PlanError(Exception):
    """A recipe that cannot be planned: one line."""


@dataclass
class Step:
    model: str
    argv: list[str]  # the arguments after `corefsearch`
    output: Path | None = None
    skip: str | None = None  # why the step is skipped, or None

    @property
    def command(self) -> str:
        return shlex.join(["corefsearch", *self.argv])


@dataclass
class Plan:
    model: Any  # a ShippedModel
    steps: list[Step] = field(default_factory=list)
    dataset: Path | None = None  # the dataset the train step reads: the one the scores are computed on
    ship: Path | None = None  # the new shipped folder

    @property
    def budget(self) -> str:
        minutes = BUDGETS_MIN.get(self.model.name)
        return f"stated budget on 2 CPU cores: {minutes} min" if minutes is not None else "no stated budget"


def _option(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _set_option(argv: list[str], name: str, value: str) -> list[str]:
    """``argv`` with ``name value`` (replacing the option when given, else added)."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == name and i + 1 < len(argv):
            skip = True
            continue
        if arg.startswith(name + "="):
            continue
        out.append(arg)
    return [*out, name, value]


def _positionals(argv: list[str]) -> list[str]:
    """The arguments of ``argv`` that are not options or their values (every option here takes a value, except
    the flags, which start with --no-, --overwrite or are --validated-only)."""
    flags = {"--validated-only", "--overwrite", "--quantize", "--no-quantize", "--fuse", "--no-fuse"}
    found, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            i += 1 if (arg in flags or "=" in arg or arg.startswith("--no-")) else 2
            continue
        found.append(arg)
        i += 1
    return found


def _rebase(arg: str, work: Path) -> str:
    if arg == RECIPE_WORK or arg.startswith(RECIPE_WORK + "/"):
        return str(work / arg[len(RECIPE_WORK):].lstrip("/"))
    return arg


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else ROOT / p


def plan_model(model: Any, work: Path, device: str) -> Plan:
    """The steps of ``model``'s recipe, checked, rewritten (paths, --device, the ship step) and marked skipped
    when their output is complete."""
    from corefsearch.base.model_files import MODEL_KIND_FILES

    plan = Plan(model)
    commands = [part.strip() for line in model.recipe for part in line.split("&&") if part.strip()]
    for number, command in enumerate(commands, 1):
        try:
            words = shlex.split(command)
        except ValueError as error:
            raise PlanError(f"{model.name}: recipe step {number} cannot be parsed ({error}): {command}") from None
        if not words or words[0] != "corefsearch" or len(words) < 2:
            raise PlanError(f"{model.name}: recipe step {number} is not a corefsearch command, refused: {command}")
        argv = [_rebase(arg, work) for arg in words[1:]]
        step = Step(model.name, argv)
        if argv[0] == "build-dataset":
            out = _option(argv, "--out")
            if out is not None:
                step.output = _resolve(out)
                if (step.output / "manifest.json").is_file():
                    step.skip = f"dataset {out} is complete (manifest.json)"
                elif step.output.exists():
                    step.argv = [*argv, "--overwrite"] if "--overwrite" not in argv else argv
        elif argv[0] == "train" and len(argv) > 1:
            step.argv = argv = _set_option(argv, "--device", device)
            out = _option(argv, "--out")
            positionals = _positionals(argv[2:])
            if positionals:
                plan.dataset = _resolve(positionals[0])
            settings = MODEL_KIND_FILES.get(argv[1])
            if out is not None:
                step.output = _resolve(out)
                if settings and (step.output / settings).is_file():
                    step.skip = f"model {out} is complete ({settings})"
        elif argv[0] == "export-onnx" and _option(argv, "--ship") is not None:
            target = _option(argv, "--ship") or ""
            if target.rstrip("/") != SHIPPED_PREFIX + model.name:
                raise PlanError(f"{model.name}: recipe step {number} ships to {target}, not to "
                                f"{SHIPPED_PREFIX}{model.name}: refused")
            plan.ship = (work / "shipped" / model.name).resolve()
            card = (work / "cards" / f"{model.name}.json").resolve()
            step.argv = _set_option(_set_option(argv, "--ship", str(plan.ship)), "--card", str(card))
            step.output = plan.ship
            if (plan.ship / "corefsearch_card.json").is_file():
                step.skip = f"new shipped folder {plan.ship} is complete (corefsearch_card.json)"
        elif argv[0] == "index":
            # One index folder takes a Lucene index (`index`) and a dense one (`index --dense`): each is its own
            # step, complete when its sub-folder is there (both are written under a temporary name first).
            out = _option(argv, "--out")
            if out is not None:
                part = "dense" if "--dense" in argv else "lucene"
                step.output = _resolve(out) / part
                if step.output.is_dir():
                    step.skip = f"index {out}/{part} is complete"
        else:
            out = _option(argv, "--out")
            if out is not None:
                step.output = _resolve(out)
                if step.output.exists():
                    step.skip = f"{out} exists"
        plan.steps.append(step)
    return plan


def write_card(model: Any, path: Path) -> None:
    """The current card for the ship step, less the fields the writer fills in anew (size, date)."""
    record = json.loads(model.card_path.read_text(encoding="utf-8"))
    for name in ("size", "created"):
        record.pop(name, None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# --- running -------------------------------------------------------------------------------------------------


def run_step(argv: list[str]) -> int:
    """Run ``corefsearch ARGV`` from the repository root, its output printed line by line; its exit status."""
    with subprocess.Popen([sys.executable, "-m", "corefsearch.cli", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, bufsize=1) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print("    " + line.rstrip("\n"), flush=True)
        return process.wait()


def run_output(argv: list[str]) -> str:
    """Run ``corefsearch ARGV`` from the repository root and return its stdout (a failure raises, with its output)."""
    result = subprocess.run([sys.executable, "-m", "corefsearch.cli", *argv], cwd=ROOT, capture_output=True,
                            text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"corefsearch {shlex.join(argv)} failed (exit {result.returncode}): {tail[0]}")
    return result.stdout


def _percent(value: Any) -> float:
    return round(100 * float(value), 2)


def _subtopics_file(dataset: Path, out: Path) -> Path:
    """ECB+'s gold subtopic of every document of ``dataset`` as a ``cluster --topics`` file (the grouping of the
    cards' ``conll_f1_subtopics``)."""
    from corefsearch.cluster.agreement import ecbplus_subtopic
    from corefsearch.datasets.dataset import Dataset

    groups = {p.doc_id: ecbplus_subtopic(p.doc_id, p.topic) for p in Dataset(dataset).passages()}
    out.write_text("".join(f"{doc}\t{group}\n" for doc, group in sorted(groups.items()) if group), encoding="utf-8")
    return out


def rescore(plan: Plan, work: Path) -> dict[str, dict[str, float]]:
    """The new model's scores by the metric names of its card, for the metrics the commands here give."""
    model, dataset, new = plan.model, plan.dataset, plan.ship
    if dataset is None or new is None:
        return {}
    folder = (work / "score" / model.name).resolve()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    scores: dict[str, dict[str, float]] = {"dev": {}, "test": {}}
    if model.kind == "detector":
        copy = folder / "dataset"
        shutil.copytree(dataset, copy, ignore=shutil.ignore_patterns("predicted_mentions*"))
        run_output(["detect", str(copy), "--model", str(new), "--backend", "onnx-int8"])
        for split in ("dev", "test"):
            values = json.loads(run_output(["evaluate", "--mentions", str(copy), "--dataset", str(dataset),
                                            "--split", split, "--output-format", "json"]))
            for kind in ("event", "entity", "all"):
                if kind in values.get("strict", {}):
                    scores[split][f"strict_f1_{kind}"] = _percent(values["strict"][kind]["F1"])
    elif model.kind == "clusterer":
        subtopics = _subtopics_file(dataset, folder / "subtopics.tsv")
        for split, metric, grouping in (("dev", "conll_f1", ["--scope", "topic"]),
                                        ("test", "conll_f1_subtopics", ["--topics", str(subtopics)]),
                                        ("test", "conll_f1_predicted_topics", ["--scope", "predicted-topic"])):
            out = folder / f"{split}-{metric}.jsonl"
            run_output(["cluster", str(dataset), "--split", split, "--method", "encoder", "--model", str(new),
                        "--backend", "onnx-int8", *grouping, "--out", str(out)])
            values = json.loads(run_output(["evaluate", "--clusters", str(out), "--dataset", str(dataset),
                                            "--split", split, "--output-format", "json"]))
            if isinstance(values, list):
                values = next((v for v in values if v.get("singletons") == "keep"), values[0])
            scores[split][metric] = _percent(values["CoNLL F1"])
    elif model.kind in ("retriever", "reader"):
        # Their dev scores are the training's own selection (torch, the seeded dev sample), read from the
        # training record the new folder carries; the test rows are bench/headline.py's.
        curve = json.loads((new / "dev_curve.json").read_text(encoding="utf-8"))
        best = json.loads((new / "training_args.json").read_text(encoding="utf-8")).get("best_epoch")
        entry = next((e for e in curve if e.get("epoch") == best), None)
        if entry is not None:
            names = {"retriever": {"mrr10_dev300_torch": "MRR@10", "r100_dev300_torch": "R@100"},
                     "reader": {"mrr10_rrf_dev500_torch": "MRR@10 rrf", "mrr10_dev500_torch": "MRR@10"}}
            for metric, key in names[model.kind].items():
                if entry.get(key) is not None:
                    scores["dev"][metric] = _percent(entry[key])
    return scores


def comparison_rows(plan: Plan, new: dict[str, dict[str, float]]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for split in ("dev", "test"):
        for metric, card in plan.model.scores.get(split, {}).items():
            value = new.get(split, {}).get(metric)
            if value is None:
                rows.append((plan.model.name, f"{split} {metric}", f"{card:.2f}", "not recomputed", ""))
            else:
                rows.append((plan.model.name, f"{split} {metric}", f"{card:.2f}", f"{value:.2f}",
                             f"{value - card:+.2f}"))
    return rows


def print_table(rows: list[tuple[str, str, str, str, str]]) -> None:
    print("| model | metric | card | new | Δ |")
    print("| --- | --- | ---: | ---: | ---: |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


# --- the command line ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated names of shipped models (default: every one)")
    parser.add_argument("--work", type=Path, default=Path(RECIPE_WORK),
                        help=f"work folder of datasets, models and the new shipped folders (default {RECIPE_WORK})")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and run nothing")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="added to each train step (default auto)")
    args = parser.parse_args(argv)
    work = args.work if args.work.is_absolute() else Path.cwd() / args.work

    from corefsearch.base.errors import CorefSearchError
    from corefsearch.base.progress import track
    from corefsearch.base.shipped import shipped_models

    try:
        models = shipped_models()
        if args.models:
            wanted = [name.strip() for name in args.models.split(",") if name.strip()]
            unknown = [name for name in wanted if name not in {m.name for m in models}]
            if unknown:
                raise PlanError(f"no shipped model {', '.join(unknown)} (shipped: "
                                f"{', '.join(m.name for m in models) or 'none'})")
            models = [m for m in models if m.name in wanted]
        # A model whose recipe trains what another's reads first (the reader starts from the retriever).
        models = sorted(models, key=lambda m: (KIND_ORDER.index(m.kind) if m.kind in KIND_ORDER else 0, m.name))
        plans = [plan_model(model, work, args.device) for model in models]
    except (PlanError, CorefSearchError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not plans:
        print("No shipped models to retrain.")
        return 0

    for plan in plans:
        print(f"{plan.model.name} ({plan.model.kind}): {len(plan.steps)} steps, {plan.budget}")
        for number, step in enumerate(plan.steps, 1):
            state = f"skip: {step.skip}" if step.skip else "run"
            print(f"  {number}. [{state}] {step.command}")
    if args.dry_run:
        print("Dry run: nothing was run.")
        return 0

    steps = [(plan, number) for plan in plans for number in range(len(plan.steps))]
    for plan, number in track(steps, "retraining the shipped models"):
        # Planned again just before it runs: an earlier model's recipe may have made this step's output (two
        # recipes share the dataset, the index and the retriever).
        step = plan_model(plan.model, work, args.device).steps[number]
        if step.skip:
            print(f"{plan.model.name}: skipped ({step.skip}): {step.command}")
            continue
        print(f"{plan.model.name} ({plan.budget}): {step.command}", flush=True)
        if step.argv[0] == "export-onnx" and plan.ship is not None:
            card = _option(step.argv, "--card")
            assert card is not None
            write_card(plan.model, Path(card))
        status = run_step(step.argv)
        if status != 0:
            print(f"error: {plan.model.name}: step failed (exit {status}): {step.command}; rerun the script to "
                  "resume", file=sys.stderr)
            return 1

    rows = []
    for plan in plans:
        try:
            new = rescore(plan, work)
        except (RuntimeError, OSError, ValueError, KeyError) as error:
            print(f"warning: {plan.model.name}: not rescored: {error}", file=sys.stderr)
            new = {}
        rows.extend(comparison_rows(plan, new))
    print()
    print_table(rows)
    print("\nThe new models are in " + ", ".join(str(p.ship) for p in plans if p.ship)
          + "; copy one over its shipped folder (and update its card's scores) if it should ship.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
