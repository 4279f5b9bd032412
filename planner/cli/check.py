"""``kvplan check``."""

from __future__ import annotations

from typing import Annotated

import typer

from planner.cli._options import OfflineOpt, user_errors
from planner.errors import UsageError

PlansArg = Annotated[
    str,
    typer.Argument(
        help="YAML plans file with a `deployments:` list (examples/plans.yaml).",
        show_default=False,
        metavar="PLANS",
    ),
]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table, json, markdown or junit.")]
OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the report to this file (atomically; - is stdout) instead of stdout.",
        show_default=False,
    ),
]


EmitOpt = Annotated[
    str | None,
    typer.Option(
        "--emit",
        help="Also write Kubernetes manifests for every vLLM deployment that starts "
        "(k8s, kserve, llm-d, lws, comma-separated, or all) into --emit-dir.",
        show_default=False,
    ),
]
EmitDirOpt = Annotated[
    str | None,
    typer.Option(
        "--emit-dir",
        help="Folder for the --emit files (made if missing; same-named files are replaced).",
        show_default=False,
    ),
]


def check(
    plans: PlansArg,
    format_: FormatOpt = "table",
    output: OutputOpt = None,
    offline: OfflineOpt = False,
    emit: EmitOpt = None,
    emit_dir: EmitDirOpt = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Same as --format json (every command takes --json).")
    ] = False,
) -> None:
    """Check every deployment of a plans file against its requirements, for CI.

    Each deployment's outcome: won't start, starts but queues at worst case (fewer than
    max_num_seqs requests of max_model_len run at once), or fits at worst case. A `workload:`
    (a trace or spec as `kvplan simulate -w` reads) adds max_preemptions, max_kv_usage_p90,
    max_ttft_p90_s and min_output_tokens_per_s, checked by replaying it.

    Exit code 0: every deployment starts and meets its requirements; 1: any won't start,
    misses a requirement or cannot be planned; 2: the file is invalid (each problem is an
    `Error: file:line:` line on stderr).

    \b
    Examples:
      kvplan check deploy/plans.yaml
      kvplan check deploy/plans.yaml --format junit -o kvplan.xml
      kvplan check deploy/plans.yaml --format markdown >> "$GITHUB_STEP_SUMMARY"
      kvplan check deploy/plans.yaml --emit k8s --emit-dir deploy/k8s/
    """
    from planner.check import check_file
    from planner.render import check as render

    with user_errors():
        if json_:
            if format_ not in ("table", "json"):
                raise UsageError(f"--json and --format {format_}: give one")
            format_ = "json"
        if format_ not in render.CHECK_FORMATS:
            raise UsageError(f"--format {format_!r}: use one of {', '.join(render.CHECK_FORMATS)}")
        kinds = None
        if emit is not None or emit_dir is not None:
            from planner.deploy import parse_kinds

            if emit is None or emit_dir is None:
                raise UsageError("--emit KINDS and --emit-dir DIR go together")
            kinds = parse_kinds(emit)
        if output is not None:
            from planner.files import check_outputs

            # before any model is read or planned; `-o -` is stdout
            check_outputs([("-o", output)], inputs=[("the plans file", plans)])
            output = None if output == "-" else output
        from planner.status import quiet

        quiet(format_ != "table")  # no status line beside a machine-read report
        result = check_file(plans, offline=offline or None)
        render.check(result, fmt=format_, output=output)
        if kinds is not None and emit_dir is not None and not result.problems:
            _emit(plans, kinds, emit_dir, offline=offline or None)
    raise typer.Exit(result.exit_code)


def _emit(plans: str, kinds: list[str], folder: str, *, offline: bool | None) -> None:
    import sys

    from planner.deploy import plans_manifests, write_manifests
    from planner.render._output import err_console, print_wrapped

    files, skipped = plans_manifests(plans, kinds, offline=offline)
    for line in skipped:
        print_wrapped(err_console(), f"note: {line}", hang="  ")
    if files:
        write_manifests(files, folder, stream=sys.stderr)
