"""Errors a user can act on. The CLI prints their message and exits non-zero, no traceback."""


class CorefSearchError(Exception):
    """Base class: the message is meant for the user as it is."""


class InputError(CorefSearchError):
    """A malformed input file or record (the message names the file, line or record)."""


class MissingArtefactError(CorefSearchError):
    """A dataset, index or model that is not there (the message says what to run)."""
