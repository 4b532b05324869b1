"""How well one grouping of documents agrees with another: adjusted Rand index and V-measure.

Used to score predicted topics against the gold ones a dataset records (and, for ECB+, against its
subtopics: each topic's ``ecb`` and ``ecbplus`` halves, see :func:`ecbplus_subtopic`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_ECBPLUS_DOC = re.compile(r"^(\d+)_\d+(ecb|ecbplus)$")


@dataclass(frozen=True)
class Agreement:
    """Agreement of a grouping with a reference grouping, each in [0, 1] (ARI can go below 0)."""

    ari: float  # adjusted Rand index
    v_measure: float
    homogeneity: float  # each predicted group holds one reference group
    completeness: float  # each reference group is in one predicted group
    groups: int  # predicted groups
    reference_groups: int
    documents: int

    def line(self) -> str:
        return (f"ARI {self.ari:.3f}, V-measure {self.v_measure:.3f} (homogeneity {self.homogeneity:.3f}, "
                f"completeness {self.completeness:.3f}); {self.groups} groups for {self.reference_groups}")


def agreement(predicted: Mapping[str, str], reference: Mapping[str, str]) -> Agreement:
    """Agreement of ``predicted`` with ``reference`` (both ``{doc: group}``) over the documents of ``predicted``;
    every one of them must be in ``reference``."""
    from sklearn.metrics import adjusted_rand_score, homogeneity_completeness_v_measure

    docs = sorted(predicted)
    missing = [doc for doc in docs if doc not in reference]
    if missing:
        raise KeyError(f"{len(missing)} document(s) without a reference group, e.g. {missing[0]}")
    ours = [predicted[doc] for doc in docs]
    theirs = [reference[doc] for doc in docs]
    if not docs:
        return Agreement(1.0, 1.0, 1.0, 1.0, 0, 0, 0)
    homogeneity, completeness, v_measure = homogeneity_completeness_v_measure(theirs, ours)
    return Agreement(float(adjusted_rand_score(theirs, ours)), float(v_measure), float(homogeneity),
                     float(completeness), len(set(ours)), len(set(theirs)), len(docs))


def ecbplus_subtopic(doc_id: str, topic: str | None = None) -> str | None:
    """The ECB+ subtopic of a document: its topic and half, e.g. ``36_1ecb`` -> ``36ecb``, ``36_1ecbplus`` ->
    ``36ecbplus``; None for an id not of that form, or whose number is not ``topic`` (when given)."""
    match = _ECBPLUS_DOC.match(doc_id)
    if match is None or (topic is not None and match.group(1) != str(topic)):
        return None
    return f"{match.group(1)}{match.group(2)}"


def ecbplus_subtopics(doc_topics: Mapping[str, str | None]) -> dict[str, str] | None:
    """``{doc: subtopic}`` when every document's subtopic can be derived (``{doc: topic}``), else None."""
    found = {}
    for doc, topic in doc_topics.items():
        subtopic = ecbplus_subtopic(doc, topic)
        if subtopic is None:
            return None
        found[doc] = subtopic
    return found
