"""What ``kvplan check`` reports: each check of a deployment (:class:`Check`), its figures and
replayed traffic, one result per deployment and the report over a plans file
(:class:`CheckReport`), the shape of its JSON, JUnit and Markdown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.check.plans import (
    Problem,
)
from planner.plan_types import FITS_AT_WORST_CASE, QUEUES_AT_WORST_CASE, WONT_START

if TYPE_CHECKING:
    from planner.simulate.engine import SimResult
    from planner.simulate.workload import Workload


@dataclass(frozen=True)
class Check:
    """One requirement of a deployment: ``actual`` against ``required``.

    Attributes:
        name: what is checked: ``max_model_len`` (one request of that length fits; every
            plannable deployment has it), ``weights`` (the only check when the weights alone
            exceed the engine's budget), ``max_num_seqs`` (a vLLM hybrid: each running
            sequence holds a Mamba state block), a rule ``kvplan estimate`` refuses by
            (unit ``rule``, required 1, actual 0: ``node``, ``divisibility``;
            ``kv_cache_memory`` in bytes: the pool, weights and non-torch memory against the
            GPU's total), or a requirement of the plans file: ``min_concurrency``,
            ``min_kv_tokens``, ``max_kv_usage``, and the workload's ``max_preemptions``,
            ``max_kv_usage_p90``, ``max_ttft_p90_s``, ``min_output_tokens_per_s``.
        resource: the same in words, e.g. ``KV memory for one max_model_len request``.
        unit: how to show the numbers: ``bytes``, ``x`` (requests), ``tokens``, ``ratio``,
            ``seqs``, ``preemptions``, ``s``, ``tokens/s`` or ``rule`` (no numbers).
        required: the bound: the plans file's, or what one ``max_model_len`` request needs.
        actual: what the deployment gets.
        passed: ``actual >= required``; ``actual <= required`` for ``weights``,
            ``max_num_seqs`` and the ``max_`` requirements.
        margin: relative room: +0.25 means 25 % to spare, negative means failed by that much
            (``actual / required - 1``, or ``required / actual - 1`` for an upper bound).
            Qwen2.5-7B on an RTX 4090 with 8 x 32,768-token requests uses 2.5409 of its KV
            blocks against a ``max_kv_usage`` of 0.9: 0.9 / 2.5409 - 1 = -0.6458.
    """

    name: str
    resource: str
    unit: str
    required: float
    actual: float
    passed: bool
    margin: float


@dataclass(frozen=True)
class Figures:
    """The capacity figures a deployment was judged on, per GPU rank.

    Attributes:
        source: whose formulas: ``vllm``, ``sglang`` or ``trtllm``.
        weights_bytes: the weights one rank holds.
        available_kv_bytes: the engine's KV pool on one rank.
        kv_cache_size_tokens: the pool in tokens (vLLM's "GPU KV cache size").
        max_concurrency: requests of ``max_model_len`` tokens the pool holds at once.
        num_gpu_blocks: vLLM's KV blocks (None for the other engines).
        blocks_per_request: blocks one ``max_model_len`` request takes (vLLM only).
        kv_usage: what ``max_num_seqs`` full-length requests take of the pool: with vLLM
            ``max_num_seqs x blocks_per_request / (num_gpu_blocks - 1)`` (the null block is
            never handed out), else ``max_num_seqs / max_concurrency``; None when an engine
            other than vLLM is given no ``max_num_seqs``.
        setting: the engine knob that set the budget, e.g. ``gpu_memory_utilization=0.92``
            or ``mem_fraction_static=0.8``.

    Qwen2.5-7B on an RTX 4090 (vLLM, 32,768 tokens, 8 sequences): 6,449 blocks of 16 tokens
    are 103,184 tokens; a request takes 2,048 blocks, so 103,184 / 32,768 = 3.1489 requests
    fit at once, and 8 x 2,048 / 6,448 = 2.5409 is the KV usage.
    """

    source: str
    weights_bytes: int
    available_kv_bytes: int
    kv_cache_size_tokens: int
    max_concurrency: float
    num_gpu_blocks: int | None
    blocks_per_request: int | None
    kv_usage: float | None
    setting: str


@dataclass(frozen=True)
class Simulated:
    """What replaying the entry's workload on its deployment measured
    (:func:`planner.simulate.compare.simulate_model`; ``kvplan simulate -w`` with the same
    settings prints the same figures).

    Attributes:
        workload: the workload's file, joined to the plans file's folder.
        requests: requests replayed, rejected ones included.
        completed: requests that finished.
        rejected_too_long: requests longer than ``max_model_len`` (vLLM's API server rejects
            them; they are never scheduled).
        preemptions: preemption events.
        usage_p90, usage_max: KV usage of the usable blocks: 90 % of the time at most
            ``usage_p90``; the peak.
        max_running: most requests running in one step.
        ttft_p90_s, tpot_p90_s: 90th percentiles of time to first token and time per output
            token (roofline times, not measurements).
        output_tokens_per_s: output tokens over the replay's duration.
        duration_s: simulated seconds from the first arrival to the last finish.

    The JSON rounds the floats to 4 places. A pool too small for the traffic must preempt: two
    requests arriving together whose prompts fit the usable blocks together but whose full
    lengths (prompt + output) do not both start decoding and run out of blocks, so
    ``preemptions`` is at least 1; a pool that holds both at full length never preempts
    (``tests/test_check_workload.py``).
    """

    workload: str
    requests: int
    completed: int
    rejected_too_long: int
    preemptions: int
    usage_p90: float
    usage_max: float
    max_running: int
    ttft_p90_s: float
    tpot_p90_s: float
    output_tokens_per_s: float
    duration_s: float

    @classmethod
    def of(cls, workload: Workload, r: SimResult) -> Simulated:
        return cls(
            workload=workload.source,
            requests=r.requests,
            completed=r.completed,
            rejected_too_long=r.rejected_too_long,
            preemptions=r.preemptions,
            usage_p90=r.usage_p90,
            usage_max=r.usage_max,
            max_running=r.max_concurrency,
            ttft_p90_s=r.ttft_s.p90,
            tpot_p90_s=r.tpot_s.p90,
            output_tokens_per_s=r.output_tokens_per_s,
            duration_s=r.duration_s,
        )


@dataclass(frozen=True)
class DeploymentResult:
    """The verdict on one deployment: pass, fail (a requirement is not met) or error (it could
    not be planned: unknown model, invalid TP for the model ...).

    Attributes:
        name: the entry's ``name``.
        line: the line of the entry's first key.
        status: ``pass``, ``fail`` or ``error``.
        outcome: what vLLM does with the settings (SGLang / TRT-LLM: what their budgets
            say), the words of ``kvplan estimate``: ``wont_start`` (weights, one
            ``max_model_len`` request, or a hybrid's Mamba blocks < ``max_num_seqs``),
            ``queues_at_worst_case`` (with every request ``max_model_len`` tokens long, fewer
            than ``max_num_seqs`` run at once; the rest wait or are preempted) or
            ``fits_at_worst_case``; None on an error. Qwen2.5-7B on 24 GiB at gmu 0.9,
            8,192 x 32: 6,274 usable blocks // 512 per request = 12 of 32, so it queues.
        worst_case_running: how many ``max_model_len`` requests run at once, capped by
            ``max_num_seqs`` (SGLang / TRT-LLM without one: by the engine's own running
            limit); 0 when it won't start; None on an error.
        outcome_reason: why it won't start, in vLLM's words where vLLM has them; else None.
        model: the model as loaded (``Qwen/Qwen2.5-7B-Instruct`` for ``qwen2.5-7b``); on an
            error, the entry's model argument.
        engine: ``vllm``, ``sglang`` or ``trtllm``.
        gpu: the GPU's name; ``custom`` for a bare ``gpu_memory``.
        gpu_memory_bytes: the GPU's total memory, which the budget starts from.
        settings: the settings judged, as the engine resolves them: ``tp``, ``pp``,
            ``max_model_len``, ``max_num_seqs``, ``gpu_memory_utilization`` (the fraction in
            effect, e.g. vLLM's 0.92 when not given), ``kv_cache_dtype`` (``auto`` resolved,
            e.g. ``bf16``), then ``max_num_batched_tokens`` (vLLM) and ``block_size``. On an
            error, what the entry gave (None: the engine's default).
        checks: ``max_model_len`` first, then the requirements; only ``weights`` when the
            weights do not fit.
        limiting: the check with the smallest margin (None without checks).
        margin: that check's margin, rounded to 4 places.
        figures: the capacity figures (None on an error, or when the weights do not fit).
        fix: what to change, in plans-file keys, alternatives joined by ``; or `` (``, or ``
            when the weights do not fit): ``kv_cache_dtype: fp8 (6.30x, 206,438 tokens) with
            max_num_seqs: 5; or tp: 2 (13.92x, 456,130 tokens)``. None on a pass.
        error: why it could not be planned (status ``error`` only).
        caveats: what a fix needs said beside it: :func:`planner.deployment.fp8_kv_caveat`
            for the GPU when a fix suggests fp8 KV; else empty.
        simulated: the workload replay's figures (None without a workload, or when vLLM
            won't start).
    """

    name: str
    line: int
    status: str
    outcome: str | None
    worst_case_running: int | None
    outcome_reason: str | None
    model: str
    engine: str
    gpu: str
    gpu_memory_bytes: int
    settings: dict[str, Any]
    checks: list[Check]
    limiting: str | None
    margin: float | None
    figures: Figures | None
    fix: str | None
    error: str | None = None
    caveats: list[str] = field(default_factory=list)
    simulated: Simulated | None = None


@dataclass(frozen=True)
class CheckReport:
    """``kvplan check``: every deployment's verdict plus the file's problems.

    Attributes:
        file: the plans file as it was named.
        results: one :class:`DeploymentResult` per valid entry, in file order.
        problems: the file's validation errors; an entry with any is not checked.

    ``examples/plans.yaml`` has one deployment that passes and one that does not; both
    start, the failing one queues at worst case: counts ``{"deployments": 2, "passed": 1,
    "failed": 1, "errors": 0, "invalid": 0, "wont_start": 0, "queues_at_worst_case": 1,
    "fits_at_worst_case": 1}``, exit code 1.
    """

    file: str
    results: list[DeploymentResult]
    problems: list[Problem] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """2 when the file has problems, else 1 when any deployment failed or could not be
        planned, else 0."""
        if self.problems:
            return 2
        return 0 if all(r.status == "pass" for r in self.results) else 1

    @property
    def counts(self) -> dict[str, int]:
        """Deployments (valid entries and invalid ones), passed, failed, errors, invalid, then
        the checked ones by outcome (the entries in error have none)."""
        statuses = [r.status for r in self.results]
        outcomes = [r.outcome for r in self.results]
        invalid = len({p.index for p in self.problems if p.index is not None})
        return {
            "deployments": len(self.results) + invalid,
            "passed": statuses.count("pass"),
            "failed": statuses.count("fail"),
            "errors": statuses.count("error"),
            "invalid": invalid,
            WONT_START: outcomes.count(WONT_START),
            QUEUES_AT_WORST_CASE: outcomes.count(QUEUES_AT_WORST_CASE),
            FITS_AT_WORST_CASE: outcomes.count(FITS_AT_WORST_CASE),
        }
