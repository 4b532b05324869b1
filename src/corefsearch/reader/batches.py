"""The reader's training examples: per epoch, each train query with one relevant passage and retrieved
negatives (:func:`epoch_examples`), and the windows an example is read in (:func:`example_windows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from corefsearch.base.schema import Passage, Query
from corefsearch.reader.arguments import ReaderTrainingArguments
from corefsearch.training.common import epoch_rng

if TYPE_CHECKING:
    from corefsearch.reader.inputs import PairWindow
    from corefsearch.reader.read import Reader


@dataclass
class ReaderExample:
    query: Query
    positive: str
    gold: tuple[int, int]  # characters of the coreferring mention in the positive
    negatives: list[str]


@dataclass
class ReaderData:
    """What a reader trains and is scored on: the run's train and dev queries, their relevant and ranked
    passages (the run's order, the query's own passage left out) and those passages."""

    train: list[Query]
    dev: list[Query]
    relevant: dict[str, set[str]]  # train and dev
    ranked: dict[str, list[str]]  # the run, in rank order, the query's own passage left out
    passages: dict[str, Passage]


def gold_span(passage: Passage, cluster_id: str) -> tuple[int, int] | None:
    spans = sorted((m.start, m.end) for m in passage.mentions if m.cluster_id == cluster_id)
    return spans[0] if spans else None


def epoch_examples(data: ReaderData, args: ReaderTrainingArguments, epoch: int) -> list[ReaderExample]:
    """The shuffled examples of one epoch (the same for the same seed and epoch)."""
    rng = epoch_rng(args.seed, epoch)
    examples = []
    for query in data.train:
        gold = data.relevant[query.id]
        retrieved = data.ranked[query.id]
        found = [pid for pid in retrieved if pid in gold]
        positives = [pid for pid in (found or sorted(gold)) if pid in data.passages
                     and gold_span(data.passages[pid], query.cluster_id) is not None]
        negatives = [pid for pid in retrieved if pid not in gold and pid != query.passage_id
                     and query.cluster_id not in {m.cluster_id for m in data.passages[pid].mentions}]
        if not positives or not negatives:
            continue
        positive = rng.choice(positives)
        chosen = rng.sample(negatives, min(args.negatives, len(negatives)))
        span = gold_span(data.passages[positive], query.cluster_id)
        examples.append(ReaderExample(query, positive, span, chosen))  # type: ignore[arg-type]
    rng.shuffle(examples)
    return examples


def example_windows(reader: Reader, example: ReaderExample,
                    passages: dict[str, Passage]) -> tuple[list[PairWindow], tuple[int, int]] | None:
    """The windows an example is read in (the positive's window that holds its gold span first, then
    each negative's first window) and the gold span's window tokens; ``None`` when no window holds
    the whole gold span (a mention longer than a window)."""
    ids = [example.positive, *example.negatives]
    windows_all = reader.windows(example.query, [(pid, passages[pid].text) for pid in ids])
    for window in windows_all:
        if window.passage == 0:
            gold_tokens = window.token_span(*example.gold)
            if gold_tokens is not None:
                firsts: dict[int, PairWindow] = {}
                for other in windows_all:
                    firsts.setdefault(other.passage, other)
                return [window, *(firsts[i] for i in range(1, len(ids)))], gold_tokens
    return None
