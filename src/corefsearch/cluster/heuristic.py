"""``--method lemma-heuristic``: the same-lemma heuristic of Ahmed et al. (2023), "2*n is better than n²:
Decomposing Event Coreference Resolution into Two Tractable Problems" (ACL Findings; code
github.com/ahmeshaf/lemma_ce_coref, ``heuristic.py`` and its ECB+ parse).

Two mentions of one group and type are linked when

* the lemma of one occurs in the text of the other, or one lemma in the other, in either direction, and
* their sentences overlap: the Jaccard similarity of the sets of lemmas of their sentences is above J
  (``--sentence-overlap``, 0.05 as in the paper; 0 drops this condition);

the clusters are the connected components of the links (transitive closure).

A mention's lemma is the lemma of its longest word, as the paper says (their code takes the syntactic head's,
spaCy's ``span.root``, as ``--method lemma`` does; the longest word scored higher at every scope on ECB+
events dev, +0.8 to +2.5 CoNLL F1: bench/RESULTS.md, "The published same-lemma heuristic"). As in their code
(the paper's prose says less): "occurs in" is a substring test on lowercased strings ("attack" occurs in
"attacked"); a sentence's set holds the lowercased lemmas of its words that are neither stop words nor
punctuation, the pronouns he, she, his, him and her kept; the Jaccard similarity must be strictly above J.
Where this differs from their code: their test of one lemma in the other runs one way only (by the order of
the pair), here both ways, so that the rule is symmetric; their sentence is the ECB+ sentence as tokenised by
the annotators and parsed by ``en_core_web_md``, here the parser's sentence (``en_core_web_sm``) of the
passage that holds the head; their synonymous lemma pairs mined from the train split are left out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from corefsearch.base.errors import InputError
from corefsearch.base.nlp import head_and_sentence_lemmas
from corefsearch.base.progress import track
from corefsearch.base.schema import safe_id
from corefsearch.cluster.mentions import ClusterMention

DEFAULT_SENTENCE_OVERLAP = 0.05
# Kept in a sentence's set although spaCy counts them as stop words (their code does so).
KEPT_PRONOUNS = frozenset({"he", "she", "his", "him", "her"})


@dataclass(frozen=True)
class LemmaContext:
    """What the rule reads of a mention: its head lemma and text (lowercased) and its sentence's lemma set."""

    lemma: str
    text: str
    sentence: frozenset[str]


@dataclass(frozen=True)
class PairCounts:
    """The rule's pairs within the groups and types: all, those it links directly, the coreferent ones
    (same gold cluster) and the coreferent ones it links."""

    total: int
    kept: int
    coreferent: int
    found: int

    @property
    def recall(self) -> float:
        return self.found / self.coreferent if self.coreferent else 0.0

    @property
    def kept_share(self) -> float:
        return self.kept / self.total if self.total else 0.0


def check_sentence_overlap(overlap: float) -> None:
    if not 0 <= overlap < 1:
        raise InputError(f"--sentence-overlap must be at least 0 and below 1 (a Jaccard similarity; 0 turns the "
                         f"filter off), got {overlap:g}")


def jaccard(a: Set[str], b: Set[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def lemma_occurs(a: LemmaContext, b: LemmaContext) -> bool:
    """The lemma of one occurs in the other's text or lemma, either way (an empty lemma occurs nowhere)."""
    return bool(a.lemma) and (a.lemma in b.text or a.lemma in b.lemma) or \
        bool(b.lemma) and (b.lemma in a.text or b.lemma in a.lemma)


def linked(a: LemmaContext, b: LemmaContext, overlap: float = DEFAULT_SENTENCE_OVERLAP) -> bool:
    """The rule for one pair; ``overlap`` 0: the lemma condition alone."""
    return lemma_occurs(a, b) and (overlap <= 0 or jaccard(a.sentence, b.sentence) > overlap)


def links(contexts: Mapping[str, LemmaContext], blocks: Mapping[str, Sequence[str]],
          overlap: float = DEFAULT_SENTENCE_OVERLAP) -> list[tuple[str, str]]:
    """Every pair ``(a, b)`` (``a < b``) of mentions of one block the rule links. Only candidates are compared:
    per distinct lemma, the mentions whose text or lemma holds it, so the cost is the distinct lemmas times
    the distinct texts and lemmas of a block (substring tests) plus the candidate pairs, not all pairs."""
    found: list[tuple[str, str]] = []
    for ids in blocks.values():
        by_lemma: dict[str, list[str]] = defaultdict(list)
        by_text: dict[str, list[str]] = defaultdict(list)
        for mention_id in ids:
            by_lemma[contexts[mention_id].lemma].append(mention_id)
            by_text[contexts[mention_id].text].append(mention_id)
        candidates: set[tuple[str, str]] = set()
        for lemma, holders in by_lemma.items():
            if not lemma:
                continue
            partners = [m for text, group in by_text.items() if lemma in text for m in group]
            partners += [m for other, group in by_lemma.items() if lemma in other for m in group]
            candidates.update((min(a, b), max(a, b)) for a in holders for b in partners if a != b)
        found += sorted(pair for pair in candidates if linked(contexts[pair[0]], contexts[pair[1]], overlap))
    return found


def blocks_of(mention_ids: Iterable[str], groups: Mapping[str, str], types: Mapping[str, str]) -> dict[str, list[str]]:
    """``{"GROUP/TYPE": sorted mention ids}``: the mentions that may be linked."""
    blocks: dict[str, list[str]] = defaultdict(list)
    for mention_id in sorted(mention_ids):
        blocks[f"{groups[mention_id]}/{types[mention_id]}"].append(mention_id)
    return dict(blocks)


def closure(blocks: Mapping[str, Sequence[str]], pairs: Sequence[tuple[str, str]],
            contexts: Mapping[str, LemmaContext]) -> dict[str, str]:
    """``{mention_id: cluster_id}``: the connected components of the links (SciPy), named
    ``GROUP/TYPE/N-LEMMA`` after the lemma of their first mention (N counts the block's components)."""
    import numpy as np
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    ids = [mention_id for block in blocks.values() for mention_id in block]
    index = {mention_id: i for i, mention_id in enumerate(ids)}
    rows = np.array([index[a] for a, _ in pairs], dtype=np.int64)
    cols = np.array([index[b] for _, b in pairs], dtype=np.int64)
    graph = coo_matrix((np.ones(len(pairs), dtype=np.int8), (rows, cols)), shape=(len(ids), len(ids)))
    _, labels = connected_components(graph, directed=False)
    assignment: dict[str, str] = {}
    for block, members in blocks.items():
        names: dict[int, str] = {}
        for mention_id in members:
            label = int(labels[index[mention_id]])
            if label not in names:
                names[label] = safe_id(f"{block}/{len(names) + 1}-{contexts[mention_id].lemma or 'mention'}")
            assignment[mention_id] = names[label]
    return assignment


@dataclass
class HeuristicClusters:
    assignment: dict[str, str]  # {mention_id: cluster_id}
    pairs: list[tuple[str, str]]  # the links
    blocks: dict[str, list[str]]  # the mentions of each group and type (see blocks_of)


def heuristic_clusters(contexts: Mapping[str, LemmaContext], groups: Mapping[str, str], types: Mapping[str, str],
                       overlap: float = DEFAULT_SENTENCE_OVERLAP) -> HeuristicClusters:
    """The clusters of the mentions of ``contexts``, linked within their group and type."""
    blocks = blocks_of(contexts, groups, types)
    pairs = links(contexts, blocks, overlap)
    return HeuristicClusters(closure(blocks, pairs, contexts), pairs, blocks)


def pair_counts(pairs: Iterable[tuple[str, str]], blocks: Mapping[str, Sequence[str]],
                gold: Mapping[str, str]) -> PairCounts:
    """How the links compare with the gold clusters ``gold`` (``{mention_id: cluster_id}``) over the pairs of
    mentions within a block: pair recall and the share of pairs kept (see :class:`PairCounts`)."""
    total = sum(len(ids) * (len(ids) - 1) // 2 for ids in blocks.values())
    sizes: dict[tuple[str, str], int] = defaultdict(int)
    for block, ids in blocks.items():
        for mention_id in ids:
            if mention_id in gold:
                sizes[block, gold[mention_id]] += 1
    coreferent = sum(n * (n - 1) // 2 for n in sizes.values())
    kept = found = 0
    for a, b in pairs:
        kept += 1
        found += a in gold and b in gold and gold[a] == gold[b]
    return PairCounts(total, kept, coreferent, found)


def mention_contexts(mentions: Sequence[ClusterMention], passage_texts: Mapping[str, str]) -> dict[str, LemmaContext]:
    """Each mention's :class:`LemmaContext` (spaCy); each passage is parsed once."""
    by_passage: dict[str, list[ClusterMention]] = defaultdict(list)
    for mention in mentions:
        by_passage[mention.passage_id].append(mention)
    passage_ids = list(by_passage)
    spans = [[(m.start, m.end) for m in by_passage[pid]] for pid in passage_ids]
    texts = track([passage_texts[pid] for pid in passage_ids], "Parsing passages")
    contexts: dict[str, LemmaContext] = {}
    parsed = head_and_sentence_lemmas(texts, spans, KEPT_PRONOUNS, lemma="longest")
    for pid, found in zip(passage_ids, parsed, strict=True):
        text = passage_texts[pid]
        for mention, (lemma, sentence) in zip(by_passage[pid], found, strict=True):
            words = " ".join(text[mention.start:mention.end].lower().split())
            contexts[mention.mention_id] = LemmaContext(lemma, words, sentence)
    return contexts
