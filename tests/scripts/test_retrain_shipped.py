"""scripts/retrain_shipped.py on a folder of shipped models of the tests' own (``COREFSEARCH_SHIPPED_DIR``) holding
one tiny detector: the plan of --dry-run, a step whose output is complete skipped, a bad recipe refused in one
line, and the comparison table. No command is run: the script's runners are replaced."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers import ship

from corefsearch.base.shipped import SHIPPED_DIR_ENV

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "retrain_shipped.py"
RECIPE = ("corefsearch build-dataset data/ecbplus/ECBplus.tar.gz --format ecbplus --mention-type all "
          "--out work/ship/tiny-ds && corefsearch train detector work/ship/tiny-ds --out work/ship/tiny-det "
          "--epochs 1 && corefsearch export-onnx work/ship/tiny-det --ship src/corefsearch/shipped/detector-ecbplus "
          "--card CARD.json")


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("retrain_shipped", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def script() -> ModuleType:
    return load_script()


def shipped_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recipe: str = RECIPE) -> Path:
    root = tmp_path / "shipped"
    folder = root / "detector-ecbplus"
    folder.mkdir(parents=True)
    (folder / "corefsearch_detector.json").write_text("{}", encoding="utf-8")
    ship(folder, "detector", "all", recipe=recipe,
         scores={"dev": {"strict_f1_event": 80.0, "strict_f1_entity": 60.0}, "test": {"strict_f1_event": 75.0,
                                                                                       "muc_f1": 50.0}})
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(root))
    return root


def test_dry_run_prints_the_steps_of_the_recipe_with_the_ship_step_in_work_and_the_budget(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    shipped_root(tmp_path, monkeypatch)
    monkeypatch.setattr(script, "run_step", lambda argv: pytest.fail(f"ran {argv}"))
    work = tmp_path / "work"
    assert script.main(["--dry-run", "--work", str(work), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "detector-ecbplus (detector): 3 steps, stated budget on 2 CPU cores: 5 min" in out
    lines = [line.strip() for line in out.splitlines() if line.strip()[:2] in ("1.", "2.", "3.")]
    assert len(lines) == 3 and all("[run]" in line for line in lines)
    assert "build-dataset data/ecbplus/ECBplus.tar.gz" in lines[0] and f"--out {work}/tiny-ds" in lines[0]
    assert f"train detector {work}/tiny-ds --out {work}/tiny-det --epochs 1 --device cpu" in lines[1]
    assert f"--ship {work}/shipped/detector-ecbplus --card {work}/cards/detector-ecbplus.json" in lines[2]
    assert "src/corefsearch/shipped" not in out and "Dry run: nothing was run." in out
    assert not work.exists()


def test_a_step_whose_output_is_complete_is_skipped_and_the_others_run(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = shipped_root(tmp_path, monkeypatch)
    work = tmp_path / "work"
    (work / "tiny-ds").mkdir(parents=True)
    (work / "tiny-ds" / "manifest.json").write_text("{}", encoding="utf-8")
    (work / "tiny-det").mkdir()  # no settings file: an incomplete model, trained again
    ran: list[list[str]] = []

    def fake_step(argv: list[str]) -> int:
        ran.append(argv)
        return 0

    monkeypatch.setattr(script, "run_step", fake_step)
    monkeypatch.setattr(script, "rescore", lambda plan, work: {})
    assert script.main(["--work", str(work)]) == 0
    out = capsys.readouterr().out
    assert f"detector-ecbplus: skipped (dataset {work}/tiny-ds is complete (manifest.json))" in out
    assert [argv[:2] for argv in ran] == [["train", "detector"], ["export-onnx", str(work / "tiny-det")]]
    assert ran[0][-2:] == ["--device", "auto"]
    card = json.loads((work / "cards" / "detector-ecbplus.json").read_text(encoding="utf-8"))
    assert card["name"] == "detector-ecbplus" and "created" not in card  # the writer dates it anew
    assert (root / "detector-ecbplus" / "corefsearch_card.json").is_file()  # the shipped folder untouched
    assert "| detector-ecbplus | dev strict_f1_event | 80.00 | not recomputed |  |" in out


def test_a_recipe_step_that_is_not_corefsearch_is_refused_in_one_line(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    shipped_root(tmp_path, monkeypatch, recipe="corefsearch train detector work/ship/d --out work/ship/m && rm -rf /")
    monkeypatch.setattr(script, "run_step", lambda argv: pytest.fail(f"ran {argv}"))
    assert script.main(["--work", str(tmp_path / "work")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("error: detector-ecbplus: recipe step 2 is not a corefsearch command, refused: "
                            "rm -rf /\n")


def test_the_comparison_gives_card_new_and_delta_and_says_what_is_not_recomputed(
        script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped_root(tmp_path, monkeypatch)
    from corefsearch.base.shipped import shipped_models

    plan = script.plan_model(shipped_models()[0], tmp_path / "work", "auto")
    rows = script.comparison_rows(plan, {"dev": {"strict_f1_event": 81.5, "strict_f1_entity": 59.0},
                                         "test": {"strict_f1_event": 75.0}})
    assert rows == [("detector-ecbplus", "dev strict_f1_event", "80.00", "81.50", "+1.50"),
                    ("detector-ecbplus", "dev strict_f1_entity", "60.00", "59.00", "-1.00"),
                    ("detector-ecbplus", "test strict_f1_event", "75.00", "75.00", "+0.00"),
                    ("detector-ecbplus", "test muc_f1", "50.00", "not recomputed", "")]


def test_an_index_folder_holds_two_steps_each_skipped_when_its_part_is_complete(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = ("corefsearch index work/ship/ds --out work/ship/ix --fields && corefsearch train retriever work/ship/ds "
              "--index work/ship/ix --out work/ship/ret && corefsearch index work/ship/ds --out work/ship/ix --dense "
              "--encoder work/ship/ret && corefsearch search --index work/ship/ix --queries work/ship/ds/q.jsonl "
              "--out work/ship/runs/dev.trec")
    shipped_root(tmp_path, monkeypatch, recipe=recipe)
    work = tmp_path / "work"
    (work / "ix" / "lucene").mkdir(parents=True)  # the Lucene index is complete, the dense one is not there
    (work / "runs").mkdir()
    (work / "runs" / "dev.trec").write_text("q 0 p 1 1.0 r\n", encoding="utf-8")
    from corefsearch.base.shipped import shipped_models

    plan = script.plan_model(shipped_models()[0], work, "cpu")
    states = [(step.argv[0], step.skip) for step in plan.steps]
    assert states == [("index", f"index {work}/ix/lucene is complete"), ("train", None), ("index", None),
                      ("search", f"{work}/runs/dev.trec exists")]
    assert plan.steps[2].output == work / "ix" / "dense"
    assert plan.steps[2].argv[-2:] == ["--encoder", str(work / "ret")]


def test_the_retriever_is_retrained_before_the_reader_and_their_shared_steps_run_once(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    shared = ("corefsearch build-dataset data/ecbplus/ECBplus.tar.gz --format ecbplus --out work/ship/ds && "
              "corefsearch index work/ship/ds --out work/ship/ix --fields && corefsearch train retriever work/ship/ds "
              "--index work/ship/ix --out work/ship/ret")
    recipes = {"retriever-ecbplus": ("retriever", "corefsearch_retriever.json", shared + " && corefsearch export-onnx "
                                     "work/ship/ret --ship src/corefsearch/shipped/retriever-ecbplus --card C.json"),
               "reader-ecbplus": ("reader", "corefsearch_reader.json", shared + " && corefsearch train reader "
                                  "work/ship/ds --run work/ship/r.trec --out work/ship/rd --base-model work/ship/ret "
                                  "&& corefsearch export-onnx work/ship/rd --ship "
                                  "src/corefsearch/shipped/reader-ecbplus --card C.json")}
    root = tmp_path / "shipped"
    for name, (kind, settings, recipe) in recipes.items():
        (root / name).mkdir(parents=True)
        (root / name / settings).write_text("{}", encoding="utf-8")
        ship(root / name, kind, "event", recipe=recipe)
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(root))
    work = tmp_path / "work"
    ran: list[list[str]] = []

    def fake_step(argv: list[str]) -> int:  # makes each step's output, as the command would
        ran.append(argv)
        out = Path(argv[argv.index("--ship") + 1] if "--ship" in argv else argv[argv.index("--out") + 1])
        if argv[0] == "build-dataset":
            out.mkdir(parents=True)
            (out / "manifest.json").write_text("{}")
        elif argv[0] == "index":
            (out / "lucene").mkdir(parents=True)
        elif argv[0] == "train":
            out.mkdir(parents=True)
            (out / f"corefsearch_{argv[1]}.json").write_text("{}")
        else:
            out.mkdir(parents=True)
            (out / "corefsearch_card.json").write_text("{}")
        return 0

    monkeypatch.setattr(script, "run_step", fake_step)
    monkeypatch.setattr(script, "rescore", lambda plan, work: {})
    assert script.main(["--work", str(work)]) == 0
    assert [argv[:2] for argv in ran] == [["build-dataset", "data/ecbplus/ECBplus.tar.gz"], ["index", str(work / "ds")],
                                          ["train", "retriever"], ["export-onnx", str(work / "ret")],
                                          ["train", "reader"], ["export-onnx", str(work / "rd")]]
    out = capsys.readouterr().out
    assert f"reader-ecbplus: skipped (model {work}/ret is complete (corefsearch_retriever.json))" in out
