"""The source formats ``build-dataset`` reads, by name."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from corefsearch.errors import InputError
from corefsearch.schema import Document

SOURCE_FORMATS = ("ecbplus", "wec", "coresearch", "generic")


@dataclass
class SourceOptions:
    mention_type: str = "event"
    validated_only: bool = False
    sentences_csv: Path | None = None
    passage: str = "sentence"
    splits: tuple[str, ...] = ("train", "dev", "test")


def read_source(source_format: str, path: Path, options: SourceOptions) -> Iterator[Document]:
    """Documents (with their mentions) of ``path`` read as ``source_format``."""
    if not Path(path).exists():
        raise InputError(f"{path}: no such file or folder")
    if source_format == "ecbplus":
        from corefsearch.datasets.ecbplus import read_ecbplus

        return read_ecbplus(path, mention_type=options.mention_type, validated_only=options.validated_only,
                            sentences_csv=options.sentences_csv)
    if options.mention_type != "event" and source_format in ("wec", "coresearch"):
        raise InputError(f"--mention-type {options.mention_type}: {source_format} holds event mentions only")
    if source_format == "wec":
        from corefsearch.datasets.wec import read_wec

        return read_wec(path)
    if source_format == "coresearch":
        from corefsearch.datasets.coresearch import read_coresearch

        # Only the requested splits' files need to be there (a release may be partial).
        return read_coresearch(path, splits=options.splits)
    if source_format == "generic":
        from corefsearch.datasets.generic import read_generic

        # Windows are made of sentences; only "document" needs no segmentation.
        return read_generic(path, passage="document" if options.passage == "document" else "sentence")
    raise InputError(f"--format must be one of {', '.join(SOURCE_FORMATS)}, got {source_format!r}")
