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
    if kind == "retriever":
        from corefsearch.dense.model import BiEncoder

        model = BiEncoder.load(name, "cpu")  # a name, resolved by the loader
        passages = model.passage_encoder.encode_passages(["", "", ""], SENTENCES, 64)
        queries = model.query_encoder.encode_queries(_queries(), 32)
        unit = [v / float((v @ v) ** 0.5) for v in passages]
        return {"cosines": [[round(float(q @ p) / float((q @ q) ** 0.5), 4) for p in unit] for q in queries],
                "head": [round(float(x), 4) for x in passages[0][:8]]}
    if kind == "reader":
        from corefsearch.reader.read import Reader

        reader = Reader.load(Path(name), "cpu")
        hits = reader.read(_queries()[0], [(f"p{i}", text) for i, text in enumerate(SENTENCES)])
        return {"hits": [[hit.passage_id, round(float(hit.score), 3), hit.start, hit.end] for hit in hits]}
    raise AssertionError(f"no test inputs for a shipped {kind}: add them here")


def _queries() -> list[Any]:
    """The marked mentions of MENTIONS as queries (the retriever's and the reader's input)."""
    from corefsearch.base.schema import Query

    found = []
    for i, (sentence, mention) in enumerate(MENTIONS):
        start = sentence.index(mention)
        found.append(Query(f"q{i}", f"p{i}", sentence, start, start + len(mention), mention, "t"))
    return found


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
    elif card.kind == "reader":
        assert [h[0] for h in got["hits"]] == [h[0] for h in expected["hits"]]  # the same order
        assert [h[2:] for h in got["hits"]] == [h[2:] for h in expected["hits"]]  # the same spans
        assert [h[1] for h in got["hits"]] == pytest.approx([h[1] for h in expected["hits"]], abs=2e-3)
    else:
        assert [value for row in got["cosines"] for value in row] == pytest.approx(
            [value for row in expected["cosines"] for value in row], abs=2e-3)
        assert got["head"] == pytest.approx(expected["head"], abs=2e-3)


def test_every_shipped_model_has_its_stored_outputs_and_a_card_that_reads() -> None:
    assert sorted(p.stem for p in EXPECTED.glob("*.json")) == SHIPPED
    for name in SHIPPED:
        card = read_card(PACKAGE_SHIPPED_DIR / name)
        assert card.name == name and card.scores["test"] and card.recipe
