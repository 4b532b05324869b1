"""The registry of shipped models (``corefsearch.base.shipped``): the cards of a folder of shipped models of the
test's own (``COREFSEARCH_SHIPPED_DIR``) holding tiny random models, a name as its folder, the default of each
kind, bad cards as one line naming the file, and the package's own folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import corpus_words, save_tiny_bert, ship, ship_encoder_and_detector

from corefsearch.base import shipped
from corefsearch.base.errors import CorefSearchError, InputError, MissingArtefactError
from corefsearch.base.models import CLUSTERER_CONFIG, check_model_folder, model_kind, resolve_model
from corefsearch.base.shipped import (
    PACKAGE_SHIPPED_DIR,
    SHIPPED_DIR_ENV,
    default_shipped,
    resolve_reference,
    shipped_default,
    shipped_hint,
    shipped_model,
    shipped_models,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), corpus_words(), seed=0, max_positions=128)


@pytest.fixture(scope="module")
def models(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of shipped models: an event mention encoder and a detector of every type."""
    return ship_encoder_and_detector(base, tmp_path_factory.mktemp("shipped"))


@pytest.fixture
def shipped_dir(models: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(models))
    return models


def test_the_registry_reads_each_card_with_its_folder_and_size(shipped_dir: Path) -> None:
    found = shipped_models()
    assert [m.name for m in found] == ["detector-all", "event-encoder"]
    detector, encoder = found
    assert (encoder.kind, encoder.mention_type, encoder.path) == ("clusterer", "event", shipped_dir / "event-encoder")
    assert encoder.size_bytes == sum(p.stat().st_size for p in encoder.path.rglob("*") if p.is_file()) > 0
    assert encoder.scores == {"dev": {"CoNLL F1": 72.65}, "test": {"CoNLL F1": 70.5, "MUC F1": 80}}
    assert encoder.recipe == ("corefsearch train clusterer DATASET",) and encoder.created == "2025-01-31"
    assert encoder.card_path == shipped_dir / "event-encoder" / "corefsearch_card.json"
    assert shipped_model("event-encoder") == encoder
    record = detector.to_json()
    assert record["path"] == str(shipped_dir / "detector-all") and record["card"].endswith("corefsearch_card.json")
    assert json.loads(json.dumps(record))["scores"]["test"] == {"F1": 0.25}
    with pytest.raises(MissingArtefactError, match=r"no shipped model 'nope' \(shipped models: detector-all, "
                                                    r"event-encoder\)"):
        shipped_model("nope")


def test_a_name_is_its_folder_and_anything_else_is_left_as_it_is(shipped_dir: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder = shipped_dir / "event-encoder"
    assert resolve_reference("event-encoder") == str(folder)
    assert resolve_reference(Path("event-encoder")) == folder
    for other in (None, "default", "heuristic", "bert-base-uncased", "org/model", str(tmp_path), "./event-encoder",
                  Path("sub/event-encoder")):
        assert resolve_reference(other) == other
    # The floor's model functions take the name too.
    assert model_kind("event-encoder") == "clusterer" and model_kind("detector-all") == "detector"
    assert resolve_model("event-encoder") == str(folder)
    check_model_folder("event-encoder", "--model")
    # A folder of that name in the working directory comes first.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "event-encoder").mkdir()
    assert resolve_reference("event-encoder") == "event-encoder"
    assert model_kind("event-encoder") is None


def test_the_default_of_a_kind_is_the_one_for_the_mention_type_then_one_for_all(
        shipped_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_shipped("clusterer", "event").name == "event-encoder"
    assert default_shipped("clusterer", "entity") is None and default_shipped("clusterer", "all") is None
    assert default_shipped("detector", "entity").name == "detector-all"
    assert default_shipped("detector").name == "detector-all" and default_shipped("reader") is None
    said: list[str] = []
    assert shipped_default("clusterer", "event", said.append) == str(shipped_dir / "event-encoder")
    assert said == [f"Using the shipped mention encoder event-encoder ({shipped_dir / 'event-encoder'})"]
    with pytest.raises(InputError, match="no kind of model 'encoder'"):
        default_shipped("encoder")
    # One for every type comes after the one for the type asked, whatever their names.
    root = tmp_path / "more"
    root.mkdir()
    for name, mention_type in (("a-all", "all"), ("b-entity", "entity"), ("c-none", None)):
        (root / name).mkdir()
        (root / name / CLUSTERER_CONFIG).write_text("{}")
        ship(root / name, "clusterer", mention_type)
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(root))
    assert default_shipped("clusterer", "entity").name == "b-entity"
    assert default_shipped("clusterer", "event").name == "a-all"
    assert default_shipped("clusterer").name == "a-all"


def test_with_none_shipped_nothing_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(tmp_path))
    assert shipped_models() == [] and shipped_hint() == "" and default_shipped("clusterer", "event") is None
    assert resolve_reference("event-encoder") == "event-encoder"
    with pytest.raises(MissingArtefactError, match=r"--model ./x: no such model folder$"):
        check_model_folder("./x", "--model")
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(MissingArtefactError, match=f"{SHIPPED_DIR_ENV}=.*missing: no such folder"):
        shipped_models()


def test_an_unknown_name_lists_the_shipped_models(shipped_dir: Path) -> None:
    with pytest.raises(MissingArtefactError, match=r"--reader ./nope: no such model folder \(shipped models: "
                                                    r"detector-all, event-encoder\)"):
        check_model_folder("./nope", "--reader")
    from corefsearch.detect.detectors import check_detector

    with pytest.raises(InputError, match=r"not a detector folder .*\(shipped models: detector-all, event-encoder\)"):
        check_detector("nope")
    with pytest.raises(InputError, match="event-encoder: a clusterer folder"):
        check_detector("event-encoder")
    check_detector("detector-all")


def _broken(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / CLUSTERER_CONFIG).write_text("{}")
    ship(folder, "clusterer")
    return folder


def _edit_card(folder: Path, **changes: object) -> None:
    path = folder / "corefsearch_card.json"
    record = json.loads(path.read_text())
    record.update(changes)
    for key in [k for k, v in changes.items() if v is ...]:
        del record[key]
    path.write_text(json.dumps(record))


BAD_CARDS = {
    "no card": (lambda f: (f / "corefsearch_card.json").unlink(), "corefsearch_card.json: no such file"),
    "not JSON": (lambda f: (f / "corefsearch_card.json").write_text('{"name": '), "corefsearch_card.json:1: not a "
                                                                                  "valid model card"),
    "a list": (lambda f: (f / "corefsearch_card.json").write_text("[]"), "corefsearch_card.json: not a model card"),
    "no scores": (lambda f: _edit_card(f, scores=...), "corefsearch_card.json: the card lacks scores"),
    "no test scores": (lambda f: _edit_card(f, scores={"dev": {"F1": 1}}), "scores must be"),
    "a word for a score": (lambda f: _edit_card(f, scores={"dev": {"F1": "high"}, "test": {}}), "scores must be"),
    "another name": (lambda f: _edit_card(f, name="other"), "the card's name 'other' is not its folder's"),
    "another kind": (lambda f: _edit_card(f, kind="encoder"), "kind must be one of retriever, reader, clusterer"),
    "a bad type": (lambda f: _edit_card(f, mention_type="events"), "mention_type must be one of"),
    "a bad date": (lambda f: _edit_card(f, created="last year"), "created must be an ISO date"),
    "no recipe": (lambda f: _edit_card(f, recipe=[]), "recipe must be a command line"),
    "bad data": (lambda f: _edit_card(f, data=[{"path": "x"}]), "data must be a list"),
    "no settings file": (lambda f: (f / CLUSTERER_CONFIG).unlink(),
                         f"{CLUSTERER_CONFIG}: no such file, and "),
    "a reader's card": (lambda f: _edit_card(f, kind="reader"), "corefsearch_reader.json: no such file"),
}


@pytest.mark.parametrize("case", sorted(BAD_CARDS))
def test_a_bad_card_is_one_line_naming_the_file(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    break_it, expected = BAD_CARDS[case]
    _broken(tmp_path, "aaa-good")
    folder = _broken(tmp_path, "broken")
    break_it(folder)
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(tmp_path))
    for read in (shipped_models, lambda: resolve_reference("broken"), lambda: default_shipped("clusterer")):
        with pytest.raises(CorefSearchError) as raised:
            read()
        message = str(raised.value)
        assert expected in message and str(folder) in message and "\n" not in message, message
    # The other shipped model still resolves by name.
    assert resolve_reference("aaa-good") == str(tmp_path / "aaa-good")


def test_the_package_ships_its_folder_with_a_readme_and_every_card_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever models the package ships: every card reads, every folder holds its README.md."""
    monkeypatch.delenv(SHIPPED_DIR_ENV)
    assert shipped.shipped_dir() == PACKAGE_SHIPPED_DIR
    assert (PACKAGE_SHIPPED_DIR / "README.md").is_file()
    for model in shipped_models():
        assert (model.path / "README.md").is_file(), model.name
        assert model.path.parent == PACKAGE_SHIPPED_DIR


def test_a_name_enters_the_library_as_its_folder(shipped_dir: Path, tmp_path: Path) -> None:
    """Where a model reference enters (a trainer's base model, the dense index's encoder, a reader's options), a
    shipped model's name becomes its folder, which is what the run, the manifest or the metadata records."""
    from corefsearch.cluster.arguments import ClustererTrainingArguments
    from corefsearch.dense.store import portable_reference
    from corefsearch.search.backends.dense import DenseIndexOptions
    from corefsearch.training.run import start_run

    folder = str(shipped_dir / "event-encoder")
    args = ClustererTrainingArguments(base_model="event-encoder", device="cpu")
    run, _ = start_run(args, tmp_path / "out", overwrite=False, log=None, open_inputs=lambda: None)
    assert run.args.base_model == folder and args.recorded_options()["base_model"] == folder
    options = DenseIndexOptions(encoder="event-encoder", device="cpu")
    options.validate()
    assert options.encoder == folder
    assert portable_reference("event-encoder") == folder and portable_reference("default") == "default"
