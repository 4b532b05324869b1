"""The source formats ``build-dataset`` reads, by name."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from corefsearch.base.errors import InputError
from corefsearch.datasets.cdcr_json import read_cdcr_json
from corefsearch.datasets.conll import read_conll
from corefsearch.datasets.coresearch import read_coresearch
from corefsearch.datasets.ecbplus import read_ecbplus
from corefsearch.datasets.generic import MENTIONS_FILE, read_generic
from corefsearch.datasets.text import TITLE_MODES, TextOptions, TextReport, has_records, read_text
from corefsearch.datasets.wec import read_wec

if TYPE_CHECKING:
    from corefsearch.datasets.cdcr_json import CdcrReport
    from corefsearch.datasets.conll import ConllReport
from corefsearch.base.schema import Document
from corefsearch.base.segmentation import DEFAULT_SENTENCES, SENTENCE_MODES

SOURCE_FORMATS = ("ecbplus", "wec", "coresearch", "generic", "cdcr-json", "conll", "text")
MENTION_TYPE_CHOICES = ("event", "entity", "all")
SPLIT_BY = ("clusters", "corpus")
CHAIN_CHOICES = ("cross-document", "all")  # ecbplus: the chains whose mentions are kept
# Formats whose documents come with a fixed split (ECB+ topics, CoreSearch's and CDCR-JSON's files)
# and those whose clusters build splits by a seeded shuffle unless told otherwise.
FIXED_SPLIT_FORMATS = ("ecbplus", "coresearch", "cdcr-json")
# Formats whose text is cut into sentences here (--sentences), not brought cut by the corpus.
SENTENCE_FORMATS = ("generic", "text")


@dataclass
class SourceOptions:
    """How ``build-dataset`` reads a corpus; the ``--help`` of its options in the metadata (``passage`` and
    ``splits``: those of :class:`~corefsearch.datasets.build.BuildOptions`)."""

    mention_type: str | None = field(default=None, metadata={  # None: the format's (see effective_mention_type)
        "help": "event | entity | all: the mentions kept (ecbplus, generic, cdcr-json; wec and coresearch hold events "
                "only; conll: the type of its mentions, event or entity). Default: event, for generic all."})
    validated_only: bool = field(default=False, metadata={"option": "--validated-only", "help": (
        "ECB+: keep only the validated sentences of ECBplus_coreference_sentences.csv.")})
    sentences_csv: Path | None = field(default=None, metadata={
        "help": "ECB+: the validated-sentences CSV (default: beside INPUT)."})
    passage: str = "sentence"
    splits: tuple[str, ...] = ("train", "dev", "test")
    sentences: str | None = field(default=None, metadata={  # spacy (the default) | newline (see segmentation.py)
        "help": "generic, text: how text is cut into sentences: spacy (spaCy's sentencizer within each line; "
                "default) | newline (one sentence per line). Sentences a mention straddles are joined."})
    split_by: str | None = field(default=None, metadata={  # None: the format's default (see effective_split_by)
        "help": "clusters (a seeded shuffle of the clusters by --split-ratios; default for wec, generic, conll) | "
                "corpus (each document's own split: ecbplus, coresearch, cdcr-json, generic documents with a "
                "'split' field, and conll files named train…, dev…/val…, test…)."})
    chains: str | None = field(default=None, metadata={  # ecbplus only; refused for the others
        "help": "ECB+: the gold mentions kept: cross-document (those of CROSS_DOC_COREF chains; default) | all "
                "(also intra-document chains and singletons, as coreference scoring needs)."})
    title: str | None = field(default=None, metadata={  # None: auto (text files only)
        "help": f"text: how a .txt/.md file's title is taken: {' | '.join(TITLE_MODES)}. auto (default): line 1 "
                "when it reads as a headline (more text follows, no closing full stop), else every line is text; "
                "first-line: always line 1; none: no title."})
    text_field: str | None = field(default=None, metadata={
        "help": "text, a .csv/.tsv/.jsonl table: the column of the text (default: the first of text, contents, "
                "content, body, article, document, abstract; any case)."})
    id_field: str | None = field(default=None, metadata={
        "help": "text, a table: the column of the document id (default: doc_id, docid, id, _id, uuid, url; "
                "without one, NAME-N: the file's name and the row's number)."})
    title_field: str | None = field(default=None, metadata={
        "help": "text, a table: the column of the title (default: title, headline, heading, subject, name; "
                "without one, no titles)."})

    @property
    def text_options(self) -> TextOptions:
        return TextOptions(self.title, self.text_field, self.id_field, self.title_field)

    def resolved(self, source_format: str) -> dict[str, str | None]:
        """The options as they apply to ``source_format`` (defaults filled in), for the manifest."""
        return {"mention_type": effective_mention_type(source_format, self.mention_type),
                "split_by": effective_split_by(source_format, self.split_by),
                "sentences": (self.sentences or DEFAULT_SENTENCES) if source_format in SENTENCE_FORMATS else None,
                **({"chains": self.chains or "cross-document"} if source_format == "ecbplus" else {}),
                **(self.text_options.resolved() if source_format == "text" else {})}


def effective_mention_type(source_format: str, mention_type: str | None) -> str:
    """The mention type read: as given, else ``all`` for generic (whatever types its mentions
    carry, as before the option applied to it) and text (the mentions `corefsearch add` may bring)
    and ``event`` for the others."""
    if mention_type is None:
        return "all" if source_format in ("generic", "text") else "event"
    if mention_type not in MENTION_TYPE_CHOICES:
        raise InputError(f"--mention-type must be one of {', '.join(MENTION_TYPE_CHOICES)}, got {mention_type!r}")
    return mention_type


def effective_split_by(source_format: str, split_by: str | None) -> str:
    """How the splits are made: as given, else ``corpus`` for the formats with a fixed split and
    ``clusters`` for the others; refused where it cannot apply."""
    if split_by is None:
        return "corpus" if source_format in FIXED_SPLIT_FORMATS else "clusters"
    if split_by not in SPLIT_BY:
        raise InputError(f"--split-by must be one of {', '.join(SPLIT_BY)}, got {split_by!r}")
    if split_by == "clusters" and source_format in FIXED_SPLIT_FORMATS:
        raise InputError(f"--split-by clusters: {source_format} comes with its own split "
                         f"(--split-by corpus, the default for it); choose the splits kept with --splits")
    if split_by == "corpus" and source_format == "wec":
        raise InputError("--split-by corpus: wec documents carry no split; wec is split by clusters "
                         "(--split-ratios, --seed)")
    return split_by


def read_source(source_format: str, path: Path, options: SourceOptions,
                report: CdcrReport | None = None, text_report: TextReport | None = None,
                conll_report: ConllReport | None = None) -> Iterator[Document]:
    """Documents (with their mentions) of ``path`` read as ``source_format``; ``report`` (cdcr-json)
    is filled with the counts the corpus's ``statistics`` file gives too, ``text_report`` (text) and
    ``conll_report`` (conll) with how the documents were read."""
    if source_format not in SOURCE_FORMATS:
        raise InputError(f"--format must be one of {', '.join(SOURCE_FORMATS)}, got {source_format!r}")
    mention_type = effective_mention_type(source_format, options.mention_type)
    split_by = effective_split_by(source_format, options.split_by)
    if source_format not in SENTENCE_FORMATS and options.sentences is not None:
        raise InputError(f"--sentences applies to --format generic and text only; {source_format} comes with its "
                         "own sentences (or paragraphs)")
    if source_format != "ecbplus" and options.chains is not None:
        raise InputError(f"--chains applies to --format ecbplus only; {source_format} has no chains to choose from")
    text_options = options.text_options
    if source_format != "text" and (text_options.title is not None or text_options.fields_given):
        raise InputError(f"--title, --text-field, --id-field and --title-field apply to --format text only; "
                         f"{source_format} has its own titles and fields")
    text_options.check()
    if options.chains is not None and options.chains not in CHAIN_CHOICES:
        raise InputError(f"--chains must be one of {', '.join(CHAIN_CHOICES)}, got {options.chains!r}")
    if options.sentences is not None and options.sentences not in SENTENCE_MODES:
        raise InputError(f"--sentences must be one of {', '.join(SENTENCE_MODES)}, got {options.sentences!r}")
    if not Path(path).exists():
        raise InputError(f"{path}: no such file or folder")
    if source_format == "ecbplus":
        return read_ecbplus(path, mention_type=mention_type, validated_only=options.validated_only,
                            sentences_csv=options.sentences_csv, chains=options.chains or "cross-document")
    if source_format == "cdcr-json":
        return read_cdcr_json(path, splits=options.splits, mention_type=mention_type, report=report)
    if source_format == "conll":
        return read_conll(path, mention_type=mention_type, split_by=split_by, report=conll_report)
    if mention_type != "event" and source_format in ("wec", "coresearch"):
        raise InputError(f"--mention-type {mention_type}: {source_format} holds event mentions only")
    if source_format == "wec":
        return read_wec(path)
    if source_format == "coresearch":
        # Only the requested splits' files need to be there (a release may be partial).
        return read_coresearch(path, splits=options.splits)
    # Windows are made of sentences; only "document" needs no segmentation.
    units = "document" if options.passage == "document" else "sentence"
    if source_format == "text" or (source_format == "generic" and plain_source(source_format, path)):
        if source_format == "text" and options.mention_type is not None:
            raise InputError(f"--mention-type {options.mention_type}: --format text reads documents without "
                             "mentions")

        return read_text(path if source_format == "text" else Path(path) / "corpus.jsonl", units,
                         sentences=options.sentences or DEFAULT_SENTENCES, split_by=split_by, options=text_options,
                         report=text_report)
    if source_format == "generic":
        return read_generic(path, passage=units, sentences=options.sentences or DEFAULT_SENTENCES,
                            mention_type=mention_type, split_by=split_by)
    raise InputError(f"--format must be one of {', '.join(SOURCE_FORMATS)}, got {source_format!r}")


def plain_source(source_format: str, path: Path) -> str | None:
    """Why the corpus at ``path`` read as ``source_format`` holds no gold mentions, in one line (``--format
    text``; a generic folder whose ``mentions.jsonl`` is missing or empty), or ``None`` when it has them.
    The dataset built from it holds plain documents: passages, and no queries, qrels or clusters."""
    what = "the dataset holds its passages, without mentions, queries or qrels"
    if source_format == "text":
        return f"{path}: plain documents (--format text): {what}"
    if source_format != "generic" or not Path(path).is_dir() or not (Path(path) / "corpus.jsonl").is_file():
        return None

    mentions = Path(path) / MENTIONS_FILE
    if has_records(mentions):
        return None
    why = "is empty" if mentions.is_file() else "is missing"
    return f"{mentions} {why}: {path} is read as plain documents; {what}"
