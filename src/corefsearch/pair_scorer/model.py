"""The pair scorer: a cross-encoder that reads two marked mentions together and says whether they corefer
(Ahmed et al. 2023, "2*n is better than n²", §3: a cross-encoder over the pairs a lemma heuristic keeps).

The input of a pair (A, B) is ``[CLS] A's sentence [SEP] B's sentence [SEP]`` (the tokenizer's own pair
format), each mention between ``[E]`` and ``[/E]`` (the mention encoder's markers) and each sentence cut
to a window of half the ``max_length`` budget centred on its mention. The head reads
``[CLS ; mean(A's tokens) ; mean(B's tokens) ; mean(A) ∘ mean(B)]`` (as Ahmed et al.) through an MLP
with one hidden layer to one logit; the probability of a pair is the mean of σ(logit) of both orders
(A, B) and (B, A), so that it is symmetric.

A saved scorer is a Hugging Face folder (weights, the tokenizer with ``[E]``/``[/E]``) plus
``pair_scorer_head.safetensors`` and ``corefsearch_pair_scorer.json`` (:class:`PairScorerConfig`: max
length, head size, and what dev picked: the probability threshold, the linkage, and the candidate
pairs it was selected with).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from corefsearch.base.artefacts import config_from_json
from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.model_files import HEAD_FILES
from corefsearch.base.models import (
    DEFAULT_MODEL,
    PAIR_SCORER_CONFIG,
    EncoderWithHead,
    base_encoder,
    load_offline,
    resolve_device,
    resolve_model,
)
from corefsearch.base.precision import autocast
from corefsearch.base.progress import track
from corefsearch.cluster.baselines import mention_head_lemmas
from corefsearch.cluster.candidates import LINKAGES, assignment_of, candidate_pairs
from corefsearch.cluster.heuristic import blocks_of, links, mention_contexts
from corefsearch.cluster.inputs import ENTITY_END, ENTITY_START, MentionRecord
from corefsearch.cluster.mentions import SplitMentions
from corefsearch.cluster.model import add_entity_markers
from corefsearch.reader.inputs import pair_format

if TYPE_CHECKING:
    import torch

HEAD_WEIGHTS = HEAD_FILES["pair-scorer"]
TRAIN_HINT = "train one with `corefsearch train pair-scorer`"


@dataclass
class PairScorerConfig:
    """How a pair scorer reads and how its pairs are clustered; saved beside its weights."""

    base_model: str = DEFAULT_MODEL
    max_length: int = 128  # word pieces of the pair, both sentences and the special tokens
    hidden: int = 256
    dropout: float = 0.1
    threshold: float | None = None  # probability above which a pair links; set by training on dev
    linkage: str = "average"  # components (of the pairs above the threshold) | average (linkage on 1 − p)
    neighbours: int = 0  # candidate pairs: each mention's k nearest by the mention encoder (0: none)
    same_lemma: bool = True  # candidate pairs: mentions with the same head lemma
    lemma_heuristic: bool = False  # candidate pairs: those the lemma heuristic links (``cluster.heuristic``)
    both_orders: bool = True  # a pair's probability: the mean over (A, B) and (B, A), else (A, B) only

    def validate(self) -> None:
        if self.max_length < 16:
            raise InputError(f"max_length must be at least 16, got {self.max_length}")
        at_least_one("hidden", self.hidden)
        if not 0 <= self.dropout < 1:
            raise InputError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.threshold is not None:
            check_probability(self.threshold, "threshold")
        if self.linkage not in LINKAGES:
            raise InputError(f"linkage must be one of {', '.join(LINKAGES)}, got {self.linkage!r}")
        if self.neighbours < 0:
            raise InputError(f"neighbours must not be negative, got {self.neighbours}")


def check_probability(value: float, option: str = "--pair-threshold") -> None:
    """A pair threshold: a probability in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise InputError(f"{option} (the probability above which two mentions link) must be in [0, 1), got {value}")


@dataclass(frozen=True)
class Side:
    """One mention's word pieces with its markers, and the position of its first and one past its last token."""

    ids: list[int]
    mention_start: int
    mention_end: int


def mention_side(tokenizer: Any, record: MentionRecord, budget: int) -> Side:
    """``record``'s sentence with ``[E]``/``[/E]`` around the mention, cut to ``budget`` word pieces centred
    on it (the mention's own pieces first kept)."""
    start_id, end_id = tokenizer.convert_tokens_to_ids([ENTITY_START, ENTITY_END])
    left = tokenizer(record.sentence[:record.start], add_special_tokens=False, verbose=False)["input_ids"]
    mention = tokenizer(record.text, add_special_tokens=False, verbose=False)["input_ids"]
    right = tokenizer(record.sentence[record.end:], add_special_tokens=False, verbose=False)["input_ids"]
    mention = mention[:max(1, budget - 2)]
    room = max(0, budget - 2 - len(mention))
    n_left = min(len(left), max(room // 2, room - len(right)))
    n_right = min(len(right), room - n_left)
    ids = [*left[len(left) - n_left:], start_id, *mention, end_id, *right[:n_right]]
    return Side(ids, n_left + 1, n_left + 1 + len(mention))


def _head_module(config: PairScorerConfig, width: int) -> Any:
    from torch import nn

    class PairHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(4 * width, config.hidden), nn.ReLU(), nn.Dropout(config.dropout),
                                     nn.Linear(config.hidden, 1))

    return PairHead()


class PairScorer(EncoderWithHead):
    """The encoder, its tokenizer (with ``[E]``/``[/E]``), the head and the config."""

    CONFIG_FILE = PAIR_SCORER_CONFIG
    HEAD_FILE = HEAD_WEIGHTS
    HEAD_NAME = "the pair scorer's head"

    def __init__(self, model: Any, tokenizer: Any, config: PairScorerConfig, head: Any = None,
                 device: str = "cpu") -> None:
        self._attach(model, tokenizer, config, device)
        add_entity_markers(tokenizer, self.model)
        self.head = (head if head is not None else _head_module(config, int(model.config.hidden_size))).to(device)
        self.format = pair_format(tokenizer)
        self._sides: dict[str, Side] = {}

    @classmethod
    def from_base(cls, name_or_path: str | None, config: PairScorerConfig | None = None,
                  device: str = "cpu") -> PairScorer:
        """A new scorer (random head) on a Hugging Face model (default: the bundled all-MiniLM-L6-v2)."""
        from transformers import AutoModel, AutoTokenizer

        config = config or PairScorerConfig()
        name_or_path = base_encoder(name_or_path)
        reference = resolve_model(name_or_path)
        if name_or_path not in (None, "", "default"):
            config.base_model = reference
        return cls(load_offline(AutoModel, reference), load_offline(AutoTokenizer, reference, use_fast=True), config,
                   device=device)

    @classmethod
    def load(cls, folder: Path, device: str = "cpu") -> PairScorer:
        """A scorer saved by :meth:`save`; a folder that is not one is a one-line error."""
        from transformers import AutoModel, AutoTokenizer

        folder = Path(folder)
        if not (folder / PAIR_SCORER_CONFIG).is_file() or not (folder / HEAD_WEIGHTS).is_file():
            raise MissingArtefactError(f"{folder} is not a pair scorer (no {PAIR_SCORER_CONFIG} / {HEAD_WEIGHTS}); "
                                       f"{TRAIN_HINT}")
        remedy = f"copy the pair scorer folder {folder} again, or train it again (`corefsearch train pair-scorer`)"
        config = config_from_json(PairScorerConfig, folder / PAIR_SCORER_CONFIG, remedy, "pair scorer configuration")
        tokenizer = load_offline(AutoTokenizer, str(folder), use_fast=True)
        if ENTITY_START not in tokenizer.get_vocab() or ENTITY_END not in tokenizer.get_vocab():
            raise InputError(f"{folder}: the tokenizer lacks the {ENTITY_START}/{ENTITY_END} tokens; {remedy}")
        scorer = cls(load_offline(AutoModel, str(folder)), tokenizer, config, device=device)
        scorer.load_head(folder, remedy)
        return scorer

    def side(self, record: MentionRecord) -> Side:
        """The window of ``record`` (tokenised once per mention)."""
        found = self._sides.get(record.mention_id)
        if found is None:
            budget = (self.config.max_length - self.format.n_special) // 2
            if budget < 3:
                raise InputError(f"max length {self.config.max_length} leaves no room for two mentions")
            found = self._sides[record.mention_id] = mention_side(self.tokenizer, record, budget)
        return found

    def batch(self, pairs: Sequence[tuple[MentionRecord, MentionRecord]]) -> dict[str, torch.Tensor]:
        """Padded ``input_ids``, ``attention_mask`` (``token_type_ids`` when the model has segments) and the
        masks ``first_mask``/``second_mask`` (1 on each mention's tokens) of ``pairs``."""
        import torch

        fmt = self.format
        rows = []
        for a, b in pairs:
            first, second = self.side(a), self.side(b)
            head = [*fmt.prefix, *first.ids, *fmt.middle]
            ids = [*head, *second.ids, *fmt.suffix]
            types = [fmt.first_type] * len(head) + [fmt.second_type] * (len(ids) - len(head))
            offset = len(fmt.prefix)
            rows.append((ids, types, (offset + first.mention_start, offset + first.mention_end),
                         (len(head) + second.mention_start, len(head) + second.mention_end)))
        width = max(len(r[0]) for r in rows)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        types = torch.zeros((len(rows), width), dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        masks = torch.zeros((2, len(rows), width), dtype=torch.float32)
        for row, (row_ids, row_types, span_a, span_b) in enumerate(rows):
            ids[row, :len(row_ids)] = torch.tensor(row_ids)
            types[row, :len(row_types)] = torch.tensor(row_types)
            attention[row, :len(row_ids)] = 1
            masks[0, row, span_a[0]:span_a[1]] = 1
            masks[1, row, span_b[0]:span_b[1]] = 1
        batch = {"input_ids": ids, "attention_mask": attention, "first_mask": masks[0], "second_mask": masks[1]}
        if getattr(self.model.config, "type_vocab_size", 1) > 1:
            batch["token_type_ids"] = types
        return {name: tensor.to(self.device) for name, tensor in batch.items()}

    def forward(self, pairs: Sequence[tuple[MentionRecord, MentionRecord]]) -> torch.Tensor:
        """The logits of ``pairs`` in the order given (one per pair), with gradients (for training)."""
        import torch

        batch = self.batch(pairs)
        first, second = batch.pop("first_mask"), batch.pop("second_mask")
        with autocast(self.device):
            hidden = self.model(**batch).last_hidden_state
            a = (hidden * first.unsqueeze(-1).to(hidden.dtype)).sum(1) / first.sum(1, keepdim=True).clamp(min=1)
            b = (hidden * second.unsqueeze(-1).to(hidden.dtype)).sum(1) / second.sum(1, keepdim=True).clamp(min=1)
            logits = self.head.mlp(torch.cat([hidden[:, 0], a, b, a * b], dim=-1)).squeeze(-1)
        return logits.float()

    def score(self, records: Sequence[MentionRecord], pairs: np.ndarray, batch_size: int = 64,
              progress: bool = False) -> np.ndarray:
        """The probability that each pair ``(i, j)`` of ``pairs`` (rows of indices into ``records``) corefers:
        σ(logit), the mean over both orders (``both_orders``), in evaluation mode. Pairs are read in order of length."""
        import torch

        at_least_one("--batch-size", batch_size)
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        ordered = np.concatenate([pairs, pairs[:, ::-1]]) if self.config.both_orders else pairs
        lengths = [len(self.side(records[i]).ids) + len(self.side(records[j]).ids) for i, j in ordered.tolist()]
        order = np.argsort(lengths, kind="stable")
        probabilities = np.zeros(len(ordered), dtype=np.float64)
        batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
        was_training = self.model.training
        self.train(False)
        try:
            with torch.inference_mode():
                for rows in (track(batches, "Scoring pairs") if progress else batches):
                    logits = self.forward([(records[i], records[j]) for i, j in ordered[rows].tolist()])
                    probabilities[rows] = torch.sigmoid(logits).cpu().numpy()
        finally:
            self.train(was_training)
        if not self.config.both_orders:
            return probabilities
        half = len(pairs)
        return (probabilities[:half] + probabilities[half:]) / 2


def lemma_candidates(config: PairScorerConfig, found: SplitMentions, groups: Mapping[str, str],
                     types: Mapping[str, str]) -> tuple[dict[str, str] | None, list[tuple[str, str]]]:
    """What :func:`~corefsearch.cluster.candidates.candidate_pairs` takes from the mentions' words, as ``config``
    says: the head lemmas (``same_lemma``) and the pairs the lemma heuristic links (``lemma_heuristic``)."""
    lemmas = mention_head_lemmas(found.mentions, found.passage_texts) if config.same_lemma else None
    extra: list[tuple[str, str]] = []
    if config.lemma_heuristic:
        contexts = mention_contexts(found.mentions, found.passage_texts)
        extra = links(contexts, blocks_of(contexts, groups, types))
    return lemmas, extra


def scored_assignment(scorer: PairScorer, records: Sequence[MentionRecord], vectors: np.ndarray | None,
                      groups: Mapping[str, str], types: Mapping[str, str], lemmas: Mapping[str, str] | None,
                      threshold: float, linkage: str, batch_size: int = 64, progress: bool = False,
                      extra: Sequence[tuple[str, str]] = ()) -> tuple[dict[str, str], int]:
    """``{mention_id: cluster_id}`` of ``records`` clustered from the scorer's probabilities of their candidate
    pairs (``cluster.candidates``: the scorer's config says which: same head lemma, given ``lemmas``; the
    ``neighbours`` nearest by the mention encoder's unit ``vectors``, rows of ``records``), and how many pairs
    were scored; ``extra``: more candidate pairs of ids (the heuristic's links)."""
    ids = [r.mention_id for r in records]
    k = scorer.config.neighbours if vectors is not None else 0
    pairs = candidate_pairs(ids, groups, types, lemmas=lemmas if scorer.config.same_lemma else None,
                            vectors=vectors, k=k, extra=extra)
    probabilities = scorer.score(records, pairs, batch_size, progress=progress)
    return assignment_of(ids, groups, types, pairs, probabilities, threshold, linkage), len(pairs)


def check_pair_options(method: str, scope: str, pair_threshold: float | None, threshold: float | None,
                       lemma_weight: float | None) -> None:
    """The options ``cluster --pair-scorer`` takes with it (one line for each that it does not)."""
    if method != "encoder":
        raise InputError(f"--pair-scorer: only with --method encoder (its --model gives the candidate pairs' nearest "
                         f"mentions), not with --method {method}")
    if scope == "corpus":
        raise InputError("--pair-scorer scores the candidate pairs within each group: use --scope topic or "
                         "predicted-topic")
    given = [name for name, value in (("--threshold", threshold), ("--lemma-weight", lemma_weight))
             if value is not None]
    if given:
        raise InputError(f"{', '.join(given)}: the mention encoder's own clustering; with --pair-scorer the scored "
                         "pairs are clustered at --pair-threshold (default: the scorer's)")
    if pair_threshold is not None:
        check_probability(pair_threshold)


def cluster_with_scorer(folder: Path, records: Sequence[MentionRecord], vectors: np.ndarray, found: SplitMentions,
                        groups: Mapping[str, str], types: Mapping[str, str], threshold: float | None,
                        batch_size: int, device: str, stages: dict[str, float]) -> tuple[dict[str, str], str]:
    """``cluster --pair-scorer``: the scorer of ``folder`` scores the candidate pairs of ``records`` (the mention
    encoder's unit ``vectors`` give the nearest mentions) and they are clustered at ``threshold`` (default: the
    scorer's); the assignment and a line saying how. The seconds of the steps go into ``stages``."""
    import time

    scorer = PairScorer.load(folder, resolve_device(device))
    chosen = scorer.config.threshold if threshold is None else threshold
    if chosen is None:
        raise InputError(f"{folder}: the pair scorer records no threshold (it was trained without dev clusters); "
                         "give --pair-threshold p (e.g. 0.5)")
    started = time.perf_counter()
    lemmas, extra = lemma_candidates(scorer.config, found, groups, types)
    stages["lemmas"] = time.perf_counter() - started
    started = time.perf_counter()
    assignment, scored = scored_assignment(scorer, records, vectors, groups, types, lemmas, float(chosen),
                                           scorer.config.linkage, batch_size, progress=True, extra=extra)
    stages["score pairs"] = time.perf_counter() - started
    return assignment, (f"the pair scorer's {scorer.config.linkage} linkage at p > {chosen:g} over {scored:,} "
                        "candidate pairs")
