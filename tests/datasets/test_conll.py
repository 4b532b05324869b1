"""The CoNLL coreference reader (``build-dataset --format conll``) and the round trip with ``cluster --conll``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corefsearch.cli import app
from corefsearch.datasets.conll import read_conll
from corefsearch.errors import InputError

# One cross-document block (as Cattan et al. 2021 write ECB+): two documents, sentence ids in the
# second column, token ids through the document; nested (1 inside 2), overlapping (2 and 3), a
# singleton chain (9) and a mention on a document's last token.
CROSS_DOCUMENT = """\
#begin document test_events
d1\t0\t0\tPolice\t-
d1\t0\t1\tarrested\t(1)
d1\t0\t2\tthe\t(2
d1\t0\t3\tZürich\t(3
d1\t0\t4\tmayor\t2)
d1\t0\t5\ttoday\t3)
d1\t1\t6\tThe\t-
d1\t1\t7\tarrest\t(1)
d2\t0\t0\tMayor\t(2
d2\t0\t1\tdetained\t2)|(1)
d2\t0\t2\tagain\t(9)
#end document
"""

# CoNLL-2012 layout: one block per document and part, token numbers restarting in each sentence
# (blank lines between sentences), more columns, chains scoped to their block.
CONLL_2012 = """\
#begin document (bc/a); part 000
bc/a 0 0 Storms  NNS * - - - - * (7)
bc/a 0 1 hit     VBD * - - - - * -
bc/a 0 2 coast   NN  * - - - - * (8)

bc/a 0 0 They    PRP * - - - - * (7)
bc/a 0 1 left    VBD * - - - - * -
#end document
#begin document (bc/b); part 000
bc/b 0 0 Storms  NNS * - - - - * (7)
bc/b 0 1 ended   VBD * - - - - * -
#end document
"""


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _mentions(documents: list[Any]) -> dict[str, tuple[str, str]]:
    return {m.mention_id: (d.text[m.start:m.end], m.cluster_id) for d in documents for m in d.mentions}


def test_a_cross_document_block_gives_its_documents_and_chains(tmp_path: Path) -> None:
    documents = list(read_conll(_write(tmp_path, "test_events.gold_conll", CROSS_DOCUMENT)))
    assert [d.doc_id for d in documents] == ["d1", "d2"]
    d1 = documents[0]
    assert d1.text == "Police arrested the Zürich mayor today\nThe arrest"
    assert d1.units == [(0, 38), (39, 49)] and d1.title == "Police arrested the Zürich mayor today"
    assert _mentions(documents) == {
        "d1_1": ("arrested", "1"), "d1_2": ("the Zürich mayor", "2"), "d1_3": ("Zürich mayor today", "3"),
        "d1_4": ("arrest", "1"), "d2_1": ("Mayor detained", "2"), "d2_2": ("detained", "1"), "d2_3": ("again", "9")}
    assert documents[1].mentions[-1].end == len(documents[1].text)  # the document's last token
    assert {m.type for d in documents for m in d.mentions} == {"event"}
    assert all(d.split is None and d.topic is None for d in documents)


def test_nested_brackets_of_one_chain_close_the_latest_first(tmp_path: Path) -> None:
    text = "#begin document x\nd 0 0 a (4\nd 0 1 b (4\nd 0 2 c 4)\nd 0 3 d 4)\n#end document\n"
    documents = list(read_conll(_write(tmp_path, "x.conll", text), mention_type="entity"))
    assert sorted(_mentions(documents).values()) == [("a b c d", "4"), ("b c", "4")]
    assert {m.type for m in documents[0].mentions} == {"entity"}


def test_conll_2012_blocks_scope_their_chains_and_blank_lines_end_sentences(tmp_path: Path) -> None:
    documents = list(read_conll(_write(tmp_path, "a.v4_gold_conll", CONLL_2012)))
    assert [d.doc_id for d in documents] == ["bc/a", "bc/b"]
    assert documents[0].text == "Storms hit coast\nThey left"
    assert _mentions(documents) == {"bc/a_1": ("Storms", "bc/a_000/7"), "bc/a_2": ("coast", "bc/a_000/8"),
                                    "bc/a_3": ("They", "bc/a_000/7"), "bc/b_1": ("Storms", "bc/b_000/7")}


def test_a_folder_is_read_file_by_file_and_split_by_file_names(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    _write(folder, "train_events.conll", CROSS_DOCUMENT.replace("test_events", "train_events"))
    _write(folder, "dev.conll", "#begin document dev\nd5 0 0 Quake (5)\nd6 0 0 quake (5)\n#end document\n")
    _write(folder, "notes.md", "not read")
    documents = list(read_conll(folder, split_by="corpus"))
    assert [(d.doc_id, d.split) for d in documents] == [("d5", "dev"), ("d6", "dev"), ("d1", "train"),
                                                         ("d2", "train")]
    # Two blocks: chains are named by block.
    assert _mentions(documents)["d5_1"] == ("Quake", "dev/5")


@pytest.mark.parametrize(("text", "message"), [
    ("#begin document x\nd 0 0 a (4\nd 0 1 b -\n#end document\n", r"x.conll:2: the bracket \(4 never closes"),
    ("#begin document x\nd 0 0 a 4)\n#end document\n", "x.conll:2: 4\\) closes chain 4, which has no open bracket"),
    ("#begin document x\nd 0 1 a -\nd 0 0 b -\n#end document\n", "x.conll:3: token number 0 is out of order"),
    ("#begin document x\nd 0 zero a -\n#end document\n", "x.conll:2: the token number .* must be a non-negative"),
    ("#begin document x\nd 0 0 a (4|(\n#end document\n", "x.conll:2: coreference column '\\(4\\|\\(': '\\(' is not"),
    ("#begin document x\nd 0 0 a ((4)\n#end document\n", "x.conll:2: coreference column"),
    ("#begin document x\nd 0 0 a\n#end document\n", "x.conll:2: expected at least 5 columns"),
    ("#begin document x\nall (1)\n#end document\n", "x.conll:2: two columns .*: a key with one line per mention"),
    ("#begin document x\nd 0 0 a (4)\n", "x.conll: the block begun on line 1 has no '#end document'"),
    ("d 0 0 a (4)\n", "x.conll:1: a token line outside"),
    ("#end document\n", "x.conll:1: #end document without #begin document"),
    ("#begin document x\n#begin document y\n", "x.conll:2: #begin document before the #end document"),
    ("#begin document x\nd 0 0 a (4\ne 0 1 b 4)\n#end document\n", "x.conll:3: 4\\) closes in document e"),
    ("#begin document x\nd 0 0 a -\ne 0 0 b -\nd 1 1 c -\n#end document\n", "x.conll:4: document d comes back"),
    ("", "x.conll: holds no '#begin document' block"),
])
def test_malformed_files_name_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        list(read_conll(_write(tmp_path, "x.conll", text)))


def test_untyped_mentions_need_a_type_and_file_names_need_a_split(tmp_path: Path) -> None:
    path = _write(tmp_path, "events.conll", CROSS_DOCUMENT)
    with pytest.raises(InputError, match="do not say which type"):
        list(read_conll(path, mention_type="all"))
    with pytest.raises(InputError, match="events.conll: --split-by corpus takes each file's split"):
        list(read_conll(path, split_by="corpus"))
    with pytest.raises(InputError, match="no CoNLL files in this folder"):
        list(read_conll(_write(tmp_path / "empty", "a.md", "x").parent))


def test_build_dataset_reads_conll_and_writes_nothing_on_a_bad_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.conll", CROSS_DOCUMENT)
    out = tmp_path / "ds"
    result = CliRunner().invoke(app, ["build-dataset", str(path), "--format", "conll", "--out", str(out),
                                      "--split-ratios", "0,0,1"])
    assert result.exit_code == 0, result.output
    clusters = [json.loads(line) for line in (out / "clusters.jsonl").read_text().splitlines()]
    assert sorted(len(c["mention_ids"]) for c in clusters) == [1, 1, 2, 3]
    bad = _write(tmp_path, "bad.conll", CROSS_DOCUMENT.replace("d2\t0\t1\tdetained\t2)|(1)", "d2\t0\t1\tdetained\t-"))
    result = CliRunner().invoke(app, ["build-dataset", str(bad), "--format", "conll", "--out", str(tmp_path / "b")])
    assert result.exit_code != 0
    assert "bad.conll:10: the bracket (2 never closes" in result.output
    assert not (tmp_path / "b").exists()


def test_gold_clusters_written_by_cluster_conll_read_back_as_the_same_clusters(tiny_dataset: Path,
                                                                               tmp_path: Path) -> None:
    runner = CliRunner()
    conll = tmp_path / "gold.conll"
    result = runner.invoke(app, ["cluster", str(tiny_dataset), "--method", "gold", "--split", "train",
                                 "--scope", "corpus", "--out", str(tmp_path / "gold.jsonl"), "--conll", str(conll)])
    assert result.exit_code == 0, result.output
    gold: dict[str, set[str]] = {}
    for line in (tmp_path / "gold.jsonl").read_text().splitlines():
        record = json.loads(line)
        gold.setdefault(record["cluster_id"], set()).add(record["mention_id"])
    key = {c["cluster_id"]: set(c["mention_ids"]) for c in map(json.loads, (tiny_dataset / "clusters.jsonl")
                                                                 .read_text().splitlines()) if c["split"] == "train"}
    assert gold == key and len(gold) > 1
    back = tmp_path / "back"
    result = runner.invoke(app, ["build-dataset", str(conll), "--format", "conll", "--out", str(back),
                                 "--split-ratios", "0,0,1"])
    assert result.exit_code == 0, result.output
    # The mention-level file has one "token" per mention: its id.
    words = {m["mention_id"]: p["text"][m["start"]:m["end"]] for p in map(json.loads, (back / "passages.jsonl")
                                                                          .read_text().splitlines())
             for m in p["mentions"]}
    read_back = [{words[m] for m in c["mention_ids"]} for c in map(json.loads, (back / "clusters.jsonl")
                                                                    .read_text().splitlines())]
    assert sorted(map(sorted, read_back)) == sorted(map(sorted, gold.values()))
