"""The dataset's predicted mentions as every command finds them (``Dataset.check_predicted``): neither file,
both (and agreeing), or broken (one file without the other, an unreadable manifest, a changed mentions file),
each said in one line that names the file(s) and the fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import BROKEN_PREDICTED, break_predicted

from corefsearch.base.artefacts import PREDICTED_MENTIONS, manifest_record, write_manifest
from corefsearch.base.errors import CorefSearchError, MissingArtefactError
from corefsearch.datasets.dataset import Dataset
from corefsearch.io.write import sha256_file


@pytest.fixture
def detected(tiny_dataset: Path, tmp_path: Path) -> Path:
    """A copy of the tiny dataset with predicted mentions as `detect` writes them (the file and its manifest,
    which records the file's checksum)."""
    root = tmp_path / "dataset"
    shutil.copytree(tiny_dataset, root)
    passage = next(Dataset(root).passages())
    lines = [{"mention_id": f"{passage.id}:0-{end}:event", "passage_id": passage.id, "doc_id": passage.doc_id,
              "start": 0, "end": end, "type": "event", "score": 1.0, "text": passage.text[:end]} for end in (3, 5)]
    mentions = root / "predicted_mentions.jsonl"
    mentions.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    write_manifest(root / "predicted_mentions.json", manifest_record(PREDICTED_MENTIONS, {
        "detector": {"name": "heuristic"}, "file_sha256": "sha256:" + sha256_file(mentions)}))
    return root


def test_neither_file_is_no_predicted_mentions(tiny_dataset: Path) -> None:
    dataset = Dataset(tiny_dataset)
    assert not dataset.has_predicted_files() and dataset.check_predicted() is None
    with pytest.raises(MissingArtefactError) as raised:
        dataset.predicted_manifest()
    assert str(raised.value) == (f"{tiny_dataset} holds no predicted mentions; run `corefsearch detect {tiny_dataset} "
                                 "--model MODEL|heuristic` first")


def test_both_files_that_agree_are_read(detected: Path) -> None:
    dataset = Dataset(detected)
    manifest = dataset.check_predicted()
    assert manifest is not None and manifest["detector"] == {"name": "heuristic"}
    assert dataset.predicted_manifest() == manifest and len(list(dataset.predicted_mentions())) == 2


@pytest.mark.parametrize("state", BROKEN_PREDICTED)
def test_a_broken_state_is_one_line_naming_the_files_and_the_fix(detected: Path, state: str) -> None:
    expected = break_predicted(detected, state)
    dataset = Dataset(detected)
    assert dataset.has_predicted_files()
    for read in (dataset.check_predicted, dataset.predicted_manifest, lambda: list(dataset.predicted_mentions())):
        with pytest.raises(CorefSearchError) as raised:
            read()
        assert str(raised.value) == expected and "\n" not in expected
    assert "predicted_mentions.json" in expected and "--overwrite` to detect them again" in expected


def test_a_change_made_after_a_sound_read_is_found(detected: Path) -> None:
    dataset = Dataset(detected)
    assert dataset.check_predicted() is not None  # checked once, then kept while the files stay as they are
    expected = break_predicted(detected, "changed")
    with pytest.raises(CorefSearchError, match="no longer matches its manifest"):
        dataset.check_predicted()
    assert "checksum" in expected


def test_an_unreadable_or_foreign_manifest_says_to_detect_again_with_overwrite(detected: Path) -> None:
    manifest = detected / "predicted_mentions.json"
    fix = f"run `corefsearch detect {detected} --model MODEL|heuristic --overwrite` to detect them again"
    manifest.write_text("{", encoding="utf-8")
    with pytest.raises(CorefSearchError) as raised:
        Dataset(detected).check_predicted()
    assert str(raised.value).startswith(f"{manifest}:") and str(raised.value).endswith(fix)
    manifest.write_text(json.dumps({"kind": "corefsearch-dataset"}), encoding="utf-8")
    with pytest.raises(CorefSearchError) as raised:
        Dataset(detected).check_predicted()
    assert str(raised.value) == f"{manifest}: not a corefsearch predicted mentions manifest; {fix}"


def test_a_manifest_without_a_checksum_is_not_checked_against_the_file(detected: Path) -> None:
    # written by hand (or by an older corefsearch): nothing to compare the file with
    write_manifest(detected / "predicted_mentions.json",
                   manifest_record(PREDICTED_MENTIONS, {"detector": {"name": "heuristic"}}))
    (detected / "predicted_mentions.jsonl").write_text("", encoding="utf-8")
    assert Dataset(detected).check_predicted() is not None
