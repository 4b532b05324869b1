"""``corefsearch cluster``: cluster every gold (or predicted) mention of a dataset's split and write the clusters."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from corefsearch.base.checks import all_at_least_one, at_least_one
from corefsearch.base.errors import InputError
from corefsearch.base.models import check_device, resolve_device
from corefsearch.base.onnx_backend import check_backend_device, resolve_backend
from corefsearch.base.shipped import default_shipped, resolve_reference, shipped_default, shipped_hint
from corefsearch.cluster.agreement import Agreement, agreement, ecbplus_subtopics
from corefsearch.cluster.baselines import METHODS, gold, mention_head_lemmas, same_lemma, singletons
from corefsearch.cluster.encoder import DEFAULT_BATCH_SIZE, DEFAULT_K, check_evidence
from corefsearch.cluster.heuristic import (
    DEFAULT_SENTENCE_OVERLAP,
    PairCounts,
    blocks_of,
    check_sentence_overlap,
    heuristic_clusters,
    links,
    mention_contexts,
    pair_counts,
)
from corefsearch.cluster.mentions import SplitMentions, read_split_mentions
from corefsearch.cluster.output import write_clusters, write_conll
from corefsearch.cluster.predicted import (
    ALL_PASSAGES,
    MENTION_KINDS,
    predicted_records,
    read_predicted_mentions,
    span_fields,
)
from corefsearch.cluster.topics import (
    SCOPES,
    check_topic_options,
    mention_groups,
    read_topics_file,
    write_topics_file,
)
from corefsearch.datasets.dataset import Dataset
from corefsearch.io.outputs import Output, writes_outputs

if TYPE_CHECKING:
    import numpy as np

    from corefsearch.cluster.inputs import MentionRecord
    from corefsearch.cluster.model import MentionEncoder


@dataclass
class ClusterSummary:
    out: Path
    conll: Path | None
    mentions: int
    clusters: int
    groups: int
    seconds: float
    threshold: float | None = None  # τ of --method encoder
    lemma_weight: float | None = None  # β of --method encoder (0: the encoder alone)
    stages: dict[str, float] | None = None  # --method encoder: seconds of "encode" and "cluster"
    encoded: int | None = None  # --method encoder: distinct encoder inputs (copies of a mention are encoded once)
    mention_kind: str = "gold"  # --mentions: gold (the dataset's annotations) or predicted (a detector's)
    detector: str | None = None  # --mentions predicted: the detector's name its manifest records
    split: str = "test"  # the split clustered (predicted mentions: all, for every passage)
    sentence_overlap: float | None = None  # J of --method lemma-heuristic
    pairs_kept: int | None = None  # --method lemma-heuristic: the pairs it links directly, of
    pairs_total: int | None = None  # all pairs of mentions within a group and type
    scope: str = "topic"  # the --scope used
    backend: str | None = None  # --method encoder: the mention encoder's runtime (torch | onnx | onnx-int8)
    topic_agreement: Agreement | None = None  # predicted-topic: the groups against the gold topics
    subtopic_agreement: Agreement | None = None  # ... and against the ECB+ subtopics (e.g. 36ecb, 36ecbplus)
    pair_clustering: str | None = None  # --pair-scorer: the linkage, threshold and pairs scored
    evidence: str | None = None  # --method encoder --evidence lemma-heuristic: the rule whose links earn β


ALL_METHODS = (*METHODS, "encoder", "lemma-heuristic")


class MentionEncoding(Protocol):
    """Where ``--method encoder`` runs the mention encoder's forward passes when not in this process:
    a strategy the caller passes in, so that this wing knows of no cluster (the Ray one is
    ``corefsearch.distributed.mention_encoding.RayMentionEncoding``, which the ``cluster`` command's
    stage passes for ``--ray``). :meth:`encode` must give the vectors ``encoder.encode`` gives."""

    option: str  # the command-line option that chose it, named in errors (e.g. "--ray")

    def validate(self) -> None: ...

    def encode(self, encoder: MentionEncoder, folder: Path, records: Sequence[MentionRecord], batch_size: int,
               device: str) -> np.ndarray: ...


def _cluster_outputs(a: dict[str, Any]) -> list[Output]:
    inputs = {"DATASET": a["dataset"], "--model": a["model"], "--topics": a["topics"]}
    return [Output(a["out"], "--out", inputs=inputs),
            Output(a["conll"], "--conll", inputs={**inputs, "--out": a["out"]}),
            Output(a["write_topics"], "--write-topics", inputs={**inputs, "--out": a["out"], "--conll": a["conll"]})]


@writes_outputs(_cluster_outputs)
def cluster_dataset(dataset: Path, out: Path, method: str = "lemma", split: str | None = None,
                    scope: str | None = None, conll: Path | None = None, topic_threshold: float | None = None,
                    topic_method: str | None = None, n_topics: int | None = None, topics: Path | None = None,
                    write_topics: Path | None = None, model: Path | None = None,
                    threshold: float | None = None, k: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                    device: str = "auto", encoding: MentionEncoding | None = None,
                    lemma_weight: float | None = None, mentions: str = "gold",
                    sentence_overlap: float | None = None, pair_scorer: Path | None = None,
                    pair_threshold: float | None = None, evidence: str | None = None,
                    backend: str | None = None, log: Callable[[str], None] | None = None) -> ClusterSummary:
    """Cluster the gold mentions of ``split`` with ``method`` within each group of ``scope``; write
    ``{mention_id, cluster_id}`` lines to ``out`` and, with ``conll``, the CoNLL file (see ``output.py``).
    ``split`` defaults to test. ``mentions`` predicted: the detector's mentions of the passages of ``split``
    (``all``: every passage, the default when no passage records a split) instead (``predicted.py``), each
    line adding where its mention is.
    ``scope`` defaults to topic (predicted-topic with ``topics``). ``topic_method`` (agglomerative, the default,
    agglomerative-tfidf or kmeans), ``topic_threshold`` (the cosine distance that cuts the agglomerative tree;
    None: the method's default) and ``n_topics``
    (the number of groups) say how ``predicted-topic`` groups documents; ``topics``: a ``doc_id<TAB>group``
    file to take the groups from instead; ``write_topics``: write the groups used to that file.
    With ``method`` encoder: the mention encoder folder ``model``, the clustering threshold τ
    (``threshold``, default the model's), the lemma weight β (``lemma_weight``, default the model's: two
    mentions with the same head lemma are β closer), ``k`` neighbours of the corpus scope's kNN graph (default 50),
    the encoding ``batch_size`` and ``device`` (see ``encoder.py``); ``encoding``: where the mentions are
    encoded instead of here (:class:`MentionEncoding`, e.g. on a Ray cluster), to the same vectors.
    With ``method`` lemma-heuristic: ``sentence_overlap``, the Jaccard similarity J that linked mentions' sentences
    must exceed (default 0.05; 0: no such condition; see ``heuristic.py``).
    ``evidence`` (with ``method`` encoder): what earns a pair the bonus β: ``lemma`` (the same head lemma, the
    default) or ``lemma-heuristic`` (a link of that method's rule at ``sentence_overlap``).
    ``pair_scorer`` (with ``method`` encoder): a pair scorer folder (``train pair-scorer``) scores the candidate
    pairs (``candidates.py``: same head lemma, the encoder's nearest) and clusters them at its threshold (or
    ``pair_threshold``) instead of the encoder's τ. ``backend`` (with ``method`` encoder): the encoder's runtime, torch
    | onnx | onnx-int8 (ONNX Runtime on the CPU, from ``corefsearch export-onnx MODEL``); None: torch, or onnx-int8
    for a folder that ships only that export. ``model`` and ``pair_scorer`` may name shipped models; with ``method``
    encoder and no ``model``, the shipped mention encoder for the mentions' type, said through ``log``."""
    started = time.perf_counter()
    model, pair_scorer = resolve_reference(model), resolve_reference(pair_scorer)
    if topics is not None and scope not in (None, "predicted-topic"):
        raise InputError(f"--topics FILE groups the documents as the file says (--scope predicted-topic); it "
                         f"cannot be used with --scope {scope}")
    scope = scope or ("predicted-topic" if topics is not None else "topic")
    if mentions == "gold" and (Path(dataset) / "manifest.json").is_file():
        # Gold mentions: a dataset of plain documents has none (one line saying what to run instead).

        Dataset(dataset).require_gold("cluster", f"find mentions with `corefsearch detect {dataset} --model "
                                                 f"heuristic`, then cluster them with `corefsearch cluster {dataset} "
                                                 "--mentions predicted`")
    if method not in ALL_METHODS:
        raise InputError(f"--method must be one of {', '.join(ALL_METHODS)}, got {method!r}")
    if mentions not in MENTION_KINDS:
        raise InputError(f"--mentions must be one of {', '.join(MENTION_KINDS)}, got {mentions!r}")
    if mentions == "predicted" and method == "gold":
        raise InputError("--method gold gives the dataset's own clusters of its gold mentions: it cannot cluster "
                         "--mentions predicted; choose lemma, lemma-heuristic, singletons or encoder")
    if mentions == "gold" and split == ALL_PASSAGES:
        raise InputError(f"--split {ALL_PASSAGES}: only with --mentions predicted (gold mentions are clustered by "
                         "the split of their cluster in clusters.jsonl)")
    if evidence is not None:
        check_evidence(evidence)
        if method == "encoder" and pair_scorer is not None:
            raise InputError("--evidence: what earns a pair the bonus β of the encoder's clustering; --pair-scorer "
                             "clusters the scored pairs without it, leave --evidence out")
        if method == "encoder" and evidence == "lemma-heuristic" and lemma_weight == 0:
            raise InputError("--evidence lemma-heuristic gives the bonus β to the pairs the rule links: with "
                             "--lemma-weight 0 there is none; give β > 0")
    if sentence_overlap is not None:
        if method != "lemma-heuristic" and not (method == "encoder" and evidence == "lemma-heuristic"):
            raise InputError(f"--sentence-overlap: only with --method lemma-heuristic or --method encoder --evidence "
                             f"lemma-heuristic (the Jaccard similarity linked mentions' sentences must exceed), not "
                             f"with --method {method}" + (" alone" if method == "encoder" else ""))
        check_sentence_overlap(sentence_overlap)
    if pair_threshold is not None and pair_scorer is None:
        raise InputError("--pair-threshold: only with --pair-scorer (the probability above which scored pairs link)")
    if pair_scorer is not None:
        from corefsearch.pair_scorer.model import check_pair_options

        check_pair_options(method, scope, pair_threshold, threshold, lemma_weight)
    if method != "encoder":
        given = [name for name, value in (("--model", model), ("--threshold", threshold), ("--k", k),
                                          ("--lemma-weight", lemma_weight), ("--evidence", evidence),
                                          ("--backend", backend))
                 if value is not None]
        given += [encoding.option] if encoding is not None else []
        if given:
            raise InputError(f"{', '.join(given)}: only with --method encoder (the trained mention encoder), "
                             f"not with --method {method}")
    else:
        if model is None:
            model = _shipped_encoder(Path(dataset), mentions, split, log)
        if model is None:
            raise InputError("--method encoder needs --model MODEL_DIR (a mention encoder from `corefsearch train "
                             "clusterer`)")
        all_at_least_one({"--k": k})
        if k is not None and scope != "corpus":
            raise InputError(f"--k: the neighbours of the kNN graph of --scope corpus; --scope {scope} compares "
                             "every pair within a group, leave --k out")
        at_least_one("--batch-size", batch_size)
        if lemma_weight is not None:
            from corefsearch.cluster.model import check_lemma_weight

            check_lemma_weight(lemma_weight)

        check_device(device)
        backend = resolve_backend(model, backend, device)
        check_backend_device(backend, device)
        if encoding is not None:
            encoding.validate()
    if scope not in SCOPES:
        raise InputError(f"--scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if topic_threshold is not None and scope != "predicted-topic":
        raise InputError("--topic-threshold cuts the document tree of --scope predicted-topic; "
                         f"it does nothing with --scope {scope}")
    given = [name for name, value in (("--topic-method", topic_method), ("--topic-threshold", topic_threshold),
                                      ("--n-topics", n_topics)) if value is not None]
    if given and (scope != "predicted-topic" or topics is not None):
        raise InputError(f"{', '.join(given)}: how --scope predicted-topic groups documents; not with "
                         + ("--topics FILE (the file gives the groups)" if topics is not None else f"--scope {scope}"))
    check_topic_options(topic_method or "agglomerative", topic_threshold, n_topics)
    if topic_threshold is not None and (topic_method == "kmeans" or n_topics is not None):
        raise InputError("--topic-threshold cuts the agglomerative tree by distance; --n-topics and --topic-method "
                         "kmeans give the number of groups instead: give one or the other")
    if mentions == "gold":
        split = split or "test"
        found = read_split_mentions(dataset, split)
    else:
        found = read_predicted_mentions(dataset, split)
        split = found.split or ALL_PASSAGES
    doc_ids = {m.doc_id for m in found.mentions}
    file_topics = read_topics_file(Path(topics), doc_ids) if topics is not None else None
    # Checked for singletons too (a missing topic is an error with every method), so that a loop over
    # methods and scopes fails at once; the singleton partition itself is the same in every scope.
    groups = mention_groups(found.mentions, scope, dataset, topic_threshold, topic_method or "agglomerative",
                            n_topics, file_topics)
    doc_groups = {m.doc_id: groups[m.mention_id] for m in found.mentions}
    tau: float | None = None
    beta: float | None = None
    stages: dict[str, float] | None = None
    encoded: int | None = None
    pairs: PairCounts | None = None
    if method == "singletons":
        assignment = singletons(found.mentions)
    elif method == "gold":
        assignment = gold(found.mentions, Dataset(Path(dataset)).clusters())
    elif method == "encoder":
        stages = {}
        scored: dict[str, Any] = {"folder": pair_scorer, "threshold": pair_threshold}
        assignment, tau, beta, encoded = _encoder_assignment(
            Path(dataset), split, found, groups, scope, Path(model), threshold, lemma_weight,
            DEFAULT_K if k is None else k, batch_size, device, stages, encoding, scored, evidence or "lemma",
            DEFAULT_SENTENCE_OVERLAP if sentence_overlap is None else sentence_overlap, backend or "torch")
    elif method == "lemma-heuristic":
        sentence_overlap = DEFAULT_SENTENCE_OVERLAP if sentence_overlap is None else sentence_overlap
        result = heuristic_clusters(mention_contexts(found.mentions, found.passage_texts), groups,
                                    {m.mention_id: m.type for m in found.mentions}, sentence_overlap)
        assignment, pairs = result.assignment, pair_counts(result.pairs, result.blocks, {})
    else:
        assignment = same_lemma(found.mentions, groups, mention_head_lemmas(found.mentions, found.passage_texts))
    extra = span_fields(found.mentions, found.detector) if found.kind == "predicted" else None
    write_clusters(out, assignment, extra)
    if conll is not None:
        write_conll(conll, assignment)
    if write_topics is not None:
        write_topics_file(Path(write_topics), doc_groups)
    summary = ClusterSummary(Path(out), Path(conll) if conll is not None else None, len(assignment),
                          len(set(assignment.values())), len(set(groups.values())), time.perf_counter() - started,
                          tau, beta, stages, encoded, found.kind, found.detector, split, sentence_overlap,
                          pairs.kept if pairs is not None else None, pairs.total if pairs is not None else None)
    summary.scope = scope
    summary.backend = backend if method == "encoder" else None
    if method == "encoder" and evidence == "lemma-heuristic" and pair_scorer is None:
        summary.evidence, summary.sentence_overlap = "lemma-heuristic", (
            DEFAULT_SENTENCE_OVERLAP if sentence_overlap is None else sentence_overlap)
    if pair_scorer is not None:
        summary.threshold, summary.lemma_weight, summary.pair_clustering = None, None, scored["note"]
    if scope == "predicted-topic":
        summary.topic_agreement, summary.subtopic_agreement = topic_agreements(found, doc_groups)
    return summary


def _shipped_encoder(dataset: Path, mentions: str, split: str | None,
                     log: Callable[[str], None] | None) -> Path | None:
    """The shipped mention encoder for the type of the mentions to cluster (the split's gold clusters', or the
    types the detector kept; both types: one for all), or None when no mention encoder is shipped."""
    if default_shipped("clusterer") is None:
        return None
    dataset_ = Dataset(dataset)
    if mentions == "gold":
        types = {cluster.type for cluster in dataset_.clusters(split or "test")}
    else:
        types = set(dataset_.predicted_manifest().get("types") or ())
    mention_type = next(iter(types)) if len(types) == 1 else ("all" if types else None)
    shipped = shipped_default("clusterer", mention_type, log)
    if shipped is None:
        raise InputError(f"--method encoder needs --model MODEL_DIR (a mention encoder from `corefsearch train "
                         f"clusterer`): no shipped mention encoder is for {mention_type} mentions{shipped_hint()}")
    return Path(shipped)


def topic_agreements(found: SplitMentions, doc_groups: dict[str, str]) -> tuple[Agreement | None, Agreement | None]:
    """Agreement of the documents' groups with the gold topics their passages record (None when one records
    none) and with the ECB+ subtopics derived from their ids (None when an id is not of that form)."""
    gold = {m.doc_id: m.topic for m in found.mentions}
    if any(topic is None for topic in gold.values()):
        return None, None
    reference = {doc: str(topic) for doc, topic in gold.items()}
    subtopics = ecbplus_subtopics(reference)
    return agreement(doc_groups, reference), agreement(doc_groups, subtopics) if subtopics is not None else None


def _encoder_assignment(dataset: Path, split: str, found: SplitMentions, groups: dict[str, str],
                        scope: str, model: Path, threshold: float | None, lemma_weight: float | None, k: int,
                        batch_size: int, device: str, stages: dict[str, float],
                        encoding: MentionEncoding | None = None, scored: dict[str, Any] | None = None,
                        evidence: str = "lemma", sentence_overlap: float = DEFAULT_SENTENCE_OVERLAP,
                        backend: str = "torch") -> tuple[dict[str, str], float, float, int]:
    """Encode every mention of the split once, then cluster the vectors within each group (all pairs) or,
    for ``scope`` corpus, over the kNN graph of ``k`` neighbours, a shared head lemma taking β off a pair's
    distance; the assignment, the τ and β used and the number of distinct inputs encoded. The seconds of
    the steps go into ``stages``. ``scored``: ``{"folder", "threshold"}`` of a pair scorer that clusters the
    candidate pairs instead (``corefsearch.pair_scorer``); what it did is written back under ``"note"``. ``evidence``
    lemma-heuristic: β goes to the pairs the lemma-heuristic rule links at ``sentence_overlap`` instead."""
    from corefsearch.cluster.encoder import cluster_vectors, split_records
    from corefsearch.cluster.model import MentionEncoder

    # Encoded elsewhere (--ray: by the workers), the encoder here only tokenises and batches, on the CPU.
    encoder = MentionEncoder.load(model, resolve_device("cpu" if encoding is not None else device), backend)
    tau = encoder.config.threshold if threshold is None else threshold
    if tau is None:
        raise InputError(f"{model}: the mention encoder records no threshold (it was trained without a dev split); "
                         "give --threshold τ (a cosine distance, e.g. 0.5)")
    beta = encoder.config.lemma_weight if lemma_weight is None else lemma_weight
    if evidence == "lemma-heuristic" and not beta and (scored is None or scored["folder"] is None):
        raise InputError(f"--evidence lemma-heuristic gives the bonus β to the pairs the rule links, and {model} "
                         "records β 0: give --lemma-weight β (> 0)")
    mentions = found.mentions
    records = predicted_records(dataset, found) if found.kind == "predicted" else split_records(dataset, split)
    ids = [r.mention_id for r in records]
    if set(ids) != {m.mention_id for m in mentions}:  # both read the same clusters.jsonl and passages.jsonl
        raise InputError(f"{dataset}: passages.jsonl changed while it was read; run the command again")
    started = time.perf_counter()
    if encoding is not None:
        vectors = encoding.encode(encoder, model, records, batch_size, device)
    else:
        vectors = encoder.encode(records, batch_size=batch_size, progress=True)
    stages["encode"] = time.perf_counter() - started
    types = {m.mention_id: m.type for m in mentions}
    if scored is not None and scored["folder"] is not None:
        from corefsearch.pair_scorer.model import cluster_with_scorer

        assignment, scored["note"] = cluster_with_scorer(Path(scored["folder"]), records, vectors, found, groups,
                                                         types, scored["threshold"], batch_size, device, stages)
        return assignment, float(tau), float(beta), int(encoder.last_unique_inputs or 0)
    lemmas = None
    linked = None
    if beta and evidence == "lemma-heuristic":
        started = time.perf_counter()
        contexts = mention_contexts(mentions, found.passage_texts)
        linked = links(contexts, blocks_of(contexts, groups, types), sentence_overlap)
        stages["links"] = time.perf_counter() - started
    elif beta:
        started = time.perf_counter()
        lemmas = mention_head_lemmas(mentions, found.passage_texts)
        stages["lemmas"] = time.perf_counter() - started
    started = time.perf_counter()
    assignment = cluster_vectors(ids, vectors, groups, types, float(tau), scope, k, lemmas, float(beta),
                                 resolve_device(device), linked)
    stages["cluster"] = time.perf_counter() - started
    return assignment, float(tau), float(beta), int(encoder.last_unique_inputs or 0)
