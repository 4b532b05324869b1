"""Topics of documents: the gold ones a dataset records, predicted ones (TF-IDF + agglomerative or K-means),
or a file's (``--topics``).

``--scope predicted-topic`` groups documents before mentions are clustered, as Barhom et al. (2019)
did for ECB+. They ran K-means on TF-IDF vectors with the number of topics given; a corpus of
one's own has no known number of topics, so by default the documents are clustered agglomeratively
instead (``--topic-method kmeans --n-topics K`` is theirs): TF-IDF vectors (scikit-learn, English
stop words left out, sublinear term frequency), average linkage on cosine distance (SciPy), cut at
the distance :data:`DEFAULT_TOPIC_THRESHOLD`. The distance matrix is dense, so memory grows with the
square of the number of documents (10,000 documents: 0.8 GB).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from corefsearch.base.checks import all_at_least_one
from corefsearch.base.errors import InputError
from corefsearch.cluster.mentions import ClusterMention, document_texts
from corefsearch.io.write import atomic_file

# Cosine distance at which the average-linkage tree is cut. Chosen by bench/topics.py (bench/RESULTS.md,
# "Document grouping") on the ECB+ train and dev documents that hold mentions (all mentions; full text and
# validated sentences), among 0.7-0.9: 0.8 gave the best mean adjusted Rand index against the gold subtopics
# (each topic's ecb and ecbplus halves, what the field's predicted topics match): full text train 0.81,
# dev 0.87 (0.9: 0.76, 0.67). On test, scored once after the choice: 0.82 (0.9: 0.69 full text, 0.74
# validated). It splits some subtopics (38 groups for 20 on test) rather than merge a topic's two halves.
DEFAULT_TOPIC_THRESHOLD = 0.8


TOPIC_METHODS = ("agglomerative", "kmeans")


def predicted_topics(texts: Mapping[str, str], threshold: float = DEFAULT_TOPIC_THRESHOLD,
                     method: str = "agglomerative", n_topics: int | None = None) -> dict[str, str]:
    """``{doc_id: topic}`` for the documents ``{doc_id: text}``; topics are named ``p1``, ``p2``, ... in
    the order of their first document (documents sorted by id). ``agglomerative``: the average-linkage
    tree cut at ``threshold`` (or into ``n_topics`` groups); ``kmeans``: K-means into ``n_topics`` groups."""
    check_topic_options(method, threshold, n_topics)
    doc_ids = sorted(texts)
    if len(doc_ids) < 2 or n_topics == 1:
        return {doc_id: "p1" for doc_id in doc_ids}
    try:
        vectors = tfidf_vectors([texts[doc_id] for doc_id in doc_ids])
    except ValueError:  # no word at all, or only stop words: nothing tells the documents apart
        return {doc_id: "p1" for doc_id in doc_ids}
    if method == "kmeans":
        from sklearn.cluster import KMeans

        k = min(int(n_topics or 1), len(doc_ids))
        labels = KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(vectors)
    else:
        labels = average_linkage_labels(vectors, threshold, n_topics)
    names: dict[int, str] = {}
    topics = {}
    for doc_id, label in zip(doc_ids, labels, strict=True):
        topics[doc_id] = names.setdefault(int(label), f"p{len(names) + 1}")
    return topics


def check_topic_options(method: str, threshold: float | None, n_topics: int | None) -> None:
    """One-line errors for a bad ``--topic-method``, ``--topic-threshold`` or ``--n-topics``."""
    if method not in TOPIC_METHODS:
        raise InputError(f"--topic-method must be one of {', '.join(TOPIC_METHODS)}, got {method!r}")
    if threshold is not None and not 0 < threshold <= 2:
        raise InputError(f"--topic-threshold is a cosine distance, in (0, 2]; got {threshold}")
    all_at_least_one({"--n-topics": n_topics})
    if method == "kmeans" and n_topics is None:
        raise InputError("--topic-method kmeans needs --n-topics K (the number of topics)")


def tfidf_vectors(texts: Sequence[str]) -> Any:
    """L2-normalised TF-IDF rows (a SciPy sparse matrix) of ``texts``: English stop words left out,
    sublinear term frequency, fitted on ``texts`` themselves."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(stop_words="english", sublinear_tf=True).fit_transform(list(texts))


def average_linkage_labels(vectors: Any, threshold: float | None, n_topics: int | None = None) -> Any:
    """Average-linkage clustering of the rows on cosine distance, cut at ``threshold`` or into ``n_topics``."""
    import numpy as np
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    # Rows are L2-normalised, so the dot product is the cosine similarity (an all-zero row: 0).
    distances = 1.0 - (vectors @ vectors.T).toarray()
    np.clip(distances, 0.0, 2.0, out=distances)
    np.fill_diagonal(distances, 0.0)
    distances = (distances + distances.T) / 2  # exactly symmetric for squareform
    tree = linkage(squareform(distances, checks=False), method="average")
    if n_topics is not None:
        return fcluster(tree, t=n_topics, criterion="maxclust")
    return fcluster(tree, t=DEFAULT_TOPIC_THRESHOLD if threshold is None else threshold, criterion="distance")


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
                   threshold: float = DEFAULT_TOPIC_THRESHOLD, method: str = "agglomerative",
                   n_topics: int | None = None, doc_topics: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{mention_id: group}``: mentions are clustered only within their group -- the gold topic of their
    document (``topic``), its predicted topic (``predicted-topic``; ``doc_topics``, when given, instead of
    predicting them) or one group for all (``corpus``)."""
    if scope == "topic":
        return gold_topics(mentions, dataset_dir)
    if scope == "predicted-topic":
        if doc_topics is None:
            doc_topics = predicted_topics(document_texts(dataset_dir, {m.doc_id for m in mentions}), threshold,
                                          method, n_topics)
        return {m.mention_id: doc_topics[m.doc_id] for m in mentions}
    if scope == "corpus":
        return {m.mention_id: "corpus" for m in mentions}
    raise InputError(f"--scope must be one of {', '.join(SCOPES)}, got {scope!r}")


def read_topics_file(path: Path, doc_ids: set[str] | None = None) -> dict[str, str]:
    """``{doc_id: group}`` from a tab-separated file of ``doc_id<TAB>group`` lines (``#`` comments and blank
    lines skipped); with ``doc_ids``, every one of them must be in it (other documents may be too)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--topics {path}: no such file")
    groups: dict[str, str] = {}
    where: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise InputError(f"{path}:{number}: expected doc_id<TAB>group (two tab-separated fields), got "
                                 f"{len(fields)} field(s): {line[:80]!r}")
            doc_id, group = fields[0].strip(), fields[1].strip()
            if doc_id in groups and groups[doc_id] != group:
                raise InputError(f"{path}:{number}: document {doc_id} is in group {group!r} here and in "
                                 f"{groups[doc_id]!r} on line {where[doc_id]}")
            groups[doc_id] = group
            where.setdefault(doc_id, number)
    if doc_ids is not None:
        missing = sorted(doc_ids - set(groups))
        if missing:
            raise InputError(f"{path}: {len(missing):,} document(s) of the mentions to cluster have no group "
                             f"(e.g. {missing[0]}); give every document a line doc_id<TAB>group")
    return groups


def write_topics_file(path: Path, doc_topics: Mapping[str, str]) -> None:
    """Write ``{doc_id: group}`` as ``doc_id<TAB>group`` lines (sorted by document), atomically."""
    with atomic_file(Path(path)) as handle:
        handle.write("# doc_id\tgroup\n")
        for doc_id in sorted(doc_topics):
            handle.write(f"{doc_id}\t{doc_topics[doc_id]}\n")
