"""The encoder input of a mention (Hsu & Horwood 2022, §3.2; DESIGN.md §4 "Contrastive").

The contrastive mention encoder reads each gold mention of a split once: the first two sentences of
its document (the document's topic, as a reader would skim it) paired with the mention's own
sentence, the mention wrapped in ``[E]`` ... ``[/E]`` so the encoder can attend to it and the head
can sum its tokens. At most ``max_length`` (128) word pieces; when that is too many, tokens go from
the end of the document context first, then from the sentence, keeping a window centred on the
mention, and never from the mention itself (unless the mention alone is longer than the budget,
when its first tokens are kept).

:func:`mention_records` streams ``passages.jsonl`` twice instead of loading it: the first pass
finds the first passage of each wanted mention and counts them per document; the second builds
the records, holding the two head sentences only of documents with mentions still to come. Memory
is O(mentions of the split), not O(corpus), so a WEC/CoreSearch-sized passages file
(hundreds of MB, mostly distractors) streams. With sentence passages (``DOCID-N``) the
"sentence" of a mention is its passage; with window passages it is the window (the token window
below centres it on the mention anyway).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.cluster.mentions import split_mention_ids
from corefsearch.datasets.dataset import Dataset
from corefsearch.reader.inputs import pair_format

ENTITY_START = "[E]"
ENTITY_END = "[/E]"
MAX_LENGTH = 128
HEAD_SENTENCES = 2


@dataclass(frozen=True)
class MentionRecord:
    """A gold mention and the text the encoder reads for it.

    ``start``/``end`` are character offsets into ``sentence`` (end exclusive;
    ``sentence[start:end] == text``); ``context`` is the document's first two sentences joined by a
    space (the mention's own sentence may be one of them, as in the paper)."""

    mention_id: str
    cluster_id: str
    doc_id: str
    topic: str | None
    passage_id: str
    text: str
    start: int
    end: int
    sentence: str
    context: str


def passage_position(passage_id: str, doc_id: str) -> int | None:
    """N of a passage id ``DOCID-N`` (white space in the doc id written as ``_``), else None."""
    stem, _, number = passage_id.rpartition("-")
    if not number.isdigit() or stem != "_".join(doc_id.split()) and stem != doc_id:
        return None
    return int(number)


def mention_records(dataset_dir: Path, split: str) -> Iterator[MentionRecord]:
    """One :class:`MentionRecord` per gold mention of the clusters of ``split`` (``clusters.jsonl``).

    A mention in several overlapping passages is read in its first. The head sentences of a
    document are its passages ``DOCID-0`` and ``DOCID-1`` (by their ``N``, wherever they are in the
    file); a document whose ids are not of that form uses its first two passages in file order.
    Records come in file order as soon as their document's head is read; those of documents with a
    single passage or other ids come at the end. Raises InputError when clusters.jsonl names
    mentions no passage holds."""
    dataset = Dataset(dataset_dir)
    yield from _records(dataset, set(split_mention_ids(dataset, split)))


def _records(dataset: Dataset, wanted: set[str]) -> Iterator[MentionRecord]:
    """The records of the ``wanted`` mention ids (see :func:`mention_records`), in two passes over the passages."""
    path = dataset.passages_path
    if not path.is_file():
        raise MissingArtefactError(f"{path}: no such file; rebuild the dataset with `corefsearch build-dataset ... "
                                   f"--out {dataset.root} --overwrite`")
    # Pass 1: the first passage of each wanted mention, and how many wanted mentions each document holds.
    first_passage: dict[str, str] = {}
    pending: dict[str, int] = {}
    for passage in dataset.passages():
        for mention in passage.mentions:
            if mention.mention_id in wanted and mention.mention_id not in first_passage:
                first_passage[mention.mention_id] = passage.id
                pending[passage.doc_id] = pending.get(passage.doc_id, 0) + 1
    missing = sorted(wanted - set(first_passage))
    if missing:
        raise InputError(f"{dataset.root}: clusters.jsonl names {len(missing):,} mention(s) that no passage of "
                         f"passages.jsonl holds (e.g. {missing[0]}); rebuild the dataset with `corefsearch "
                         f"build-dataset ... --out {dataset.root} --overwrite`")
    # Pass 2: only documents with wanted mentions; each keeps its two lowest-position passages seen so far and
    # its records waiting for them, and is dropped once both head sentences are read and its records are out.
    heads: dict[str, list[tuple[int, int, str]]] = {}  # doc -> [(position, numbered? 0/1, text)]
    seen: dict[str, int] = {}  # doc -> passages read (the position of a passage id without N)
    waiting: dict[str, list[tuple[Any, ...]]] = {}
    for passage in dataset.passages():
        doc_id = passage.doc_id
        if doc_id not in pending:
            continue
        order = seen.get(doc_id, 0)
        seen[doc_id] = order + 1
        number = passage_position(passage.id, doc_id)
        _keep_head(heads.setdefault(doc_id, []), (order if number is None else number, number is not None,
                                                  passage.text))
        for mention in passage.mentions:
            if first_passage.get(mention.mention_id) == passage.id:
                waiting.setdefault(doc_id, []).append(
                    (mention.mention_id, mention.cluster_id, passage.id, mention.start, mention.end, passage.text,
                     passage.topic))
        head = heads[doc_id]
        if [(p, numbered) for p, numbered, _ in head] == [(0, True), (1, True)]:
            yield from _release(doc_id, head, waiting, pending)
            if doc_id not in pending:
                del heads[doc_id], seen[doc_id]
    for doc_id in list(waiting):  # single-passage documents, or passage ids without N
        yield from _release(doc_id, heads[doc_id], waiting, pending)


def _release(doc_id: str, head: list[tuple[int, int, str]], waiting: dict[str, list[tuple[Any, ...]]],
             pending: dict[str, int]) -> Iterator[MentionRecord]:
    context = " ".join(text for _, _, text in head)
    for mention_id, cluster_id, passage_id, start, end, sentence, topic in waiting.pop(doc_id, []):
        yield MentionRecord(mention_id, cluster_id, doc_id, topic, passage_id, sentence[start:end], start, end,
                            sentence, context)
        pending[doc_id] -= 1
    if pending[doc_id] == 0:
        del pending[doc_id]


def _keep_head(head: list[tuple[int, int, str]], candidate: tuple[int, int, str]) -> None:
    """Keep the ``HEAD_SENTENCES`` passages of lowest position (a document's head) in ``head``."""
    head.append(candidate)
    head.sort(key=lambda entry: entry[0])
    del head[HEAD_SENTENCES:]


@dataclass(frozen=True)
class EncoderInput:
    """Token ids of one mention's input and the positions of its mention tokens (between the markers)."""

    input_ids: list[int]
    token_type_ids: list[int] | None  # segment ids (0 context, 1 sentence) for tokenizers that have them
    mention_start: int  # first mention token (just after [E])
    mention_end: int  # one past the last mention token (the position of [/E])


def encoder_input(tokenizer: Any, record: MentionRecord, max_length: int = MAX_LENGTH) -> EncoderInput:
    """``[CLS] context [SEP] sentence-with-markers [SEP]`` (the tokenizer's own pair format, as
    ``corefsearch.reader.inputs.pair_format`` finds it: BERT- and RoBERTa-style) in at
    most ``max_length`` tokens, cut as the module docstring says. The tokenizer must know the
    ``[E]``/``[/E]`` special tokens (:func:`corefsearch.cluster.model.add_entity_markers`)."""
    start_id, end_id = tokenizer.convert_tokens_to_ids([ENTITY_START, ENTITY_END])
    if tokenizer.unk_token_id in (start_id, end_id):
        raise InputError(f"the tokenizer has no {ENTITY_START}/{ENTITY_END} tokens; load the model with "
                         "MentionEncoder, which adds them")
    left = record.sentence[:record.start]
    right = record.sentence[record.end:]
    # Markers by character position (a literal "[E]" in the text is left to the tokenizer, never taken for ours).
    marked = f"{left} {ENTITY_START} {record.text} {ENTITY_END} {right}"
    e_char = len(left) + 1
    ee_char = e_char + len(ENTITY_START) + 1 + len(record.text) + 1
    # A long sentence (a WEC paragraph) is cut around the mention below, so the tokenizer's warning about a
    # sequence longer than the model's positions does not apply.
    encoded = tokenizer(marked, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids: list[int] = encoded["input_ids"]
    offsets = encoded["offset_mapping"]
    e_pos = next((i for i, (s, _) in enumerate(offsets) if s == e_char and ids[i] == start_id), None)
    ee_pos = next((i for i, (s, _) in enumerate(offsets) if s == ee_char and ids[i] == end_id), None)
    if e_pos is None or ee_pos is None:
        raise InputError(f"mention {record.mention_id}: {type(tokenizer).__name__} does not keep {ENTITY_START}/"
                         f"{ENTITY_END} whole; they must be special tokens of the tokenizer")
    mention_ids = ids[e_pos + 1:ee_pos]
    left_ids, right_ids = ids[:e_pos], ids[ee_pos + 1:]
    # Only the context's first tokens can fit: cut it at max_length here (the same ids as cutting later,
    # without the tokenizer's warning about a sequence longer than the model's positions).
    context_ids: list[int] = tokenizer(record.context, add_special_tokens=False, truncation=True,
                                       max_length=max_length)["input_ids"]

    fmt = pair_format(tokenizer)
    budget = max_length - fmt.n_special - 2
    if budget < 1:
        raise InputError(f"max length {max_length} leaves no room for a mention")
    mention_ids = mention_ids[:budget]
    room = budget - len(mention_ids)
    # Sentence window centred on the mention: half the room each side, unused room to the other side.
    n_left = min(len(left_ids), max(room // 2, room - len(right_ids)))
    n_right = min(len(right_ids), room - n_left)
    sentence_ids = [*left_ids[len(left_ids) - n_left:], start_id, *mention_ids, end_id, *right_ids[:n_right]]
    context_ids = context_ids[:room - n_left - n_right]  # the context gives way first, from its end
    first_part = [*fmt.prefix, *context_ids, *fmt.middle]
    full = [*first_part, *sentence_ids, *fmt.suffix]
    types = [fmt.first_type] * len(first_part) + [fmt.second_type] * (len(sentence_ids) + len(fmt.suffix))
    first = len(first_part) + n_left + 1
    return EncoderInput(full, types if fmt.has_types else None, first, first + len(mention_ids))


def dataset_mention_records(dataset_dir: Path) -> dict[str, MentionRecord]:
    """``{mention id: record}`` of every mention of the dataset's clusters, whatever their split (the
    second search round's candidates, ``corefsearch.search.expansion``), in the same two passes over the passages
    as one split's."""
    dataset = Dataset(dataset_dir)
    wanted = {mention_id for cluster in dataset.clusters() for mention_id in cluster.mention_ids}
    return {record.mention_id: record for record in _records(dataset, wanted)}
