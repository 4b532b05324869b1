"""Reader training recipe: loss weighting and ranking terms, length-bucketed passes, the fusion that
`train reader` records from dev and that `search`/`query` use unless told otherwise.

Tiny random BERTs and the tiny corpus of helpers.py (fixtures in conftest.py and tests/reader/conftest.py)."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from helpers import flat, reader_args, tiny_reader
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.models import READER_CONFIG
from corefsearch.cli import app
from corefsearch.datasets.dataset import Dataset
from corefsearch.io.read import read_jsonl
from corefsearch.io.trec import read_run
from corefsearch.reader.batches import epoch_examples, example_windows
from corefsearch.reader.inputs import length_buckets
from corefsearch.reader.loss import example_loss
from corefsearch.reader.model import CrossEncoderReader
from corefsearch.reader.read import Reader
from corefsearch.reader.train import (
    RRF_METRIC,
    SELECTION_METRIC,
    ReaderTrainingArguments,
    _load_data,
    chosen_fusion,
    train_reader,
)

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")

# The recipe's options away from their defaults, to see them round-trip.
RECIPE = {"span_weight": 0.25, "ranking_loss": "softmax+pairwise", "negatives_from": 12}


# --- length buckets ------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=30), st.integers(0, 1000))
def test_length_buckets_partition_the_windows_and_never_pad_more_than_one_pass(lengths: list[int],
                                                                              overhead: int) -> None:
    groups = length_buckets(lengths, overhead)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    # Contiguous in length order: every window of a pass is at most as long as every one of the next.
    for first, second in zip(groups, groups[1:], strict=False):
        assert max(lengths[i] for i in first) <= min(lengths[i] for i in second)

    def cost(partition: list[list[int]]) -> int:
        return sum(len(g) * max(lengths[i] for i in g) + overhead for g in partition)

    assert cost(groups) <= cost([list(range(len(lengths)))])  # never worse than one pass padded to the longest
    assert cost(groups) <= cost([[i] for i in range(len(lengths))])  # nor than one pass per window


def test_length_buckets_cut_where_padding_outweighs_a_pass() -> None:
    lengths = [40, 90, 41, 92, 39, 91]
    assert length_buckets(lengths, 10_000) == [[4, 0, 2, 1, 5, 3]]  # a pass costs more than any padding
    assert length_buckets(lengths, 16) == [[4, 0, 2], [1, 5, 3]]  # short ones and long ones
    assert length_buckets([7, 7, 7], 0) == [[0, 1, 2]]  # equal lengths: one pass even for free passes


# --- the loss --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def examples_and_passages(tiny_base: Path, tiny_dataset: Path, tiny_run: Path) -> tuple[list, dict]:
    args = reader_args(tiny_base)
    data = _load_data(Dataset(tiny_dataset), [tiny_run], args, log=lambda _: None)
    return epoch_examples(data, args, 1)[:4], data.passages


@pytest.mark.parametrize("head", ["dpr", "integrated"])
def test_length_buckets_do_not_change_the_loss(tiny_base: Path, examples_and_passages: tuple, head: str) -> None:
    import torch

    examples, passages = examples_and_passages
    reader = Reader(tiny_reader(tiny_base, head))
    reader.model.train(False)  # no dropout: the same loss to float precision
    lengths_seen = set()
    with torch.no_grad():
        for example in examples:
            windows, _ = example_windows(reader, example, passages)
            lengths_seen.update(len(w.input_ids) for w in windows)
            for ranking in ("softmax", "softmax+pairwise"):
                one_pass = float(example_loss(reader, example, passages, 0.5, ranking, overhead=None))
                for overhead in (0, 16, 128):
                    assert float(example_loss(reader, example, passages, 0.5, ranking, overhead=overhead)) == (
                        pytest.approx(one_pass, abs=1e-5))
    assert len(lengths_seen) > 1  # the windows do differ in length, so the buckets differ from one pass


def test_span_weight_scales_the_span_term_and_pairwise_adds_the_margin_term(tiny_base: Path,
                                                                              examples_and_passages: tuple) -> None:
    import torch
    import torch.nn.functional as F  # noqa: N812

    examples, passages = examples_and_passages
    reader = Reader(tiny_reader(tiny_base, "dpr"))
    reader.model.train(False)
    with torch.no_grad():
        for example in examples:
            losses = {w: float(example_loss(reader, example, passages, w)) for w in (0.5, 1.0, 3.0)}
            # Linear in the weight: loss(w) = w·span + select, with span > 0.
            span = (losses[3.0] - losses[1.0]) / 2
            assert span > 0
            assert losses[0.5] == pytest.approx(losses[1.0] - 0.5 * span, abs=1e-4)
            # The DPR head's passage scores, read here in one pass: the pairwise term is the mean hinge.
            windows, _ = example_windows(reader, example, passages)
            scores = reader.model.head.select(reader.model.forward(windows).hidden[:, 0]).squeeze(-1)
            hinge = float(F.relu(1.0 - (scores[0] - scores[1:])).mean())
            pairwise = float(example_loss(reader, example, passages, 1.0, "softmax+pairwise"))
            assert pairwise == pytest.approx(losses[1.0] + hinge, abs=1e-4)


def test_recipe_options_are_validated_in_one_line(tiny_base: Path, tiny_dataset: Path, tiny_run: Path,
                                                  tmp_path: Path) -> None:
    for changes, message in (({"span_weight": 0.0}, "--span-weight must be a positive number"),
                             ({"span_weight": -1.0}, "--span-weight"), ({"span_weight": math.nan}, "--span-weight"),
                             ({"span_weight": math.inf}, "--span-weight"),
                             ({"ranking_loss": "listwise"},
                              r"--ranking-loss must be one of softmax, softmax\+pairwise, got .listwise")):
        with pytest.raises(InputError, match=message):
            replace(ReaderTrainingArguments(), **changes).validate()
    result = runner.invoke(app, ["train", "reader", str(tiny_dataset), "--run", str(tiny_run), "--out",
                                 str(tmp_path / "r"), "--ranking-loss", "pairwise", "--base-model", str(tiny_base)])
    assert result.exit_code == 1
    assert "--ranking-loss must be one of" in flat(result.output) and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


# --- training records the recipe and the fusion ----------------------------------------------------------


@pytest.fixture(scope="module")
def recipe_reader(tiny_base: Path, tiny_dataset: Path, tiny_run: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A reader trained through the CLI with the recipe's options away from their defaults."""
    out = tmp_path_factory.mktemp("recipe") / "reader"
    args = reader_args(tiny_base, dev_max_queries=4, **RECIPE)
    result = runner.invoke(app, [
        "train", "reader", str(tiny_dataset), "--run", str(tiny_run), "--out", str(out), "--base-model",
        str(tiny_base), "--epochs", "1", "--batch-size", "2", "--lr", "1e-3", "--warmup", "0", "--negatives", "5",
        "--negatives-from", "12", "--max-length", "48", "--max-query-len", "16", "--doc-stride", "8",
        "--hidden", "16", "--seed", "5", "--device", "cpu", "--dev-rerank-k", "10", "--dev-max-queries", "4",
        "--span-weight", "0.25", "--ranking-loss", "softmax+pairwise", "--threads", "1"])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "training_args.json").read_text())
    expected = {k: v for k, v in asdict(args).items() if k not in ReaderTrainingArguments.run_only}
    assert record["options"] == expected
    return out, result.output


def test_recipe_options_round_trip_through_the_model_folder(recipe_reader: tuple[Path, str]) -> None:
    out, _ = recipe_reader
    options = json.loads((out / "training_args.json").read_text())["options"]
    for name, value in RECIPE.items():
        assert options[name] == value
    # The recorded options rebuild the arguments they came from (and pass validation).
    rebuilt = ReaderTrainingArguments(**options)
    rebuilt.validate()
    assert {k: v for k, v in asdict(rebuilt).items() if k in options} == options


def test_train_reader_records_the_fusion_that_won_on_dev(recipe_reader: tuple[Path, str]) -> None:
    out, output = recipe_reader
    record = json.loads((out / "training_args.json").read_text())
    curve = json.loads((out / "dev_curve.json").read_text())
    kept = next(e for e in curve if e["epoch"] == record["best_epoch"])
    assert 0 <= kept[SELECTION_METRIC] <= 1 and 0 <= kept[RRF_METRIC] <= 1
    winner = "rrf" if kept[RRF_METRIC] > kept[SELECTION_METRIC] else "reader"
    assert record["fusion"] == {"chosen": winner, "dev": {"reader": kept[SELECTION_METRIC], "rrf": kept[RRF_METRIC]},
                                "metric": "MRR@10", "epoch": record["best_epoch"]}
    assert json.loads((out / READER_CONFIG).read_text())["fusion"] == winner
    assert CrossEncoderReader.load(out).config.fusion == winner
    assert f"Fusion: {winner}" in flat(output) and RRF_METRIC in flat(output)


def test_chosen_fusion_prefers_the_reader_on_a_tie_and_without_dev() -> None:
    curve = [{"epoch": 0, "MRR@10": 0.5}, {"epoch": 1, "MRR@10": 0.4, RRF_METRIC: 0.6},
             {"epoch": 2, "MRR@10": 0.7, RRF_METRIC: 0.7}]
    assert chosen_fusion(curve, 1) == ("rrf", {"reader": 0.4, "rrf": 0.6})
    assert chosen_fusion(curve, 2) == ("reader", {"reader": 0.7, "rrf": 0.7})
    assert chosen_fusion([{"epoch": 1, "loss": 1.0}], 1) == ("reader", None)  # no dev queries


def test_train_reader_without_dev_queries_records_reader(tiny_base: Path, tiny_dataset: Path, tiny_run: Path,
                                                         tmp_path: Path) -> None:
    train_only = tmp_path / "train-only.trec"
    dev_ids = {q.id for q in Dataset(tiny_dataset).queries("dev")}
    train_only.write_text("".join(line for line in tiny_run.read_text().splitlines(keepends=True)
                                  if line.split()[0] not in dev_ids))
    out = tmp_path / "reader"
    summary = train_reader(tiny_dataset, train_only, out, reader_args(tiny_base, max_steps=1), log=lambda _: None)
    assert (summary.extras.fusion, summary.extras.fusion_dev) == ("reader", None)
    assert json.loads((out / "training_args.json").read_text())["fusion"]["chosen"] == "reader"
    assert json.loads((out / READER_CONFIG).read_text())["fusion"] == "reader"


def test_a_run_given_as_two_files_trains_the_reader_one_file_trains(tiny_base: Path, tiny_dataset: Path,
                                                                    tiny_run: Path, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    dev_ids = {q.id for q in Dataset(tiny_dataset).queries("dev")}
    lines = tiny_run.read_text().splitlines(keepends=True)
    train_part, dev_part = tmp_path / "train.trec", tmp_path / "dev.trec"
    train_part.write_text("".join(line for line in lines if line.split()[0] not in dev_ids))
    dev_part.write_text("".join(line for line in lines if line.split()[0] in dev_ids))
    one = train_reader(tiny_dataset, tiny_run, tmp_path / "one", reader_args(tiny_base, max_steps=2),
                       log=lambda _: None)
    out = tmp_path / "two"
    two = train_reader(tiny_dataset, [train_part, dev_part], out, reader_args(tiny_base, max_steps=2),
                       log=lambda _: None)
    def scores(curve: list[dict]) -> list[dict]:
        return [{k: v for k, v in entry.items() if k != "seconds"} for entry in curve]

    assert scores(two.dev_curve) == scores(one.dev_curve)
    head_one, head_two = load_file(str(tmp_path / "one" / "reader_head.safetensors")), load_file(
        str(out / "reader_head.safetensors"))
    assert all(torch.equal(head_one[k], head_two[k]) for k in head_one)
    record = json.loads((out / "training_args.json").read_text())
    assert record["run"] == [str(train_part.resolve()), str(dev_part.resolve())]
    assert len(record["run_sha256"]) == 2 and all(d.startswith("sha256:") for d in record["run_sha256"])
    readme = (out / "README.md").read_text()
    assert "the run `train.trec`" in readme and "the run `dev.trec`" in readme
    # The same query in two runs is one line naming both files; nothing is written.
    result = runner.invoke(app, ["train", "reader", str(tiny_dataset), "--run", str(tiny_run), "--run",
                                 str(dev_part), "--out", str(tmp_path / "both"), "--base-model", str(tiny_base),
                                 "--device", "cpu"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "is in both" in flat(result.output) and str(dev_part) in flat(result.output)
    assert not (tmp_path / "both").exists()
    result = runner.invoke(app, ["train", "reader", str(tiny_dataset), "--run", str(train_part), "--run",
                                 str(dev_part), "--out", str(tmp_path / "cli"), "--base-model", str(tiny_base),
                                 "--max-steps", "1", "--device", "cpu"])
    assert result.exit_code == 0, result.output


# --- search and query use the recorded fusion ---------------------------------------------------------------


def _with_fusion(reader: Path, folder: Path, fusion: str | None) -> Path:
    """A copy of ``reader`` whose corefsearch_reader.json records ``fusion`` (None: no such key, as
    a folder written before the fusion was recorded)."""
    copy = folder / f"reader-{fusion}"
    shutil.copytree(reader, copy)
    config = json.loads((copy / READER_CONFIG).read_text())
    config.pop("fusion", None)
    if fusion is not None:
        config["fusion"] = fusion
    (copy / READER_CONFIG).write_text(json.dumps(config))
    return copy


def _search(index: Path, dataset: Path, reader: Path, out: Path, *extra: str) -> dict:
    result = runner.invoke(app, ["search", "--index", str(index), "--queries", str(dataset / "queries" / "dev.jsonl"),
                                 "--out", str(out), "--k", "12", "--query-format", "sentence", "--reader", str(reader),
                                 "--rerank-k", "6", "--device", "cpu", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(Path(f"{out}.meta.json").read_text())


def test_search_uses_the_recorded_fusion_unless_overridden(recipe_reader: tuple[Path, str], tiny_dataset: Path,
                                                           tiny_index: Path, tmp_path: Path) -> None:
    rrf_reader = _with_fusion(recipe_reader[0], tmp_path, "rrf")
    meta = _search(tiny_index, tiny_dataset, rrf_reader, tmp_path / "default.trec")
    assert meta["reader"]["fusion"] == "rrf" and meta["reader"]["fusion_from"] == "model"
    assert meta["tag"].endswith("-rrf")
    explicit = _search(tiny_index, tiny_dataset, rrf_reader, tmp_path / "explicit-rrf.trec", "--rerank-fusion", "rrf")
    assert explicit["reader"]["fusion_from"] == "--rerank-fusion"
    assert read_run(tmp_path / "default.trec") == read_run(tmp_path / "explicit-rrf.trec")
    # --rerank-fusion reader overrides the recorded rrf: the reader's order, another ranking.
    override = _search(tiny_index, tiny_dataset, rrf_reader, tmp_path / "reader.trec", "--rerank-fusion", "reader")
    assert override["reader"] == {**override["reader"], "fusion": "reader", "fusion_from": "--rerank-fusion"}
    assert not override["tag"].endswith("-rrf")
    by_reader, fused = read_run(tmp_path / "reader.trec"), read_run(tmp_path / "default.trec")
    assert by_reader.keys() == fused.keys()
    assert any(len(hits) > 6 for hits in fused.values())  # the sentence's words find more than the six re-ranked
    assert any(sorted(by_reader[q], key=by_reader[q].get) != sorted(fused[q], key=fused[q].get) for q in fused)
    read_scores: dict[str, list[float]] = {}
    for _, span in read_jsonl(Path(f"{tmp_path / 'reader.trec'}.spans.jsonl")):
        read_scores.setdefault(span["qid"], []).append(span["score"])
    for qid in fused:  # the re-ranked six: the reader's own scores, or RRF scores (at most 2 / (60 + 1))
        top_reader = sorted(by_reader[qid].values(), reverse=True)[:6]
        assert top_reader == pytest.approx(sorted(read_scores[qid], reverse=True), abs=1e-4)
        assert all(0 < score <= 2 / 61 + 1e-6 for score in sorted(fused[qid].values(), reverse=True)[:6])
        assert top_reader != pytest.approx(sorted(fused[qid].values(), reverse=True)[:6], abs=1e-4)
    # `query` too.
    answer = runner.invoke(app, ["query", "--index", str(tiny_index), "--mention", "blaze", "--context",
                                 "Firefighters fought the blaze through the night.", "--query-format", "mention",
                                 "--reader", str(rrf_reader), "--rerank-k", "5", "--k", "3", "--json",
                                 "--device", "cpu"])
    assert answer.exit_code == 0, answer.output
    assert json.loads(answer.output)["rerank_fusion"] == "rrf"
    answer = runner.invoke(app, ["query", "--index", str(tiny_index), "--mention", "blaze", "--query-format",
                                 "mention", "--reader", str(rrf_reader), "--rerank-fusion", "reader", "--json",
                                 "--device", "cpu"])
    assert answer.exit_code == 0, answer.output
    assert json.loads(answer.output)["rerank_fusion"] == "reader"


def test_an_older_reader_folder_without_a_fusion_reads_as_reader(recipe_reader: tuple[Path, str],
                                                                  tiny_dataset: Path, tiny_index: Path,
                                                                  tmp_path: Path) -> None:
    old = _with_fusion(recipe_reader[0], tmp_path, None)
    assert "fusion" not in json.loads((old / READER_CONFIG).read_text())
    assert CrossEncoderReader.load(old).config.fusion == "reader"
    meta = _search(tiny_index, tiny_dataset, old, tmp_path / "old.trec")
    assert meta["reader"]["fusion"] == "reader" and meta["reader"]["fusion_from"] == "model"
    assert not meta["tag"].endswith("-rrf")


def test_a_bad_recorded_fusion_is_refused_naming_the_file(recipe_reader: tuple[Path, str], tmp_path: Path) -> None:
    bad = _with_fusion(recipe_reader[0], tmp_path, "borda")
    with pytest.raises(InputError, match=r"corefsearch_reader\.json.*fusion must be one of reader, rrf"):
        CrossEncoderReader.load(bad)


def test_a_reader_started_from_a_retriever_folder_gets_its_query_encoder_and_marker_tokens(
        tiny_base: Path, tmp_path: Path) -> None:
    import torch

    from corefsearch.base.models import MENTION_END, MENTION_START
    from corefsearch.cluster.model import MentionEncoder
    from corefsearch.dense.model import BiEncoder, RetrieverConfig

    torch.manual_seed(3)
    retriever = BiEncoder.from_base(str(tiny_base), RetrieverConfig(pooling="mean", max_query_len=24,
                                                                    max_passage_len=32))
    with torch.no_grad():  # a query encoder unlike the base: its weights must be the ones the reader gets
        for parameter in retriever.query_encoder.model.parameters():
            parameter.add_(0.01)
    folder = tmp_path / "retriever"
    retriever.save(folder)
    reader = tiny_reader(folder, "integrated")
    query_tokenizer = retriever.query_encoder.tokenizer
    assert reader.marker_ids == tuple(query_tokenizer.convert_tokens_to_ids([MENTION_START, MENTION_END]))
    assert len(reader.tokenizer) == len(query_tokenizer)  # the markers were there: no new rows
    expected = retriever.query_encoder.model.state_dict()
    got = reader.model.state_dict()
    assert set(got) == set(expected) and all(torch.equal(got[name], expected[name]) for name in expected)
    assert reader.config.base_model == str(folder / "query_encoder")
    # the mention encoder starts from it the same way
    assert MentionEncoder.from_base(str(folder)).config.base_model == str(folder / "query_encoder")
    (folder / "query_encoder" / "config.json").unlink()
    with pytest.raises(MissingArtefactError, match="a retriever folder without its query encoder"):
        tiny_reader(folder, "integrated")
