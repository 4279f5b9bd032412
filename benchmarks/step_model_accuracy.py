"""How far kvplan simulate's clock is from published vLLM serving benchmarks.

    python benchmarks/step_model_accuracy.py

Replays every case of ``tests/data/vllm_serving_benchmarks.json`` (each cites its source)
with the step-time model's default terms (``planner/simulate/clock.py``) and with the bare
roofline it replaced (every term neutral: datasheet bandwidth and BF16 FLOP/s, no overhead,
no small-kernel time, no API-server latency), and prints predicted / published per figure,
fitted and held-out cases apart, then for each figure the share of held-out cases within the
error the output states (``EXPECTED_ERROR``).

Measured (this branch): 26 cases, 5 fitted and 21 held out (20 publish output tok/s and
TTFT, 21 TPOT); held out, predicted / published, before -> after the API server's per-token
term (api_token_s, 77.8 us: tests/data/api_server_throughput.json, none of these cases):

    figure        within issue 24's goal (+-20 / +-20 / +-35 %)   median ratio   median |error|
    output tok/s  17/20 -> 18/20                                  1.01 -> 1.01    5 % -> 5 %
    TPOT          16/21 -> 17/21                                  1.01 -> 1.01    8 % -> 8 %
    TTFT          15/20 -> 16/20                                  0.85 -> 0.86   15 % -> 14 %

(the bare roofline: 1.55-5.77, 0.36-1.81 and 0.06-0.66 of the published figures; before
Hopper's compute efficiency, 12/20, 12/21 and 14/20). It moves one case: Qwen3-0.6B, 500 x
512/128 sent at once to an H100, 1.39 / 4.13 / 0.24 -> 0.97 / 0.83 / 0.86. Fitted cases:
output tok/s 0.94-1.09, TPOT 0.90-1.09, TTFT 0.94-1.15 but 0.49 for Qwen3-8B on the chat
endpoint at concurrency 1 (its ``not_fitted``).

The misses: 1,000 prompts of 128 tokens with 4 out at once (Qwen3-14B; not the API server:
gpt-oss-20b took as many in 4.70 s with the same client); TPOT at TP 8 (Qwen3-235B-A22B on 8
H100s, 0.74-0.80: the published runs held ~25 % more requests at once than the replay's pool);
the chat endpoint's TTFT at low load; ShareGPT's own lengths (docs/simulate-clock.md).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.simulate.clock import EXPECTED_ERROR  # noqa: E402
from tests.sim_clock_cases import cases, ratios, replay  # noqa: E402

BARE = {
    "memory_efficiency": 1.0,
    "compute_efficiency": 1.0,
    "layer_floor_s": 0.0,
    "overhead_s": 0.0,
    "seq_overhead_s": 0.0,
    "request_latency_s": 0.0,
    "stream_latency_s": 0.0,
    "api_token_s": 0.0,
}
FIGURES = ("output_throughput", "tpot", "ttft")
# issue 24: output tok/s and TPOT within +-20 %, TTFT within +-35 %, on >= 80 % of held-out cases
GOAL = {"output_throughput": 0.20, "tpot": 0.20, "ttft": 0.35}


def main() -> None:
    held: dict[str, list[float]] = {f: [] for f in FIGURES}
    for split in ("fitted", "held-out"):
        print(f"\n{split} cases: predicted / published, bare roofline -> step-time model")
        print(f"{'case':<42} " + "  ".join(f"{f:>22}" for f in FIGURES))
        for case in (c for c in cases() if c["split"] == split):
            before, after = ratios(case, replay(case, BARE)), ratios(case, replay(case))
            cells = []
            for f in FIGURES:
                if f in after:
                    cells.append(f"{before[f]:>9.2f} -> {after[f]:<9.2f}")
                    if split == "held-out":
                        held[f].append(after[f])
                else:
                    cells.append(f"{'-':>22}")
            print(f"{case['id']:<42} " + "  ".join(cells))
    print("\nheld-out: within the stated error (EXPECTED_ERROR), within issue 24's goal, median")
    for f in FIGURES:
        values, bound, goal = held[f], EXPECTED_ERROR[f], GOAL[f]
        within = sum(abs(v - 1) <= bound for v in values)
        at_goal = sum(abs(v - 1) <= goal for v in values)
        print(
            f"  {f:<18} +-{bound:.0%}: {within}/{len(values)} cases   +-{goal:.0%}: "
            f"{at_goal}/{len(values)}   median {statistics.median(values):.2f}"
        )


if __name__ == "__main__":
    main()
