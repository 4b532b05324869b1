"""``python -m corefsearch.cli``: the command line."""

from corefsearch.cli import app

app()
