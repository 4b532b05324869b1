"""The ``corefsearch`` command line: one thin function per subcommand over a library call.

``app``: the Typer application, the two consoles (results on stdout, messages on stderr) and
:func:`~corefsearch.cli.app.user_errors`, which turns a library error into one line; usage errors
are one line too (exit 2). ``options``: the options ``search``, ``query`` and ``serve`` share and
the one builder of their option objects. One module per command group: ``data`` (build-dataset,
add), ``index`` (index, java-env), ``search`` (search, query, serve), ``evaluate``, ``cluster``,
``export`` (export-onnx), ``detect``, ``models`` (the shipped models) and ``train`` (retriever, reader,
clusterer, detector). ``report``:
what the commands print (tables and summary lines), in one place. ``fields``: options declared once as
dataclass fields (:func:`~corefsearch.cli.fields.options_from`); ``pyserini_cli``: Pyserini's own command
line with corefsearch's Java set-up (``python -m corefsearch.cli.pyserini_cli``).

Importing this package registers every command; heavy libraries are imported inside the commands,
so ``corefsearch --help`` stays instant.
"""

from corefsearch.cli import (  # noqa: F401  (registration)
    cluster,
    data,
    detect,
    evaluate,
    export,
    index,
    models,
    search,
    train,
)
from corefsearch.cli.app import app

__all__ = ["app"]
