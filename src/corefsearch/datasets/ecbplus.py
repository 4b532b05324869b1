"""ECB+ (Cybulska & Vossen, LREC 2014): the original XML corpus, as a folder or a ``.tar.gz``.

One :class:`Document` per XML file (``<topic>_<n>ecb.xml`` / ``<topic>_<n>ecbplus.xml``).
By default (``chains="cross-document"``) only mentions in cross-document chains are kept: the
``source`` markables of ``CROSS_DOC_COREF`` relations, whose chain id is the ``instance_id`` of
the relation's ``target`` markable (the relation's ``note`` always equals it in the release).
Singletons and ``INTRA_DOC_COREF``-only chains are left out.

``chains="all"`` keeps every gold mention, as cross-document coreference scoring needs: also
the sources of ``INTRA_DOC_COREF`` relations, in the chain ``INTRA_{doc_id}_{target m_id}``
(the target markable carries no tokens and no ``instance_id``; 110 of the 185 targets are
``UNKNOWN_INSTANCE_TAG``), and every other event/entity markable with token anchors that is in
no relation, as the singleton chain ``SINGLETON_{doc_id}_{m_id}``. A markable that were the
source of both kinds of relation would keep its cross-document chain (none is, in the release).

Facts of the release that the reader relies on (checked on all 982 files):

* sentence 0 of every ``*ecbplus.xml`` file is the source URL; it is left out of the text;
* the headline is usually sentence 1 of ``*ecbplus.xml``, but in 64 files a dateline
  ("April 27 , 2009", "Posted 11 / 27 / 2005 7 : 21 AM") comes first: lines made only of
  dates and times (62 files; at most two lines) are skipped when taking the title, the two
  that also name a place (37_13ecbplus, 38_7ecbplus) are not; ``*ecb.xml`` files (the
  original ECB) mostly have no headline, so sentence 0 -- the title taken for them -- is in
  about three quarters of them the lead sentence of the article;
* tokens may hold stray white space (``"Awards\\t"``, ``"\\t"``, ``"\\u2009"``): tokens are
  stripped and empty ones skipped;
* 52 mentions have gaps between their tokens: their span runs from first to last token.
"""

from __future__ import annotations

import csv
import re
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Document, Mention, safe_id
from corefsearch.io.read import text_lines

DEV_TOPICS = frozenset({2, 5, 12, 18, 21, 23, 34, 35})
TEST_TOPICS = frozenset(range(36, 46))
MENTION_TYPE_CHOICES = ("event", "entity", "all")
CHAIN_CHOICES = ("cross-document", "all")
SENTENCES_CSV = "ECBplus_coreference_sentences.csv"

EVENT_TAG_PREFIXES = ("ACTION_", "NEG_ACTION_")
ENTITY_TAG_PREFIXES = ("HUMAN_PART", "NON_HUMAN_PART", "LOC_", "TIME_")

_FILE_NAME = re.compile(r"^(?P<topic>\d+)_\d+ecb(?P<plus>plus)?\.xml$")

# A dateline is a line made only of these tokens (and holding a digit): dates, times, and the
# words around them. Strict on purpose, so that no headline is ever taken for one.
_MONTHS = ("jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|july"
           "|august|september|october|november|december")
_DAYS = "mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_DATELINE_WORDS = ("posted|updated|last|published|article|on|at|am|pm|a\\.m|p\\.m|a|p|m"
                   "|et|est|edt|cst|cdt|pt|pst|pdt|gmt|bst|ist|utc|th|st|nd|rd")
_DATELINE_TOKEN = re.compile(
    rf"^(?:\d+(?:st|nd|rd|th|am|pm)?|(?:{_MONTHS}|{_DAYS}|{_DATELINE_WORDS})\.?|[-/:,.|@()])$", re.IGNORECASE)
_MAX_DATELINES = 2

# doc_id -> numbers of its validated sentences
ValidatedSentences = dict[str, set[int]]


def topic_split(topic: int) -> str:
    """The standard split of Cybulska & Vossen (2015)."""
    if topic in TEST_TOPICS:
        return "test"
    if topic in DEV_TOPICS:
        return "dev"
    return "train"


def mention_kind(tag: str) -> str | None:
    """``event``/``entity`` for a markable tag, ``None`` for tags of neither (UNKNOWN_INSTANCE_TAG)."""
    if tag.startswith(EVENT_TAG_PREFIXES):
        return "event"
    if tag.startswith(ENTITY_TAG_PREFIXES):
        return "entity"
    return None


def is_dateline(line: str) -> bool:
    """True for a line that is only a date/time stamp, such as ``Updated : November 11 , 2011``."""
    tokens = line.split()
    return (bool(tokens) and any(t[0].isdigit() for t in tokens)
            and all(_DATELINE_TOKEN.match(t) for t in tokens))


def read_validated_sentences(path: Path) -> ValidatedSentences:
    """Read ``ECBplus_coreference_sentences.csv`` into ``{doc_id: {sentence numbers}}``.

    Its ``File`` column omits the topic (``10ecbplus`` in topic 1 is ``1_10ecbplus``).
    """
    path = Path(path)
    validated: ValidatedSentences = {}
    # The shared text reader: a folder, binary data or bytes that are not UTF-8 name FILE:LINE;
    # a BOM and CRLF line ends are accepted.
    lines = text_lines(path)
    reader = csv.DictReader(line for _, line in lines)
    try:
        missing = {"Topic", "File", "Sentence Number"} - set(reader.fieldnames or ())
        if missing:
            raise InputError(f"{path}: missing column(s) {', '.join(sorted(missing))} "
                             f"(expected Topic,File,Sentence Number)")
        for row in reader:
            try:
                topic = int(row["Topic"])
                sentence = int(row["Sentence Number"])
            except (TypeError, ValueError):
                raise InputError(f"{path}:{reader.line_num}: Topic and Sentence Number must be "
                                 f"integers") from None
            name = (row["File"] or "").strip()
            doc_id = name if name.startswith(f"{topic}_") else f"{topic}_{name}"
            validated.setdefault(doc_id, set()).add(sentence)
    except csv.Error as err:
        raise InputError(f"{path}:{reader.line_num}: not a CSV line ({err})") from None
    finally:
        lines.close()  # now, also when a bad row stops the reading: not later, by the garbage collector
    return validated


def _default_sentences_csv(path: Path) -> Path:
    """The CSV beside the tarball or folder (the vendored ``data/ecbplus/`` layout)."""
    candidates = ([path / SENTENCES_CSV] if path.is_dir() else []) + [path.parent / SENTENCES_CSV]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise InputError(f"validated sentences requested but {candidates[-1]} does not exist; "
                     f"pass the file {SENTENCES_CSV} with --sentences-csv")


def _sort_key(name: str) -> tuple[int, str]:
    match = _FILE_NAME.match(name)
    assert match is not None
    return int(match["topic"]), name


def _iter_sources(path: Path) -> Iterator[tuple[str, str, bytes]]:
    """Yield ``(file name, where, XML bytes)`` sorted by topic then file name."""
    if path.is_dir():
        root = path / "ECB+" if (path / "ECB+").is_dir() else path
        files = [f for f in root.glob("*/*.xml") if _FILE_NAME.match(f.name)]
        if not files:
            tarballs = sorted(p.name for p in path.glob("*.tar.gz"))
            hint = f" (to read the archive, pass {path / tarballs[0]})" if tarballs else ""
            raise InputError(f"{path}: no ECB+ XML files (<topic>/<topic>_<n>ecb[plus].xml) in this folder "
                             f"or in an ECB+ folder inside it{hint}")
        seen: dict[str, Path] = {}
        for file in files:
            if file.name in seen:
                raise InputError(f"{path}: {file.name} occurs twice ({seen[file.name]} and {file})")
            seen[file.name] = file
        for name in sorted(seen, key=_sort_key):
            try:
                data = seen[name].read_bytes()
            except OSError as err:
                raise InputError(f"{seen[name]}: cannot read it ({err.strerror or err})") from None
            yield name, str(seen[name]), data
        return
    if path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        yield from _iter_tar(path)
        return
    raise InputError(f"{path}: expected the ECB+ XML folder or ECBplus.tar.gz, "
                     f"found {'a file of another kind' if path.exists() else 'nothing'}")


def _iter_tar(path: Path) -> Iterator[tuple[str, str, bytes]]:
    # Stream mode: members come in archive order (not sorted), so they are buffered (about
    # 30 MB of XML) and sorted; random access into a gzip stream would re-decompress per file.
    members: dict[str, tuple[str, bytes]] = {}
    try:
        with tarfile.open(path, mode="r|gz") as archive:
            for member in archive:
                name = member.name.rsplit("/", 1)[-1]
                if not member.isfile() or not _FILE_NAME.match(name):
                    continue
                if name in members:
                    raise InputError(f"{path}: {name} occurs twice ({members[name][0]} and {member.name})")
                handle = archive.extractfile(member)
                assert handle is not None  # a regular file always has a handle
                # Closed here, not left to the garbage collector: an exception raised while a
                # finaliser runs is dropped, so a Ctrl-C landing as a forgotten member was cleaned
                # up would be lost and the build would carry on.
                with handle:
                    members[name] = (member.name, handle.read())
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise InputError(f"{path}: not a readable .tar.gz ({err})") from None
    if not members:
        raise InputError(f"{path}: the archive holds no ECB+ XML files (<topic>_<n>ecb[plus].xml)")
    for name in sorted(members, key=_sort_key):
        member_name, data = members[name]
        yield name, f"{path}:{member_name}", data


def _parse_document(name: str, where: str, data: bytes, mention_type: str,
                    validated: ValidatedSentences | None, chains: str = "cross-document") -> Document:
    try:
        root = ET.fromstring(data)
    except ET.ParseError as err:
        raise InputError(f"{where}: malformed XML ({err})") from None
    doc_id = name[: -len(".xml")]
    match = _FILE_NAME.match(name)
    assert match is not None
    topic, is_plus = int(match["topic"]), bool(match["plus"])

    # Group the (stripped, non-empty) tokens by sentence, in document order.
    sentences: dict[int, list[tuple[str, str]]] = {}
    token_sentence: dict[str, int] = {}
    for token in root.iter("token"):
        t_id, sentence = token.get("t_id"), token.get("sentence")
        if t_id is None or sentence is None or not sentence.lstrip("-").isdigit():
            raise InputError(f"{where}: a <token> lacks t_id or an integer sentence attribute")
        token_sentence[t_id] = int(sentence)
        words = sentences.setdefault(int(sentence), [])
        word = (token.text or "").strip()
        if word:
            words.append((t_id, word))

    # Sentence 0 of ecbplus files is the source URL, not part of the article.
    kept = [s for s in sentences if not (is_plus and s == 0)]
    allowed = validated.get(doc_id, set()) if validated is not None else None
    pieces: list[str] = []
    units: list[tuple[int, int]] = []
    token_span: dict[str, tuple[int, int]] = {}
    line_spans: list[tuple[int, int]] = []
    position = 0
    for number in kept:
        words = sentences[number]
        if not words:
            continue
        if pieces:
            pieces.append("\n")
            position += 1
        start = position
        for i, (t_id, word) in enumerate(words):
            if i:
                pieces.append(" ")
                position += 1
            token_span[t_id] = (position, position + len(word))
            pieces.append(word)
            position += len(word)
        line_spans.append((start, position))
        if allowed is None or number in allowed:
            units.append((start, position))
    text = "".join(pieces)
    lines = [text[start:end] for start, end in line_spans]
    # The headline: the first line (sentence 1 of ecbplus, 0 of ecb) unless it is a dateline.
    first = 0
    while first < min(_MAX_DATELINES, len(lines) - 1) and is_dateline(lines[first]):
        first += 1
    title = lines[first] if lines else ""

    markable_list = root.find("Markables")
    markables = {m.get("m_id"): m for m in (markable_list if markable_list is not None else [])}
    mentions: list[Mention] = []
    seen: set[str] = set()

    def add(m_id: str, cluster_id: str, relation: str) -> None:
        """Keep markable ``m_id`` as a mention of ``cluster_id`` if it is of the requested type,
        anchored on text, and (with validated sentences) inside them."""
        markable = markables.get(m_id)
        if markable is None:
            raise InputError(f"{where}: {relation} links the unknown markable {m_id!r}")
        kind = mention_kind(markable.tag)
        if kind is None or (mention_type != "all" and kind != mention_type):
            return
        anchors = [a.get("t_id") or "" for a in markable.iter("token_anchor")]
        unknown = [t for t in anchors if t not in token_sentence]
        if unknown:
            raise InputError(f"{where}: markable {m_id} is anchored on unknown token(s) {unknown}")
        # Empty tokens have no span: the mention runs from its first to last non-empty token.
        spans = [token_span[t] for t in anchors if t in token_span]
        if not spans:
            return  # only empty tokens or the URL sentence: nothing to point at
        if allowed is not None and not all(token_sentence[t] in allowed for t in anchors):
            return
        mention_id = safe_id(f"{doc_id}_{m_id}")
        if mention_id in seen:
            raise InputError(f"{where}: markable {m_id} is a source of more than one {relation.split()[0]}")
        seen.add(mention_id)
        mention = Mention(mention_id=mention_id, doc_id=doc_id, start=min(s for s, _ in spans),
                          end=max(e for _, e in spans), cluster_id=cluster_id, type=kind)
        mention.validate(text, where)
        mentions.append(mention)

    cross_sources: set[str] = set()
    for relation in root.iter("CROSS_DOC_COREF"):
        target = relation.find("target")
        chain = markables.get(target.get("m_id")) if target is not None else None
        if chain is None:
            raise InputError(f"{where}: CROSS_DOC_COREF {relation.get('r_id')} has no target markable")
        cluster_id = chain.get("instance_id") or relation.get("note")
        if not cluster_id:
            raise InputError(f"{where}: CROSS_DOC_COREF {relation.get('r_id')} names no chain id")
        for source in relation.iter("source"):
            m_id = source.get("m_id") or ""
            cross_sources.add(m_id)
            add(m_id, str(cluster_id), f"CROSS_DOC_COREF {relation.get('r_id')}")
    if chains == "all":
        # An intra-document chain is the relation's sources; its target is a markable without
        # tokens and without instance_id (in the release: 185 relations, 409 sources; no source
        # is also a CROSS_DOC_COREF source, but one that were would keep its cross-document chain).
        chained = set(cross_sources)
        for relation in root.iter("INTRA_DOC_COREF"):
            target = relation.find("target")
            target_id = target.get("m_id") if target is not None else None
            if not target_id or target_id not in markables:
                raise InputError(f"{where}: INTRA_DOC_COREF {relation.get('r_id')} has no target markable")
            for source in relation.iter("source"):
                m_id = source.get("m_id") or ""
                chained.add(m_id)
                if m_id not in cross_sources:
                    add(m_id, f"INTRA_{doc_id}_{target_id}", f"INTRA_DOC_COREF {relation.get('r_id')}")
        # Every other event/entity markable on tokens is a singleton (chain targets have no tokens).
        for m_id, markable in markables.items():
            if m_id and m_id not in chained and markable.find("token_anchor") is not None:
                add(m_id, f"SINGLETON_{doc_id}_{m_id}", "singleton")
    mentions.sort(key=lambda m: (m.start, m.end, m.mention_id))
    return Document(doc_id=doc_id, text=text, title=title, units=units, mentions=mentions,
                    split=topic_split(topic), topic=str(topic))


def read_ecbplus(path: Path, mention_type: str = "event", validated_only: bool = False,
                 sentences_csv: Path | None = None, chains: str = "cross-document") -> Iterator[Document]:
    """Read ECB+ from its XML folder or ``ECBplus.tar.gz``; one Document per file, sorted.

    ``mention_type``: ``event`` (ACTION_*, NEG_ACTION_*), ``entity`` (HUMAN_PART*,
    NON_HUMAN_PART*, LOC_*, TIME_*) or ``all``. ``validated_only`` keeps only the sentences
    listed in ``ECBplus_coreference_sentences.csv`` as units, and only the mentions inside
    them; ``sentences_csv`` defaults to that file beside ``path``. ``chains``: ``cross-document``
    (the mentions of CROSS_DOC_COREF chains) or ``all`` (also those of INTRA_DOC_COREF chains and
    the singletons; see the module docstring).
    """
    if mention_type not in MENTION_TYPE_CHOICES:
        raise InputError(f"mention type must be one of {MENTION_TYPE_CHOICES}, got {mention_type!r}")
    if chains not in CHAIN_CHOICES:
        raise InputError(f"--chains must be one of {', '.join(CHAIN_CHOICES)}, got {chains!r}")
    path = Path(path)
    validated: ValidatedSentences | None = None
    if validated_only:
        csv_path = Path(sentences_csv) if sentences_csv is not None else _default_sentences_csv(path)
        if not csv_path.exists():
            raise InputError(f"{csv_path}: no such file (the ECB+ validated sentences, "
                             f"{SENTENCES_CSV}; give it with --sentences-csv)")
        validated = read_validated_sentences(csv_path)
    for name, where, data in _iter_sources(path):
        yield _parse_document(name, where, data, mention_type, validated, chains)
