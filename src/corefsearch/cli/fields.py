"""Typer options from dataclass fields: an options dataclass declares each option once.

A field's default is the option's default; its ``metadata`` says the rest (as sentence-transformers'
``TrainingArguments`` put their help in ``field(metadata={"help": ...})``)::

    epochs: int = field(default=3, metadata={"help": "Training epochs."})
    shared_encoder: bool = field(default=False, metadata={"help": "...", "option": "--shared-encoder"})

Metadata keys (only ``help`` is needed):

- ``help``: the help text; a field without one must say ``"cli": False`` (not an option);
- ``option``: the option's name or names, e.g. ``"--shared-encoder"`` (a flag with no ``--no-`` form)
  or ``("--rerank-k", "-k")``; default: ``--field-name`` (``--x/--no-x`` for a bool);
- ``choices``: the accepted values (a ``Literal`` for Typer: it checks them and lists them in ``--help``);
- ``type`` and ``parse``: the type the command line reads, when it is not the field's, and the function
  that turns that value into the field's (e.g. ``"sentence=1,title=0.5"`` into a dict);
- ``hidden``: an option that works but is not shown in ``--help``;
- ``metavar``: the name ``--help`` shows for the option's value (default: its type, e.g. ``<path>``);
- ``cli``: False for a field with no option (the dataclass default is used).

:func:`options_from` turns one parameter of a command, annotated with the dataclass, into those options
and calls the command with the dataclass built from them; stacked, it expands several dataclasses.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, Literal, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])
NOT_ON_CLI = "cli"


def option_fields(cls: type, order: Sequence[str] = (), exclude: Iterable[str] = ()) -> list[dataclasses.Field[Any]]:
    """The fields of ``cls`` that are options: those named in ``order`` first, in that order, then the others
    in declaration order (less ``exclude`` and the fields marked ``"cli": False``)."""
    left_out = set(exclude)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in left_out
              and f.metadata.get(NOT_ON_CLI, True) is not False}
    for f in fields.values():
        if "help" not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} has no help: give it metadata {{'help': ...}} or "
                            "{'cli': False}")
    unknown = [name for name in order if name not in fields]
    if unknown:
        raise TypeError(f"{cls.__name__} has no option field {', '.join(unknown)}")
    return [fields[name] for name in order] + [f for name, f in fields.items() if name not in order]


def field_parameters(cls: type, order: Sequence[str] = (), exclude: Iterable[str] = ()) -> list[inspect.Parameter]:
    """One keyword-only ``inspect.Parameter`` per option field of ``cls``, annotated
    ``Annotated[type, typer.Option(...)]`` with the field's default."""
    hints = typing.get_type_hints(cls)
    parameters = []
    for f in option_fields(cls, order, exclude):
        meta = f.metadata
        kind = meta.get("type", hints[f.name])
        if "choices" in meta:
            kind = Literal[tuple(meta["choices"])]  # type: ignore[misc]
            if f.default is None:
                kind = kind | None
        names = meta.get("option", ())
        declarations = (names,) if isinstance(names, str) else tuple(names)
        option = typer.Option(*declarations, help=meta["help"], hidden=meta.get("hidden", False),
                              metavar=meta.get("metavar"))
        parameters.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=_default(f),
                                            annotation=Annotated[kind, option]))
    return parameters


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return inspect.Parameter.empty  # a required option


def options_from(cls: type, *, into: str = "args", order: Sequence[str] = (),
                 exclude: Iterable[str] = ()) -> Callable[[F], F]:
    """Decorate a command whose parameter ``into`` is a ``cls``: Typer sees the option fields of ``cls``
    in its place (``order`` and ``exclude``: see :func:`option_fields`), and the command is called with
    ``into=cls(**their values)``. The command's other parameters keep their places around them."""
    parameters = field_parameters(cls, order, exclude)
    parse = {f.name: f.metadata["parse"] for f in option_fields(cls, order, exclude) if "parse" in f.metadata}

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        hints = typing.get_type_hints(command, include_extras=True)
        if into not in signature.parameters:
            raise TypeError(f"{command.__name__} has no parameter {into!r} to hold the options of {cls.__name__}")
        own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()]
        clash = {p.name for p in own} & {p.name for p in parameters}
        if clash:
            raise TypeError(f"{command.__name__}: parameters {', '.join(sorted(clash))} are also fields of "
                            f"{cls.__name__}")
        at = [p.name for p in own].index(into)
        # Keyword-only from here on: the fields have defaults and may follow parameters without one.
        tail = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own[at + 1:]]
        head = [p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) if p.kind is p.KEYWORD_ONLY else p
                for p in own[:at]]
        expanded = [*head, *parameters, *tail]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {p.name: kwargs.pop(p.name) for p in parameters if p.name in kwargs}
            values.update({name: parse[name](values[name]) for name in parse if name in values})
            return command(*args, **{into: cls(**values)}, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=expanded)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in expanded} | {"return": signature.return_annotation}
        return wrapper  # type: ignore[return-value]

    return decorate
