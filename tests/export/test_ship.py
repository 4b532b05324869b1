"""Inference-only folders (``export-onnx MODEL_DIR --ship OUT --card CARD.json``): what a shipped folder holds and
leaves out, its card, that each kind (detector, mention encoder, reader, retriever) loads from it with no torch
weights and answers as the int8 backend of the trained folder does, and the one-line refusals.

Tiny random BERTs (helpers.save_tiny_bert: 2 layers, 32 wide), made into each kind of model here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import PASSAGES, a_query, flat, save_mention_encoder, saved_reader, write_cluster_dataset
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.base.head_weights import head_precision
from corefsearch.base.model_files import HEAD_FILES
from corefsearch.base.models import check_model_files, check_model_folder, model_kind
from corefsearch.base.onnx_backend import inference_only, resolve_backend
from corefsearch.base.shipped import read_card
from corefsearch.cli import app
from corefsearch.export.ship import SHIP_CARD, write_shipped

runner = CliRunner(env={"COLUMNS": "250"})
pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["The quake hit the town.", "Firefighters fought the blaze " * 20, "A fire destroyed the old textile mill."]
LEFT_OUT = ("model.safetensors", "pytorch_model.bin", "model.onnx")  # torch weights and the fp32 export


def a_card(name: str, **changes: object) -> dict:
    card = {"name": name, "description": f"The {name} of the tests.", "recipe": f"corefsearch train {name} DATA",
            "data": [{"path": "data/tiny.jsonl", "sha256": "sha256:" + "0" * 64}],
            "scores": {"dev": {"F1": 0.5}, "test": {"F1": 0.25}}, "limits": "Random weights: for the tests only."}
    return {**card, **changes}


@pytest.fixture(scope="module")
def trained(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One trained (untrained, seeded) folder of each kind, with no ONNX export yet."""
    import torch

    from corefsearch.dense.model import BiEncoder, RetrieverConfig
    from corefsearch.detect.model import DetectorConfig, MentionDetector

    root = tmp_path_factory.mktemp("trained")
    torch.manual_seed(2)
    MentionDetector.from_base(str(tiny_base), DetectorConfig(max_length=64, stride=16)).save(root / "detector")
    torch.manual_seed(3)
    BiEncoder.from_base(str(tiny_base), RetrieverConfig(max_query_len=32, max_passage_len=48)).save(root / "retriever")
    return {"detector": root / "detector", "clusterer": save_mention_encoder(tiny_base, root / "clusterer"),
            "reader": saved_reader(tiny_base, root / "reader"), "retriever": root / "retriever"}


@pytest.fixture(scope="module")
def shipped(trained: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The inference-only copy of each trained folder (each exported first, as none had an export)."""
    root = tmp_path_factory.mktemp("shipped")
    for kind, folder in trained.items():
        summary = write_shipped(folder, root / kind, a_card(kind))
        assert summary.exported is not None and summary.kind == kind
    return {kind: root / kind for kind in trained}


@pytest.mark.parametrize("kind", ["detector", "clusterer", "reader", "retriever"])
def test_a_shipped_folder_holds_no_torch_weights_nor_fp32_export_and_its_card_says_its_size(
        kind: str, trained: dict[str, Path], shipped: dict[str, Path]) -> None:
    folder = shipped[kind]
    files = {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}
    assert not [name for name in files if Path(name).name in LEFT_OUT]
    assert not [name for name in files if Path(name).name.startswith(".")]
    exports = [name for name in files if name.endswith("onnx/model_qint8.onnx")]
    assert len(exports) == (2 if kind == "retriever" else 1)  # a DPR retriever: both encoders
    assert all((folder / Path(name).parent / "export.json").is_file() for name in exports)
    card = json.loads((folder / SHIP_CARD).read_text())
    assert card["size"] == sum(size for name, size in files.items() if name != SHIP_CARD)
    assert card["kind"] == kind and card["format"] == "onnx-int8" and card["name"] == kind
    assert set(card) == {"name", "kind", "description", "mention_type", "format", "recipe", "data", "scores",
                         "limits", "base_model", "created", "size"}
    assert card["mention_type"] == ("all" if kind == "detector" else None)  # a detector's types: event and entity
    registered = read_card(folder)  # the registry of shipped models reads it as it is
    assert registered.kind == kind and registered.size_bytes == card["size"] + (folder / SHIP_CARD).stat().st_size
    full = sum(p.stat().st_size for p in trained[kind].rglob("*") if p.is_file())
    weights = sum(p.stat().st_size for p in trained[kind].rglob("*") if p.name in LEFT_OUT)
    assert card["size"] < full - weights + 20_000  # the card's own lines in README.md are all it adds
    readme = (folder / "README.md").read_text()
    assert "## Shipped model" in readme and "sha256:" + "0" * 64 in readme and "| F1 | 0.5000 | 0.2500 |" in readme
    assert "Random weights: for the tests only." in readme and f"corefsearch train {kind} DATA" in readme
    # What a model folder is: the same kind, a folder, readable files; run with onnx-int8 and nothing else.
    assert model_kind(folder) == kind and inference_only(folder) and not inference_only(trained[kind])
    check_model_folder(folder, "--model")
    check_model_files(folder)
    assert resolve_backend(folder, None) == "onnx-int8" and resolve_backend(trained[kind], None) == "torch"
    for backend in ("torch", "onnx"):
        with pytest.raises(InputError, match="ships only its int8 ONNX export") as caught:
            resolve_backend(folder, backend)
        assert "\n" not in str(caught.value)
    with pytest.raises(InputError, match="runs on the CPU"):
        resolve_backend(folder, None, "cuda")


def test_a_shipped_detector_finds_what_the_int8_backend_of_the_trained_one_finds(trained: dict[str, Path],
                                                                                  shipped: dict[str, Path]) -> None:
    from corefsearch.detect.detectors import load_detector
    from corefsearch.detect.model import MentionDetector

    detector = MentionDetector.load(shipped["detector"])
    assert detector.backend == "onnx-int8"
    expected = MentionDetector.load(trained["detector"], backend="onnx-int8").detect(TEXTS)
    assert detector.detect(TEXTS) == expected
    assert load_detector(shipped["detector"], "cpu").detect(TEXTS) == expected
    with pytest.raises(InputError, match="ships only its int8 ONNX export"):
        MentionDetector.load(shipped["detector"], backend="torch")


def test_a_shipped_mention_encoder_encodes_as_the_int8_backend_of_the_trained_one(
        trained: dict[str, Path], shipped: dict[str, Path], tmp_path: Path) -> None:
    from corefsearch.cluster.encoder import split_records
    from corefsearch.cluster.model import MentionEncoder

    records = split_records(write_cluster_dataset(tmp_path / "ds"), "train")
    encoder = MentionEncoder.load(shipped["clusterer"], "cpu")
    assert encoder.backend == "onnx-int8" and encoder.config.threshold == 0.5
    got = encoder.encode(records, batch_size=3)
    # The tiny head's matrices are below the size worth quantizing: stored as trained, the same vectors.
    np.testing.assert_array_equal(got, MentionEncoder.load(trained["clusterer"], backend="onnx-int8").encode(
        records, batch_size=3))
    with pytest.raises(InputError, match="ships only its int8 ONNX export"):
        MentionEncoder.load(shipped["clusterer"], backend="torch")


def test_a_large_head_ships_as_int8_rows_unless_asked_for_fp32(tiny_base: Path, tmp_path: Path) -> None:
    import torch

    from corefsearch.cluster.encoder import split_records
    from corefsearch.cluster.model import ClustererConfig, MentionEncoder

    torch.manual_seed(4)
    trained = tmp_path / "trained"
    MentionEncoder.from_base(str(tiny_base), ClustererConfig(mlp_hidden=512, mlp_out=256, threshold=0.5)).save(trained)
    records = split_records(write_cluster_dataset(tmp_path / "ds"), "train")
    shipped = write_shipped(trained, tmp_path / "int8", a_card("int8")).folder
    head = HEAD_FILES["clusterer"]
    assert head_precision(shipped / head) == "int8"
    assert (shipped / head).stat().st_size < (trained / head).stat().st_size / 2.5
    got = MentionEncoder.load(shipped, "cpu").encode(records, batch_size=3)
    expected = MentionEncoder.load(trained, backend="onnx-int8").encode(records, batch_size=3)
    assert not np.array_equal(got, expected)
    cosines = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosines.min() > 0.999
    # --head-precision fp32 keeps the head as trained: the same vectors to the bit.
    fp32 = write_shipped(trained, tmp_path / "fp32", a_card("fp32"), head_precision="fp32").folder
    assert head_precision(fp32 / head) == "fp32"
    np.testing.assert_array_equal(MentionEncoder.load(fp32, "cpu").encode(records, batch_size=3), expected)


def test_a_shipped_reader_reads_as_the_int8_backend_of_the_trained_one(trained: dict[str, Path],
                                                                        shipped: dict[str, Path]) -> None:
    from corefsearch.reader.read import Reader
    from corefsearch.reader.rerank import ReaderOptions

    expected = Reader.load(trained["reader"], backend="onnx-int8").read(a_query(), PASSAGES)
    got = Reader.load(shipped["reader"]).read(a_query(), PASSAGES)
    assert [(h.passage_id, h.score, h.start, h.end) for h in got] == [
        (h.passage_id, h.score, h.start, h.end) for h in expected]
    options = ReaderOptions(shipped["reader"], device="cpu")
    options.validate()
    assert options.backend == "onnx-int8"  # what a run records is what runs
    with pytest.raises(InputError, match="ships only its int8 ONNX export"):
        ReaderOptions(shipped["reader"], backend="torch").validate()


def test_a_shipped_retriever_encodes_as_the_int8_backend_of_the_trained_one(trained: dict[str, Path],
                                                                             shipped: dict[str, Path]) -> None:
    from corefsearch.base.schema import Query
    from corefsearch.dense.model import BiEncoder

    titles, texts = [f"Report {i}" for i in range(len(PASSAGES))], [t for _, t in PASSAGES]
    queries = [a_query(), Query("q2", "p", TEXTS[2], 2, 6, "fire", "t")]
    full = BiEncoder.load(str(trained["retriever"]), "cpu")
    fingerprints = full.fingerprints()
    full.use_backend("onnx-int8")
    model = BiEncoder.load(str(shipped["retriever"]), "cpu")
    assert model.backend == "onnx-int8" and model.fingerprints() == fingerprints
    model.use_backend(None)
    for side in ("query_encoder", "passage_encoder"):
        assert type(getattr(model, side).model).__name__ == "OnnxEncoder"
    np.testing.assert_array_equal(model.passage_encoder.encode_passages(titles, texts, 48),
                                  full.passage_encoder.encode_passages(titles, texts, 48))
    np.testing.assert_array_equal(model.query_encoder.encode_queries(queries, 32),
                                  full.query_encoder.encode_queries(queries, 32))
    with pytest.raises(InputError, match="ships only its int8 ONNX export"):
        model.use_backend("torch")


def test_the_cli_ships_a_folder_and_refuses_in_one_line(trained: dict[str, Path], shipped: dict[str, Path],
                                                        tmp_path: Path) -> None:
    card = tmp_path / "card.json"
    card.write_text(json.dumps(a_card("reader-event", mention_type="event")), encoding="utf-8")
    out = tmp_path / "reader-event"
    result = runner.invoke(app, ["export-onnx", str(trained["reader"]), "--ship", str(out), "--card", str(card)])
    assert result.exit_code == 0, result.output
    assert f"Wrote {out}: the inference-only reader" in flat(result.output)
    assert json.loads((out / SHIP_CARD).read_text())["mention_type"] == "event"

    def error(*args: object) -> str:
        result = runner.invoke(app, [str(a) for a in args])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
        return flat(result.output)

    assert "already exists (use --overwrite" in error("export-onnx", trained["reader"], "--ship", out, "--card", card)
    assert runner.invoke(app, ["export-onnx", str(trained["reader"]), "--ship", str(out), "--card", str(card),
                               "--overwrite"]).exit_code == 0
    assert "would overwrite its input" in error("export-onnx", trained["reader"], "--ship", trained["reader"] / "x",
                                                "--card", card)
    assert "go together" in error("export-onnx", trained["reader"], "--ship", tmp_path / "new")
    assert "go together" in error("export-onnx", trained["reader"], "--head-precision", "fp32")
    assert "--head-precision fp16: give one of int8, fp32" in error(
        "export-onnx", trained["reader"], "--ship", tmp_path / "new", "--card", card, "--head-precision", "fp16")
    assert "ships only its int8 ONNX export" in error("export-onnx", shipped["reader"])
    assert "ships only its int8 ONNX export already" in error("export-onnx", shipped["reader"], "--ship",
                                                              tmp_path / "again", "--card", card)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "colour": "red"}), encoding="utf-8")
    assert "unknown keys colour" in error("export-onnx", trained["reader"], "--ship", tmp_path / "b", "--card", bad)
    assert "is not its folder's ('b')" in error("export-onnx", trained["reader"], "--ship", tmp_path / "b",
                                                  "--card", card)
    bad.write_text(json.dumps(a_card("b", kind="detector")), encoding="utf-8")
    assert "the folder holds a reader" in error("export-onnx", trained["reader"], "--ship", tmp_path / "b",
                                                "--card", bad)
    assert not (tmp_path / "b").exists() and not (tmp_path / "new").exists()
    # A damaged export is refused on load, not run.
    damaged = tmp_path / "damaged"
    shutil.copytree(shipped["reader"], damaged)
    with (damaged / "onnx" / "model_qint8.onnx").open("ab") as handle:
        handle.write(b"\0")
    from corefsearch.reader.read import Reader

    with pytest.raises(InputError, match="sha256 differs"):
        Reader.load(damaged)


def test_a_data_file_without_a_sha256_gets_one(trained: dict[str, Path], tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text("{}\n", encoding="utf-8")
    card = a_card("out", data=[{"path": str(data)}])
    write_shipped(trained["detector"], tmp_path / "out", card)
    written = json.loads((tmp_path / "out" / SHIP_CARD).read_text())
    from corefsearch.io.write import sha256_file

    assert written["data"] == [{"path": str(data), "sha256": "sha256:" + sha256_file(data)}]
    with pytest.raises(InputError, match="has no sha256 and is not here"):
        write_shipped(trained["detector"], tmp_path / "out2", a_card("out2", data=[{"path": "nowhere.jsonl"}]))


def test_a_shipped_folder_names_no_folder_of_the_machine_it_was_trained_on(
        trained: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    root = tmp_path / "repo"
    (root / "work" / "data").mkdir(parents=True)
    model = tmp_path / "model"
    shutil.copytree(trained["detector"], model)
    (model / "training_args.json").write_text(json.dumps(
        {"dataset": str(root / "work" / "data"), "options": {"base_model": str(tmp_path / "elsewhere" / "base")},
         "epochs": 4}), encoding="utf-8")
    monkeypatch.chdir(root)
    write_shipped(model, tmp_path / "out", a_card("out"))
    record = json.loads((tmp_path / "out" / "training_args.json").read_text())
    assert record == {"dataset": "work/data", "options": {"base_model": "base"}, "epochs": 4}
