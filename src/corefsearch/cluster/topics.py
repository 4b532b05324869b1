"""Topics of documents: the gold ones a dataset records, predicted ones (agglomerative on MiniLM and TF-IDF
similarities, or K-means on TF-IDF), or a file's (``--topics``).

``--scope predicted-topic`` groups documents before mentions are clustered, as Barhom et al. (2019)
did for ECB+. They ran K-means on TF-IDF vectors with the number of topics given; a corpus of
one's own has no known number of topics, so by default the documents are clustered agglomeratively
instead (``--topic-method kmeans --n-topics K`` is theirs): average linkage (SciPy) on the cosine distance
of the mean of two cosine similarities -- the default encoder's (all-MiniLM-L6-v2, mean-pooled over each
document's first 256 tokens; it does not depend on the collection) and TF-IDF's (scikit-learn, English
stop words left out, sublinear term frequency, fitted on the collection) -- cut at
:data:`DEFAULT_TOPIC_THRESHOLD`. ``--topic-method agglomerative-tfidf`` is the former default, TF-IDF
alone cut at :data:`TFIDF_TOPIC_THRESHOLD`: on small collections its IDF, fitted on a few documents,
splits events (bench/topics_sizes.py). The encoder is loaded only when predicted topics are needed
(about 20 s per 1,000 documents on 2 CPU cores). The distance matrix is dense, so memory grows with
the square of the number of documents (10,000 documents: 0.8 GB).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from corefsearch.base.checks import all_at_least_one
from corefsearch.base.errors import InputError
from corefsearch.base.models import resolve_device
from corefsearch.cluster.mentions import ClusterMention, document_texts
from corefsearch.dense.encoder import EncoderConfig, TextEncoder
from corefsearch.io.write import atomic_file

# Cosine distance at which the average-linkage tree of ``agglomerative`` (the mean of the MiniLM and TF-IDF
# similarities) is cut. Chosen by bench/topics_sizes.py on dev-type collections of every size (ECB+ dev, whole
# documents and validated sentences; 100 seeded ECB+ dev subsets of 10-34 documents on 2-8 subtopics; the
# benchmark's plain collection, 33 documents; MEANTIME reported, not chosen on: its topics hold many events):
# the best minimum over ECB+ dev whole documents, plain and the subsets' mean ARI, 0.80 (ECB+ dev 0.81, plain
# 0.81, subsets 0.80), where TF-IDF alone at 0.8 (the former default) gives 0.48 on plain (it splits events)
# and TF-IDF at its best cut 0.74. No recipe tried puts every subset at ARI >= 0.8 (57% are): the misses
# merge a topic's two similar halves (two DUI arrests of two players of one team). ECB+ test, once, against
# the subtopics: 0.75 whole documents, 0.75 validated sentences (TF-IDF at 0.8: 0.82, 0.82; against the
# topics 0.77 and 0.71 for 0.61 and 0.51): on a large collection it merges more than the former default.
DEFAULT_TOPIC_THRESHOLD = 0.64
# The cut of ``agglomerative-tfidf`` (TF-IDF alone, the former default), chosen by bench/topics.py on the
# whole ECB+ train and dev: ARI against the subtopics 0.81 train, 0.87 dev, 0.82 test.
TFIDF_TOPIC_THRESHOLD = 0.8
# Tokens of a document the encoder reads (its first ones) and the weight of its similarity in the mean.
TOPIC_ENCODER_MAX_LENGTH = 256
TOPIC_ENCODER_WEIGHT = 0.5

TOPIC_METHODS = ("agglomerative", "agglomerative-tfidf", "kmeans")

# ``texts -> rows``: one L2-normalised vector a text (NumPy, float32), in input order.
Embedder = Callable[[Sequence[str]], Any]


def default_topic_threshold(method: str = "agglomerative") -> float:
    """The cut of ``method``'s average-linkage tree when ``--topic-threshold`` is not given."""
    return TFIDF_TOPIC_THRESHOLD if method == "agglomerative-tfidf" else DEFAULT_TOPIC_THRESHOLD


def predicted_topics(texts: Mapping[str, str], threshold: float | None = None, method: str = "agglomerative",
                     n_topics: int | None = None, embed: Embedder | None = None) -> dict[str, str]:
    """``{doc_id: topic}`` for the documents ``{doc_id: text}``; topics are named ``p1``, ``p2``, ... in
    the order of their first document (documents sorted by id). ``agglomerative``: the average-linkage tree
    on the mean of the encoder's and TF-IDF's cosine similarities, cut at ``threshold`` (default
    :data:`DEFAULT_TOPIC_THRESHOLD`) or into ``n_topics`` groups; ``agglomerative-tfidf``: the same on TF-IDF
    alone (default cut :data:`TFIDF_TOPIC_THRESHOLD`); ``kmeans``: K-means on TF-IDF into ``n_topics`` groups.
    ``embed``: the document vectors of ``agglomerative`` (default: :func:`document_embeddings`, the default
    encoder, loaded at the first call)."""
    check_topic_options(method, threshold, n_topics)
    doc_ids = sorted(texts)
    if len(doc_ids) < 2 or n_topics == 1:
        return {doc_id: "p1" for doc_id in doc_ids}
    ordered = [texts[doc_id] for doc_id in doc_ids]
    try:
        vectors = tfidf_vectors(ordered)
    except ValueError:  # no word at all, or only stop words: nothing tells the documents apart
        return {doc_id: "p1" for doc_id in doc_ids}
    if method == "kmeans":
        from sklearn.cluster import KMeans

        k = min(int(n_topics or 1), len(doc_ids))
        labels = KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(vectors)
    else:
        similarity = (vectors @ vectors.T).toarray()
        if method == "agglomerative":
            dense = (embed or document_embeddings)(ordered)
            similarity = TOPIC_ENCODER_WEIGHT * (dense @ dense.T) + (1 - TOPIC_ENCODER_WEIGHT) * similarity
        cut = default_topic_threshold(method) if threshold is None else threshold
        labels = average_linkage_labels(similarity, cut, n_topics)
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


@functools.lru_cache(maxsize=2)
def topic_encoder(reference: str | None = None) -> Any:
    """The encoder of :func:`document_embeddings` (``None``: the default, all-MiniLM-L6-v2), mean-pooled, loaded
    offline once a process on the GPU when there is one."""
    config = EncoderConfig(pooling="mean", max_length=TOPIC_ENCODER_MAX_LENGTH)
    return TextEncoder.load(reference, config, device=resolve_device("auto"))


def document_embeddings(texts: Sequence[str], encoder: str | None = None, batch_size: int = 32) -> Any:
    """L2-normalised vectors of ``texts`` (float32 rows, in input order): the mean of the last layer over each
    text's first :data:`TOPIC_ENCODER_MAX_LENGTH` tokens, by ``encoder`` (a model folder or name; ``None``: the
    default encoder)."""
    import numpy as np

    model = topic_encoder(encoder)
    vectors = model.encode_passages([""] * len(texts), list(texts), max_length=TOPIC_ENCODER_MAX_LENGTH,
                                    batch_size=batch_size)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def average_linkage_labels(similarity: Any, threshold: float | None, n_topics: int | None = None) -> Any:
    """Average-linkage clustering on cosine distance (``1 - similarity``, a dense square array, or L2-normalised
    sparse rows whose dot products are the similarities), cut at ``threshold`` or into ``n_topics``."""
    import numpy as np
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    if hasattr(similarity, "toarray"):  # sparse rows (an all-zero row: similarity 0)
        similarity = (similarity @ similarity.T).toarray()
    distances = 1.0 - np.asarray(similarity, dtype=np.float64)
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
                   threshold: float | None = None, method: str = "agglomerative",
                   n_topics: int | None = None, doc_topics: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{mention_id: group}``: mentions are clustered only within their group -- the gold topic of their
    document (``topic``), its predicted topic (``predicted-topic``; ``doc_topics``, when given, instead of
    predicting them; ``threshold`` None: the method's default cut) or one group for all (``corpus``)."""
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
