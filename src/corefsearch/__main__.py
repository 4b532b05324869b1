"""``python -m corefsearch``: the command line."""

from corefsearch.cli import app

app()
