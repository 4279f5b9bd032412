"""``kvplan check``: a table, JSON, markdown for a job summary, or JUnit XML."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.console import Console

from planner.errors import one_line
from planner.files import write_atomic
from planner.plan_types import FITS_AT_WORST_CASE, QUEUES_AT_WORST_CASE
from planner.render._output import (
    Column,
    console,
    err_console,
    outcome_words,
    print_fitted,
    print_wrapped,
    to_json,
    write_out,
)
from planner.units import fmt_bytes

if TYPE_CHECKING:
    from planner.check.results import Check, CheckReport, DeploymentResult


CHECK_FORMATS = ("table", "json", "markdown", "junit")


_STATUS = {"pass": "PASS", "fail": "FAIL", "error": "ERROR"}


_MD_STATUS = {"pass": "✅ pass", "fail": "❌ fail", "error": "⚠️ error"}


def _preemptions(n: int) -> str:
    return f"{n:,} preemption" + ("" if n == 1 else "s")


# A workload requirement's check in words: (what the replay measured, the bound).
_REPLAYED: dict[str, Callable[[float, float], tuple[str, str]]] = {
    "max_preemptions": lambda got, bound: (_preemptions(int(got)), f"{int(bound):,} allowed"),
    "max_kv_usage_p90": lambda got, bound: (f"KV usage p90 {got:.0%}", f"{bound:.0%}"),
    "max_ttft_p90_s": lambda got, bound: (f"TTFT p90 {got:.2f} s", f"{bound:g} s"),
    "min_output_tokens_per_s": lambda got, bound: (
        f"{got:,.0f} output tok/s",
        f"{bound:,.0f} required",
    ),
}


def _check_text(c: Check, r: DeploymentResult) -> str:
    """One check as a sentence with its numbers."""
    ok = "✓" if c.passed else "✗"
    at_least = "≥" if c.passed else "<"
    at_most = "≤" if c.passed else ">"
    length = r.settings.get("max_model_len")
    if c.unit == "rule" or c.name == "kv_cache_memory":  # a rule estimate applies first
        return f"{ok} won't start ({c.name}): {r.outcome_reason}"
    if c.name == "weights":
        return (
            f"{ok} weights {fmt_bytes(int(c.actual))} per GPU > the "
            f"{fmt_bytes(int(c.required))} the engine may use"
        )
    if c.name == "max_model_len" and c.unit == "bytes":
        return (
            f"{ok} one {length:,}-token request needs {fmt_bytes(int(c.required))} of KV, "
            f"{fmt_bytes(max(int(c.actual), 0))} available"
        )
    if c.name == "max_model_len":
        return f"{ok} {c.actual:.2f} requests of {length:,} tokens fit (at least 1)"
    if c.name == "min_concurrency":
        return f"{ok} concurrency {c.actual:.2f}x {at_least} {c.required:g}x required"
    if c.name == "min_kv_tokens":
        return f"{ok} KV cache {int(c.actual):,} tokens {at_least} {int(c.required):,} required"
    if c.name == "max_num_seqs":
        return (
            f"{ok} max_num_seqs {int(c.actual):,} {at_most} the {int(c.required):,} KV blocks "
            "(each running sequence of a hybrid holds a Mamba state block)"
        )
    if c.name in _REPLAYED:
        measured, bound = _REPLAYED[c.name](c.actual, c.required)
        sign = at_least if c.name.startswith("min_") else at_most
        return f"{ok} {measured} replaying the workload {sign} {bound}"
    seqs = r.settings.get("max_num_seqs")
    usage = f"{c.actual:.0%}" if c.actual != float("inf") else "∞"
    return f"{ok} KV usage at {seqs} × {length:,} tokens {usage} {at_most} {c.required:.0%} allowed"


def _outcome(r: DeploymentResult, *, short: bool = False) -> str:
    """The deployment's outcome in the words every view uses."""
    return outcome_words(
        r.outcome,
        r.worst_case_running,
        r.settings.get("max_num_seqs"),
        r.settings.get("max_model_len"),
        short=short,
    )


def _replayed(r: DeploymentResult) -> str:
    """The workload replay's figures in one line ("" without one)."""
    s = r.simulated
    if s is None:
        return ""
    rejected = f", {s.rejected_too_long:,} rejected as too long" if s.rejected_too_long else ""
    return (
        f"replayed {s.workload} ({s.requests:,} requests{rejected}): "
        f"{_preemptions(s.preemptions)}, KV usage p90 {s.usage_p90:.0%} "
        f"(max {s.usage_max:.0%}), TTFT p90 {s.ttft_p90_s:.2f} s, "
        f"{s.output_tokens_per_s:,.0f} output tok/s"
    )


def headline(rep: CheckReport) -> str:
    """How many deployments start, how many queue at worst case, how many pass:
    "4 of 4 deployments start; 3 queue at worst case; 4 of 4 pass"."""
    counts = rep.counts
    total = counts["deployments"]
    start = counts[QUEUES_AT_WORST_CASE] + counts[FITS_AT_WORST_CASE]
    queue = counts[QUEUES_AT_WORST_CASE]
    queues = f"{queue:,} queues" if queue == 1 else f"{queue or 'none'} queue"
    return (
        f"{start:,} of {total:,} deployments start; {queues} at worst case; "
        f"{counts['passed']:,} of {total:,} pass"
    )


def caveats(rep: CheckReport) -> list[str]:
    """The caveats the fixes need (fp8 KV's), each once, in the order the rows need them."""
    return list(dict.fromkeys(c for r in rep.results for c in r.caveats))


def _limiting(r: DeploymentResult) -> Check | None:
    return next((c for c in r.checks if c.name == r.limiting), None)


def _summary(r: DeploymentResult) -> str:
    """The limiting check, then any other that failed (or the error), in one line."""
    if r.status == "error":
        return f"error: {r.error}"
    c = _limiting(r)
    if c is None:
        return ""
    others = [x for x in r.checks if not x.passed and x is not c]
    return "; ".join(_check_text(x, r) for x in (c, *others))


def _margin(r: DeploymentResult) -> str:
    if r.margin is None or r.margin == float("inf"):
        return "—"
    return f"{r.margin:+.0%}"


def _where(r: DeploymentResult) -> str:
    tp = r.settings.get("tp", 1) * r.settings.get("pp", 1)
    gpus = f" ×{tp}" if tp > 1 else ""
    return f"{r.gpu}{gpus}"


def check_dict(rep: CheckReport) -> dict[str, Any]:
    """JSON of ``kvplan check``: integer bytes, floats rounded, infinities as null."""

    def clean(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, 4) if value == value and abs(value) != float("inf") else None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return {
        "file": rep.file,
        "exit_code": rep.exit_code,
        "counts": rep.counts,
        "deployments": [clean(asdict(r)) for r in rep.results],
        "problems": [asdict(p) for p in rep.problems],
    }


def check_markdown(rep: CheckReport) -> str:
    """A job-summary / PR-comment table (GitHub-flavoured markdown)."""
    lines = [
        f"### kvplan check: {headline(rep)} (`{rep.file}`)",
        "",
        "| result | worst case | deployment | model | engine | GPU | limiting | margin | numbers |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(text: Any) -> str:
        return one_line(str(text)).replace("|", "\\|").replace("`", "'")

    for r in rep.results:
        row = [
            _MD_STATUS[r.status],
            _outcome(r, short=True),
            f"`{cell(r.name)}`",
            cell(r.model),
            r.engine,
            cell(_where(r)),
            cell(r.limiting or "—"),
            _margin(r),
            cell(_summary(r)),
        ]
        lines.append("| " + " | ".join(row) + " |")
    fixes = [r for r in rep.results if r.fix]
    replays = [r for r in rep.results if r.simulated]
    if fixes or replays:
        lines.append("")
        for r in replays:
            lines.append(f"- **{cell(r.name)}** — {cell(_replayed(r))}")
        for r in fixes:
            lines.append(f"- **{cell(r.name)}** — fix: {cell(r.fix)}")
        for caveat in caveats(rep):
            lines.append(f"- note: {cell(caveat)}")
    if rep.problems:
        lines.append("")
        lines.append("**Invalid plans file** (exit 2):")
        for p in sorted(rep.problems, key=lambda p: p.line):
            lines.append(f"- `{cell(p.file)}:{p.line}` {cell(p.where)}: {cell(p.message)}")
    lines.append("")
    lines.append(
        "<sub>vLLM figures use vLLM 0.33's formulas; activation, non-torch and CUDA-graph "
        "terms are estimates (`kvplan verify` measures them).</sub>"
    )
    return "\n".join(lines) + "\n"


def check_junit(rep: CheckReport) -> str:
    """JUnit XML: one testcase per deployment; a failure carries the numbers and the fix, an
    unplannable deployment or an invalid entry is an error."""
    counts = rep.counts
    errors = counts["errors"] + len(rep.problems)
    attrs = {
        "name": "kvplan check",
        "tests": str(len(rep.results) + len(rep.problems)),
        "failures": str(counts["failed"]),
        "errors": str(errors),
    }
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", {**attrs, "name": rep.file, "skipped": "0"})
    for r in rep.results:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"kvplan.{r.engine}",
                "name": r.name,
                "file": rep.file,
                "line": str(r.line),
            },
        )
        if r.status == "error":
            error = ET.SubElement(case, "error", {"type": "PlanError", "message": r.error or ""})
            error.text = r.error
            continue
        body = [f"{r.model} on {_where(r)} ({r.engine}): {_outcome(r)}"]
        texts = [_check_text(c, r) for c in r.checks]
        if r.outcome_reason and not any(r.outcome_reason in text for text in texts):
            body.append(r.outcome_reason)
        body += texts
        if r.figures is not None:
            f = r.figures
            body.append(
                f"{f.source} figures: KV cache {fmt_bytes(max(f.available_kv_bytes, 0))}, "
                f"{f.kv_cache_size_tokens:,} tokens, {f.max_concurrency:.2f}x concurrency "
                f"({f.setting})"
            )
        if r.simulated is not None:
            body.append(_replayed(r))
        if r.fix:
            body.append(f"fix: {r.fix}")
            body += [f"note: {caveat}" for caveat in r.caveats]
        if r.status == "fail":
            message = _summary(r) + (f"; fix: {r.fix}" if r.fix else "")
            failure = ET.SubElement(case, "failure", {"type": "DoesNotFit", "message": message})
            failure.text = "\n".join(body)
        else:
            ET.SubElement(case, "system-out").text = "\n".join(body)
    for p in sorted(rep.problems, key=lambda p: p.line):
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": "kvplan.plans", "name": p.where, "file": p.file, "line": str(p.line)},
        )
        ET.SubElement(case, "error", {"type": "InvalidPlan", "message": str(p)}).text = str(p)
    for element in root.iter():  # XML 1.0 has no control characters, even escaped
        element.attrib.update({k: one_line(v) for k, v in element.attrib.items()})
        if element.text:
            element.text = "\n".join(one_line(line) for line in element.text.split("\n"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _check_table(rep: CheckReport, out: Console) -> None:
    """One plain row per deployment, fitted to the console: names, models and GPUs whole (so
    ``grep chat-8b-h100`` finds the row), secondary columns dropped for width."""
    rows = rep.results
    columns = [
        Column("result", [_STATUS[r.status] for r in rows], identifier=True),
        Column("deployment", [one_line(r.name) for r in rows], identifier=True),
        Column("worst case", [_outcome(r, short=True) for r in rows], identifier=True),
        Column("model", [one_line(r.model) for r in rows], identifier=True),
        Column(
            "GPU",
            [one_line(_where(r)) + ("" if r.engine == "vllm" else f" ({r.engine})") for r in rows],
            identifier=True,
        ),
        Column("margin", [_margin(r) for r in rows], right=True),
        Column("limiting", [r.limiting or "—" for r in rows]),
    ]
    print_fitted(out, f"kvplan check {one_line(rep.file)}: {headline(rep)}", columns)
    for r in rep.results:  # prose at the terminal's width, broken between words only
        print_wrapped(out, f"{one_line(r.name)}: {one_line(_summary(r))}", hang="  ")
        if r.simulated is not None:
            print_wrapped(out, _replayed(r), indent="  ", hang="    ")
        if r.fix:
            print_wrapped(out, f"fix: {r.fix}", indent="  ", hang="    ")
    for caveat in caveats(rep):
        print_wrapped(out, f"note: {caveat}", hang="  ")
    out.print(
        "[dim]worst case: of max_num_seqs requests all max_model_len long, how many run at once "
        "(the rest queue; vLLM still starts). vLLM figures use vLLM 0.33's formulas; "
        "SGLang/TRT-LLM rows use those engines' budgets. --format json gives every figure.[/]"
    )


def check(rep: CheckReport, *, fmt: str = "table", output: str | None = None) -> None:
    """Print (or write with ``-o``) a :class:`CheckReport`; invalid entries also
    go to stderr as ``Error:`` lines, whatever the format."""
    if fmt == "json":
        text = to_json(check_dict(rep))
    elif fmt == "markdown":
        text = check_markdown(rep)
    elif fmt == "junit":
        text = check_junit(rep)
    elif not rep.results:  # every entry is invalid: the Error lines say it all
        text = ""
    elif output is None:
        _check_table(rep, console())
        text = ""
    else:
        buf = io.StringIO()
        _check_table(rep, Console(file=buf, width=120, no_color=True, highlight=False))
        text = buf.getvalue()
    if output is not None:
        write_atomic(output, text, flag="-o")
    elif text:
        write_out(text)
    err = err_console()
    for problem in sorted(rep.problems, key=lambda p: p.line):
        err.print(f"Error: {one_line(str(problem))}", markup=False, soft_wrap=True)
