"""The ``corefsearch`` application: the Typer app, the consoles, and how errors reach the user
(a library error or a usage error is one line, ``error: …``; no traceback)."""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup, TyperOption

try:  # Typer ≥ 0.22 carries its own copy of Click; earlier releases use Click itself
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - depends on the installed Typer
    from click import exceptions as click_errors  # type: ignore[no-redef]

from corefsearch import __version__
from corefsearch.base.errors import CorefSearchError


def _flag_type(option: TyperOption, ctx: Any) -> str | None:
    """A flag takes no value, so ``--help`` shows no type beside it (as Click's plain help does): Typer's
    rich panel would show ``<bool>`` beside every flag, ``--help`` too, as if it took a value."""
    return None if option.is_flag else _option_type(option, ctx)


_option_type = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


class CommandLine(TyperGroup):
    """The root command: a usage error (an unknown option, a missing argument, a value of the wrong
    type) is one line on stderr, ``error: … (see `corefsearch CMD --help`)``, exit 2 — like every other
    error, not Typer's boxed usage panel. ``corefsearch`` with no arguments still prints the help."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_errors.NoArgsIsHelpError as err:
            err.show()
            sys.exit(err.exit_code)
        except click_errors.UsageError as err:
            command = err.ctx.command_path if err.ctx is not None else (prog_name or self.name or "corefsearch")
            where = f" (see `{command} --help`)"
            err_console.print(f"[red]error:[/red] {escape(err.format_message())}{where}", highlight=False)
            sys.exit(err.exit_code)
        except click_errors.ClickException as err:
            err_console.print(f"[red]error:[/red] {escape(err.format_message())}", highlight=False)
            sys.exit(err.exit_code)
        except typer.Abort:
            err_console.print("[red]interrupted[/red]")
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="corefsearch",
    cls=CommandLine,
    help="Cross-document coreference search: given a passage with one marked mention, find every "
         "passage that mentions the same event or entity.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Results on stdout, messages on stderr; both print each line whole, never wrapped or cut at the console
# width (a terminal folds long lines itself; a pipe or log file gets each line as it is). Tables keep
# the console's width.
console = Console(soft_wrap=True)
# Messages are printed whole, never wrapped or cut at the console width (a terminal folds long
# lines itself; a pipe or log file gets each message on one line).
err_console = Console(stderr=True, soft_wrap=True)


def log_line(message: str) -> None:
    """A library's progress message (``log=``) on stderr, as it is: no markup, no highlighting."""
    err_console.print(message, markup=False, highlight=False)


def _version(value: bool) -> None:
    if value:
        console.print(f"corefsearch {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False) -> None:
    """corefsearch: build a coreference-search dataset, index it, search it, evaluate runs."""


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: Any = None) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {escape(str(message))}", highlight=False)


def user_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Print a library error as one line and exit 1, with no traceback; warnings in yellow.

    Messages quote the user's ids, paths and text, so they are escaped, not read as rich markup.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        warnings.showwarning = _show_warning
        try:
            return func(*args, **kwargs)
        except CorefSearchError as err:
            err_console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("[red]interrupted[/red]: nothing half-written was left in place")
            raise typer.Exit(130) from None
        except Exception as err:
            # A Java exception from Pyserini/Anserini that the library did not translate: one line too.
            from corefsearch.sparse.java_errors import is_java_exception, java_message

            if not is_java_exception(err):
                raise
            err_console.print(f"[red]error:[/red] {escape(f'Lucene (Java) failed: {java_message(err)}')}",
                              highlight=False)
            raise typer.Exit(1) from None

    return wrapper


