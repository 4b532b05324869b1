"""Shipped models from the command line: `corefsearch models` (a table, JSON, none shipped, a bad card), a shipped
model by name through the model options (`cluster --model`, `detect --model`, `query --mention-encoder`, the
search options), and the defaults a command takes when it is given no model, each said on stderr; with none
shipped, each command behaves as before. The models are tiny random ones in a folder of shipped models of the
tests' own (``COREFSEARCH_SHIPPED_DIR``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    flat,
    read_clusters,
    saved_reader,
    ship,
    ship_encoder_and_detector,
    write_cluster_dataset,
)
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.base.shipped import SHIPPED_DIR_ENV
from corefsearch.cli import app
from corefsearch.datasets.dataset import read_queries
from corefsearch.reader.rerank import ReaderOptions
from corefsearch.search.options import ExpansionOptions, SearchOptions

runner = CliRunner(env={"COLUMNS": "250"})
pytestmark = pytest.mark.usefixtures("one_thread")


def cli(*args: object) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


@pytest.fixture(scope="module")
def shipped_root(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of shipped models: an event mention encoder, a detector of every type and a reader."""
    root = ship_encoder_and_detector(tiny_base, tmp_path_factory.mktemp("shipped"))
    ship(saved_reader(tiny_base, root / "tiny-reader"), "reader", None)
    return root


@pytest.fixture
def shipped(shipped_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(shipped_root))
    return shipped_root


# --- corefsearch models ------------------------------------------------------------------------------------


def test_models_with_none_shipped_says_so_in_one_line() -> None:
    result = cli("models")
    assert result.exit_code == 0 and result.stdout.startswith("No models are shipped (in ")
    assert len(result.stdout.strip().splitlines()) == 1
    result = cli("models", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []


def test_models_lists_each_shipped_model_as_a_table_and_as_json(shipped: Path) -> None:
    result = cli("models")
    assert result.exit_code == 0, result.output
    cells = [line.split() for line in result.stdout.splitlines()]
    rows = {words[1]: " ".join(words) for words in cells if words[1:2] and "-" in words[1]}
    assert set(rows) == {"event-encoder", "detector-all", "tiny-reader"}
    encoder = rows["event-encoder"]
    assert "clusterer" in encoder and "event" in encoder and "CoNLL F1 72.65" in encoder
    assert "CoNLL F1 70.5, MUC F1 80" in encoder
    assert str(shipped / "event-encoder" / "corefsearch_card.json") in flat(result.stdout)
    assert "F1 0.5" in rows["detector-all"] and "F1 0.25" in rows["detector-all"]
    listed = json.loads(cli("models", "--json").stdout)
    assert [m["name"] for m in listed] == ["detector-all", "event-encoder", "tiny-reader"]
    reader = listed[2]
    assert (reader["kind"], reader["mention_type"], reader["path"]) == ("reader", None, str(shipped / "tiny-reader"))
    assert reader["size_bytes"] == sum(p.stat().st_size for p in (shipped / "tiny-reader").rglob("*") if p.is_file())
    assert reader["card"] == str(shipped / "tiny-reader" / "corefsearch_card.json")
    mb = f"{reader['size_bytes'] / 1e6:.1f}"
    assert mb in rows["tiny-reader"]


def test_models_with_a_damaged_card_or_model_file_is_one_line_naming_it(shipped_root: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "shipped"
    shutil.copytree(shipped_root, root)
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(root))
    card = root / "event-encoder" / "corefsearch_card.json"
    card.write_text(card.read_text()[:40])
    result = cli("models")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {card}:") and "not a valid model card" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    # The name given to an option reads the card too.
    result = cli("cluster", tmp_path / "ds", "--out", tmp_path / "c.jsonl", "--method", "encoder", "--model",
                 "event-encoder")
    assert result.exit_code == 1 and f"{card}:" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    shutil.rmtree(root / "event-encoder")
    settings = root / "detector-all" / "corefsearch_detector.json"
    settings.unlink()
    result = cli("models", "--json")
    assert result.exit_code == 1 and f"error: {settings}: no such file" in result.stderr


# --- by name, and by default ------------------------------------------------------------------------------


def test_cluster_takes_a_shipped_encoder_by_name_and_by_default(shipped: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = write_cluster_dataset(tmp_path / "ds")
    common = ("cluster", dataset, "--method", "encoder", "--threshold", "0.3", "--device", "cpu")
    by_folder = cli(*common, "--out", tmp_path / "folder.jsonl", "--model", shipped / "event-encoder")
    assert by_folder.exit_code == 0, by_folder.output
    by_name = cli(*common, "--out", tmp_path / "name.jsonl", "--model", "event-encoder")
    assert by_name.exit_code == 0, by_name.output
    assert "Using the shipped" not in by_name.stderr
    by_default = cli(*common, "--out", tmp_path / "default.jsonl")
    assert by_default.exit_code == 0, by_default.output
    assert by_default.stderr.strip() == f"Using the shipped mention encoder event-encoder ({shipped / 'event-encoder'})"
    clusters = read_clusters(tmp_path / "folder.jsonl")
    assert read_clusters(tmp_path / "name.jsonl") == clusters == read_clusters(tmp_path / "default.jsonl")
    unknown = cli(*common, "--out", tmp_path / "x.jsonl", "--model", "./no-such-encoder")
    assert unknown.exit_code == 1
    assert "(shipped models: detector-all, event-encoder, tiny-reader)" in unknown.stderr
    # No shipped mention encoder for entity mentions: the dataset's clusters are entities.
    clusters_file = dataset / "clusters.jsonl"
    clusters_file.write_text(clusters_file.read_text().replace('"type": "event"', '"type": "entity"'))
    refused = cli(*common, "--out", tmp_path / "entity.jsonl")
    assert refused.exit_code == 1 and "no shipped mention encoder is for entity mentions" in flat(refused.stderr)
    # None shipped: as before.
    (tmp_path / "none").mkdir()
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(tmp_path / "none"))
    refused = cli(*common, "--out", tmp_path / "none.jsonl")
    assert refused.exit_code == 1
    assert refused.stderr.strip() == ("error: --method encoder needs --model MODEL_DIR (a mention encoder from "
                                      "`corefsearch train clusterer`)")


def test_detect_takes_a_shipped_detector_by_name_and_by_default(shipped: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    named = write_cluster_dataset(tmp_path / "named")
    result = cli("detect", named, "--model", "detector-all", "--device", "cpu")
    assert result.exit_code == 0, result.output
    manifest = json.loads((named / "predicted_mentions.json").read_text())
    assert manifest["detector"]["name"] == str(shipped / "detector-all")  # the folder, not the name
    defaulted = write_cluster_dataset(tmp_path / "defaulted")
    result = cli("detect", defaulted, "--device", "cpu", "--mention-type", "event")
    assert result.exit_code == 0, result.output
    assert f"Using the shipped mention detector detector-all ({shipped / 'detector-all'})" in result.stderr
    assert json.loads((defaulted / "predicted_mentions.json").read_text())["types"] == ["event"]
    (tmp_path / "none").mkdir()
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(tmp_path / "none"))
    result = cli("detect", write_cluster_dataset(tmp_path / "plain"))
    assert result.exit_code == 2 and "Missing option '--model'" in result.stderr


def test_the_search_options_resolve_names_and_take_the_shipped_mention_encoder_where_one_is_needed(
        shipped: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    said: list[str] = []
    encoder = shipped / "event-encoder"
    options = SearchOptions(expansion=ExpansionOptions(rounds=2)).check(log=said.append)
    assert options.mention_encoder == encoder and options.expansion.candidates == "detected"
    assert said == [f"Using the shipped mention encoder event-encoder ({encoder})"]
    assert options.expansion.describe()["encoder"] == str(encoder)
    said.clear()
    clustered = SearchOptions(cluster=True).check(log=said.append)
    assert clustered.mention_encoder == encoder and len(said) == 1
    # The reader's spans need no mention encoder; names become folders.
    said.clear()
    options = SearchOptions(reader=ReaderOptions(Path("tiny-reader")),
                            expansion=ExpansionOptions(rounds=2, detector="detector-all")).check(log=said.append)
    assert said == [] and options.mention_encoder is None and options.expansion.candidates == "reader"
    assert options.reader.model == shipped / "tiny-reader"
    options = SearchOptions(expansion=ExpansionOptions(rounds=2, detector="detector-all",
                                                       encoder=Path("event-encoder"))).check(log=said.append)
    assert said == [] and options.mention_encoder == encoder
    assert options.expansion.detector == str(shipped / "detector-all")
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(tmp_path))
    with pytest.raises(InputError, match="add --mention-encoder DIR"):
        SearchOptions(expansion=ExpansionOptions(rounds=2)).check()
    with pytest.raises(InputError, match="--cluster clusters the mentions found with a mention encoder"):
        SearchOptions(cluster=True).check()


@pytest.fixture(scope="module")
def index(tiny_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("index") / "index"
    result = cli("index", tiny_dataset, "--out", out, "--threads", "1")
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.java
def test_query_takes_a_shipped_mention_encoder_by_name_and_by_default(shipped: Path, tiny_dataset: Path, index: Path,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    qid = read_queries(tiny_dataset / "queries" / "dev.jsonl")[0].id
    base = ("query", "--index", index, "--dataset", tiny_dataset, "--qid", qid, "--query-format", "mention",
            "--device", "cpu", "--k", "5", "--json", "--cluster")
    by_name = cli(*base, "--mention-encoder", "event-encoder")
    assert by_name.exit_code == 0, by_name.output
    assert "Using the shipped" not in by_name.stderr
    by_default = cli(*base)
    assert by_default.exit_code == 0, by_default.output
    assert f"Using the shipped mention encoder event-encoder ({shipped / 'event-encoder'})" in by_default.stderr
    cluster = json.loads(by_name.stdout)["cluster"]
    assert cluster == json.loads(by_default.stdout)["cluster"] and cluster["threshold"] == 0.5
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(tmp_path))
    refused = cli(*base)
    assert refused.exit_code == 1 and "add --mention-encoder DIR" in flat(refused.stderr)
