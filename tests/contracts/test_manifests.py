"""Every manifest has one writer and one reader (``corefsearch.base.artefacts``): the same header, a
refusal of another kind, and no module that builds a manifest by hand."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from corefsearch import __version__
from corefsearch.base import artefacts
from corefsearch.base.artefacts import (
    DATASET,
    DENSE_INDEX,
    DENSE_PARTIAL,
    DENSE_SHARD,
    LUCENE_INDEX,
    ONNX_EXPORT,
    RUN,
    find_manifest,
    manifest_record,
    read_manifest,
    training_kind,
    write_manifest,
)
from corefsearch.base.errors import InputError, MissingArtefactError

SRC = Path(artefacts.__file__).parent
KINDS = [DATASET, LUCENE_INDEX, DENSE_INDEX, DENSE_SHARD, DENSE_PARTIAL, RUN, ONNX_EXPORT, training_kind("reader")]


def test_every_kind_has_its_own_name() -> None:
    assert len({kind.kind for kind in KINDS}) == len(KINDS)
    assert all(kind.kind.startswith("corefsearch-") for kind in KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_a_manifest_starts_with_the_same_header_and_reads_back(kind: artefacts.ManifestKind, tmp_path: Path) -> None:
    record = manifest_record(kind, {"passages": 3, "note": "é"})
    head = ["kind", *(["format_version"] if kind.format_version is not None else []), "corefsearch_version",
            "created"]
    assert list(record) == [*head, "passages", "note"]
    assert record["kind"] == kind.kind and record["corefsearch_version"] == __version__
    path = tmp_path / "manifest.json"
    write_manifest(path, record)
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n") and "é" in text  # indented UTF-8, one final newline
    assert read_manifest(path, kind, "rebuild it") == record == find_manifest(path, kind)
    assert "created" not in manifest_record(kind, {}, created=False)


def test_another_kind_or_no_manifest_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    write_manifest(path, manifest_record(DENSE_SHARD, {}))
    with pytest.raises(InputError, match=r"manifest\.json: not a corefsearch dense index manifest; rebuild it"):
        read_manifest(path, DENSE_INDEX, "rebuild it")
    assert find_manifest(path, DENSE_INDEX) is None
    with pytest.raises(MissingArtefactError, match="no dataset manifest at"):
        read_manifest(tmp_path / "missing.json", DATASET, "rebuild it")
    path.write_text("[1, 2]", encoding="utf-8")
    assert find_manifest(path, DENSE_SHARD) is None
    path.write_bytes(b"\xff{")
    assert find_manifest(path, DENSE_SHARD) is None
    with pytest.raises(ValueError, match="starts with its kind"):
        write_manifest(path, {"passages": 1})
    assert path.read_bytes() == b"\xff{"


def test_no_module_writes_a_manifest_by_hand() -> None:
    """A dict literal with a ``"kind"`` key is a manifest built by hand: only ``artefacts.py`` builds them."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "artefacts.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "kind" for k in node.keys):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []


def test_a_training_record_resumes_across_library_versions(tmp_path: Path) -> None:
    from corefsearch.training.checkpoint import RUN_FILE, WorkDir
    from corefsearch.training.common import claim_work_dir

    work = WorkDir(tmp_path / "out.training")
    record = manifest_record(training_kind("reader"), {"options": {"lr": 1e-5}, "versions": {"torch": "2"}},
                             created=False)
    claim_work_dir(work, record, overwrite=False, log=lambda _: None)
    older = {**record, "corefsearch_version": "0.0.9", "versions": {"torch": "1"}}
    (work.path / RUN_FILE).write_text(json.dumps(older), encoding="utf-8")
    claim_work_dir(work, record, overwrite=False, log=lambda _: None)  # the same run: no error
    other = {**record, "options": {"lr": 2e-5}}
    with pytest.raises(InputError, match="other settings \\(--lr\\)"):
        claim_work_dir(work, other, overwrite=False, log=lambda _: None)
