"""The models that ship with corefsearch (``src/corefsearch/shipped/``), each loaded by its name and run on a few
inputs, against the outputs stored in ``tests/shipped/expected/NAME.json`` for the same inputs: a change in
pre-processing, tokenisation or the runtime that moves a shipped model's output fails here.

After a deliberate change (a retrained model), write the expected outputs again with
``COREFSEARCH_WRITE_EXPECTED=1 pytest tests/shipped`` and say why in the commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from corefsearch.base.shipped import PACKAGE_SHIPPED_DIR, SHIPPED_DIR_ENV, read_card

EXPECTED = Path(__file__).parent / "expected"
WRITE = os.environ.get("COREFSEARCH_WRITE_EXPECTED") == "1"
SENTENCES = [
    "A landslide closed the coast road at Porthallow on Monday.",
    "Engineers cleared it by noon, the county council said.",
    "The fire that destroyed the warehouse in Leeds was started deliberately, police said on Tuesday.",
]
# (sentence, mention) pairs for the mention encoders: two of the same event worded otherwise, one of another
MENTIONS = [(SENTENCES[0], "closed"), ("Rockfall shuts the coast road at Porthallow.", "shuts"),
            (SENTENCES[2], "destroyed"), (SENTENCES[2], "the warehouse")]
SHIPPED = sorted(p.name for p in PACKAGE_SHIPPED_DIR.iterdir() if (p / "corefsearch_card.json").is_file()) \
    if PACKAGE_SHIPPED_DIR.is_dir() else []


@pytest.fixture
def shipped_here(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package's own shipped models (the suite otherwise runs with none: tests/conftest.py)."""
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(PACKAGE_SHIPPED_DIR))
    return PACKAGE_SHIPPED_DIR


def _outputs(name: str, kind: str) -> dict[str, Any]:
    if kind == "detector":
        from corefsearch.detect.detectors import load_detector

        found = load_detector(name, device="cpu").detect(SENTENCES, batch_size=4)
        return {"mentions": [[[start, end, kind, round(float(p), 3)] for start, end, kind, p in sentence]
                             for sentence in found]}
    if kind == "clusterer":
        from corefsearch.cluster.inputs import MentionRecord
        from corefsearch.cluster.model import MentionEncoder

        encoder = MentionEncoder.load(Path(name), "cpu")  # a name, resolved by the loader
        records = []
        for i, (sentence, mention) in enumerate(MENTIONS):
            start = sentence.index(mention)
            records.append(MentionRecord(f"m{i}", "", f"d{i}", None, f"p{i}", mention, start, start + len(mention),
                                         sentence, sentence))
        vectors = encoder.encode(records)
        return {"cosines": [[round(float(a @ b), 4) for b in vectors] for a in vectors],
                "head": [round(float(x), 4) for x in vectors[0][:8]]}
    raise AssertionError(f"no test inputs for a shipped {kind}: add them here")


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_model_loads_by_name_and_gives_its_stored_outputs(name: str, shipped_here: Path) -> None:
    card = read_card(shipped_here / name)
    got = _outputs(name, card.kind)
    path = EXPECTED / f"{name}.json"
    if WRITE:
        path.write_text(json.dumps(got, indent=1) + "\n", encoding="utf-8")
    expected = json.loads(path.read_text(encoding="utf-8"))
    if card.kind == "detector":
        assert [[m[:3] for m in s] for s in got["mentions"]] == [[m[:3] for m in s] for s in expected["mentions"]]
        assert [[m[3] for m in s] for s in got["mentions"]] == [
            pytest.approx([m[3] for m in s], abs=2e-3) for s in expected["mentions"]]
    else:
        assert [value for row in got["cosines"] for value in row] == pytest.approx(
            [value for row in expected["cosines"] for value in row], abs=2e-3)
        assert got["head"] == pytest.approx(expected["head"], abs=2e-3)


def test_every_shipped_model_has_its_stored_outputs_and_a_card_that_reads() -> None:
    assert sorted(p.stem for p in EXPECTED.glob("*.json")) == SHIPPED
    for name in SHIPPED:
        card = read_card(PACKAGE_SHIPPED_DIR / name)
        assert card.name == name and card.scores["test"] and card.recipe
