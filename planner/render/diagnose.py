"""``kvplan diagnose``: the log beside the plan, term by term, and the findings."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.table import Table

from planner.errors import one_line
from planner.render._output import (
    console,
    outcome_words,
    print_wrapped,
    to_json,
    user_text,
    write_out,
)
from planner.units import GIB, fmt_bytes

if TYPE_CHECKING:
    from planner.diagnose import Diagnosis, Finding
    from planner.diagnose.boot_log import SpecDecodeLog
    from planner.diagnose.ranks import DataParallel


def _size(n: float | None, unit: str) -> str:
    if n is None:
        return "—"
    if unit == "bytes":
        return f"{n / GIB:,.2f} GiB"
    if unit == "x":
        return f"{n:.2f}x"
    return f"{int(n):,}"


def _signed(n: float | None, unit: str) -> str:
    if n is None:
        return ""
    if unit == "bytes":
        return "0.00 GiB" if abs(n) < GIB / 200 else f"{n / GIB:+,.2f} GiB"
    if unit == "x":
        return f"{n:+.2f}x"
    return f"{int(n):+,}"


def finding_text(f: Finding) -> str:
    """One finding as a sentence with its numbers."""
    d = f.data
    if f.kind in ("budget", "matches"):
        source = "blocks × the plan's block size" if d["available_implied_by_blocks"] else "log"
        head = (
            f"Available KV cache: {source} {_size(d['log_available_bytes'], 'bytes')}, plan "
            f"{_size(d['plan_available_bytes'], 'bytes')} "
            f"({_signed(d['difference_bytes'], 'bytes')})"
        )
        if f.kind == "matches":
            return head + ": the plan matches the log within its 0.01 GiB rounding."
        if d["term_log_bytes"] is None:
            why = (
                f"The log does not state {d['term']}; together they account for "
                f"{_signed(d['share_bytes'], 'bytes')} (DEBUG logging prints the breakdown)"
            )
        else:
            term = d["term"][:1].upper() + d["term"][1:]
            why = (
                f"{term} explains it: log {_size(d['term_log_bytes'], 'bytes')} vs plan "
                f"{_size(d['term_plan_bytes'], 'bytes')} gives {_signed(d['share_bytes'], 'bytes')}"
                " of KV cache"
            )
        return f"{head}. {why}."
    if f.kind == "layout-matches":
        return (
            f"Layout matches: with the log's KV memory the plan's blocks hold "
            f"{d['expected_tokens_low']:,}–{d['expected_tokens_high']:,} tokens; the log has "
            f"{d['log_tokens']:,}."
        )
    if f.kind == "layout":
        return (
            f"Layout differs: the log stores {d['log_tokens']:,} tokens in its KV memory, "
            f"{d['log_bytes_per_token']:,.0f} B/token; the plan's layout needs "
            f"{d['plan_bytes_per_token']:,.0f} B/token (×{d['ratio']}; plan has "
            f"{d['kv_heads_per_rank']} KV heads per rank) and would hold "
            f"{d['expected_tokens_low']:,}–{d['expected_tokens_high']:,}."
        )
    if f.kind == "startup-max-len":
        need = _size(d["needed_bytes"], "bytes")
        have = _size(d["available_bytes"], "bytes")
        plan_est = d["plan_estimated_max_model_len"]
        return (
            f"vLLM refused max_model_len {d['max_model_len'] or '?'}: one request needs {need} "
            f"of KV, {have} available; vLLM's estimated maximum model length is "
            f"{d['estimated_max_model_len'] or '?'}"
            + (f" (the plan's: {plan_est:,})" if plan_est else "")
            + "."
        )
    if f.kind == "startup-crash":
        term = d["plan_term"].removesuffix("_bytes").replace("_", " ")
        plan = ""
        if d["plan_bytes"] == 0 and d["plan_term"] == "cuda_graph_bytes":
            plan = (
                "; the plan subtracts no CUDA-graph memory before the pool (this release sizes "
                "the KV cache first), so the graphs had to fit in what the pool left"
            )
        elif d["plan_bytes"] is not None:
            plan = f"; the plan's {term} is {_size(d['plan_bytes'], 'bytes')}"
        error = str(d["error"]).rstrip(". ")
        return f"vLLM crashed during {d['stage']} and never served: {error}{plan}."
    if f.kind == "gpu-shared":
        text = (
            f"Another process holds the GPU: {_size(d['free_bytes'], 'bytes')} of "
            f"{_size(d['total_bytes'], 'bytes')} free at start-up, "
            f"{_size(d['held_bytes'], 'bytes')} held; vLLM asks for "
            f"{_size(d['requested_bytes'], 'bytes')}"
        )
        if d.get("starting_gpu_memory_utilization") is None:
            return text + " and plans with what is free."
        return text + (
            f". Planned with the free memory: at gpu_memory_utilization "
            f"{d['starting_gpu_memory_utilization']:g} vLLM starts with "
            f"{_size(d['starting_kv_cache_bytes'], 'bytes')} of KV cache "
            f"({d['starting_kv_cache_tokens']:,} tokens)."
        )
    if f.kind == "seqs-capped":
        return (
            f"Concurrency capped by max_num_seqs: {d['max_running']} running (= max_num_seqs "
            f"{d['max_num_seqs']}), up to {d['max_waiting']} waiting, KV usage at most "
            f"{d['peak_pct']:.1f} %: the GPU idles while requests queue."
        )
    if f.kind == "long-prefill":
        return (
            f"Long requests are prefill-bound: prompt throughput {d['prompt_tokens_per_s']:,} "
            f"tokens/s against generation {d['generation_tokens_per_s']:,} over "
            f"{d['samples']} stat lines, up to {d['max_waiting']} waiting, max_model_len "
            f"{d['max_model_len']:,}: first tokens are slow."
        )
    if f.kind == "startup-no-memory":
        return "vLLM found no memory for KV blocks: weights and activations fill the budget."
    if f.kind in ("oom", "oom-fragmentation"):
        spare = ", ".join(
            f"{_size(d[k], 'bytes')} {label}"
            for k, label in (
                ("free_bytes", "free"),
                ("reserved_unallocated_bytes", "reserved but unallocated"),
            )
            if d[k] is not None
        )
        head = f"CUDA OOM allocating {_size(d['tried_bytes'], 'bytes')}" + (
            f" while {spare}" if spare else ""
        )
        if f.kind == "oom-fragmentation":
            return head + ": memory looks free, so fragmentation or a wrong KV-head count."
        return head + ": the budget is too tight."
    if f.kind == "kv-pinned":
        peak = d["peak_pct"]
        return (
            f"KV usage pinned near 100 %: {d['high_samples']} of {d['samples']} stat lines "
            f"≥ 95 %"
            + (f", peak {peak:.1f} %" if peak is not None else "")
            + f", {d['preemptions']:,} preemptions, up to {d['max_waiting']} requests waiting: "
            + ("requests queue and are preempted." if d["preemptions"] else "requests queue.")
        )
    if f.kind == "kv-low":
        return (
            f"KV usage never above {d['peak_pct']:.1f} % in {d['samples']} stat lines: the cache "
            "is larger than the load needs."
        )
    if f.kind == "prefix-off":
        return (
            "Prefix caching is off: requests that share a system prompt recompute it, which "
            "shows as high TTFT."
        )
    if f.kind == "dp-ranks-differ":
        return (
            f"DP ranks differ: rank {d['min_rank']} holds {d['min_kv_cache_size_tokens']:,} KV "
            f"tokens, rank {d['max_rank']} {d['max_kv_cache_size_tokens']:,} "
            f"({d['spread_pct']:.2f} % fewer). The balancer gives every rank the same load, so "
            f"rank {d['min_rank']} fills first: under an even load the {d['ranks']} ranks hold "
            f"{d['ranks']} × {d['min_kv_cache_size_tokens']:,} = "
            f"{d['even_load_kv_cache_size_tokens']:,} tokens"
            + (
                f" ({d['even_load_max_concurrency']:.2f}x)"
                if d["even_load_max_concurrency"] is not None
                else ""
            )
            + f", not {d['kv_cache_size_tokens']:,}."
        )
    if f.kind == "prefix-low-hit":
        return (
            f"Prefix cache hit rate {d['mean_hit_pct']:.1f} % over {d['samples']} stat lines: "
            "requests share little; with a shared system prompt, high TTFT follows."
        )
    if f.kind == "encoder-profile":
        text = (
            f"Encoder cache budget {d['budget_tokens']:,} tokens, profiled with "
            f"{d['items']:,} {d['modality']} item(s) of the largest size"
        )
        if d["plan_budget_tokens"] is not None and d["plan_items"] is not None:
            same = (d["plan_budget_tokens"], d["plan_items"]) == (d["budget_tokens"], d["items"])
            text += (
                "; the plan has the same"
                if same
                else f"; the plan has {d['plan_budget_tokens']:,} tokens and "
                f"{d['plan_items']:,} {d['plan_modality']} item(s)"
            )
            if d["plan_encoder_bytes"]:
                text += (
                    f", holding ~{_size(d['plan_encoder_bytes'], 'bytes')} of encoder "
                    "outputs and tower activations in the profile run"
                )
        return text + "."
    return str(d.get("message", f.kind))


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
            _size(f.kv_cache_size_tokens, "tokens"),
            _size(f.max_concurrency, "x"),
            _size(f.available_kv_bytes, "bytes"),
            _size(f.weights_bytes, "bytes"),
        )
    c = dp.cluster
    table.add_row("all", _size(c.kv_cache_size_tokens, "tokens"), _size(c.max_concurrency, "x"))
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
                t.name, _size(t.log, t.unit), _size(t.plan, t.unit), _signed(t.diff, t.unit), t.note
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
