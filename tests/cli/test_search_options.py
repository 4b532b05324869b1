"""The options of search, query and serve: declared once, on the wings' options dataclasses, and generated."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer.main

from corefsearch.cli import app
from corefsearch.cli.options import BM25Args, FileBM25Args, ModelArgs, RoundArgs, expansion_options, search_options
from corefsearch.search.options import ExpansionOptions, RetrievalOptions, SearchOptions
from corefsearch.sparse.search import BM25Options

# The options one command declares otherwise, on purpose (cli/options.py: FileBM25Args, ServeModelArgs, ...).
OWN = {("serve", "retriever"), ("serve", "query_format"), ("query", "mention_encoder"), ("serve", "mention_encoder")}
FILE_ONLY = {"threads", "rerank_batch_queries", "spans_out", "save_topics", "ray", "ray_workers", "ray_cpus_per_worker"}


def options(command: str) -> dict[str, Any]:
    click_app = typer.main.get_command(app)
    return {param.name: param for param in click_app.commands[command].params}  # type: ignore[attr-defined]


def test_the_defaults_on_the_command_line_are_the_wings_defaults() -> None:
    setup = search_options(["bm25"], BM25Args(), ModelArgs(), RoundArgs())
    assert setup.bm25 == replace(BM25Options(), threads=1) and setup.reader is None
    assert setup.retrieval == RetrievalOptions() and setup.expansion is None
    assert search_options(["bm25"], FileBM25Args(), ModelArgs(), RoundArgs()).bm25 == BM25Options()
    assert expansion_options(RoundArgs()) is None
    assert expansion_options(RoundArgs(rounds=2)) == ExpansionOptions(rounds=2)


def test_search_query_and_serve_take_each_shared_option_as_declared_once() -> None:
    search, query, serve = options("search"), options("query"), options("serve")
    shared = {name for name in search if name in serve} | {name for name in search if name in query}
    assert {"query_format", "rm3", "fields", "retriever", "encoder", "backend", "reader", "rerank_k", "ef_search",
            "rounds", "candidates", "detector", "mention_encoder"} <= shared
    for name in sorted(shared - {"index", "k", "help"}):
        for command, params in (("query", query), ("serve", serve)):
            if name not in params or (command, name) in OWN:
                continue
            a, b = search[name], params[name]
            assert (a.opts, a.help, a.default, a.is_flag) == (b.opts, b.help, b.default, b.is_flag), (command, name)
    assert set(search) >= FILE_ONLY and not FILE_ONLY & (set(query) | set(serve))
    for command, name in OWN:
        assert options(command)[name].help != search[name].help, (command, name)


def test_the_help_comes_from_the_options_dataclasses() -> None:
    fields = BM25Options.__dataclass_fields__
    assert options("search")["rm3"].help == fields["rm3"].metadata["help"]
    assert options("query")["candidates"].help == ExpansionOptions.__dataclass_fields__["candidates"].metadata["help"]
    assert options("serve")["query_format"].help.startswith(fields["query_format"].metadata["help"])


def test_the_options_of_search_are_resolved_once(tmp_path: Path) -> None:
    """`search_options` builds one SearchOptions; its `.check()` works out the second round's candidates (the
    reader's spans with a reader and no mention encoder, detected ones with a mention encoder), and a second
    `.check()` does nothing."""
    reader, encoder = tmp_path / "reader", tmp_path / "mention-encoder"
    reader.mkdir()
    encoder.mkdir()
    rounds = RoundArgs(rounds=2)
    options = search_options(["bm25"], FileBM25Args(), ModelArgs(reader=reader, device="cpu"), rounds, k=100)
    assert isinstance(options, SearchOptions) and options.k == 100 and options.rounds == 2
    assert options.reader is not None and options.reader.model == reader
    assert options.expansion is not None and options.expansion.candidates is None  # open until checked
    assert options.check() is options
    assert options.expansion.candidates == "reader" and options.expansion.source == "reader"
    resolved = options.expansion
    options.k = 0  # refused by a check; a second check validates and resolves nothing again
    assert options.check() is options and options.expansion is resolved and options.k == 0
    with_encoder = search_options(["bm25"], FileBM25Args(), ModelArgs(reader=reader, device="cpu"),
                                  replace(rounds, mention_encoder=encoder))
    expansion = with_encoder.check().expansion
    assert expansion is not None and expansion.candidates == "detected" and expansion.source == "encoder"
    assert with_encoder.mention_encoder == encoder
