"""The two baseline clusterings: every mention alone, and same head lemma (Barhom et al. 2019, Cattan
et al. 2021: the standard ECB+ baseline). Mentions are clustered within their group (topic, predicted
topic or the whole split) and never across mention types. And the gold clusters themselves
(``--method gold``): the key, to hand to the reference scorer or to read back."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from corefsearch.base.nlp import head_lemmas
from corefsearch.base.progress import track
from corefsearch.base.schema import Cluster, safe_id
from corefsearch.cluster.mentions import ClusterMention

METHODS = ("lemma", "singletons", "gold")


def gold(mentions: Sequence[ClusterMention], clusters: Iterable[Cluster]) -> dict[str, str]:
    """``{mention_id: cluster_id}`` of the dataset's gold clusters, for ``mentions``."""
    wanted = {m.mention_id for m in mentions}
    return {mention_id: cluster.cluster_id for cluster in clusters for mention_id in cluster.mention_ids
            if mention_id in wanted}


def singletons(mentions: Sequence[ClusterMention]) -> dict[str, str]:
    """``{mention_id: cluster_id}`` with every mention its own cluster (named after the mention)."""
    return {m.mention_id: m.mention_id for m in mentions}


def same_lemma(mentions: Sequence[ClusterMention], groups: Mapping[str, str],
               lemmas: Mapping[str, str]) -> dict[str, str]:
    """``{mention_id: cluster_id}``: mentions of one group and type whose head lemma is the same form one
    cluster, named ``GROUP/TYPE/LEMMA`` (white space in a lemma replaced by ``_``)."""
    return {m.mention_id: safe_id(f"{groups[m.mention_id]}/{m.type}/{lemmas[m.mention_id]}") for m in mentions}


def mention_head_lemmas(mentions: Sequence[ClusterMention], passage_texts: Mapping[str, str]) -> dict[str, str]:
    """``{mention_id: lowercased lemma of the mention's syntactic head}``; each passage is parsed once."""
    by_passage: dict[str, list[ClusterMention]] = {}
    for mention in mentions:
        by_passage.setdefault(mention.passage_id, []).append(mention)
    passage_ids = list(by_passage)
    spans = [[(m.start, m.end) for m in by_passage[pid]] for pid in passage_ids]
    lemmas: dict[str, str] = {}
    texts = track([passage_texts[pid] for pid in passage_ids], "Parsing passages")
    for pid, found in zip(passage_ids, head_lemmas(texts, spans), strict=True):
        for mention, lemma in zip(by_passage[pid], found, strict=True):
            lemmas[mention.mention_id] = lemma
    return lemmas
