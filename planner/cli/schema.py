"""``kvplan schema``."""

from __future__ import annotations

from typing import Annotated

import typer


def schema(
    what: Annotated[
        str, typer.Argument(help="plans: the JSON Schema of a `kvplan check` plans file.")
    ] = "plans",
) -> None:
    """Print a JSON Schema generated from kvplan's setting declarations.

    \b
    Examples:
      kvplan schema plans > plans.schema.json
      # then, first line of a plans file: # yaml-language-server: $schema=plans.schema.json
    """
    import json

    from planner.cli._options import user_errors
    from planner.errors import UsageError

    with user_errors():
        if what != "plans":
            raise UsageError(f"kvplan schema takes: plans (got {what!r})")
        from planner.check.plans import plans_json_schema

        typer.echo(json.dumps(plans_json_schema(), indent=2))
