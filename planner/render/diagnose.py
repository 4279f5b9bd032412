"""``kvplan diagnose``: the log beside the plan, term by term, and the findings."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.table import Table

from planner.diagnose.kinds import finding_text, signed_text, size_text
from planner.errors import one_line
from planner.render._output import (
    console,
    outcome_words,
    print_wrapped,
    to_json,
    user_text,
    write_out,
)
from planner.units import fmt_bytes

if TYPE_CHECKING:
    from planner.diagnose import Diagnosis
    from planner.diagnose.log_figures import SpecDecodeLog
    from planner.diagnose.ranks import DataParallel


def verdict_text(dg: Diagnosis) -> str:
    """The outcome in the words every view uses, with where it comes from ("" with none):
    "✓ Verdict (the plan for these settings): starts, queues at worst case: 45 of 256 requests
    of 8,192 tokens run at once". Of a data-parallel log it is one rank's: "(the plan for these
    settings, each of 3 DP ranks)"."""
    if dg.outcome is None:
        return ""
    words = outcome_words(dg.outcome, dg.worst_case_running, dg.max_num_seqs, dg.max_model_len)
    source = "the log" if dg.outcome_source == "log" else "the plan for these settings"
    if dg.data_parallel is not None and dg.outcome_source != "log":
        source += f", each of {dg.data_parallel.data_parallel_size} DP ranks"
    if dg.outcome == "wont_start":
        reason = f": {dg.outcome_reason}" if dg.outcome_reason else ""
        return f"✗ Verdict ({source}): {words}{reason}"
    return f"✓ Verdict ({source}): {words}"


def _ranks_table(dp: DataParallel) -> Table:
    """Each DP rank's logged figures, one row a rank, and the cluster's sums."""
    expert = ", expert parallel" if dp.expert_parallel else ""
    table = Table(
        title=f"Per DP rank ({dp.data_parallel_size} ranks{expert})", title_justify="left"
    )
    table.add_column("rank")
    for col in ("KV tokens", "concurrency", "available KV", "weights"):
        table.add_column(col, justify="right")
    for f in dp.ranks:
        table.add_row(
            str(f.rank),
            size_text(f.kv_cache_size_tokens, "tokens"),
            size_text(f.max_concurrency, "x"),
            size_text(f.available_kv_bytes, "bytes"),
            size_text(f.weights_bytes, "bytes"),
        )
    c = dp.cluster
    table.add_row(
        "all", size_text(c.kv_cache_size_tokens, "tokens"), size_text(c.max_concurrency, "x")
    )
    return table


def cluster_text(dp: DataParallel) -> str:
    """The cluster in one sentence: "Cluster: 841,760 KV tokens, 52.60x requests of 16,000
    tokens at once over 2 DP ranks." (the concurrency left out when not logged)."""
    c = dp.cluster
    if c.kv_cache_size_tokens is None:
        return f"Cluster: {c.ranks} DP ranks; none logged its KV cache size."
    length = next((f.max_model_len for f in dp.ranks if f.max_model_len), None)
    concurrency = (
        f", {c.max_concurrency:.2f}x requests of {length:,} tokens at once"
        if c.max_concurrency is not None and length
        else ""
    )
    rested = (
        ""
        if len(c.logged_ranks) == c.ranks
        else f" (as logged by rank{'s' if len(c.logged_ranks) > 1 else ''} "
        f"{', '.join(map(str, c.logged_ranks))})"
    )
    return (
        f"Cluster: {c.kv_cache_size_tokens:,} KV tokens{concurrency} over {c.ranks} DP "
        f"ranks{rested}."
    )


def speculative_dict(spec: SpecDecodeLog) -> dict[str, Any]:
    """Speculative decoding as the log states it, its stat lines summarised (JSON
    ``speculative``): ``draft_acceptance_pct`` is accepted over drafted tokens, summed over
    the lines; ``mean_acceptance_length`` the mean of the lines' (each an interval's)."""
    lengths = spec.mean_acceptance_length
    return {
        "method": spec.method,
        "num_speculative_tokens": spec.num_speculative_tokens,
        "draft_model": spec.draft_model,
        "samples": len(lengths),
        "mean_acceptance_length": round(sum(lengths) / len(lengths), 2) if lengths else None,
        "accepted_tokens": spec.accepted_tokens,
        "drafted_tokens": spec.drafted_tokens,
        "draft_acceptance_pct": (
            round(100 * spec.accepted_tokens / spec.drafted_tokens, 1)
            if spec.drafted_tokens
            else None
        ),
    }


def speculative_text(spec: SpecDecodeLog) -> str:
    """One line: "Speculative decoding: mtp, 3 tokens a step; 2 stat lines: 89 of 975 drafted
    tokens accepted (9.1 %), mean acceptance length 2.37." (what the log lacks left out)."""
    d = speculative_dict(spec)
    head = "Speculative decoding: " + (d["method"] or "on")
    if d["num_speculative_tokens"] is not None:
        head += f", {d['num_speculative_tokens']} tokens a step"
    if not d["samples"]:
        return head + "."
    lines = f"{d['samples']} stat line{'s' if d['samples'] > 1 else ''}"
    accepted = (
        f" {d['accepted_tokens']:,} of {d['drafted_tokens']:,} drafted tokens accepted "
        f"({d['draft_acceptance_pct']:.1f} %),"
        if d["draft_acceptance_pct"] is not None
        else ""
    )
    return f"{head}; {lines}:{accepted} mean acceptance length {d['mean_acceptance_length']:.2f}."


def diagnose_dict(dg: Diagnosis) -> dict[str, Any]:
    """JSON of ``kvplan diagnose``; runtime samples are summarised, not listed."""
    data = asdict(dg)
    log = data["log"]
    for key in ("data_parallel_size", "expert_parallel", "ranks"):
        del log[key]  # a data-parallel log has them at the top level
    data.update(data.pop("data_parallel") or {})
    del log["speculative"]  # summarised at the top level, when the log shows it
    if dg.log.speculative is not None:
        data["speculative"] = speculative_dict(dg.log.speculative)
    for key in ("kv_usage_pct", "prefix_hit_pct"):
        samples = log.pop(key)
        log[key.removesuffix("_pct") + "_samples"] = len(samples)
        log[key.removesuffix("_pct") + "_peak_pct"] = max(samples) if samples else None
    for term, t in zip(data["terms"], dg.terms, strict=True):
        term["diff"] = t.diff
    for finding, f in zip(data["findings"], dg.findings, strict=True):
        finding["text"] = finding_text(f)
    return data


def diagnose(dg: Diagnosis, *, as_json: bool = False) -> None:
    """Print ``kvplan diagnose``: what the log says, the plan beside it, the findings."""
    if as_json:
        write_out(to_json(diagnose_dict(dg)))
        return
    out = console()
    log = dg.log
    kind = (
        f"vLLM {log.engine}" + (f" (v{log.version})" if log.version else "")
        if log.engine
        else "vLLM"
    )
    runtime = (
        f", {len(log.kv_usage_pct)} runtime stat lines, {log.preemptions:,} preemptions"
        if log.kv_usage_pct or log.preemptions
        else ""
    )
    out.print(
        f"[bold]{user_text(dg.file)}[/]: {kind} log, {log.recognised} lines recognised{runtime}"
    )
    if dg.settings:
        parts = []
        for key, value in dg.settings.items():
            where = dg.sources.get(key, "")
            shown = fmt_bytes(value) if key.endswith("_bytes") and isinstance(value, int) else value
            parts.append(f"{key} {shown}" + (f" ({where})" if where else ""))
        print_wrapped(out, "Plan settings: " + " · ".join(parts))
    verdict = verdict_text(dg)
    if verdict:
        print_wrapped(out, verdict)
    dp = dg.data_parallel
    if dg.terms:
        title = "Log vs plan, per GPU rank"
        if dp is not None and dp.ranks:
            title += f" (the log's figures: DP rank {dp.ranks[0].rank})"
        table = Table(title=title, title_justify="left")
        table.add_column("term")
        for col in ("log", "plan", "log − plan"):
            table.add_column(col, justify="right")
        table.add_column("note")
        for t in dg.terms:
            table.add_row(
                t.name,
                size_text(t.log, t.unit),
                size_text(t.plan, t.unit),
                signed_text(t.diff, t.unit),
                t.note,
            )
        out.print(table)
    if dp is not None:
        out.print(_ranks_table(dp))
        print_wrapped(out, cluster_text(dp))
    if log.speculative is not None:
        print_wrapped(out, speculative_text(log.speculative))
    for note in dg.notes:
        print_wrapped(out, f"note: {one_line(note)}", style="dim")
    if dg.findings:
        out.print("[bold]Findings:[/]")
    mark = {"info": "·", "warning": "!", "error": "✗"}
    for f in dg.findings:
        where = f" (line {', '.join(str(n) for n in f.lines if n)})" if any(f.lines) else ""
        print_wrapped(out, f"{mark[f.severity]} {finding_text(f)}{where}", indent="  ")
        for fix in f.fix:
            print_wrapped(out, f"→ {fix}", indent="      ", hang="        ")
        for caveat in f.caveats:
            print_wrapped(out, f"note: {caveat}", indent="      ", hang="        ")
    if not dg.findings and not dg.terms:
        out.print("Nothing to compare: the log has no startup figures and no runtime problems.")
    out.print(
        "[dim]Logged sizes are GiB rounded to 0.01; plan terms for activation, non-torch and "
        "CUDA graphs are estimates.[/]"
    )
