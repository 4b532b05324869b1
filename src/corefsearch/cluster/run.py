"""``corefsearch cluster``: cluster every gold mention of a dataset's split and write the clusters."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.cluster.baselines import METHODS, mention_head_lemmas, same_lemma, singletons
from corefsearch.cluster.mentions import read_split_mentions
from corefsearch.cluster.output import write_clusters, write_conll
from corefsearch.cluster.topics import DEFAULT_TOPIC_THRESHOLD, SCOPES, mention_groups
from corefsearch.errors import InputError
from corefsearch.io import Output, writes_outputs


@dataclass
class ClusterSummary:
    out: Path
    conll: Path | None
    mentions: int
    clusters: int
    groups: int
    seconds: float


def _cluster_outputs(a: dict[str, Any]) -> list[Output]:
    inputs = {"DATASET": a["dataset"]}
    return [Output(a["out"], "--out", inputs=inputs),
            Output(a["conll"], "--conll", inputs={**inputs, "--out": a["out"]})]


@writes_outputs(_cluster_outputs)
def cluster_dataset(dataset: Path, out: Path, method: str = "lemma", split: str = "test", scope: str = "topic",
                    conll: Path | None = None, topic_threshold: float | None = None) -> ClusterSummary:
    """Cluster the gold mentions of ``split`` with ``method`` within each group of ``scope``; write
    ``{mention_id, cluster_id}`` lines to ``out`` and, with ``conll``, the CoNLL file (see ``output.py``).
    ``topic_threshold``: the cosine distance that cuts the document tree of ``predicted-topic``."""
    started = time.perf_counter()
    if method not in METHODS:
        raise InputError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    if scope not in SCOPES:
        raise InputError(f"--scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if topic_threshold is not None and scope != "predicted-topic":
        raise InputError("--topic-threshold cuts the document tree of --scope predicted-topic; "
                         f"it does nothing with --scope {scope}")
    found = read_split_mentions(dataset, split)
    threshold = DEFAULT_TOPIC_THRESHOLD if topic_threshold is None else topic_threshold
    # Checked for singletons too (a missing topic is an error with every method), so that a loop over
    # methods and scopes fails at once; the singleton partition itself is the same in every scope.
    groups = mention_groups(found.mentions, scope, dataset, threshold)
    if method == "singletons":
        assignment = singletons(found.mentions)
    else:
        assignment = same_lemma(found.mentions, groups, mention_head_lemmas(found.mentions, found.passage_texts))
    write_clusters(out, assignment)
    if conll is not None:
        write_conll(conll, assignment)
    return ClusterSummary(Path(out), Path(conll) if conll is not None else None, len(assignment),
                          len(set(assignment.values())), len(set(groups.values())), time.perf_counter() - started)
