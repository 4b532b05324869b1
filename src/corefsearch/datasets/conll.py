"""The CoNLL coreference format of the reference scorer (Pradhan et al. 2014), as cross-document
corpora are published in it (NewsWCL50, CD²CR, the gold files of ECB+ baselines).

A file holds blocks::

    #begin document (NAME); part 000
    doc_a   0   0   Police   (3
    doc_a   0   1   said     -
    doc_a   0   2   ...      3)|(7)
    #end document

one token a line, columns separated by white space: the document, the part (or the sentence, in
the cross-document files of Cattan et al. 2021), the token number, the token, any other columns,
and last the coreference column: ``-``, or ``|``-joined ``(ID`` (a mention starts), ``ID)`` (it
ends) and ``(ID)`` (a one-token mention). ``#begin document NAME`` (without part) is read too.
Blank lines end sentences, as does a change of the second column; other ``#`` lines are
comments. Brackets of different chains may overlap and brackets of one chain nest (the latest
one opened closes first).

What the reader makes of it:

* **Documents** are the values of the first column: a cross-document corpus is usually one block
  holding many documents. A document in blocks of different parts is one document per part,
  named ``NAME_PART``.
* **Chains** are scoped to their block, as the scorer scores each block alone: with one block the
  cluster id is the chain id, with several it is ``BLOCK/ID`` (``BLOCK`` the name and part).
* **Mentions** are numbered in each document in text order (``DOC_1``, ``DOC_2``, …, by first
  token, then last);
  they take the type ``--mention-type`` names, since the format does not type them.
* **Splits**: none in the format. With ``--split-by corpus`` each file's split is the start of
  its name (``train``, ``dev``/``val``, ``test``), as in ``dev_events.gold_conll``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from corefsearch.datasets.tokenised import TokenDocument, TokenMention
from corefsearch.errors import InputError
from corefsearch.io.read import closing_iterator, text_lines
from corefsearch.schema import Document, safe_id

FILE_SUFFIXES = (".conll", "_conll", ".txt")
_BEGIN = re.compile(r"^#begin document\s+(?:\((?P<paren>.+)\)|(?P<bare>\S.*?))(?:;\s*part\s+(?P<part>\S+))?\s*$")
_ITEM = re.compile(r"^(?:\((?P<single>[^()|\s]+)\)|\((?P<open>[^()|\s]+)|(?P<close>[^()|\s]+)\))$")
_SPLIT_NAMES = {"train": "train", "training": "train", "dev": "dev", "val": "dev", "valid": "dev",
                "validation": "dev", "test": "test"}
MIN_COLUMNS = 5


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

    @property
    def label(self) -> str:
        return self.name if self.part is None else f"{self.name}_{self.part}"


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


def _items(path: Path, number: int, column: str) -> list[tuple[str, str]]:
    """The coreference column as ``(kind, chain)`` pairs, kind ``single``, ``open`` or ``close``."""
    if column == "-":
        return []
    items = []
    for item in column.split("|"):
        match = _ITEM.match(item)
        if match is None:
            raise InputError(f"{path}:{number}: coreference column {column!r}: {item!r} is not (ID, ID) or "
                             "(ID); IDs hold no brackets, bars or spaces")
        kind = match.lastgroup
        assert kind is not None
        items.append((kind, match[kind]))
    return items


def _read_file(path: Path) -> list[_Block]:
    blocks: list[_Block] = []
    block: _Block | None = None
    open_mentions: dict[str, list[_Open]] = {}
    sentence_key: tuple[str, str] | None = None
    last_doc: str | None = None
    last_token: int | None = None
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
                open_mentions, sentence_key, last_doc, last_token = {}, None, None, None
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
            columns = line.split()
            if len(columns) == 2:
                raise InputError(f"{path}:{number}: two columns (document, coreference): a key with one line per "
                                 "mention and no tokens holds no text to build a dataset from; the reader needs "
                                 f"at least {MIN_COLUMNS} columns (document, part or sentence, token number, token, "
                                 "…, coreference)")
            if len(columns) < MIN_COLUMNS:
                raise InputError(f"{path}:{number}: expected at least {MIN_COLUMNS} columns (document, part or "
                                 f"sentence, token number, token, …, coreference), got {len(columns)}")
            doc_name, second, token_number, token, coreference = (columns[0], columns[1], columns[2], columns[3],
                                                                  columns[-1])
            if not re.fullmatch(r"\d+", token_number):
                raise InputError(f"{path}:{number}: the token number (third column) must be a non-negative integer, "
                                 f"got {token_number!r}")
            document = block.documents.get(doc_name)
            if document is None:
                document = block.documents[doc_name] = TokenDocument(doc_name)
            elif last_doc != doc_name:
                raise InputError(f"{path}:{number}: document {doc_name} comes back after other documents in the "
                                 f"block begun on line {block.line}; the lines of a document must be together")
            if sentence_key != (doc_name, second):
                document.sentences.append([])
                sentence_key, last_token = (doc_name, second), None
            last_doc = doc_name
            value = int(token_number)
            if last_token is not None and value <= last_token:
                raise InputError(f"{path}:{number}: token number {value} is out of order (it follows "
                                 f"{last_token} in the same sentence)")
            last_token = value
            position = (len(document.sentences) - 1, len(document.sentences[-1]))
            document.sentences[-1].append(token)
            for kind, chain in _items(path, number, coreference):
                if kind == "single":
                    block.mentions.append((chain, doc_name, position, position, f"{path}:{number}"))
                elif kind == "open":
                    open_mentions.setdefault(chain, []).append(_Open(chain, doc_name, position, number))
                else:
                    stack = open_mentions.get(chain)
                    if not stack:
                        raise InputError(f"{path}:{number}: {chain}) closes chain {chain}, which has no open "
                                         "bracket")
                    opened = stack.pop()
                    if opened.doc_id != doc_name:
                        raise InputError(f"{path}:{number}: {chain}) closes in document {doc_name} the bracket "
                                         f"opened on line {opened.line} in document {opened.doc_id}")
                    block.mentions.append((chain, doc_name, opened.start, position, f"{path}:{opened.line}"))
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


def read_conll(path: Path, mention_type: str = "event", split_by: str = "clusters") -> Iterator[Document]:
    """Yield the documents of a CoNLL file, or of every CoNLL file of a folder, in file order."""
    if mention_type not in ("event", "entity"):
        raise InputError(f"--mention-type {mention_type}: CoNLL files do not say which type their mentions are; "
                         "name it with --mention-type event or --mention-type entity")
    files = conll_files(path)
    read = [(file, file_split(file) if split_by == "corpus" else None, _read_file(file)) for file in files]
    prefixed = sum(len(blocks) for _, _, blocks in read) > 1
    # Documents named in blocks of more than one part are one document per part.
    names: dict[str, int] = {}
    for _, _, blocks in read:
        for block in blocks:
            for doc_name in block.documents:
                names[doc_name] = names.get(doc_name, 0) + 1
    taken: dict[str, str] = {}
    for file, split, blocks in read:
        for block in blocks:
            doc_ids = {}
            for doc_name in block.documents:
                doc_id = safe_id(doc_name if names[doc_name] == 1 or block.part is None else
                                 f"{doc_name}_{block.part}")
                if doc_id in taken:
                    raise InputError(f"{file}:{block.line}: document {doc_id} is also in {taken[doc_id]}")
                taken[doc_id] = f"{file}:{block.line}"
                doc_ids[doc_name] = doc_id
            counters: dict[str, int] = {}
            for chain, doc_name, first, last, where in sorted(block.mentions, key=lambda m: (m[2], m[3], m[0])):
                document = block.documents[doc_name]
                counters[doc_name] = counters.get(doc_name, 0) + 1
                tokens = [first, last] if first != last else [first]
                cluster_id = safe_id(f"{block.label}/{chain}" if prefixed else chain)
                document.mentions.append(TokenMention(f"{doc_ids[doc_name]}_{counters[doc_name]}", cluster_id,
                                                      mention_type, tokens, where))
            for doc_name, document in block.documents.items():
                document.doc_id, document.split = doc_ids[doc_name], split
                yield document.to_document()
