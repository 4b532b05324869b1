"""Mention detection: BIO tags and spans, the tiny detector's offsets, the scorer by hand, `train detector`,
`detect` (predicted mentions kept apart from gold ones, resumable) and `evaluate --mentions`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import (
    BROKEN_PREDICTED,
    break_predicted,
    build_tiny_dataset,
    corpus_words,
    make_tiny_bert,
    one_torch_thread,
)
from typer.testing import CliRunner

from corefsearch.base.errors import CorefSearchError
from corefsearch.cli import app
from corefsearch.detect.labels import B_TAG, I_TAG, IGNORE, O_TAG, spans_from_tags, tags_for_spans, trim
from corefsearch.evaluate.mentions import score_detection
from corefsearch.io.write import sha256_file

runner = CliRunner()


def one_line_error(*args: object) -> str:
    """The one line (exit 1, no traceback) with which a command refuses."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- BIO tags ------------------------------------------------------------------------------------------


def test_tags_for_spans_marks_first_token_b_and_keeps_the_longer_of_overlapping_spans() -> None:
    offsets = [(0, 0), (0, 3), (4, 9), (10, 14), (14, 15), (0, 0)]  # [CLS] the quake hit . [SEP]
    assert tags_for_spans(offsets, [(4, 14)]) == [IGNORE, O_TAG, B_TAG, I_TAG, O_TAG, IGNORE]
    # "quake hit" and "quake" overlap: one BIO sequence keeps the longer
    assert tags_for_spans(offsets, [(4, 9), (4, 14)]) == [IGNORE, O_TAG, B_TAG, I_TAG, O_TAG, IGNORE]
    # a span that starts inside a token takes the whole token
    assert tags_for_spans(offsets, [(6, 9)]) == [IGNORE, O_TAG, B_TAG, O_TAG, O_TAG, IGNORE]


def test_spans_from_tags_decodes_b_i_runs_an_i_after_o_and_stops_at_special_tokens() -> None:
    offsets = [(0, 0), (0, 3), (4, 9), (10, 14), (15, 20), (21, 24), (0, 0)]
    tags = [IGNORE, B_TAG, I_TAG, O_TAG, I_TAG, B_TAG, I_TAG]
    scores = [0.0, 0.9, 0.7, 0.5, 0.6, 0.8, 0.1]
    assert spans_from_tags(tags, offsets, scores) == [(0, 9, pytest.approx(0.8)), (15, 20, 0.6), (21, 24, 0.8)]
    assert spans_from_tags([B_TAG, B_TAG], [(0, 2), (3, 5)]) == [(0, 2, 1.0), (3, 5, 1.0)]
    assert trim("  fire ", 0, 7) == (2, 6)
    assert trim("   ", 0, 3) is None


# --- the scorer, by hand -------------------------------------------------------------------------------


def test_score_detection_strict_and_head_by_hand() -> None:
    gold = {"p1": [(0, 5, "event"), (10, 25, "entity")], "p2": [(3, 8, "event")]}
    heads = {"p1": [(0, 5), (19, 25)], "p2": [(3, 8)]}
    predicted = {"p1": [(0, 5, "event"), (19, 25, "entity"), (30, 33, "event")],
                 "p2": [(3, 8, "entity")], "p3": [(0, 1, "event")]}  # p3: no gold, not scored
    scores = score_detection(gold, predicted, heads)
    strict, head = scores["strict"], scores["head"]
    # strict: event 1 correct of 2 gold, 2 predicted; entity 0 of 1 gold, 2 predicted
    assert (strict["event"].correct, strict["event"].gold, strict["event"].predicted) == (1, 2, 2)
    assert (strict["entity"].correct, strict["entity"].gold, strict["entity"].predicted) == (0, 1, 2)
    assert strict["all"].f1 == pytest.approx(2 * (1 / 4) * (1 / 3) / (1 / 4 + 1 / 3))
    # head: the entity prediction (19, 25) holds the gold entity's head; the p2 type differs: no match
    assert head["entity"].correct == 1 and head["event"].correct == 1
    assert head["all"].precision == pytest.approx(2 / 4) and head["all"].recall == pytest.approx(2 / 3)


def test_head_match_is_one_to_one() -> None:
    gold = {"p": [(0, 3, "entity"), (4, 7, "entity")]}
    heads = {"p": [(0, 3), (4, 7)]}
    scores = score_detection(gold, {"p": [(0, 7, "entity")]}, heads)
    assert scores["head"]["entity"].correct == 1  # one prediction holds both heads but matches one


# --- the tiny detector -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-detector-base"), corpus_words() + ["café", "zürich"], seed=3)


def test_a_detector_trained_on_one_passage_gives_exact_offsets_on_non_ascii_text_and_at_the_last_character(
        tiny_base: Path) -> None:
    import torch

    from corefsearch.detect.model import DetectorConfig, MentionDetector

    text = "Fire at the Café in Zürich; firemen fought the blaze"
    gold = [(0, 4, "event"), (12, 16, "entity"), (20, 26, "entity"), (47, 52, "event")]  # blaze: the last characters
    assert text[47:52] == "blaze" and len(text) == 52 and text[12:16] == "Café"
    with one_torch_thread():
        torch.manual_seed(0)
        detector = MentionDetector.from_base(str(tiny_base), DetectorConfig(max_length=64, stride=8, dropout=0.0))
        optimizer = torch.optim.Adam([*detector.model.parameters(), *detector.head.parameters()], lr=3e-3)
        detector.train(True)
        windows = detector.windows([text])
        for _ in range(150):
            optimizer.zero_grad()
            loss = detector.loss(windows, [gold])
            loss.backward()
            optimizer.step()
        found = detector.detect([text])[0]
    assert [(s, e, k) for s, e, k, _ in found] == sorted(gold)
    assert [text[s:e] for s, e, _, _ in found] == ["Fire", "Café", "Zürich", "blaze"]


def test_long_passages_are_read_in_windows_and_spans_found_twice_are_kept_once(tiny_base: Path) -> None:
    from corefsearch.detect.model import DetectorConfig, MentionDetector

    detector = MentionDetector.from_base(str(tiny_base), DetectorConfig(max_length=16, stride=4))
    text = " ".join(["the fire burned"] * 12)
    windows = detector.windows([text, "fire"])
    assert len({w.row for w in windows}) == 2 and sum(w.row == 0 for w in windows) > 1
    for window in windows:
        for start, end in window.offsets:
            source = text if window.row == 0 else "fire"
            assert (start, end) == (0, 0) or (source[start:end].strip() == source[start:end] != "")
    found = detector.detect([text, "fire"])
    for spans, source in zip(found, [text, "fire"], strict=True):
        assert len(spans) == len(set(spans))
        assert all(0 <= s < e <= len(source) and source[s:e].strip() == source[s:e] for s, e, _, _ in spans)


# --- train detector, detect, evaluate --mentions ----------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_dataset(tmp_path_factory, (0.5, 0.25, 0.25))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, dataset: Path, tiny_base: Path) -> Path:
    out = tmp_path_factory.mktemp("detector") / "model"
    with one_torch_thread():
        result = runner.invoke(app, ["train", "detector", str(dataset), "--out", str(out), "--base-model",
                                     str(tiny_base), "--mention-type", "event", "--max-steps", "2", "--epochs", "1",
                                     "--batch-size", "4"])
    assert result.exit_code == 0, result.output
    return out


def test_train_detector_writes_a_detector_folder_with_its_card(trained: Path) -> None:
    config = json.loads((trained / "corefsearch_detector.json").read_text())
    assert config["types"] == ["event"]
    record = json.loads((trained / "training_args.json").read_text())
    assert record["kind"] == "corefsearch-detector-training" and record["options"]["mention_type"] == "event"
    card = (trained / "README.md").read_text()
    assert "token-classification" in card and "corefsearch detect DATASET --model" in card


def _copy(dataset: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "dataset"
    shutil.copytree(dataset, copy)
    return copy


@pytest.mark.parametrize("model", ["trained", "heuristic"])
def test_detect_keeps_predicted_mentions_apart_and_their_offsets_slice_the_passages(
        model: str, trained: Path, dataset: Path, tmp_path: Path) -> None:
    from corefsearch.datasets.dataset import Dataset

    copy = _copy(dataset, tmp_path)
    before = sha256_file(copy / "passages.jsonl")
    reference = str(trained) if model == "trained" else "heuristic"
    with one_torch_thread():
        result = runner.invoke(app, ["detect", str(copy), "--model", reference, "--batch-size", "3"])
    assert result.exit_code == 0, result.output
    assert sha256_file(copy / "passages.jsonl") == before  # gold mentions untouched
    data = Dataset(copy)
    texts = {p.id: p.text for p in data.passages()}
    found = list(data.predicted_mentions())
    manifest = data.predicted_manifest()
    assert manifest["counts"]["passages"] == len(texts)
    assert sum(manifest["counts"][k] for k in ("event", "entity")) == len(found)
    for mention in found:
        assert texts[mention.passage_id][mention.start:mention.end] == mention.text
    if model == "heuristic":
        assert any(m.text == "earthquake" for m in found) or found  # the parse finds verbs and nouns
        assert {m.type for m in found} == {"event", "entity"}
    again = runner.invoke(app, ["detect", str(copy), "--model", reference])
    assert again.exit_code == 1 and "--overwrite" in again.output


def test_detect_resumes_at_the_first_unwritten_shard(trained: Path, dataset: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import corefsearch.detect.run as run

    copy = _copy(dataset, tmp_path)
    with one_torch_thread():
        run.detect_dataset(copy, str(trained), shard_size=2)
        first = (copy / "predicted_mentions.jsonl").read_text()
        calls = []
        detect_passages = run.detect_passages

        def interrupted(*args: object, **kwargs: object) -> object:
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return detect_passages(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(run, "detect_passages", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run.detect_dataset(copy, str(trained), shard_size=2, overwrite=True)
        assert (copy / run.WORK_DIR / "shard-000000.jsonl").is_file()
        monkeypatch.setattr(run, "detect_passages", detect_passages)
        messages: list[str] = []
        summary = run.detect_dataset(copy, str(trained), shard_size=2, overwrite=True, log=messages.append)
    assert summary.resumed_shards == 1 and any("Resuming" in m for m in messages)
    assert (copy / "predicted_mentions.jsonl").read_text() == first
    assert not (copy / run.WORK_DIR).exists()


def test_evaluate_mentions_scores_a_detection_against_the_gold_mentions(dataset: Path, tmp_path: Path) -> None:
    copy = _copy(dataset, tmp_path)
    from corefsearch.datasets.dataset import Dataset

    # a perfect detection of the events: every gold mention as a prediction
    lines = []
    for passage in Dataset(copy).passages():
        for m in passage.mentions:
            lines.append({"mention_id": f"{passage.id}:{m.start}", "passage_id": passage.id, "doc_id": passage.doc_id,
                          "start": m.start, "end": m.end, "type": m.type, "score": 1.0,
                          "text": passage.text[m.start:m.end]})
    path = tmp_path / "gold_as_predicted.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = runner.invoke(app, ["evaluate", "--mentions", str(path), "--dataset", str(copy), "--output-format",
                                 "json"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    assert scores["strict"]["event"]["F1"] == 1.0 and scores["head"]["all"]["F1"] == 1.0
    missing = runner.invoke(app, ["evaluate", "--mentions", str(path)])
    assert missing.exit_code == 1 and "--dataset" in missing.output


@pytest.mark.parametrize("state", BROKEN_PREDICTED)
def test_broken_predicted_mentions_are_named_by_every_command_and_detect_overwrite_repairs_them(
        dataset: Path, tmp_path: Path, state: str) -> None:
    from corefsearch.datasets.dataset import Dataset

    copy = _copy(dataset, tmp_path)
    assert runner.invoke(app, ["detect", str(copy), "--model", "heuristic"]).exit_code == 0
    expected = f"error: {break_predicted(copy, state)}"
    # detect (never "already exists" of a file that is not there), evaluate --mentions DATASET, add: the same line
    assert one_line_error("detect", copy, "--model", "heuristic") == expected
    assert one_line_error("evaluate", "--mentions", copy, "--dataset", copy) == expected
    corpus = tmp_path / "new"
    corpus.mkdir()
    (corpus / "corpus.jsonl").write_text(json.dumps({"doc_id": "new-1", "text": "The earthquake hit the town."}) + "\n",
                                         encoding="utf-8")
    before = sha256_file(copy / "passages.jsonl")
    assert one_line_error("add", copy, "--corpus", corpus) == expected
    assert sha256_file(copy / "passages.jsonl") == before  # refused before anything was added
    # --overwrite writes both files afresh, and the dataset's predicted mentions read again
    result = runner.invoke(app, ["detect", str(copy), "--model", "heuristic", "--overwrite"])
    assert result.exit_code == 0, result.output
    manifest = Dataset(copy).check_predicted()
    assert manifest is not None
    assert manifest["file_sha256"] == "sha256:" + sha256_file(copy / "predicted_mentions.jsonl")
    assert sum(manifest["counts"][k] for k in ("event", "entity")) == len(list(Dataset(copy).predicted_mentions()))
    scored = runner.invoke(app, ["evaluate", "--mentions", str(copy), "--dataset", str(copy)])
    assert scored.exit_code == 0, scored.output


def test_detect_overwrite_stopped_before_its_manifest_leaves_no_new_mentions_under_the_old_record(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import corefsearch.detect.run as run
    from corefsearch.datasets.dataset import Dataset

    copy = _copy(dataset, tmp_path)
    run.detect_dataset(copy, "heuristic", types=["event"])

    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "write_manifest", stopped)
    with pytest.raises(KeyboardInterrupt):
        run.detect_dataset(copy, "heuristic", overwrite=True)  # every type now: another file than the manifest's
    assert (copy / "predicted_mentions.jsonl").is_file() and not (copy / "predicted_mentions.json").exists()
    with pytest.raises(CorefSearchError, match=r"has no manifest beside it .* --overwrite` to detect them again"):
        Dataset(copy).check_predicted()
    monkeypatch.undo()
    run.detect_dataset(copy, "heuristic", overwrite=True)
    assert Dataset(copy).predicted_manifest()["types"] == ["event", "entity"]


def test_detect_refuses_what_is_not_a_detector(dataset: Path, tmp_path: Path, tiny_base: Path,
                                               trained: Path) -> None:
    copy = _copy(dataset, tmp_path)
    result = runner.invoke(app, ["detect", str(copy), "--model", str(trained), "--backend", "onnx", "--device", "cuda"])
    assert result.exit_code == 1 and "runs the model on the CPU" in result.output
    assert not (copy / "predicted_mentions.jsonl").exists()
    result = runner.invoke(app, ["detect", str(copy), "--model", str(tiny_base)])
    assert result.exit_code == 1 and "not a detector folder" in result.output
    result = runner.invoke(app, ["detect", str(copy), "--model", "heuristic", "--backend", "onnx"])
    assert result.exit_code == 1 and "spaCy" in result.output
    result = runner.invoke(app, ["detect", str(copy), "--model", "heuristic", "--mention-type", "events"])
    assert result.exit_code == 2 and "--mention-type" in result.output
    result = runner.invoke(app, ["detect", str(copy)])
    assert result.exit_code == 2


def test_train_detector_refuses_an_ecbplus_dataset_that_is_not_annotated_in_full(dataset: Path,
                                                                                  tmp_path: Path) -> None:
    copy = _copy(dataset, tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["options"]["source"] = {"format": "ecbplus", "mention_type": "all", "chains": "cross-document",
                                     "validated_only": False}
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    result = runner.invoke(app, ["train", "detector", str(copy), "--out", str(tmp_path / "m")])
    assert result.exit_code == 1 and "--validated-only --chains all" in result.output


@pytest.mark.parametrize("options", [{}, {"quantize_ops": "all", "fuse": False}], ids=["default", "unfused-all"])
def test_an_onnx_export_of_a_detector_finds_what_torch_finds(trained: Path, tmp_path: Path, options: dict) -> None:
    from corefsearch.detect.model import MentionDetector
    from corefsearch.export.onnx import export_onnx

    folder = tmp_path / "detector"
    shutil.copytree(trained, folder)
    with one_torch_thread():
        summary = export_onnx(folder, quantize=True, **options)
        assert summary.kind == "detector" and (folder / "onnx" / "model.onnx").is_file()
        record = json.loads((folder / "onnx" / "export.json").read_text())
        assert record["quantization"]["ops"] == options.get("quantize_ops", "linear")
        assert (record["fusion"] is not None) == options.get("fuse", True)  # a BERT is fused by default
        texts = ["The quake hit the town.", "Firefighters fought the blaze " * 30]
        torch_found = MentionDetector.load(folder).detect(texts)
        onnx_found = MentionDetector.load(folder, backend="onnx").detect(texts)
        MentionDetector.load(folder, backend="onnx-int8").detect(texts)  # runs; int8 may differ by design
    assert [[m[:3] for m in found] for found in onnx_found] == [[m[:3] for m in found] for found in torch_found]
    for a, b in zip(onnx_found, torch_found, strict=True):
        assert all(abs(x[3] - y[3]) < 1e-3 for x, y in zip(a, b, strict=True))


def test_add_detects_the_new_passages_with_the_datasets_detector(trained: Path, dataset: Path,
                                                                   tmp_path: Path) -> None:
    from corefsearch.datasets.dataset import Dataset

    copy = _copy(dataset, tmp_path)
    detector = tmp_path / "detector"
    shutil.copytree(trained, detector)
    with one_torch_thread():
        assert runner.invoke(app, ["detect", str(copy), "--model", str(detector)]).exit_code == 0
        before = (copy / "predicted_mentions.jsonl").read_text()
        corpus = tmp_path / "new"
        corpus.mkdir()
        (corpus / "corpus.jsonl").write_text(json.dumps({"doc_id": "new-1", "title": "Quake",
                                                         "text": "The earthquake hit the town. Crews came."}) + "\n",
                                             encoding="utf-8")
        result = runner.invoke(app, ["add", str(copy), "--corpus", str(corpus)])
    assert result.exit_code == 0, result.output
    assert "predicted mentions: +" in result.output
    data = Dataset(copy)
    after = (copy / "predicted_mentions.jsonl").read_text()
    assert after.startswith(before)
    manifest = data.predicted_manifest()
    assert manifest["passages_sha256"] == "sha256:" + sha256_file(copy / "passages.jsonl")
    assert manifest["counts"]["passages"] == sum(1 for _ in data.passages())
    texts = {p.id: p.text for p in data.passages()}
    assert all(texts[m.passage_id][m.start:m.end] == m.text for m in data.predicted_mentions())
    # a detector that is gone: refused before anything is added
    shutil.rmtree(detector)
    (corpus / "corpus.jsonl").write_text(json.dumps({"doc_id": "new-2", "text": "A storm came."}) + "\n",
                                         encoding="utf-8")
    result = runner.invoke(app, ["add", str(copy), "--corpus", str(corpus)])
    assert result.exit_code == 1 and "cannot be loaded" in result.output
    assert sha256_file(copy / "passages.jsonl") == manifest["passages_sha256"].removeprefix("sha256:")


def test_add_of_text_files_detects_them_with_the_datasets_detector(trained: Path, tmp_path: Path) -> None:
    """A collection built from .txt files grows by more .txt files (a nested one too), and the detector that
    found the dataset's mentions runs on the new passages."""
    from corefsearch.datasets.dataset import Dataset

    first = tmp_path / "first"
    first.mkdir()
    (first / "fire.txt").write_text("A fire burned the mill at Avonford.\nCrews fought the blaze all night.\n",
                                    encoding="utf-8")
    built = tmp_path / "built"
    with one_torch_thread():
        result = runner.invoke(app, ["build-dataset", str(first), "--format", "text", "--out", str(built)])
        assert result.exit_code == 0, result.output
        assert runner.invoke(app, ["detect", str(built), "--model", str(trained)]).exit_code == 0
        before = (built / "predicted_mentions.jsonl").read_text()
        more = tmp_path / "more"
        (more / "2024").mkdir(parents=True)
        (more / "2024" / "quake.txt").write_text("The earthquake hit the town. Rescuers arrived.\n", encoding="utf-8")
        result = runner.invoke(app, ["add", str(built), "--corpus", str(more)])
    assert result.exit_code == 0, result.output
    assert "predicted mentions: +" in result.output
    data = Dataset(built)
    passages = list(data.passages())
    assert {p.doc_id for p in passages} == {"fire", "2024/quake"}
    assert any(p.text == "The earthquake hit the town." for p in passages)
    assert (built / "predicted_mentions.jsonl").read_text().startswith(before)
    manifest = data.predicted_manifest()
    assert manifest["passages_sha256"] == "sha256:" + sha256_file(built / "passages.jsonl")
    assert manifest["counts"]["passages"] == len(passages)


def test_word_tagging_tags_the_first_piece_of_each_word_with_the_whole_word() -> None:
    from corefsearch.detect.model import _word_offsets

    # [CLS] poly ##gam ##y was banned [SEP]: "Polygamy was banned"
    offsets = [(0, 0), (0, 4), (4, 7), (7, 8), (9, 12), (13, 19), (0, 0)]
    words = [None, 0, 0, 0, 1, 2, None]
    assert _word_offsets(offsets, words) == [(0, 0), (0, 8), (0, 0), (0, 0), (9, 12), (13, 19), (0, 0)]
    assert tags_for_spans(_word_offsets(offsets, words), [(0, 8)]) == [IGNORE, B_TAG, IGNORE, IGNORE, O_TAG, O_TAG,
                                                                       IGNORE]
