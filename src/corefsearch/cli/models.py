"""``models``: the models that ship with corefsearch, from their cards."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from corefsearch.cli.app import app, console, user_errors
from corefsearch.cli.fields import options_from


@dataclass
class ModelsArgs:
    """The options of ``models``."""

    as_json: bool = field(default=False, metadata={"option": "--json", "help": (
        "Print the list as JSON (each card's fields, the folder, the card's path and the size in bytes).")})


@app.command("models")
@user_errors
@options_from(ModelsArgs)
def models_command(*, args: ModelsArgs) -> None:
    """List the shipped models: name, kind, size, dev and test scores, card. Every model option takes a shipped
    model's name as well as a folder; a command that needs a model and is given none takes the shipped one."""
    from corefsearch.base.shipped import shipped_dir, shipped_models
    from corefsearch.cli.report import print_shipped_models

    models = shipped_models()
    if args.as_json:
        sys.stdout.write(json.dumps([model.to_json() for model in models], ensure_ascii=False, indent=2) + "\n")
    elif not models:
        console.print(f"No models are shipped (in {shipped_dir()}).", markup=False, highlight=False)
    else:
        print_shipped_models(models, console)
