"""The optional compiled engine (``python tools/build_fast.py``) prints what pure Python prints.

Skipped where it is not built (CI, a plain install) or built from an older source (kvplan then
imports the source). Each side runs in its own process, one with ``KVPLAN_PURE_PYTHON=1``:
the simulate goldens' commands (every engine path the goldens cover: prefix caching, window
groups, Mamba state, the CPU tier, data parallelism, a MoE model's step times) and a few
more below (preemptions, synchronous scheduling, a closed loop, speculative lookahead, a
large generated workload), compared byte for byte. And the bound the compiled loop's one-word
event keys put on admissions (checked in pure Python, where the bound can be patched).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.simulate import Request, Workload, fast, simulate

ROOT = Path(__file__).resolve().parents[1]
MORE = [
    # a pool of 2,000 blocks for requests of ~2,000 tokens: preemptions and recomputation
    ["simulate", "llama-3.1-8b", "--gpu", "l4", "--num-gpu-blocks", "2000",
     "--avg-prompt-tokens", "2000", "--avg-output-tokens", "400", "--request-rate", "20",
     "--num-requests", "300"],
    # synchronous scheduling (before 0.14), a closed loop of 16
    ["simulate", "qwen2.5-7b", "--gpu", "h100", "--vllm-version", "0.10.0",
     "--avg-prompt-tokens", "735", "--avg-output-tokens", "200", "--max-concurrency", "16",
     "--num-requests", "400"],
    # speculative decoding's lookahead slots, a shared prefix
    ["simulate", "llama-3.1-8b", "--gpu", "h100", "--speculative-config",
     '{"method":"eagle","model":"eagle-llama3-instruct-8b","num_speculative_tokens":3}',
     "--shared-prefix", "512",
     "--avg-prompt-tokens", "1000", "--avg-output-tokens", "300", "--num-requests", "300"],
    # issue 24's shape, enough requests for the long-array paths (percentiles in runs)
    ["simulate", "qwen2.5-7b", "--gpu", "h100", "--avg-prompt-tokens", "735",
     "--avg-output-tokens", "200", "--request-rate", "20", "--num-requests", "70000"],
]  # fmt: skip

SCRIPT = """
import json, sys
from tests.golden_cases import CASES
from tests.test_golden import run_case
from planner.simulate import fast
import planner.simulate.engine
more = json.loads(sys.argv[1])
cases = [(argv, code) for stem, argv, code in CASES if stem.startswith("simulate-")]
outs = [run_case(argv, code) for argv, code in cases + [(argv, 0) for argv in more]]
print(json.dumps({"compiled": fast.compiled_modules(), "outs": outs}))
"""


def replay(pure: bool) -> dict[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != fast.PURE_ENV}
    if pure:
        env[fast.PURE_ENV] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(MORE)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, list[str]] = json.loads(proc.stdout)
    return out


@pytest.mark.skipif(
    not all(fast.fresh(m) for m in fast.COMPILED),
    reason="the compiled engine is not built from these sources (python tools/build_fast.py)",
)
def test_compiled_engine_prints_what_pure_python_prints() -> None:
    compiled, pure = replay(pure=False), replay(pure=True)
    assert compiled["compiled"] == list(fast.COMPILED)  # it did run compiled
    assert pure["compiled"] == []
    assert len(compiled["outs"]) == len(pure["outs"]) == 7 + len(MORE)
    for a, b in zip(compiled["outs"], pure["outs"], strict=True):
        assert a == b
        assert '"steps"' in a  # a replay's report, not an error


def test_more_admissions_than_an_event_holds_stop_the_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An event is step << 32 | seq << 2 | kind: an admission number past SEQ_MASK would spill
    # into the step's bits, so the replay stops instead. With the mask at 3, five requests run
    # one at a time (max_num_seqs 1) take admission numbers 0..4: the fifth stops it.
    from planner.simulate import engine
    from tests.helpers import sim_config

    if "planner.simulate.engine" in fast.compiled_modules():
        pytest.skip("compiled, SEQ_MASK is a constant (Final) in the code")
    w = Workload(name="t", source="t", requests=tuple(Request(10, 2) for _ in range(5)))
    config = sim_config(100, max_num_seqs=1)
    assert simulate(w, config).completed == 5  # at the real mask
    monkeypatch.setattr(engine, "SEQ_MASK", 3)
    with pytest.raises(AssertionError, match=r"more than 2\*\*30 admissions"):
        simulate(w, config)
    four = Workload(name="t", source="t", requests=w.requests[:4])  # 0..3 fit
    assert simulate(four, config).completed == 4
