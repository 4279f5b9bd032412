"""Every finding kind as a type that carries its own text (JSON ``findings[].kind`` is its
name, ``findings[].text`` its sentence): :data:`KINDS` maps each name to its :class:`Kind`, and
:func:`finding_text` words a finding from its ``data`` for a boot log or for a server's
metrics (``source="scrape"``). A new kind is one class here with ``@registered``; a finding of
a kind with no class is refused when it is made (:class:`planner.diagnose.findings.Finding`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from planner.units import GIB

if TYPE_CHECKING:
    from planner.diagnose.findings import Finding

Source = Literal["log", "scrape"]


def size_text(n: float | None, unit: str) -> str:
    if n is None:
        return "—"
    if unit == "bytes":
        return f"{n / GIB:,.2f} GiB"
    if unit == "x":
        return f"{n:.2f}x"
    return f"{int(n):,}"


def signed_text(n: float | None, unit: str) -> str:
    if n is None:
        return ""
    if unit == "bytes":
        return "0.00 GiB" if abs(n) < GIB / 200 else f"{n / GIB:+,.2f} GiB"
    if unit == "x":
        return f"{n:+.2f}x"
    return f"{int(n):+,}"


def pct_text(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f} %"


def secs_text(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x * 1000:,.0f} ms" if x < 1 else f"{x:,.2f} s"


def count_text(x: float | None) -> str:
    return "—" if x is None else f"{round(x):,}"


def quantile_text(q: dict[str, Any] | None, show: Callable[[Any], str]) -> str:
    if q is None:
        return ""
    p99 = ("≥ " if q["p99_capped"] else "") + show(q["p99"])
    return f"p50 {show(q['p50'])}, p90 {show(q['p90'])}, p99 {p99} ({q['count']:,})"


def preemption_text(d: dict[str, Any]) -> str:
    """The preemption rate in words: "37 preemptions (37.0 per 1,000 requests, 0.12/s)"."""
    pre = d.get("preemptions")
    if pre is None:
        return "preemptions not exported"
    rates = []
    if d.get("preemptions_per_1k_requests") is not None:
        rates.append(f"{d['preemptions_per_1k_requests']:,.1f} per 1,000 requests")
    if d.get("preemptions_per_s") is not None:
        rates.append(f"{d['preemptions_per_s']:,.3g}/s")
    return f"{pre:,} preemptions" + (f" ({', '.join(rates)})" if rates else "")


class Kind:
    """A finding kind: ``names`` (its JSON ``kind``; one class may word several) and its
    sentence for a boot log (:meth:`log`) and for a server's metrics (:meth:`scrape`, by
    default the log's with the log's words changed)."""

    names: ClassVar[tuple[str, ...]] = ()

    def log(self, f: Finding) -> str:
        return str(f.data.get("message", f.kind))

    def scrape(self, f: Finding) -> str:
        # the plan's checks, worded for a scrape: it states blocks, not the budget's terms
        return (
            self.log(f)
            .replace("The log does not state", "The scrape does not state")
            .replace("(DEBUG logging prints the breakdown)", "(the boot log states them)")
        )


KINDS: dict[str, Kind] = {}


def registered(cls: type[Kind]) -> type[Kind]:
    """Add ``cls`` to :data:`KINDS` under each of its names (a name twice is an error)."""
    for name in cls.names:
        if name in KINDS:
            raise AssertionError(f"finding kind {name!r} declared twice")
        KINDS[name] = cls()
    return cls


@registered
class Message(Kind):
    """A finding whose text is its message: kvplan's own plan failing beside the log."""

    names = ("plan-does-not-fit",)


@registered
class Budget(Kind):
    """Which budget term explains the difference between the log's available KV cache and
    the plan's."""

    names = ("budget",)

    def head(self, f: Finding) -> str:
        d = f.data
        source = "blocks × the plan's block size" if d["available_implied_by_blocks"] else "log"
        head = (
            f"Available KV cache: {source} {size_text(d['log_available_bytes'], 'bytes')}, plan "
            f"{size_text(d['plan_available_bytes'], 'bytes')} "
            f"({signed_text(d['difference_bytes'], 'bytes')})"
        )
        return head

    def log(self, f: Finding) -> str:
        d = f.data
        head = self.head(f)
        if d["term_log_bytes"] is None:
            why = (
                f"The log does not state {d['term']}; together they account for "
                f"{signed_text(d['share_bytes'], 'bytes')} (DEBUG logging prints the breakdown)"
            )
        else:
            term = d["term"][:1].upper() + d["term"][1:]
            why = (
                f"{term} explains it: log {size_text(d['term_log_bytes'], 'bytes')} vs plan "
                f"{size_text(d['term_plan_bytes'], 'bytes')} gives "
                f"{signed_text(d['share_bytes'], 'bytes')}"
                " of KV cache"
            )
        return f"{head}. {why}."


@registered
class Matches(Budget):
    """The plan's available KV cache matches the log's within its rounding."""

    names = ("matches",)

    def log(self, f: Finding) -> str:
        return self.head(f) + ": the plan matches the log within its 0.01 GiB rounding."


@registered
class LayoutMatches(Kind):
    names = ("layout-matches",)

    def log(self, f: Finding) -> str:
        d = f.data
        return (
            f"Layout matches: with the log's KV memory the plan's blocks hold "
            f"{d['expected_tokens_low']:,}–{d['expected_tokens_high']:,} tokens; the log has "
            f"{d['log_tokens']:,}."
        )


@registered
class Layout(Kind):
    names = ("layout",)

    def log(self, f: Finding) -> str:
        d = f.data
        return (
            f"Layout differs: the log stores {d['log_tokens']:,} tokens in its KV memory, "
            f"{d['log_bytes_per_token']:,.0f} B/token; the plan's layout needs "
            f"{d['plan_bytes_per_token']:,.0f} B/token (×{d['ratio']}; plan has "
            f"{d['kv_heads_per_rank']} KV heads per rank) and would hold "
            f"{d['expected_tokens_low']:,}–{d['expected_tokens_high']:,}."
        )


@registered
class StartupMaxLen(Kind):
    names = ("startup-max-len",)

    def log(self, f: Finding) -> str:
        d = f.data
        need = size_text(d["needed_bytes"], "bytes")
        have = size_text(d["available_bytes"], "bytes")
        plan_est = d["plan_estimated_max_model_len"]
        return (
            f"vLLM refused max_model_len {d['max_model_len'] or '?'}: one request needs {need} "
            f"of KV, {have} available; vLLM's estimated maximum model length is "
            f"{d['estimated_max_model_len'] or '?'}"
            + (f" (the plan's: {plan_est:,})" if plan_est else "")
            + "."
        )


@registered
class StartupCrash(Kind):
    names = ("startup-crash",)

    def log(self, f: Finding) -> str:
        d = f.data
        term = d["plan_term"].removesuffix("_bytes").replace("_", " ")
        plan = ""
        if d["plan_bytes"] == 0 and d["plan_term"] == "cuda_graph_bytes":
            plan = (
                "; the plan subtracts no CUDA-graph memory before the pool (this release sizes "
                "the KV cache first), so the graphs had to fit in what the pool left"
            )
        elif d["plan_bytes"] is not None:
            plan = f"; the plan's {term} is {size_text(d['plan_bytes'], 'bytes')}"
        error = str(d["error"]).rstrip(". ")
        return f"vLLM crashed during {d['stage']} and never served: {error}{plan}."


@registered
class GraphEstimate(Kind):
    names = ("graph-estimate",)

    def log(self, f: Finding) -> str:
        d = f.data
        gap = d["gap_bytes"]
        tokens = f" ({d['gap_tokens']:,} tokens)" if d.get("gap_tokens") is not None else ""
        head = (
            f"vLLM set aside {size_text(d['estimate_bytes'], 'bytes')} for CUDA graphs before "
            f"sizing the KV cache; the capture took {size_text(d['capture_bytes'], 'bytes')}"
        )
        if gap > 0:
            return (
                f"{head}: the pool is {size_text(gap, 'bytes')}{tokens} smaller than the GPU "
                "allows (vLLM's estimate extrapolates its second graph to all of them)."
            )
        return (
            f"{head}: the server runs {size_text(-gap, 'bytes')} past gpu_memory_utilization's "
            "budget, and a higher setting runs out of memory capturing them."
        )


@registered
class GpuShared(Kind):
    names = ("gpu-shared",)

    def log(self, f: Finding) -> str:
        d = f.data
        text = (
            f"Another process holds the GPU: {size_text(d['free_bytes'], 'bytes')} of "
            f"{size_text(d['total_bytes'], 'bytes')} free at start-up, "
            f"{size_text(d['held_bytes'], 'bytes')} held; vLLM asks for "
            f"{size_text(d['requested_bytes'], 'bytes')}"
        )
        if d.get("starting_gpu_memory_utilization") is None:
            return text + " and plans with what is free."
        return text + (
            f". Planned with the free memory: at gpu_memory_utilization "
            f"{d['starting_gpu_memory_utilization']:g} vLLM starts with "
            f"{size_text(d['starting_kv_cache_bytes'], 'bytes')} of KV cache "
            f"({d['starting_kv_cache_tokens']:,} tokens)."
        )


@registered
class SeqsCapped(Kind):
    names = ("seqs-capped",)

    def log(self, f: Finding) -> str:
        d = f.data
        return (
            f"Concurrency capped by max_num_seqs: {d['max_running']} running (= max_num_seqs "
            f"{d['max_num_seqs']}), up to {d['max_waiting']} waiting, KV usage at most "
            f"{d['peak_pct']:.1f} %: the GPU idles while requests queue."
        )


@registered
class LongPrefill(Kind):
    names = ("long-prefill",)

    def log(self, f: Finding) -> str:
        d = f.data
        return (
            f"Long requests are prefill-bound: prompt throughput {d['prompt_tokens_per_s']:,} "
            f"tokens/s against generation {d['generation_tokens_per_s']:,} over "
            f"{d['samples']} stat lines, up to {d['max_waiting']} waiting, max_model_len "
            f"{d['max_model_len']:,}: first tokens are slow."
        )


@registered
class StartupNoMemory(Kind):
    names = ("startup-no-memory",)

    def log(self, f: Finding) -> str:
        return "vLLM found no memory for KV blocks: weights and activations fill the budget."


@registered
class Oom(Kind):
    """A CUDA out-of-memory error: the budget is too tight."""

    names = ("oom",)
    why = "the budget is too tight."

    def log(self, f: Finding) -> str:
        d = f.data
        spare = ", ".join(
            f"{size_text(d[k], 'bytes')} {label}"
            for k, label in (
                ("free_bytes", "free"),
                ("reserved_unallocated_bytes", "reserved but unallocated"),
            )
            if d[k] is not None
        )
        head = f"CUDA OOM allocating {size_text(d['tried_bytes'], 'bytes')}" + (
            f" while {spare}" if spare else ""
        )
        return f"{head}: {self.why}"


@registered
class OomFragmentation(Oom):
    """A CUDA out-of-memory error while memory looks free."""

    names = ("oom-fragmentation",)
    why = "memory looks free, so fragmentation or a wrong KV-head count."


@registered
class KvPinned(Kind):
    names = ("kv-pinned",)

    def log(self, f: Finding) -> str:
        d = f.data
        peak = d["peak_pct"]
        return (
            f"KV usage pinned near 100 %: {d['high_samples']} of {d['samples']} stat lines "
            f"≥ 95 %"
            + (f", peak {peak:.1f} %" if peak is not None else "")
            + f", {d['preemptions']:,} preemptions, up to {d['max_waiting']} requests waiting: "
            + ("requests queue and are preempted." if d["preemptions"] else "requests queue.")
        )

    def scrape(self, f: Finding) -> str:
        d = f.data
        scrapes = f"{d.get('samples', 0)} scrape{'s' if d.get('samples', 0) != 1 else ''}"
        return (
            f"KV usage at the top: p90 {pct_text(d['p90_pct'])}, peak "
            f"{pct_text(d['peak_pct'])} over "
            f"{scrapes}, {preemption_text(d)}, up to {d['max_waiting']:,} requests waiting: "
            + (
                "requests queue and are preempted."
                if d["preemptions"]
                else "requests queue for blocks."
            )
        )


class OverSamples(Kind):
    """A kind whose sentence is the same for a log and a scrape but for what it counts over:
    "4 stat lines" of a log, "3 scrapes" of a server's metrics."""

    def sentence(self, d: dict[str, Any], over: str) -> str:
        raise NotImplementedError

    def log(self, f: Finding) -> str:
        return self.sentence(f.data, f"{f.data['samples']} stat lines")

    def scrape(self, f: Finding) -> str:
        n = f.data.get("samples", 0)
        return self.sentence(f.data, f"{n} scrape{'s' if n != 1 else ''}")


@registered
class KvLow(OverSamples):
    names = ("kv-low",)

    def sentence(self, d: dict[str, Any], over: str) -> str:
        return (
            f"KV usage never above {d['peak_pct']:.1f} % in {over}: the cache is larger than "
            "the load needs."
        )


@registered
class PrefixOff(Kind):
    names = ("prefix-off",)

    def log(self, f: Finding) -> str:
        return (
            "Prefix caching is off: requests that share a system prompt recompute it, which "
            "shows as high TTFT."
        )

    def scrape(self, f: Finding) -> str:
        return (
            "Prefix caching is off (cache_config_info): requests that share a system prompt "
            "recompute it, which shows as high TTFT."
        )


@registered
class DpRanksDiffer(Kind):
    names = ("dp-ranks-differ",)

    def log(self, f: Finding) -> str:
        d = f.data
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


@registered
class PrefixLowHit(OverSamples):
    names = ("prefix-low-hit",)

    def sentence(self, d: dict[str, Any], over: str) -> str:
        return (
            f"Prefix cache hit rate {d['mean_hit_pct']:.1f} % over {over}: requests share "
            "little; with a shared system prompt, high TTFT follows."
        )


@registered
class EncoderProfile(Kind):
    names = ("encoder-profile",)

    def log(self, f: Finding) -> str:
        d = f.data
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
                    f", holding ~{size_text(d['plan_encoder_bytes'], 'bytes')} of encoder "
                    "outputs and tower activations in the profile run"
                )
        return text + "."


@registered
class KvUsage(Kind):
    names = ("kv-usage",)

    def scrape(self, f: Finding) -> str:
        d = f.data
        scrapes = f"{d.get('samples', 0)} scrape{'s' if d.get('samples', 0) != 1 else ''}"
        where = {
            "above": "above the 80–90 % target",
            "on-target": "on the 80–90 % target",
            "below": "below the 80–90 % target",
        }[d["band"]]
        return (
            f"KV cache usage p50 {pct_text(d['p50_pct'])}, p90 {pct_text(d['p90_pct'])}, max "
            f"{pct_text(d['max_pct'])} over {scrapes}: {where}."
        )

    def log(self, f: Finding) -> str:
        return self.scrape(f)  # a server's metrics only


@registered
class StarvedMaxNumSeqs(Kind):
    names = ("starved-max-num-seqs",)

    def scrape(self, f: Finding) -> str:
        d = f.data
        source = {"observed": " (as observed)", "plan": " (vLLM's default)"}.get(
            d["max_num_seqs_source"], ""
        )
        return (
            f"Starved by max_num_seqs: up to {d['waiting_max']:,} requests wait in "
            f"{d['waiting_scrapes']} of {d['scrapes']} scrape(s) while "
            f"{count_text(d['running_max_while_waiting'])} run, the limit of max_num_seqs "
            f"{d['max_num_seqs']:,}{source}, with KV at "
            f"{pct_text(d['kv_usage_max_pct_while_waiting'])}: the pool has room for more."
        )

    def log(self, f: Finding) -> str:
        return self.scrape(f)  # a server's metrics only


@registered
class StarvedTokenBudget(Kind):
    names = ("starved-token-budget",)

    def scrape(self, f: Finding) -> str:
        d = f.data
        return (
            f"Requests wait with room in the pool: up to {d['waiting_max']:,} waiting in "
            f"{d['waiting_scrapes']} of {d['scrapes']} scrape(s), "
            f"{count_text(d['running_max_while_waiting'])} running"
            + (f" of max_num_seqs {d['max_num_seqs']:,}" if d["max_num_seqs"] else "")
            + f", KV at {pct_text(d['kv_usage_max_pct_while_waiting'])}: the per-step token "
            "budget admits them slowly"
            + (
                ""
                if d["max_num_seqs"]
                else " (or max_num_seqs, unknown here: pass --max-num-seqs or --gpu)"
            )
            + "."
        )

    def log(self, f: Finding) -> str:
        return self.scrape(f)  # a server's metrics only


@registered
class Latency(Kind):
    names = ("latency",)

    def scrape(self, f: Finding) -> str:
        d = f.data
        parts = []
        for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("queue_s", "queue")):
            text = quantile_text(d[key], secs_text)
            if text:
                parts.append(f"{label} {text}")
        return "Latency: " + "; ".join(parts) + "."

    def log(self, f: Finding) -> str:
        return self.scrape(f)  # a server's metrics only


@registered
class Lengths(Kind):
    names = ("lengths",)

    def scrape(self, f: Finding) -> str:
        d = f.data
        parts = []
        for key, label in (("prompt", "prompt"), ("output", "output")):
            q = d[key]
            if q is not None:
                mean = f", mean {q['mean']:,.0f}" if q["mean"] is not None else ""
                parts.append(f"{label} {quantile_text(q, count_text)}{mean}")
        return "Request lengths (tokens): " + "; ".join(parts) + "."

    def log(self, f: Finding) -> str:
        return self.scrape(f)  # a server's metrics only


def finding_text(f: Finding, source: Source = "log") -> str:
    """One finding as a sentence with its numbers, in the words of its source."""
    kind = KINDS[f.kind]
    return kind.scrape(f) if source == "scrape" else kind.log(f)
