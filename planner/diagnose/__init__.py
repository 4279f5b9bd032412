"""Read a vLLM boot log, compare it with the plan term by term, and say what to change.

``kvplan diagnose vllm.log --model llama-3.1-8b --gpu h100`` parses the startup lines of both
engines (V0: ``# GPU blocks: N``; V1: ``Model loading took``, ``Available KV cache memory``,
``GPU KV cache size``, ``Maximum concurrency``, the memory-profiling breakdown, CUDA-graph
capture, the "estimated maximum model length" error) and the runtime lines (``GPU KV cache
usage``, preemption warnings, prefix-cache hit rates, CUDA OOM). Settings the log states (model,
max_seq_len, TP, gpu_memory_utilization, GPU total) fill in what the command line leaves out.

Every memory figure a log prints is GiB rounded to 0.01 (``format_gib``), so a logged value is
exact only to +-0.005 GiB; comparisons allow for that.

The stages, one module each: :mod:`~planner.diagnose.boot_log` parses the log (:func:`parse_log`,
its :data:`RULES`), :mod:`~planner.diagnose.settings` layers the plan's settings (the flags over
the log over vLLM's defaults), :mod:`~planner.diagnose.diagnosis` plans and compares them
(:func:`diagnose_file`, :class:`Diagnosis`), :mod:`~planner.diagnose.findings` draws the
conclusions (:class:`Finding`), and :mod:`~planner.diagnose.ranks` reads a data-parallel log
(one engine per DP rank, each line prefixed ``(EngineCore_DP1 pid=...)``) rank by rank and as
one cluster.
"""

from planner.diagnose.boot_log import PREFILTER, RULES, parse_log
from planner.diagnose.diagnosis import (
    MAX_LOG_BYTES,
    Diagnosis,
    LogFileError,
    NothingRecognisedError,
    Term,
    diagnose_file,
)
from planner.diagnose.findings import (
    LOG_ROUNDING_BYTES,
    LOW_PCT,
    MIN_SAMPLES,
    PINNED_PCT,
    Finding,
)
from planner.diagnose.log_figures import BootLog
from planner.units import GIB, MIB

__all__ = [
    "GIB",
    "LOG_ROUNDING_BYTES",
    "LOW_PCT",
    "MAX_LOG_BYTES",
    "MIB",
    "MIN_SAMPLES",
    "PINNED_PCT",
    "RULES",
    "BootLog",
    "Diagnosis",
    "Finding",
    "LogFileError",
    "NothingRecognisedError",
    "Term",
    "PREFILTER",
    "diagnose_file",
    "parse_log",
]
