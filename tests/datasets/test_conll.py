"""The CoNLL coreference reader (``build-dataset --format conll``) and the round trip with ``cluster --conll``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.datasets.conll import read_conll

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
# (blank lines between sentences), more columns; a chain id names one chain in every block.
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


def test_conll_2012_blocks_share_their_chains_and_blank_lines_end_sentences(tmp_path: Path) -> None:
    documents = list(read_conll(_write(tmp_path, "a.v4_gold_conll", CONLL_2012)))
    assert [d.doc_id for d in documents] == ["bc/a", "bc/b"]
    assert documents[0].text == "Storms hit coast\nThey left"
    assert _mentions(documents) == {"bc/a_1": ("Storms", "7"), "bc/a_2": ("coast", "8"), "bc/a_3": ("They", "7"),
                                    "bc/b_1": ("Storms", "7")}


def _spans(documents: list[Any]) -> dict[str, tuple[int, int, str]]:
    return {m.mention_id: (m.start, m.end, m.cluster_id) for d in documents for m in d.mentions}


def _clusters(documents: list[Any]) -> dict[str, list[str]]:
    clusters: dict[str, list[str]] = {}
    for document in documents:
        for mention in document.mentions:
            clusters.setdefault(mention.cluster_id, []).append(mention.mention_id)
    return clusters


def test_tab_separated_cells_keep_their_spaces_and_non_breaking_spaces(tmp_path: Path) -> None:
    # Tokens "New York" (a space) and "10\u00a0000" (a non-breaking space); coreference cells with spaces.
    text = ("#begin document (t); part 000\n"
            "d1\t0\t0\tNew York\t(12| (14\n"
            "d1\t0\t1\tfined\t12) | (3)\n"
            "d1\t0\t2\t10\u00a0000\t14)\n"
            "d1\t0\t3\t\u00a0dollars \t (5) \t\n"
            "#end document\n")
    documents = list(read_conll(_write(tmp_path, "t.conll", text)))
    assert [d.text for d in documents] == ["New York fined 10\u00a0000 \u00a0dollars"]
    assert _spans(documents) == {"d1_1": (0, 14, "12"), "d1_2": (0, 21, "14"), "d1_3": (9, 14, "3"),
                                 "d1_4": (22, 30, "5")}
    assert _mentions(documents)["d1_2"] == ("New York fined 10\u00a0000", "14")


def test_space_separated_lines_still_split_on_any_white_space(tmp_path: Path) -> None:
    # Spaces only (a tab at the end of a line is white space around it, not a separator).
    text = "#begin document s\nd 0 0  Storm    (1)\nd 0 1 hit -\t\n#end document\n"
    documents = list(read_conll(_write(tmp_path, "s.conll", text)))
    assert documents[0].text == "Storm hit" and _spans(documents) == {"d_1": (0, 5, "1")}


def test_a_chain_continues_across_blocks_as_one_cluster(tmp_path: Path) -> None:
    text = ("#begin document (topic_1); part 000\n"
            "a\t0\t0\tQuake\t(5)\n"
            "a\t0\t1\tkills\t(6)\n"
            "#end document\n"
            "#begin document (topic_2); part 000\n"
            "b\t0\t0\tThe\t(5\n"
            "b\t0\t1\tquake\t5)\n"
            "b\t0\t2\thit\t(7)\n"
            "#end document\n")
    documents = list(read_conll(_write(tmp_path, "two_blocks.conll", text)))
    assert [d.doc_id for d in documents] == ["a", "b"]
    assert _spans(documents) == {"a_1": (0, 5, "5"), "a_2": (6, 11, "6"), "b_1": (0, 9, "5"), "b_2": (10, 13, "7")}
    assert _clusters(documents) == {"5": ["a_1", "b_1"], "6": ["a_2"], "7": ["b_2"]}


def test_the_same_chain_id_in_two_files_of_a_folder_is_two_clusters(tmp_path: Path) -> None:
    # Files such as `cluster --conll` writes number their chains from 1 each.
    _write(tmp_path / "c", "dev.conll", "#begin document (all); part 000\nall 0 0 m1 (1)\n#end document\n")
    _write(tmp_path / "c", "test.conll", "#begin document (all); part 000\nx 0 0 m2 (1)\n#end document\n")
    documents = list(read_conll(tmp_path / "c"))
    assert _clusters(documents) == {"dev/1": ["all_1"], "test/1": ["x_1"]}


def test_the_eight_column_layout_of_the_reference_scorer(tmp_path: Path) -> None:
    text = ("#begin document x\ndoc1 0 0 Token - - - (3)\ndoc1 0 1 two - - - (3\ndoc1 0 2 three - - - 3)\n"
            "#end document\n")
    documents = list(read_conll(_write(tmp_path, "x.conll", text)))
    assert [(d.doc_id, d.text, d.topic) for d in documents] == [("doc1", "Token two three", None)]
    assert _spans(documents) == {"doc1_1": (0, 5, "3"), "doc1_2": (6, 15, "3")}


# The eight columns of the ECB+ files of Cattan et al.'s code (one block per topic, corpus-wide chain ids):
# topic, subtopic, document, sentence, token number, token, annotated, coreference.
TOPIC_LEVEL = """\
#begin document 36
36\t36_0\t36_1ecb\t0\t0\tPerennial\tTrue\t(12
36\t36_0\t36_1ecb\t0\t1\tparty\tTrue\t12)
36\t36_0\t36_1ecb\t0\t2\tgirl\tTrue\t-
36\t36_0\t36_1ecb\t1\t3\tarrested\tTrue\t(3)
36\t36_1\t36_2ecbplus\t0\t0\tShe\tFalse\t-
36\t36_1\t36_2ecbplus\t0\t1\twas\tTrue\t-
36\t36_1\t36_2ecbplus\t0\t2\tarrested\tTrue\t(3)
#end document
#begin document 37
37\t37_0\t37_1ecb\t0\t0\tQuake\tTrue\t(40)
37\t37_0\t37_1ecb\t0\t1\tarrested\tTrue\t(3)
#end document"""


def test_the_eight_column_topic_layout_of_cattan_et_al(tmp_path: Path) -> None:
    documents = list(read_conll(_write(tmp_path, "dev_events_topic_level.conll", TOPIC_LEVEL)))
    assert [(d.doc_id, d.topic, d.text) for d in documents] == [
        ("36_1ecb", "36", "Perennial party girl\narrested"), ("36_2ecbplus", "36", "She was arrested"),
        ("37_1ecb", "37", "Quake arrested")]
    assert _spans(documents) == {"36_1ecb_1": (0, 15, "12"), "36_1ecb_2": (21, 29, "3"),
                                 "36_2ecbplus_1": (8, 16, "3"), "37_1ecb_1": (0, 5, "40"),
                                 "37_1ecb_2": (6, 14, "3")}
    assert _clusters(documents)["3"] == ["36_1ecb_2", "36_2ecbplus_1", "37_1ecb_2"]


def test_a_folder_is_read_file_by_file_and_split_by_file_names(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    _write(folder, "train_events.conll", CROSS_DOCUMENT.replace("test_events", "train_events"))
    _write(folder, "dev.conll", "#begin document dev\nd5 0 0 Quake (5)\nd6 0 0 quake (5)\n#end document\n")
    _write(folder, "notes.md", "not read")
    documents = list(read_conll(folder, split_by="corpus"))
    assert [(d.doc_id, d.split) for d in documents] == [("d5", "dev"), ("d6", "dev"), ("d1", "train"),
                                                         ("d2", "train")]
    # Two files: chains are named by file.
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
    ("#begin document x\nd\t0\t0 a\t(4)\n#end document\n", "x.conll:2: expected at least 5 columns .*, got 4"),
    ("#begin document x\nd\t0\t0\tNew York\t(4|\n#end document\n", "x.conll:2: coreference column '\\(4\\|': '' is"),
    ("#begin document x\nd\t0\t0\ta\t(4\n#end document\n#begin document y\ne\t0\t0\tb\t4)\n#end document\n",
     r"x.conll:2: the bracket \(4 never closes"),
    ("#begin document x\nd 0 0 a (4)\n#end document\n#begin document y\ne 0 0 b 4)\n#end document\n",
     r"x.conll:5: 4\) closes chain 4, which has no open bracket in this block"),
    (TOPIC_LEVEL.replace("\t37_0\t37_1ecb", "\t37_1ecb"), "x.conll:11: expected 8 columns .*, as on line 2, got 7"),
    (TOPIC_LEVEL.replace("37_1ecb\t0\t1", "37_1ecb\t0\tone"), "x.conll:12: the token number .fifth column. must be"),
    (TOPIC_LEVEL.replace("36\t36_1\t36_2ecbplus\t0\t1", "37\t36_1\t36_2ecbplus\t0\t1"),
     "x.conll:7: topic 37, but document 36_2ecbplus"),
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


def test_build_dataset_joins_a_chain_across_blocks_and_reports_a_bad_line_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    result = CliRunner().invoke(app, ["build-dataset", str(_write(tmp_path, "t.conll", TOPIC_LEVEL)), "--format",
                                      "conll", "--out", str(out), "--split-ratios", "0,0,1"])
    assert result.exit_code == 0, result.output
    clusters = {c["cluster_id"]: c["mention_ids"] for c in map(json.loads, (out / "clusters.jsonl").read_text()
                                                                .splitlines())}
    assert clusters == {"12": ["36_1ecb_1"], "3": ["36_1ecb_2", "36_2ecbplus_1", "37_1ecb_2"], "40": ["37_1ecb_1"]}
    bad = _write(tmp_path, "bad.conll", TOPIC_LEVEL.replace("\t37_0\t37_1ecb", "\t37_1ecb"))
    result = CliRunner().invoke(app, ["build-dataset", str(bad), "--format", "conll", "--out", str(tmp_path / "b")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)  # an exit, not a traceback
    assert result.output.strip().splitlines() == [f"error: {bad}:11: expected 8 columns (topic, subtopic, document, "
                                                  "sentence, token number, token, True/False, coreference), as on "
                                                  "line 2, got 7"]
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


# A token that is a space (spaCy keeps one for a double space), its cell a space between two tabs, and one
# that is nothing between two tabs: each an empty token in its place, the columns after it read as they are.
SPACE_TOKENS = """\
#begin document (0_news_1); part 000
0_news_1\t0\t0\tStorm\t(1)
0_news_1\t0\t1\t \t-
0_news_1\t0\t2\thits\t(2
0_news_1\t0\t3\t\t-
0_news_1\t0\t4\tcoast\t2)|(3
0_news_1\t0\t5\t \t3)

0_news_1\t1\t0\t \t(9)

0_news_1\t2\t0\t \t(1
0_news_1\t2\t1\tThe\t-
0_news_1\t2\t2\tstorm\t1)
#end document
"""


def test_a_token_of_white_space_is_an_empty_token_and_keeps_its_column(tmp_path: Path) -> None:
    from corefsearch.datasets.conll import ConllReport

    report = ConllReport()
    documents = list(read_conll(_write(tmp_path, "news.conll", SPACE_TOKENS), report=report))
    [document] = documents
    # Two spaces between the tokens around an inner blank one; blank tokens at a sentence's ends and a sentence of
    # blank tokens only are left out of the text.
    assert document.text == "Storm  hits  coast\nThe storm" and document.units == [(0, 18), (19, 28)]
    # The columns after a blank token are read right: the coreference of line 6 is 2)|(3, not shifted.
    assert _mentions(documents) == {"0_news_1_1": ("Storm", "1"), "0_news_1_2": ("hits  coast", "2"),
                                    "0_news_1_3": ("coast", "3"), "0_news_1_4": ("The storm", "1")}
    assert report.blank_tokens == 5 and report.blank_where == f"{tmp_path / 'news.conll'}:3"
    assert report.blank_mentions == [f"{tmp_path / 'news.conll'}:9"]  # (9) on a blank token only
    lines = report.lines()
    assert lines[0].startswith(f"Blank tokens: 5 token cell(s) held only white space or nothing (first at "
                               f"{tmp_path / 'news.conll'}:3); each is an empty token in its place")
    assert lines[1] == f"Left out 1 mention(s) on blank tokens only (first at {tmp_path / 'news.conll'}:9)."
    assert len(lines) == 2  # one file: ids as they are


def test_a_file_without_blank_tokens_reports_nothing(tmp_path: Path) -> None:
    from corefsearch.datasets.conll import ConllReport

    report = ConllReport()
    list(read_conll(_write(tmp_path, "t.conll", CROSS_DOCUMENT), report=report))
    assert report.lines() == [] and report.blank_tokens == 0


@pytest.mark.parametrize(("text", "message"), [
    # A doubled tab between columns is not a token: the line would have a column more than the line before it.
    ("#begin document x\nd\t0\t0\ta\t-\nd\t0\t1\t\tb\t(4)\n#end document\n",
     "x.conll:3: 6 columns, but line 2 of the same document has 5: a blank cell"),
    (TOPIC_LEVEL.replace("36_0\t36_1ecb\t0\t1", "36_0\t \t0\t1"), r"x.conll:3: the document \(third column\) is blank"),
    ("#begin document x\nd\t \t0\ta\t-\n#end document\n", r"x.conll:2: the part or sentence \(second column\) is"),
])
def test_blank_cells_other_than_the_token_name_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        list(read_conll(_write(tmp_path, "x.conll", text)))


def test_space_separated_lines_with_a_blank_token_elsewhere_still_read(tmp_path: Path) -> None:
    # One file mixing space-separated lines and a tab-separated line with a blank token.
    text = "#begin document s\nd 0 0 Storm (1)\nd\t0\t1\t \t-\nd 0 2 hit (1)\n#end document\n"
    documents = list(read_conll(_write(tmp_path, "s.conll", text)))
    assert documents[0].text == "Storm  hit" and _spans(documents) == {"d_1": (0, 5, "1"), "d_2": (7, 10, "1")}


# Split files that each number their documents from 0: train.conll and dev.conll both hold 0_news_362, two
# different documents, and each numbers its chains from 1.
SPLIT_TRAIN = """\
#begin document (0_news_362); part 000
0_news_362\t0\t0\tStorm\t(1)
0_news_362\t0\t1\thits\t(2)
0_news_362\t1\t0\tThe\t(1
0_news_362\t1\t1\tstorm\t1)
#end document
#begin document (1_news_7); part 000
1_news_7\t0\t0\tstorm\t(1)
#end document
"""
SPLIT_DEV = """\
#begin document (0_news_362); part 000
0_news_362\t0\t0\tQuake\t(1)
0_news_362\t0\t1\tkills\t(5)
0_news_362\t1\t0\tquake\t(1)
#end document
"""


@pytest.mark.parametrize("split_by", ["corpus", "clusters"])
def test_split_files_that_reuse_a_document_id_keep_both_documents_by_file(tmp_path: Path, split_by: str) -> None:
    from corefsearch.datasets.conll import ConllReport

    folder = tmp_path / "splits"
    _write(folder, "train.conll", SPLIT_TRAIN)
    _write(folder, "dev.conll", SPLIT_DEV)
    report = ConllReport()
    documents = list(read_conll(folder, split_by=split_by, report=report))
    assert [(d.doc_id, d.split, d.text) for d in documents] == [
        ("dev/0_news_362", "dev" if split_by == "corpus" else None, "Quake kills\nquake"),
        ("train/0_news_362", "train" if split_by == "corpus" else None, "Storm hits\nThe storm"),
        ("train/1_news_7", "train" if split_by == "corpus" else None, "storm")]
    assert _mentions(documents) == {
        "dev/0_news_362_1": ("Quake", "dev/1"), "dev/0_news_362_2": ("kills", "dev/5"),
        "dev/0_news_362_3": ("quake", "dev/1"),
        "train/0_news_362_1": ("Storm", "train/1"), "train/0_news_362_2": ("hits", "train/2"),
        "train/0_news_362_3": ("The storm", "train/1"), "train/1_news_7_1": ("storm", "train/1")}
    assert report.lines() == [
        f"Document ids by file: 1 document name(s) are in more than one file (e.g. 0_news_362 in {folder}/dev.conll:1 "
        f"and {folder}/train.conll:1), so every document id is FILE/NAME (e.g. dev/0_news_362), FILE as in the cluster "
        "ids (the file's name without its last suffix); mention ids follow (FILE/NAME_1, …)."]


def test_document_ids_stay_as_they_are_where_no_two_files_share_one(tmp_path: Path) -> None:
    from corefsearch.datasets.conll import ConllReport

    folder = tmp_path / "splits"
    _write(folder, "train.conll", SPLIT_TRAIN)
    _write(folder, "dev.conll", SPLIT_DEV.replace("0_news_362", "0_news_363"))
    report = ConllReport()
    documents = list(read_conll(folder, split_by="corpus", report=report))
    assert [d.doc_id for d in documents] == ["0_news_363", "0_news_362", "1_news_7"]
    assert report.lines() == []


def test_a_document_named_twice_in_one_file_is_an_error(tmp_path: Path) -> None:
    # Within a file, two blocks of the same part (or none) naming one document cannot be told apart.
    text = SPLIT_TRAIN.replace("1_news_7", "0_news_362")
    with pytest.raises(InputError, match=r"train.conll:7: document 0_news_362_000 is also in .*train.conll:1$"):
        list(read_conll(_write(tmp_path, "train.conll", text)))
    # Also when another file shares the name.
    _write(tmp_path / "f", "train.conll", text)
    _write(tmp_path / "f", "dev.conll", SPLIT_DEV)
    with pytest.raises(InputError, match=r"train.conll:7: document 0_news_362_000 is also in .*train.conll:1$"):
        list(read_conll(tmp_path / "f", split_by="corpus"))


def test_build_dataset_reads_split_files_that_reuse_ids_and_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "splits"
    _write(folder, "train.conll", SPLIT_TRAIN + SPACE_TOKENS)
    _write(folder, "dev.conll", SPLIT_DEV)
    out = tmp_path / "ds"
    result = CliRunner().invoke(app, ["build-dataset", str(folder), "--format", "conll", "--split-by", "corpus",
                                      "--splits", "train,dev", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Document ids by file: 1 document name(s) are in more than one file" in result.output
    assert "Blank tokens: 5 token cell(s)" in result.output
    assert "Left out 1 mention(s) on blank tokens only" in result.output
    passages = [json.loads(line) for line in (out / "passages.jsonl").read_text().splitlines()]
    assert {p["doc_id"] for p in passages} == {"dev/0_news_362", "train/0_news_362", "train/1_news_7",
                                               "train/0_news_1"}
    clusters = {c["cluster_id"]: sorted(c["mention_ids"]) for c in map(json.loads, (out / "clusters.jsonl")
                                                                        .read_text().splitlines())}
    assert clusters["dev/1"] == ["dev/0_news_362_1", "dev/0_news_362_3"]
    assert clusters["train/1"] == ["train/0_news_1_1", "train/0_news_1_4", "train/0_news_362_1",
                                   "train/0_news_362_3", "train/1_news_7_1"]


def _synthetic_file(rng: Any, doc_names: list[str], chains: int) -> str:
    """A tab-separated CoNLL file: a block per document, sentences of 3 to 9 tokens (some of them blank), mentions
    within sentences (nested, overlapping, one-token), never on blank tokens only."""
    lines = []
    for doc_name in doc_names:
        lines.append(f"#begin document ({doc_name}); part 000")
        for sentence in range(rng.randint(1, 4)):
            length = rng.randint(3, 9)
            words = [" " if 0 < index < length - 1 and rng.random() < 0.15 else f"w{rng.randint(0, 99)}"
                     for index in range(length)]
            cells: list[list[str]] = [[] for _ in words]
            for _ in range(rng.randint(0, 4)):
                starts = [index for index, word in enumerate(words) if word.strip()]
                first = rng.choice(starts)
                last = rng.choice([index for index in starts if index >= first])
                chain = rng.randint(1, chains)
                if first == last:
                    cells[first].append(f"({chain})")
                else:
                    cells[first].append(f"({chain}")
                    cells[last].insert(0, f"{chain})")  # closes before the ones this line opens
            for index, word in enumerate(words):
                lines.append(f"{doc_name}\t{sentence}\t{index}\t{word}\t{'|'.join(cells[index]) or '-'}")
            lines.append("")
        lines.append("#end document")
    return "\n".join(lines) + "\n"


def _independent_counts(folder: Path) -> tuple[int, int]:
    """Mentions and chains of the CoNLL files of ``folder`` from their last column alone: a mention per ``(``,
    a chain per chain id and file (the files of a folder stay apart)."""
    mentions, chains = 0, set()
    for path in sorted(folder.glob("*.conll")):
        opens = closes = 0
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            coreference = line.split("\t")[-1]
            singles = re.findall(r"\((\d+)\)", coreference)
            opened = re.findall(r"\((\d+)(?![\d)])", coreference)
            opens, closes = opens + len(opened), closes + len(re.findall(r"(?<![(\d])\d+\)", coreference))
            mentions += len(singles) + len(opened)
            chains.update((path.name, chain) for chain in singles + opened)
        assert opens == closes, path
    return mentions, len(chains)


@pytest.mark.parametrize("split_by", ["corpus", "clusters"])
def test_build_counts_of_split_files_with_blank_tokens_are_those_the_files_give(tmp_path: Path,
                                                                                split_by: str) -> None:
    import random

    rng = random.Random(7)
    folder = tmp_path / "corpus"
    # Each split file numbers its documents and chains from 0 and 1: the documents 0_news_0, … are in every file.
    for name, documents in (("train.conll", 30), ("dev.conll", 12), ("test.conll", 12)):
        _write(folder, name, _synthetic_file(rng, [f"{number}_news_{number * 7}" for number in range(documents)],
                                             chains=25))
    mentions, chains = _independent_counts(folder)
    assert mentions > 250 and chains > 50
    out = tmp_path / f"ds-{split_by}"
    result = CliRunner().invoke(app, ["build-dataset", str(folder), "--format", "conll", "--split-by", split_by,
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = re.search(r"(\d+) documents, \d+ passages \(0 distractors\), ([\d,]+) mentions in ([\d,]+) clusters",
                        result.output)
    assert summary is not None, result.output
    assert (int(summary[1]), int(summary[2].replace(",", "")), int(summary[3].replace(",", ""))) == (
        54, mentions, chains)
    assert "Document ids by file:" in result.output and "Blank tokens:" in result.output
    assert "Left out" not in result.output and "crossed a passage boundary" not in result.output
    clusters = [json.loads(line) for line in (out / "clusters.jsonl").read_text().splitlines()]
    assert len(clusters) == chains and sum(len(c["mention_ids"]) for c in clusters) == mentions
