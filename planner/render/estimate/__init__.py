"""``kvplan estimate``: the KV estimate, then the plan on a GPU (memory bar, what vLLM would
log, the grid) or the table of common GPUs.

rich's tables are imported by the functions that draw them: ``--json`` prints without them.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from planner.kv_layout import refused_block_size
from planner.model.specs import Engine
from planner.recommend import rejected_words
from planner.render._output import (
    OUTCOME_PHRASES,
    Column,
    console,
    outcome_words,
    print_fitted,
    print_note,
    to_json,
    user_text,
    warnings_,
    write_out,
)
from planner.render.estimate.budget import budget_lines, host_ram_line, memory_beyond, mm_line
from planner.render.estimate.data import estimate_dict, refusal_dict, report_dict
from planner.units import fmt_bytes

if TYPE_CHECKING:
    from rich.console import Console

    from planner.kv_layout import KVEstimate
    from planner.plan_types import Plan, Refusal
    from planner.report import Report


def estimate(est: KVEstimate, *, as_json: bool = False, warn: bool = True) -> None:
    """Print an estimate: header, per-kind table, totals, vLLM layout, batch examples."""
    if warn:
        warnings_(est.warnings)
    if as_json:
        write_out(to_json(estimate_dict(est)))
        return
    from rich.table import Table

    out = console()
    out.print(f"[bold]{user_text(est.model)}[/]  ({user_text(est.source)})")
    heads = (
        f"{est.num_attention_heads} heads / {est.num_kv_heads} KV heads"
        if est.num_attention_heads
        else "no attention"
    )
    out.print(
        f"{user_text(est.model_type)} · {est.attention_type} · {est.num_layers} layers · {heads} · "
        f"head {est.head_dim} · weights {est.model_dtype}"
    )
    pp = (
        f" · PP {est.pipeline_parallel_size} (stage {est.pp_stage}: layers "
        f"{est.pp_layers[0]}–{est.pp_layers[1] - 1})"
        if est.pipeline_parallel_size > 1
        else ""
    )
    out.print(
        f"engine {est.engine} · TP {est.tensor_parallel_size}{pp} · KV dtype "
        f"{est.kv_cache_dtype} ({est.kv_dtype_bytes} B) · block {est.block_size} · "
        f"max_model_len {est.max_model_len:,}"
    )

    table = Table(title="Cache per GPU rank, by layer kind", title_justify="left")
    table.add_column("kind")
    table.add_column("layers", justify="right")
    table.add_column("window", justify="right")
    table.add_column("B/token/layer", justify="right")
    table.add_column("state/layer", justify="right")
    table.add_column("B/token", justify="right")
    for g in est.layer_groups:
        table.add_row(
            g.kind,
            str(g.num_layers),
            f"{g.window:,}" if g.window else "—",
            f"{g.bytes_per_token:,}" if g.bytes_per_token else "—",
            fmt_bytes(g.state_bytes_per_sequence) if g.state_bytes_per_sequence else "—",
            f"{g.bytes_per_token * g.num_layers:,}" if g.bytes_per_token else "—",
        )
    out.print(table)

    out.print(
        f"KV bytes per token:  {est.kv_bytes_per_token:,} B ({fmt_bytes(est.kv_bytes_per_token)})"
        + _savings(est)
    )
    if est.state_bytes_per_sequence:
        out.print(
            f"State per sequence:  {est.state_bytes_per_sequence:,} B "
            f"({fmt_bytes(est.state_bytes_per_sequence)}), independent of length"
        )
    out.print(
        f"KV per sequence at {est.max_model_len:,} tokens: {est.kv_bytes_per_sequence:,} B "
        f"({fmt_bytes(est.kv_bytes_per_sequence)}) with window caps and block rounding"
    )
    if est.request_bytes != est.kv_bytes_per_sequence:
        out.print(
            f"One request in all (KV + state pages): {est.request_bytes:,} B "
            f"({fmt_bytes(est.request_bytes)})"
        )
    if est.vllm is not None:
        _vllm_layout(out, est)

    examples = Table(title=f"KV for {est.max_model_len:,} tokens × batch", title_justify="left")
    examples.add_column("batch", justify="right")
    examples.add_column("tokens", justify="right")
    examples.add_column("KV + state (per rank)", justify="right")
    examples.add_column("bytes", justify="right")
    for ex in est.examples:
        examples.add_row(
            str(ex.batch), f"{ex.tokens:,}", fmt_bytes(ex.total_bytes), f"{ex.total_bytes:,}"
        )
    if est.examples:
        out.print(examples)
    for note in est.notes:
        print_note(out, note)
    out.print("[dim]Sizes in binary units (1 GiB = 2^30 bytes). --json gives every figure.[/]")


def _savings(est: KVEstimate) -> str:
    if not est.mha_bytes_per_token or est.mha_bytes_per_token == est.kv_bytes_per_token:
        return ""
    return (
        f"; {est.mha_savings:.1f}× smaller than MHA of the same width "
        f"({fmt_bytes(est.mha_bytes_per_token)}/token)"
    )


def _vllm_layout(out: Console, est: KVEstimate) -> None:
    from rich.table import Table

    layout = est.vllm
    assert layout is not None
    table = Table(title="vLLM KV-cache groups (one block table each)", title_justify="left")
    table.add_column("group", justify="right")
    table.add_column("kind")
    table.add_column("layers", justify="right")
    table.add_column("block", justify="right")
    table.add_column("page/layer", justify="right")
    table.add_column("blocks/request", justify="right")
    for i, g in enumerate(layout.groups):
        table.add_row(
            str(i),
            g.kind + (f" (W={g.window:,})" if g.window else ""),
            str(g.num_layers),
            str(g.block_size),
            fmt_bytes(g.page_size_bytes),
            f"{g.blocks_per_request:,}",
        )
    out.print(table)
    per_block = f"{fmt_bytes(layout.bytes_per_block)} per block ({layout.bytes_per_block:,} B)"
    out.print(
        f"vLLM: {per_block}, "
        f"{layout.blocks_per_request:,} blocks per {est.max_model_len:,}-token request; "
        f"max_num_batched_tokens {layout.max_num_batched_tokens:,} "
        f"({layout.max_in_flight_tokens:,} tokens in flight)"
    )


def refusal(r: Refusal, *, as_json: bool = False) -> None:
    """Print a deployment that won't start before it is planned: the verdict, why, the
    changes that start and the layouts of the GPUs given; never a command."""
    if as_json:
        if r.estimate is not None:
            warnings_(r.estimate.warnings)
        write_out(to_json(refusal_dict(r)))
        return
    out = console()
    s = r.settings
    where = f" on {r.gpu.name} ({fmt_bytes(r.gpu.memory_bytes)})" if r.gpu else ""
    engine = ENGINE_NAMES.get(s.engine.value, "vLLM")
    if r.check == "layouts":  # no layout was picked: the GPUs, not the default TP 1
        head = f"{r.gpus} x {r.gpu.name if r.gpu else 'GPU'}, {engine}"
        out.print(f"[bold]{user_text(r.model)}[/] on {user_text(head)}")
    else:
        out.print(
            f"[bold]{user_text(r.model)}[/]{user_text(where)}, {engine}, TP {s.tp}"
            + (f", PP {s.pp}" if s.pp > 1 else "")
            + (f", DP {s.dp}" if s.dp > 1 else "")
            + (" + EP" if s.enable_expert_parallel else "")
        )
    out.print(f"✗ Won't start: {r.reason}", markup=False)
    for hint in r.hints:
        out.print(f"  try: {hint}", markup=False)
    if r.layouts:
        _layout_table(r.layouts, r.gpus or 0, "")


def report(
    rep: Report, *, as_json: bool = False, show_grid: bool = False, details: bool = False
) -> None:
    """Print ``kvplan estimate``. With a GPU the verdict comes first (the outcome of the
    user's settings, KV per token and request, the recommendation and its command), then the
    budget, what vLLM would log, what changes buy and the other engines; the layer tables and
    trade-offs follow with ``details``. Without one: the estimate, then the GPU table."""
    plan_warnings = rep.plan.warnings if rep.plan is not None else []
    if as_json:
        warnings_([*rep.estimate.warnings, *plan_warnings])
        write_out(to_json(report_dict(rep)))
        return
    if rep.plan is None:
        estimate(rep.estimate)
        if rep.gpu_table:
            _gpu_table(rep)
        return
    warnings_([*rep.estimate.warnings, *plan_warnings])
    if rep.engine is not None:
        _engine_plan(rep)
    _plan(rep.plan, show_grid, compared=rep.engine is not None)
    if details:
        console().print()
        estimate(rep.estimate, warn=False)
        _tradeoffs(rep.plan)
        if rep.plan.engines:
            _other_commands(rep.plan)
    else:
        console().print(
            "[dim]--details: layer tables, trade-offs, other engines' commands; --json: all.[/]"
        )


def _gpu_table(rep: Report) -> None:
    """vLLM on the common GPUs, one plain row each (names whole); a GPU where one request of
    max_model_len does not fit shows its pool's tokens against that length, not prose."""
    est = rep.estimate
    out = console()
    rows = rep.gpu_table
    length = est.max_model_len
    columns = [
        Column("GPU", [r.name for r in rows], identifier=True),
        Column("KV tokens", [f"{max(r.kv_cache_size_tokens, 0):,}" for r in rows], right=True),
        Column(
            "at once",
            [f"{r.max_concurrency:.2f}x" if r.fits else f"< 1 (needs {length:,})" for r in rows],
            right=True,
            identifier=True,
        ),
        Column(
            "KV memory",
            [fmt_bytes(r.available_kv_bytes) if r.available_kv_bytes > 0 else "0" for r in rows],
            right=True,
        ),
        Column("memory", [fmt_bytes(r.memory_bytes) for r in rows], right=True),
        Column("weights", [fmt_bytes(r.weights_bytes) for r in rows], right=True),
    ]
    print_fitted(
        out,
        f"vLLM on common GPUs (TP {est.tensor_parallel_size}, default gpu_memory_utilization, "
        f"max_model_len {length:,}); name one with --gpu:",
        columns,
    )


def wrap_command(command: str, width: int = 80) -> list[str]:
    """``command`` as shell lines of at most ``width`` columns (a flag stays with its value),
    joined by `` \\`` continuations: pasted into a shell it is the same command. A single
    token longer than the width gets a line of its own, whole."""
    tokens = shlex.split(command)
    words: list[str] = []
    for token in tokens:
        quoted = shlex.quote(token)
        if words and words[-1].startswith("--") and not token.startswith("--"):
            words[-1] += " " + quoted
        else:
            words.append(quoted)
    lines: list[str] = []
    line = ""
    for word in words:
        if line and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return lines


ENGINE_NAMES = {"sglang": "SGLang", "trtllm": "TensorRT-LLM", "hf": "transformers"}


def _engine_plan(rep: Report) -> None:
    """``--engine sglang|trtllm|hf`` with a GPU: that engine's plan first, vLLM's after."""
    e, p, est = rep.engine, rep.plan, rep.estimate
    assert e is not None and p is not None
    out = console()
    out.print(
        f"[bold]{user_text(est.model)}[/] on {user_text(p.gpu.name)} "
        f"({fmt_bytes(p.gpu.memory_bytes)}), {ENGINE_NAMES[e.engine]}, "
        f"TP {est.tensor_parallel_size}, KV {est.kv_cache_dtype}"
    )
    mark = "✗" if rep.engine_outcome == "wont_start" else "✓"
    limit = rep.engine_running_limit or e.max_running_requests
    phrase = OUTCOME_PHRASES[rep.engine_outcome or "wont_start"]
    words = phrase[0].upper() + phrase[1:]
    out.print(
        f"{mark} {words}: {min(limit, int(e.max_concurrency)):,} of {limit:,} running "
        f"requests fit at {est.max_model_len:,} tokens each",
        markup=False,
    )
    knob = f"{e.setting.replace('=', ' ')}: " if e.fraction is not None else ""
    out.print(
        f"  {knob}{fmt_bytes(max(e.available_kv_bytes, 0))} of KV = "
        f"{e.max_total_tokens:,} tokens; KV {fmt_bytes(est.kv_bytes_per_token)}/token",
        markup=False,
    )
    out.print(f"  [dim]model: {user_text(e.note)}[/]")
    command = p.commands.get(e.engine)
    if command:
        for line in wrap_command(command):
            out.print(f"  {line}", markup=False, soft_wrap=True)
        if e.engine == "trtllm":
            _command_files(p)
    out.print()
    out.print("[bold]vLLM on the same GPU, for comparison:[/]")


def _print_nodes(out: Console, commands: list[str]) -> None:
    """Each node's command under its number, the head's marked."""
    for node, command in enumerate(commands):
        out.print(f"  node {node}{' (head)' if node == 0 else ''}:", markup=False)
        for line in wrap_command(command):
            out.print(f"  {line}", markup=False, soft_wrap=True)


def _plan(p: Plan, show_grid: bool, compared: bool = False) -> None:
    out = console()
    cap, est, rec = p.vllm, p.estimate, p.recommended
    where = (
        f"{p.gpu.name} ({fmt_bytes(p.gpu.memory_bytes)})"
        if p.gpu.memory_bytes
        else f"a {fmt_bytes(cap.available_kv_bytes)} KV pool"
    )
    dp = p.cluster.data_parallel_size if p.cluster else 1
    out.print(
        f"[bold]{user_text(est.model)}[/] on {user_text(where)}, vLLM, "
        f"TP {est.tensor_parallel_size}"
        + (f", PP {est.pipeline_parallel_size}" if est.pipeline_parallel_size > 1 else "")
        + (f", DP {dp}" if dp > 1 else "")
        + (" + EP" if p.expert_parallel else "")
        + f", KV {est.kv_cache_dtype}"
        + (
            f", {p.speculative.method} k={p.speculative.num_speculative_tokens}"
            if p.speculative
            else ""
        )
    )
    verdict = outcome_words(p.outcome, p.worst_case_running, cap.max_num_seqs, cap.max_model_len)
    mark = "✗" if p.outcome == "wont_start" else "✓"
    out.print(f"{mark} {verdict[0].upper()}{verdict[1:]}", markup=False)
    if p.outcome_reason:
        out.print(f"  {_short_reason(p)}", markup=False)
    if p.layout_choice:
        out.print(f"  layout picked: {p.layout_choice}", markup=False)
    out.print(
        f"  KV: {fmt_bytes(est.kv_bytes_per_token)}/token, {fmt_bytes(est.request_bytes)}/"
        f"request; pool {max(cap.kv_cache_size_tokens, 0):,} tokens = "
        f"{cap.num_gpu_blocks:,} blocks",
        markup=False,
    )
    if p.cluster is not None and p.cluster.data_parallel_size > 1:
        c = p.cluster
        out.print(
            f"  per DP rank; the {c.gpus:,} GPUs hold {c.kv_cache_size_tokens:,} tokens "
            f"({c.data_parallel_size} pools), max_num_seqs {c.max_num_seqs:,} in all",
            markup=False,
        )
    if p.speculative is not None:
        sp = p.speculative
        out.print(
            f"  drafter ({sp.method}): {fmt_bytes(sp.draft_weights_bytes)} of weights, "
            f"{sp.draft_kv_layers} KV layer(s) = {fmt_bytes(sp.draft_kv_bytes_per_token)}/token; "
            f"{sp.num_lookahead_tokens} lookahead slot(s) per running request",
            markup=False,
        )
    memory_beyond(p)
    if p.mm is not None:
        mm_line(p)
    if rec:
        basis = {
            "workload": "from your workload",
            "worst_case": "every request fits at worst case",
            "engine_default": "no workload given",
        }[rec.basis]
        flags = f"max_model_len {rec.max_model_len:,} · max_num_seqs {rec.max_num_seqs:,}"
        if rec.gpu_memory_utilization != cap.gpu_memory_utilization:
            flags += f" · gpu_memory_utilization {rec.gpu_memory_utilization:g}"
        unchanged = (
            rec.basis == "engine_default"
            and rec.max_model_len == cap.max_model_len
            and rec.max_num_seqs == cap.max_num_seqs
        )
        out.print(f"[bold]Recommended[/] ({basis}): {'keep ' if unchanged else ''}{flags}")
        if rec.auto_fit_max_model_len:
            out.print(
                f"  longest request that fits: {rec.auto_fit_max_model_len:,} tokens "
                "(--max-model-len -1), rounded down",
                markup=False,
            )
        elif not unchanged:
            out.print(f"  {rec.reason}", markup=False)
        if rec.basis == "engine_default":
            out.print(
                "  traffic advice: -w TRACE, or --avg-prompt-tokens N --avg-output-tokens M",
                markup=False,
            )
    elif p.outcome == "wont_start":
        out.print("[bold]Recommended:[/] none on this GPU; see the error below")
        out.print("  your settings as a command (this won't start):", markup=False)
    if p.node_commands:
        _print_nodes(out, p.node_commands)
        if p.node_docker_commands:  # an AMD GPU: each node's command in vLLM's ROCm image
            out.print(
                "  or in vLLM's ROCm image on each node, with the devices ROCm needs and the "
                "host's network:",
                markup=False,
            )
            _print_nodes(out, p.node_docker_commands)
    else:
        for line in wrap_command(p.commands["vllm"]):
            out.print(f"  {line}", markup=False, soft_wrap=True)
        if "docker" in p.commands:  # an AMD GPU: the same command in vLLM's ROCm image
            out.print("  or in vLLM's ROCm image, with the devices ROCm needs:", markup=False)
            for line in wrap_command(p.commands["docker"]):
                out.print(f"  {line}", markup=False, soft_wrap=True)
    if p.advice is not None and p.advice.rejected:
        out.print(
            f"  ! {rejected_words(p.advice.rejected, p.advice.requests, cap.max_model_len)}; "
            "raise --max-model-len to serve them",
            markup=False,
        )
    if p.advice is not None:
        y = p.advice.yours
        out.print(
            f"  your max_num_seqs {y.max_num_seqs:,} on this workload: peak "
            f"{y.usage_max:.0%} of the KV blocks, {y.preemptions:,} preemptions",
            markup=False,
        )
    out.print()
    if p.gpu.memory_bytes:
        budget_lines(p)
    else:
        out.print(f"[bold]vLLM with --kv-cache-memory {fmt_bytes(cap.available_kv_bytes)}[/]")
    out.print(host_ram_line(p), markup=False)
    out.print("[bold]vLLM would log:[/]")
    for line in cap.log_lines:
        out.print(f"  {line}", markup=False)
    out.print(
        f"  ({cap.num_gpu_blocks:,} blocks of {fmt_bytes(cap.bytes_per_block)}; "
        f"{cap.blocks_per_request:,} blocks per request)"
    )
    if cap.mamba_max_num_seqs is not None:
        out.print(
            f"  Mamba layers: max_num_seqs may not exceed {cap.mamba_max_num_seqs:,} "
            "(one state block per decoding sequence)"
        )
    if p.layouts:
        _layouts(p)
    if show_grid:
        _grid(p)
    if p.alternatives or p.mm_levers:
        out.print("[bold]What changes buy[/] (requests of max_model_len at once):")
    for alt in p.alternatives:
        verdict = f"{alt.max_concurrency:.2f}x" if alt.fits else "still won't start"
        out.print(f"  {alt.change}: {verdict} ({alt.num_gpu_blocks:,} blocks)", markup=False)
    for lever in p.mm_levers:
        verdict = (
            f"{lever.max_concurrency:.2f}x, +{lever.kv_tokens_gained:,} KV tokens "
            f"({lever.kv_cache_size_tokens:,})"
            if lever.fits
            else "still won't start"
        )
        out.print(f"  {lever.change}: {verdict}", markup=False)
    if p.prefix_sharing:
        _prefix_sharing(p)
    if p.engines:
        out.print(
            f"[bold]Other engines on this GPU[/] (KV memory · tokens · requests of "
            f"{est.max_model_len:,} at once; --details: their commands):"
        )
        for e in p.engines:
            knob = f"  ({e.setting.replace('=', ' ')})" if e.fraction is not None else ""
            out.print(
                f"  {e.engine:7} {fmt_bytes(max(e.available_kv_bytes, 0))} · "
                f"{e.max_total_tokens:,} · {e.max_concurrency:.2f}{knob}",
                markup=False,
            )
    for note in p.notes:
        if note not in p.command_notes:  # those go with the commands (--details)
            print_note(out, note)
    out.print(
        "[dim]Activation, non-torch and CUDA-graph terms are estimates (`kvplan verify --gpu` "
        "measures them); weights are exact only from safetensors headers.[/]"
    )


def _layouts(p: Plan) -> None:
    """``--gpus``: every TP x PP x DP split, per GPU and for the cluster."""
    rows = p.layouts
    gpus = rows[0].tp * rows[0].dp * rows[0].pp
    _layout_table(rows, gpus, "")


def _layout_table(rows: list[Any], gpus: int, choice: str) -> None:
    """The layouts side by side: weights per GPU, the cluster's KV tokens and requests of
    max_model_len at once; the one kvplan picked (and why) or the user's marked."""
    out = console()
    print_fitted(
        out,
        f"Layouts on {gpus} GPU{'s' if gpus != 1 else ''}:",
        [
            Column("layout", [r.label for r in rows], identifier=True),
            Column("weights/GPU", [fmt_bytes(r.weights_bytes) for r in rows], right=True),
            Column(
                "cluster tokens",
                [f"{r.cluster_kv_cache_size_tokens:,}" if r.fits else "won't start" for r in rows],
                identifier=True,
                right=True,
            ),
            Column(
                "at once",
                [f"{r.cluster_max_concurrency:.2f}x" if r.fits else "—" for r in rows],
                right=True,
            ),
            Column("", ["chosen" if r.chosen else "yours" if r.yours else "" for r in rows]),
        ],
        note="--json: layouts",
    )
    if choice:
        out.print(f"  chosen: {choice}", markup=False)


def _other_commands(p: Plan) -> None:
    out = console()
    out.print("[bold]Other engines' commands:[/]")
    for name, command in p.commands.items():
        if name in ("vllm", "docker"):  # shown with the plan
            continue
        for i, line in enumerate(wrap_command(command, out.width - 10)):
            out.print(f"  {name if i == 0 else '':7} {line}", markup=False, soft_wrap=True)
    _command_files(p)
    for note in p.command_notes:
        print_note(out, note)


def _command_files(p: Plan) -> None:
    """Files a command reads (TRT-LLM's KV options), as a heredoc to paste first."""
    out = console()
    for name, text in p.command_files.items():
        out.print(f"  {name}, read by the trtllm command; write it first:", markup=False)
        out.print(f"cat > {name} <<'EOF'\n{text}EOF", soft_wrap=True, markup=False)


def _short_reason(p: Plan) -> str:
    """Why vLLM refuses, in one short line (its own wording is in "vLLM would log" and the
    JSON): one request of max_model_len does not fit, or no memory is left, or the Mamba
    blocks are fewer than max_num_seqs."""
    cap = p.vllm
    if cap.estimated_max_model_len is not None or (
        cap.available_kv_bytes > 0 and cap.error and "max seq len" in cap.error
    ):
        need = cap.bytes_per_block * cap.blocks_per_request
        left = max(cap.available_kv_bytes - cap.bytes_per_block, 0)  # less the null block
        return (
            f"one {cap.max_model_len:,}-token request needs {fmt_bytes(need)} of KV cache; "
            f"{fmt_bytes(left)} is left"
        )
    reason = p.outcome_reason or ""
    return reason.split(" Try increasing")[0]


def _prefix_sharing(p: Plan) -> None:
    """What prefix caching buys, as requests running at once."""
    ps, cap = p.prefix_sharing, p.vllm
    assert ps is not None
    out = console()
    out.print(
        f"Prefix sharing: {ps.requests:,} requests × a shared "
        f"{ps.shared_prefix_tokens:,}-token prefix save {ps.blocks_saved:,} blocks "
        f"({fmt_bytes(ps.bytes_saved)})",
        markup=False,
    )
    if ps.running_without and ps.running_with != ps.running_without:
        out.print(
            f"  with it {ps.running_with:,} requests of {cap.max_model_len:,} tokens run at "
            f"once instead of {ps.running_without:,}",
            markup=False,
        )


def _tradeoffs(p: Plan) -> None:
    out = console()
    nv = p.naive_vs_paged
    out.print(
        f"Naive contiguous cache for {nv.sequences} sequences: {fmt_bytes(nv.naive_bytes)}; "
        f"paged at {nv.avg_tokens:,} tokens each: {fmt_bytes(nv.paged_bytes)} "
        f"({nv.waste_pct:.0f}% of the naive cache would be empty)"
    )
    out.print(f"Block size trade-off (at {nv.avg_tokens:,} tokens/request):")
    for b in p.block_sizes:
        # a size no attention backend takes (planner.kv_layout.refused_block_size)
        refused = refused_block_size(Engine.VLLM, b.block_size)
        out.print(
            f"  block {b.block_size}: {b.fragmentation_pct:.2f}% waste, "
            f"{b.block_table_entries:,} table entries"
            + (" (refused: not a multiple of 16)" if refused else "")
        )


def _grid(p: Plan) -> None:
    from rich.table import Table

    seqs = sorted({c.max_num_seqs for c in p.grid})
    table = Table(
        title="max_model_len × max_num_seqs: requests of max_model_len running at once, and KV "
        "usage if all ran (✗ = won't start)",
        title_justify="left",
    )
    table.add_column("max_model_len", justify="right")
    for s in seqs:
        table.add_column(f"{s} seqs", justify="right")
    for length in sorted({c.max_model_len for c in p.grid}):
        row = [f"{length:,}"]
        for s in seqs:
            cell = next(c for c in p.grid if c.max_model_len == length and c.max_num_seqs == s)
            usage = f"{cell.kv_usage:.0%}" if cell.kv_usage != float("inf") else "—"
            row.append(
                f"{cell.worst_case_running:,} · {usage}" if cell.outcome != "wont_start" else "✗"
            )
        table.add_row(*row)
    console().print(table)
