"""The reader tests' Lucene index of the tiny news corpus (test_reader*.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from corefsearch.cli import app


@pytest.fixture(scope="module")
def tiny_index(tiny_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("index") / "index"
    result = CliRunner().invoke(app, ["index", str(tiny_dataset), "--out", str(out), "--threads", "1"])
    assert result.exit_code == 0, result.output
    return out
