"""Topics of documents: the gold ones a dataset records, or predicted ones (TF-IDF + agglomerative).

``--scope predicted-topic`` groups documents before mentions are clustered, as Barhom et al. (2019)
did for ECB+. They ran K-means on TF-IDF vectors with the number of topics given; a corpus of
one's own has no known number of topics, so here the documents are clustered agglomeratively
instead: TF-IDF vectors (scikit-learn, English stop words left out, sublinear term frequency),
average linkage on cosine distance (SciPy), cut at the distance :data:`DEFAULT_TOPIC_THRESHOLD`.
The distance matrix is dense, so memory grows with the square of the number of documents
(10,000 documents: 0.8 GB).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from corefsearch.base.errors import InputError
from corefsearch.cluster.mentions import ClusterMention, document_texts

# Cosine distance at which the average-linkage tree is cut. Chosen on the ECB+ train and dev
# documents that hold mentions (mention type all), among 0.7, 0.8, 0.85, 0.9, 0.95: 0.9 gave the
# best adjusted Rand index against the gold topics on both (train 0.84: 34 topics for 25; dev 0.94:
# 10 for 8); on test it gives 14 topics for 10 (adjusted Rand index 0.93).
DEFAULT_TOPIC_THRESHOLD = 0.9


def predicted_topics(texts: Mapping[str, str], threshold: float = DEFAULT_TOPIC_THRESHOLD) -> dict[str, str]:
    """``{doc_id: topic}`` for the documents ``{doc_id: text}``; topics are named ``p1``, ``p2``, ... in
    the order of their first document (documents sorted by id)."""
    if not 0 < threshold <= 2:
        raise InputError(f"--topic-threshold is a cosine distance, in (0, 2]; got {threshold}")
    doc_ids = sorted(texts)
    if len(doc_ids) < 2:
        return {doc_id: "p1" for doc_id in doc_ids}
    import numpy as np
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        vectors = TfidfVectorizer(stop_words="english", sublinear_tf=True).fit_transform(
            [texts[doc_id] for doc_id in doc_ids])
    except ValueError:  # no word at all, or only stop words: nothing tells the documents apart
        return {doc_id: "p1" for doc_id in doc_ids}
    # Rows are L2-normalised, so the dot product is the cosine similarity (an all-zero row: 0).
    distances = 1.0 - (vectors @ vectors.T).toarray()
    np.clip(distances, 0.0, 2.0, out=distances)
    np.fill_diagonal(distances, 0.0)
    distances = (distances + distances.T) / 2  # exactly symmetric for squareform
    labels = fcluster(linkage(squareform(distances, checks=False), method="average"), t=threshold,
                      criterion="distance")
    names: dict[int, str] = {}
    topics = {}
    for doc_id, label in zip(doc_ids, labels, strict=True):
        topics[doc_id] = names.setdefault(int(label), f"p{len(names) + 1}")
    return topics


SCOPES = ("topic", "predicted-topic", "corpus")


def gold_topics(mentions: Sequence[ClusterMention], dataset_dir: Path) -> dict[str, str]:
    """``{mention_id: topic}`` from the topic recorded on each mention's passage."""
    groups = {}
    for mention in mentions:
        if mention.topic is None:
            raise InputError(f"{Path(dataset_dir) / 'passages.jsonl'}: passage {mention.passage_id} (document "
                             f"{mention.doc_id}) records no topic, which --scope topic needs: rebuild the dataset "
                             "with this version of `corefsearch build-dataset` (ECB+ records each document's topic; "
                             "a generic corpus.jsonl needs a 'topic' on every line), or use --scope predicted-topic "
                             "or corpus")
        groups[mention.mention_id] = mention.topic
    return groups


def mention_groups(mentions: Sequence[ClusterMention], scope: str, dataset_dir: Path,
                   threshold: float = DEFAULT_TOPIC_THRESHOLD) -> dict[str, str]:
    """``{mention_id: group}``: mentions are clustered only within their group -- the gold topic of their
    document (``topic``), its predicted topic (``predicted-topic``) or one group for all (``corpus``)."""
    if scope == "topic":
        return gold_topics(mentions, dataset_dir)
    if scope == "predicted-topic":
        doc_topics = predicted_topics(document_texts(dataset_dir, {m.doc_id for m in mentions}), threshold)
        return {m.mention_id: doc_topics[m.doc_id] for m in mentions}
    if scope == "corpus":
        return {m.mention_id: "corpus" for m in mentions}
    raise InputError(f"--scope must be one of {', '.join(SCOPES)}, got {scope!r}")
