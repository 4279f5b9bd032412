"""Golden ``--json`` outputs: every command on representative models (dense, sliding window,
MLA, hybrid Mamba, hybrid linear attention, MoE), recorded before the Deployment redesign.

Each case is (file stem, argv, exit code); ``--json`` is added where missing.
``tools/refresh_golden.py`` writes ``tests/golden/<stem>.json``; ``tests/test_golden.py``
checks that the output is unchanged.
A change to a golden file is a deliberate fix, explained in the commit that makes it.
Paths are relative to the repository root (the tests run from there).
"""

from __future__ import annotations

CHAT = "examples/workloads/chat.yaml"
LOGS = "tests/fixtures/logs"

CASES: list[tuple[str, list[str], int]] = [
    # estimate: no GPU (the common-GPU table), a GPU, a custom memory size, a fixed KV pool
    ("estimate-llama-3.1-8b", ["estimate", "llama-3.1-8b"], 0),
    ("estimate-llama-3.1-8b-a100", ["estimate", "llama-3.1-8b", "--gpu", "a100-80gb"], 0),
    ("estimate-llama-3.1-8b-l4", ["estimate", "llama-3.1-8b", "--gpu", "l4"], 1),
    (
        "estimate-llama-3.1-8b-l4-autofit",
        ["estimate", "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "-1"],
        0,
    ),
    (
        "estimate-qwen2.5-7b-24gib-grid",
        [
            "estimate",
            "qwen2.5-7b-instruct",
            "--gpu-memory",
            "24GiB",
            "--grid",
            "--gpu-memory-utilization",
            "0.9",
            "--max-num-seqs",
            "32",
            "--max-model-len",
            "8192",
        ],
        0,
    ),
    (
        "estimate-qwen2.5-7b-24gib-chat",
        [
            "estimate",
            "qwen2.5-7b-instruct",
            "--gpu-memory",
            "24GiB",
            "--gpu-memory-utilization",
            "0.9",
            "--max-num-seqs",
            "32",
            "--max-model-len",
            "8192",
            "-w",
            CHAT,
        ],
        0,
    ),
    (
        "estimate-qwen2.5-7b-h100-trtllm-fp8",
        [
            "estimate",
            "qwen2.5-7b-instruct",
            "--gpu",
            "h100",
            "--engine",
            "trtllm",
            "--kv-cache-dtype",
            "fp8",
            "--max-model-len",
            "8192",
        ],
        0,
    ),
    (
        "estimate-qwen3-14b-kvmem",
        ["estimate", "qwen3-14b", "--kv-cache-memory", "6.51GiB", "--max-model-len", "32768"],
        0,
    ),
    (
        "estimate-gemma-2-9b-l40s",
        ["estimate", "gemma-2-9b-it", "--gpu", "l40s", "--shared-prefix", "800"],
        0,
    ),
    (
        "estimate-deepseek-v2-lite-h100-fp8",
        ["estimate", "deepseek-v2-lite", "--gpu", "h100", "--kv-cache-dtype", "fp8"],
        0,
    ),
    (
        "estimate-nemotron-h-56b-h200",
        ["estimate", "nemotron-h-56b-base-8k", "--gpu", "h200", "--tp", "2"],
        1,
    ),
    (
        "estimate-qwen3-next-h200-tp2",
        [
            "estimate",
            "qwen3-next-80b-a3b-thinking",
            "--gpu",
            "h200",
            "--tp",
            "2",
            "--max-model-len",
            "32768",
        ],
        0,
    ),
    (
        "estimate-qwen3-next-h200-weights",
        ["estimate", "qwen3-next-80b-a3b-thinking", "--gpu", "h200", "--json"],
        1,
    ),
    (
        "estimate-qwen3-30b-a3b-h100-tp2",
        ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "2", "--enforce-eager"],
        0,
    ),
    ("estimate-gpt-oss-20b-sglang", ["estimate", "gpt-oss-20b", "--engine", "sglang"], 0),
    # the features of the DP/EP, speculative, LoRA, offload and multimodal round, recorded
    # before the settings registry moved them (issue 21, item 7)
    (
        "estimate-llama-3.1-8b-l4-lora",
        [
            "estimate",
            "llama-3.1-8b",
            "--gpu",
            "l4",
            "--max-model-len",
            "8192",
            "--enable-lora",
            "--max-loras",
            "4",
            "--max-lora-rank",
            "64",
        ],
        0,
    ),
    (
        "estimate-qwen2.5-vl-7b-h100-mm",
        [
            "estimate",
            "qwen2.5-vl-7b-instruct",
            "--gpu",
            "h100",
            "--limit-mm-per-prompt",
            '{"image":2,"video":0}',
        ],
        0,
    ),
    (
        "estimate-qwen3-30b-a3b-h100-dp-ep-deepep",
        [
            "estimate",
            "qwen3-30b-a3b",
            "--gpu",
            "h100",
            "--tp",
            "2",
            "--dp",
            "2",
            "--enable-expert-parallel",
            "--all2all-backend",
            "deepep_high_throughput",
            "--max-model-len",
            "32768",
        ],
        0,
    ),
    (
        "estimate-llama-3.1-8b-h100-eagle",
        [
            "estimate",
            "llama-3.1-8b",
            "--gpu",
            "h100",
            "--speculative-config",
            '{"method":"eagle","model":"eagle-llama3-instruct-8b","num_speculative_tokens":3}',
        ],
        0,
    ),
    (
        "estimate-llama-3.1-8b-h100-cpu-tier",
        ["estimate", "llama-3.1-8b", "--gpu", "h100", "--kv-offloading-size", "64"],
        0,
    ),
    (
        "estimate-deepseek-v3-h200-2-nodes",
        [
            "estimate",
            "deepseek-v3",
            "--gpu",
            "h200",
            "--tp",
            "8",
            "--dp",
            "2",
            "--enable-expert-parallel",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
        ],
        0,
    ),
    # simulate: a GPU-sized pool, an explicit pool, a comparison
    (
        "simulate-llama-3.1-8b-a100",
        ["simulate", "llama-3.1-8b", "-w", CHAT, "--gpu", "a100-80gb", "--num-requests", "200"],
        0,
    ),
    (
        "simulate-llama-3.1-8b-kvmem",
        [
            "simulate",
            "llama-3.1-8b",
            "-w",
            CHAT,
            "--kv-cache-memory",
            "20GiB",
            "--num-requests",
            "200",
        ],
        0,
    ),
    (
        "simulate-gemma-2-9b-l40s-blocks",
        [
            "simulate",
            "gemma-2-9b-it",
            "-w",
            CHAT,
            "--gpu",
            "l40s",
            "--block-size",
            "16,32",
            "--num-requests",
            "200",
        ],
        0,
    ),
    (
        "simulate-qwen3-next-h200-tp2",
        [
            "simulate",
            "qwen3-next-80b-a3b-thinking",
            "-w",
            CHAT,
            "--gpu",
            "h200",
            "--tp",
            "2",
            "--max-model-len",
            "32768",
            "--num-requests",
            "200",
        ],
        0,
    ),
    (
        "simulate-deepseek-v2-lite-h100-fp8",
        [
            "simulate",
            "deepseek-v2-lite",
            "-w",
            CHAT,
            "--gpu",
            "h100",
            "--kv-cache-dtype",
            "auto,fp8",
            "--num-requests",
            "200",
        ],
        0,
    ),
    (
        "simulate-llama-3.1-8b-h100-lora-cpu-tier",
        [
            "simulate",
            "llama-3.1-8b",
            "-w",
            CHAT,
            "--gpu",
            "h100",
            "--enable-lora",
            "--max-loras",
            "2",
            "--kv-offloading-size",
            "32",
            "--num-requests",
            "200",
        ],
        0,
    ),
    (
        "simulate-qwen3-30b-a3b-h100-dp2-ep",
        [
            "simulate",
            "qwen3-30b-a3b",
            "-w",
            CHAT,
            "--gpu",
            "h100",
            "--dp",
            "2",
            "--enable-expert-parallel",
            "--max-model-len",
            "32768",
            "--num-requests",
            "200",
        ],
        0,
    ),
    # check: the example plans and one file over the six kinds of model
    ("check-examples", ["check", "examples/plans.yaml", "--format", "json"], 1),
    ("check-models", ["check", "tests/golden/plans.yaml", "--format", "json"], 1),
    (
        "check-features",
        ["check", "tests/golden/plans-features.yaml", "--format", "json"],
        0,
    ),
    # a DP 3 x TP 2 + EP log that also states all2all_backend (DeepEP): the fixture is the
    # dp3-ep log with that arg added and its available KV 1 GiB lower
    (
        "diagnose-dp3-ep-deepep",
        ["diagnose", f"{LOGS}/vllm-v1-dp3-ep-deepep-qwen3-30b-a3b.log", "--gpu", "h100", "--json"],
        0,
    ),
    # diagnose: every fixture log
    (
        "diagnose-llama8b-h100",
        ["diagnose", f"{LOGS}/vllm-v1-llama8b-h100.log", "--json"],
        0,
    ),
    (
        "diagnose-llama8b-3090-maxlen",
        ["diagnose", f"{LOGS}/vllm-v1-llama8b-3090-maxlen.log", "--json"],
        1,  # the log shows vLLM refusing to start: won't start exits 1, as estimate does
    ),
    (
        "diagnose-oom-fragmented",
        ["diagnose", f"{LOGS}/vllm-v1-oom-fragmented.log", "--json"],
        0,
    ),
    (
        "diagnose-v0-qwen7b-a100",
        ["diagnose", f"{LOGS}/vllm-v0-qwen7b-a100.log", "--json"],
        0,
    ),
    (
        "diagnose-llama8b-a100-override",
        ["diagnose", f"{LOGS}/vllm-v1-llama8b-h100.log", "--gpu", "a100-80gb", "--json"],
        0,
    ),
    # models and gpus: the catalogs
    ("models", ["models", "--json"], 0),
    ("gpus", ["gpus", "--json"], 0),
]

# verify needs torch; its CPU run is deterministic under a fixed budget.
VERIFY_CASES: list[tuple[str, list[str], int]] = [
    (
        "verify-qwen3-0.6b-cpu",
        [
            "verify",
            "qwen3-0.6b",
            "--device",
            "cpu",
            "--memory-budget",
            "3GiB",
            "--max-model-len",
            "4096",
            "--json",
        ],
        0,
    ),
]
