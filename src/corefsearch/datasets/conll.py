"""The CoNLL coreference format of the reference scorer (Pradhan et al. 2014), as cross-document
corpora are published in it (NewsWCL50, CD²CR, the gold files of ECB+ baselines).

A file holds blocks::

    #begin document (NAME); part 000
    doc_a   0   0   Police   (3
    doc_a   0   1   said     -
    doc_a   0   2   ...      3)|(7)
    #end document

one token a line. A line holding a tab is split on tabs only, so that a cell may hold spaces (a
token ``New York`` or ``10\u00a0000``, a coreference cell ``(12| (14``); other lines are split on
white space. In a tab-separated line every cell is a column, a blank one too: a token that is white
space (``doc\t0\t7\t \t-``, a space as spaCy keeps one, or nothing between the two tabs) is an
empty token in its place, and the build summary counts them (only the token may be blank, and a
blank token's line has as many columns as the line before it in the document, so that a doubled tab
between columns is not read as a token). Two layouts are read, the first token line of each file telling which:

* the reference scorer's: the document, the part (or the sentence, in the cross-document files of
  Cattan et al. 2021), the token number, the token, any other columns (``doc1 0 0 Token - - - (3)``),
  and last the coreference column;
* the eight columns of the ECB+ files of Cattan et al.'s code: topic, subtopic, document, sentence,
  token number, token, ``True``/``False`` (the sentence is annotated) and the coreference. A first
  line of eight columns whose seventh is ``True`` or ``False``, fourth and fifth numbers and third
  not is taken for this layout.

The coreference column is ``-``, or ``|``-joined ``(ID`` (a mention starts), ``ID)`` (it ends) and
``(ID)`` (a one-token mention). ``#begin document NAME`` (without part) is read too. Blank lines end
sentences, as does a change of the sentence column; other ``#`` lines are comments. Brackets of
different chains may overlap and brackets of one chain nest (the latest one opened closes first); a
mention opens and closes in one document of one block.

What the reader makes of it:

* **Documents** are the values of the document column: a cross-document corpus is usually one block
  holding many documents. A document in blocks of different parts is one document per part,
  named ``NAME_PART``. The document ids are these names while they are unique; where two files of a
  folder name the same document (split files that each number their documents from 0, as
  ``train.conll`` and ``dev.conll`` both holding ``0_news_362``), the two are different documents and
  every document id is ``FILE/NAME``, ``FILE`` as in the cluster ids (``dev/0_news_362``), whether the
  files are splits (``--split-by corpus``) or not, and the build summary says so. Ids are left as
  they are where nothing collides, so a folder whose files name different documents keeps its ids. A
  name given twice within one file (the same part, or no part) is an error.
* **Chains** run through the whole file: a chain id names one cluster in every block of the file
  (the topic-level files of Cattan et al. hold one block per topic, with corpus-wide chain ids), and
  the cluster id is the chain id. The files of a folder stay apart (files such as ``cluster --conll``
  writes number their chains from 1 each): with several files it is ``FILE/ID``, ``FILE`` the
  file's name without its last suffix (the whole name where two would be the same).
* **Mentions** are numbered in each document in text order (``DOC_1``, ``DOC_2``, …, by first
  token, then last; ``DOC`` the document id, so ``dev/0_news_362_1`` where ids are by file);
  they take the type ``--mention-type`` names, since the format does not type them. A mention runs
  from its first to its last token that is not blank; one on blank tokens only is left out, and
  the build summary counts it.
* **Topics**: the topic column of the eight-column layout; none in the other.
* **Splits**: none in the format. With ``--split-by corpus`` each file's split is the start of
  its name (``train``, ``dev``/``val``, ``test``), as in ``dev_events.gold_conll``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Document, safe_id
from corefsearch.datasets.conll_ids import BlockNames, Collision, document_ids, file_labels
from corefsearch.datasets.tokenised import TokenDocument, TokenMention
from corefsearch.io.read import closing_iterator, text_lines

FILE_SUFFIXES = (".conll", "_conll", ".txt")
_BEGIN = re.compile(r"^#begin document\s+(?:\((?P<paren>.+)\)|(?P<bare>\S.*?))(?:;\s*part\s+(?P<part>\S+))?\s*$")
_ITEM = re.compile(r"^(?:\((?P<single>[^()|\s]+)\)|\((?P<open>[^()|\s]+)|(?P<close>[^()|\s]+)\))$")
_NUMBER = re.compile(r"\d+")
_SPLIT_NAMES = {"train": "train", "training": "train", "dev": "dev", "val": "dev", "valid": "dev",
                "validation": "dev", "test": "test"}
# White space around a tab-separated cell; a non-breaking space (U+00A0) is part of the cell.
_ASCII_SPACE = " \t\r\n\f\v"
MIN_COLUMNS = 5


@dataclass(frozen=True)
class _Layout:
    """Which column holds what (the coreference is always the last column)."""

    document: int
    sentence: int
    token_number: int
    token: int
    topic: int | None
    columns: int | None  # the exact number of columns, or None: at least MIN_COLUMNS
    description: str


_SCORER = _Layout(0, 1, 2, 3, None, None, "document, part or sentence, token number, token, …, coreference")
_TOPICS = _Layout(2, 3, 4, 5, 0, 8, "topic, subtopic, document, sentence, token number, token, "
                                    "True/False, coreference")
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


class _Row(NamedTuple):
    doc_name: str
    sentence: str
    token_number: int
    token: str
    coreference: str
    topic: str | None


@dataclass
class _Open:
    chain: str
    doc_id: str
    start: tuple[int, int]
    line: int


@dataclass
class _Block:
    name: str
    part: str | None
    line: int
    documents: dict[str, TokenDocument] = field(default_factory=dict)
    # Per mention, in opening order: chain id, document, first and last token, line of its opening.
    mentions: list[tuple[str, str, tuple[int, int], tuple[int, int], str]] = field(default_factory=list)


def conll_files(path: Path) -> list[Path]:
    """The CoNLL files of ``path``: the file itself, or a folder's ``*.conll``, ``*_conll`` and ``*.txt``."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(FILE_SUFFIXES))
        if not files:
            raise InputError(f"{path}: no CoNLL files in this folder (names ending in "
                             f"{', '.join(FILE_SUFFIXES)})")
        return files
    raise InputError(f"{path}: no such file or folder")


def file_split(path: Path) -> str:
    """The split a file's name starts with (``dev_events.gold_conll`` is dev)."""
    head = re.split(r"[^a-z]", path.name.lower(), maxsplit=1)[0]
    if head not in _SPLIT_NAMES:
        raise InputError(f"{path}: --split-by corpus takes each file's split from the start of its name "
                         f"(train, dev or val, test); this name gives none (or split by clusters: "
                         "--split-by clusters)")
    return _SPLIT_NAMES[head]


def _columns(line: str) -> list[str]:
    """The cells of a token line: split on tabs where it holds one (cells keep inner spaces; a cell of white
    space only, or none, is a blank cell ``""`` in its place), else on white space."""
    line = line.strip(_ASCII_SPACE)
    if "\t" not in line:
        return line.split()
    return [raw.strip(_ASCII_SPACE) for raw in line.split("\t")]


def _layout_of(columns: list[str]) -> _Layout:
    """The layout a file's first token line shows."""
    if (len(columns) == 8 and columns[6] in ("True", "False") and _NUMBER.fullmatch(columns[3])
            and _NUMBER.fullmatch(columns[4]) and not _NUMBER.fullmatch(columns[2])):
        return _TOPICS
    return _SCORER


def _row(path: Path, number: int, columns: list[str], layout: _Layout, layout_line: int) -> _Row:
    """The fields of a token line in ``layout`` (set by line ``layout_line`` of the file)."""
    if layout.columns is not None and len(columns) != layout.columns:
        raise InputError(f"{path}:{number}: expected {layout.columns} columns ({layout.description}), as on line "
                         f"{layout_line}, got {len(columns)}")
    if len(columns) == 2:
        raise InputError(f"{path}:{number}: two columns (document, coreference): a key with one line per "
                         "mention and no tokens holds no text to build a dataset from; the reader needs "
                         f"at least {MIN_COLUMNS} columns ({layout.description})")
    if len(columns) < MIN_COLUMNS:
        raise InputError(f"{path}:{number}: expected at least {MIN_COLUMNS} columns ({layout.description}), "
                         f"got {len(columns)}")
    # (The last column, the coreference, is never blank: white space at the end of a line is not a cell.)
    for index, what in ((layout.document, "document"), (layout.sentence, "part or sentence")):
        if not columns[index]:
            raise InputError(f"{path}:{number}: the {what} ({_ORDINALS[index]} column) is blank; only the token (the "
                             f"{_ORDINALS[layout.token]} column) may be a cell of white space or nothing between "
                             "two tabs")
    token_number = columns[layout.token_number]
    if not _NUMBER.fullmatch(token_number):
        raise InputError(f"{path}:{number}: the token number ({_ORDINALS[layout.token_number]} column) must be a "
                         f"non-negative integer, got {token_number!r}")
    return _Row(columns[layout.document], columns[layout.sentence], int(token_number), columns[layout.token],
                columns[-1], None if layout.topic is None else columns[layout.topic])


def _items(path: Path, number: int, column: str) -> list[tuple[str, str]]:
    """The coreference column as ``(kind, chain)`` pairs, kind ``single``, ``open`` or ``close``."""
    if column == "-":
        return []
    items = []
    for item in column.split("|"):
        match = _ITEM.match(item.strip())
        if match is None:
            raise InputError(f"{path}:{number}: coreference column {column!r}: {item!r} is not (ID, ID) or "
                             "(ID); IDs hold no brackets, bars or spaces")
        kind = match.lastgroup
        assert kind is not None
        items.append((kind, match[kind]))
    return items


def _read_file(path: Path, report: ConllReport) -> list[_Block]:
    blocks: list[_Block] = []
    block: _Block | None = None
    layout: _Layout | None = None
    layout_line = 0
    open_mentions: dict[str, list[_Open]] = {}
    sentence_key: tuple[str, str] | None = None
    last_doc: str | None = None
    last_token: int | None = None
    last_width: tuple[int, int] | None = None  # the columns and line number of the last token line
    with closing_iterator(text_lines(path)) as lines:
        for number, raw in lines:
            line = raw.strip()
            if line.startswith("#begin document"):
                if block is not None:
                    raise InputError(f"{path}:{number}: #begin document before the #end document of the block "
                                     f"begun on line {block.line}")
                match = _BEGIN.match(line)
                if match is None:
                    raise InputError(f"{path}:{number}: expected '#begin document (NAME); part NNN', got {line!r}")
                block = _Block((match["paren"] or match["bare"]).strip(), match["part"], number)
                open_mentions, sentence_key, last_doc, last_token, last_width = {}, None, None, None, None
                continue
            if line.startswith("#end document"):
                if block is None:
                    raise InputError(f"{path}:{number}: #end document without #begin document")
                _close_block(path, block, open_mentions)
                blocks.append(block)
                block = None
                continue
            if line.startswith("#"):
                continue  # a comment
            if not line:
                sentence_key = None  # a blank line ends the sentence
                continue
            if block is None:
                raise InputError(f"{path}:{number}: a token line outside '#begin document' … '#end document'")
            columns = _columns(raw)
            if layout is None:
                layout, layout_line = _layout_of(columns), number
            row = _row(path, number, columns, layout, layout_line)
            if not row.token:
                # A token of white space (a space as spaCy keeps one): an empty token, in its place.
                if last_width is not None and last_doc == row.doc_name and last_width[0] != len(columns):
                    raise InputError(f"{path}:{number}: {len(columns)} columns, but line {last_width[1]} of the same "
                                     f"document has {last_width[0]}: a blank cell (two tabs with nothing or spaces "
                                     "between them) is a column, the token, so the columns after it would shift; "
                                     "separate the columns with one tab each")
                report.blank_tokens += 1
                report.blank_where = report.blank_where or f"{path}:{number}"
            last_width = (len(columns), number)
            document = block.documents.get(row.doc_name)
            if document is None:
                document = block.documents[row.doc_name] = TokenDocument(row.doc_name, topic=row.topic)
            elif last_doc != row.doc_name:
                raise InputError(f"{path}:{number}: document {row.doc_name} comes back after other documents in "
                                 f"the block begun on line {block.line}; the lines of a document must be together")
            elif document.topic != row.topic:
                raise InputError(f"{path}:{number}: topic {row.topic}, but document {row.doc_name} began in topic "
                                 f"{document.topic}; a document's lines name one topic")
            if sentence_key != (row.doc_name, row.sentence):
                document.sentences.append([])
                sentence_key, last_token = (row.doc_name, row.sentence), None
            last_doc = row.doc_name
            if last_token is not None and row.token_number <= last_token:
                raise InputError(f"{path}:{number}: token number {row.token_number} is out of order (it follows "
                                 f"{last_token} in the same sentence)")
            last_token = row.token_number
            position = (len(document.sentences) - 1, len(document.sentences[-1]))
            document.sentences[-1].append(row.token)
            for kind, chain in _items(path, number, row.coreference):
                if kind == "single":
                    block.mentions.append((chain, row.doc_name, position, position, f"{path}:{number}"))
                elif kind == "open":
                    open_mentions.setdefault(chain, []).append(_Open(chain, row.doc_name, position, number))
                else:
                    stack = open_mentions.get(chain)
                    if not stack:
                        raise InputError(f"{path}:{number}: {chain}) closes chain {chain}, which has no open "
                                         "bracket in this block")
                    opened = stack.pop()
                    if opened.doc_id != row.doc_name:
                        raise InputError(f"{path}:{number}: {chain}) closes in document {row.doc_name} the bracket "
                                         f"opened on line {opened.line} in document {opened.doc_id}")
                    block.mentions.append((chain, row.doc_name, opened.start, position, f"{path}:{opened.line}"))
    if block is not None:
        raise InputError(f"{path}: the block begun on line {block.line} has no '#end document'")
    if not blocks:
        raise InputError(f"{path}: holds no '#begin document' block")
    return blocks


def _close_block(path: Path, block: _Block, open_mentions: dict[str, list[_Open]]) -> None:
    left = [opened for stack in open_mentions.values() for opened in stack]
    if left:
        first = min(left, key=lambda opened: opened.line)
        raise InputError(f"{path}:{first.line}: the bracket ({first.chain} never closes (the block ends "
                         "without a matching ')')")


def _step(document: TokenDocument, position: tuple[int, int], forward: bool) -> tuple[int, int]:
    """The token after (or before) ``position`` in ``document``, across sentences."""
    sentence, token = position
    if forward:
        return (sentence, token + 1) if token + 1 < len(document.sentences[sentence]) else (sentence + 1, 0)
    return (sentence, token - 1) if token else (sentence - 1, len(document.sentences[sentence - 1]) - 1)


def _trimmed(document: TokenDocument, first: tuple[int, int], last: tuple[int, int]
             ) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The first and last token of a mention without its blank tokens at either end; None if it has only those."""
    while first <= last and not document.sentences[first[0]][first[1]]:
        first = _step(document, first, forward=True)
    while last >= first and not document.sentences[last[0]][last[1]]:
        last = _step(document, last, forward=False)
    return (first, last) if first <= last else None


def _compact(document: TokenDocument) -> dict[tuple[int, int], tuple[int, int]]:
    """Leave out the blank tokens at the start and end of each sentence of ``document``, and the sentences of
    blank tokens only; where each token that stays has gone."""
    moved: dict[tuple[int, int], tuple[int, int]] = {}
    kept: list[list[str]] = []
    for number, words in enumerate(document.sentences):
        start = next((index for index, word in enumerate(words) if word), len(words))
        end = len(words) - next((index for index, word in enumerate(reversed(words)) if word), len(words))
        if start < end:
            moved.update({(number, index): (len(kept), index - start) for index in range(start, end)})
            kept.append(words[start:end])
    document.sentences = kept
    return moved


@dataclass
class ConllReport:
    """Filled while CoNLL files are read: what the build summary says of how they were read."""

    blank_tokens: int = 0  # token cells of white space (or nothing), kept as empty tokens
    blank_where: str | None = None  # FILE:LINE of the first
    blank_mentions: list[str] = field(default_factory=list)  # FILE:LINE of mentions on blank tokens only
    scoped: list[Collision] = field(default_factory=list)  # the document ids that two files share, unscoped
    scoped_example: str | None = None  # one document id as it was given, LABEL/NAME

    def lines(self) -> list[str]:
        lines = []
        if self.blank_tokens:
            lines.append(f"Blank tokens: {self.blank_tokens:,} token cell(s) held only white space or nothing "
                         f"(first at {self.blank_where}); each is an empty token in its place, the columns after "
                         "it read as they are: two spaces part the tokens around it in the text (at a sentence's "
                         "start or end it is left out), and mentions start and end at their other tokens.")
        if self.blank_mentions:
            lines.append(f"Left out {len(self.blank_mentions):,} mention(s) on blank tokens only (first at "
                         f"{self.blank_mentions[0]}).")
        if self.scoped:
            first = self.scoped[0]
            shared = len({collision.doc_id for collision in self.scoped})
            lines.append(f"Document ids by file: {shared:,} document name(s) are in more than one file (e.g. "
                         f"{first.name} in {first.first} and {first.where}), so every document id is FILE/NAME "
                         f"(e.g. {self.scoped_example}), FILE as in the cluster ids (the file's name without its "
                         "last suffix); mention ids follow (FILE/NAME_1, …).")
        return lines


def read_conll(path: Path, mention_type: str = "event", split_by: str = "clusters",
               report: ConllReport | None = None) -> Iterator[Document]:
    """Yield the documents of a CoNLL file, or of every CoNLL file of a folder, in file order; ``report`` is
    filled, as they are read, with what the build summary says of how they were read."""
    if mention_type not in ("event", "entity"):
        raise InputError(f"--mention-type {mention_type}: CoNLL files do not say which type their mentions are; "
                         "name it with --mention-type event or --mention-type entity")
    report = report if report is not None else ConllReport()
    files = conll_files(path)
    read = [(file, file_split(file) if split_by == "corpus" else None, _read_file(file, report)) for file in files]
    # Chains run through a file; the files of a folder are apart.
    labels = file_labels(files) if len(files) > 1 else None
    # Two files naming the same document (split files that each number their documents): ids by file.
    ids, report.scoped = document_ids(files, [[BlockNames(block.line, block.part, list(block.documents))
                                               for block in blocks] for _, _, blocks in read])
    if report.scoped:
        report.scoped_example = next(doc_id for blocks in ids for doc_ids in blocks for doc_id in doc_ids.values())
    for index, (_, split, blocks) in enumerate(read):
        for block, doc_ids in zip(blocks, ids[index], strict=True):
            mentions = []
            for chain, doc_name, first, last, where in block.mentions:
                span = _trimmed(block.documents[doc_name], first, last)
                if span is None:
                    report.blank_mentions.append(where)
                else:
                    mentions.append((chain, doc_name, *span, where))
            if report.blank_tokens:
                moved = {doc_name: _compact(document) for doc_name, document in block.documents.items()}
                mentions = [(chain, doc_name, moved[doc_name][first], moved[doc_name][last], where)
                            for chain, doc_name, first, last, where in mentions]
            counters: dict[str, int] = {}
            for chain, doc_name, first, last, where in sorted(mentions, key=lambda m: (m[2], m[3], m[0])):
                document = block.documents[doc_name]
                counters[doc_name] = counters.get(doc_name, 0) + 1
                tokens = [first, last] if first != last else [first]
                cluster_id = safe_id(chain if labels is None else f"{labels[index]}/{chain}")
                document.mentions.append(TokenMention(f"{doc_ids[doc_name]}_{counters[doc_name]}", cluster_id,
                                                      mention_type, tokens, where))
            for doc_name, document in block.documents.items():
                document.doc_id, document.split = doc_ids[doc_name], split
                yield document.to_document()
