"""The summary lines count in words: one mention, two mentions (``corefsearch.base.counts``)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from corefsearch.base.counts import counted, plural
from corefsearch.cli import report
from corefsearch.datasets.build import BuildSummary


def printed(show: object, *args: object) -> str:
    out = io.StringIO()
    show(*args, Console(file=out, width=400, color_system=None))  # type: ignore[operator]
    return " ".join(out.getvalue().split())


@pytest.mark.parametrize(("number", "noun", "expected"), [
    (0, "mention", "0 mentions"), (1, "mention", "1 mention"), (2, "cluster", "2 clusters"),
    (1, "query", "1 query"), (1_200, "query", "1,200 queries"), (3, "day", "3 days"), (2, "match", "2 matches"),
    (1, "new query", "1 new query"), (5, "new query", "5 new queries"),
])
def test_counted_says_one_in_the_singular_and_every_other_number_in_the_plural(number: int, noun: str,
                                                                               expected: str) -> None:
    assert counted(number, noun) == expected
    assert plural("passage") == "passages" and counted(2, "datum", "data") == "2 data"


def test_a_summary_of_one_counts_in_the_singular(tmp_path: Path) -> None:
    one = BuildSummary(tmp_path, documents=1, passages=1, mentions=1, clusters=1, mentions_dropped=1)
    line = printed(report.print_build_summary, one)
    assert "1 document, 1 passage (0 distractors), 1 mention in 1 cluster." in line
    assert "1 mention crossed a passage boundary and was left out." in line
    two = BuildSummary(tmp_path, documents=2, passages=3, mentions=2, clusters=2, mentions_dropped=2)
    assert "2 mentions in 2 clusters" in printed(report.print_build_summary, two)

    search = SimpleNamespace(queries=1, seconds=0.5, queries_per_second=2.0, rows=1, out=tmp_path / "run")
    assert "Searched 1 query in 0.5 s (2 queries/s); wrote 1 line to" in printed(report.print_search_summary, search)
    added = SimpleNamespace(documents=1, passages=1, mentions=0, dataset=tmp_path, total_passages=1, new_queries=1,
                            changed_queries=1, new_clusters=1, seconds=0.1, predicted_mentions=None, indexes=[])
    assert (f"Added 1 document (1 passage, 0 mentions) to {tmp_path}: 1 passage now; 1 new query, 1 query with new "
            "relevant passages, 1 new cluster") in printed(report.print_add_summary, added)
    clustered = SimpleNamespace(out=tmp_path / "c.jsonl", conll=None, threshold=None, lemma_weight=0, stages={},
                                encoded=None, mentions=1, clusters=1, groups=1, seconds=0.1)
    assert "Clustered 1 mention into 1 cluster (1 group of --scope topic)" in printed(report.print_cluster_summary,
                                                                                       clustered, "topic")
    cluster = {"size": 1, "threshold": 0.5, "documents": [], "near_misses": []}
    assert "cluster: 1 mention (each hit's best candidate at a score of 0.5 or more)" in printed(
        report.print_answer_cluster, cluster)
