"""``kvplan simulate --step-times``: a measured table times the steps instead of the roofline.

Every table here is rows (1 token, 10 ms), (101 tokens, 20 ms): a step of t tokens takes
10 ms + 0.1 ms x (t - 1), by interpolation up to 101 tokens and extrapolation past it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputFileError
from planner.simulate import Roofline, SimConfig, simulate
from planner.simulate.steptimes import StepTable, load_step_times, parse_step_times
from planner.simulate.workload import Request, Workload
from tests.helpers import sim_config

TABLE = StepTable((1, 101), (0.010, 0.020), source="t.csv")
CSV = "tokens,seconds\n1,0.010\n101,0.020\n"


def test_interpolation_and_extrapolation_by_hand() -> None:
    assert TABLE.at(1) == pytest.approx(0.010)
    assert TABLE.at(51) == pytest.approx(0.015)  # halfway
    assert TABLE.at(64) == pytest.approx(0.0163)  # 10 + 0.1 x 63 ms
    assert TABLE.at(201) == pytest.approx(0.030)  # 100 past the last row at 0.1 ms a token
    assert TABLE.step_s(51, kv_tokens=10**6, pairs=10**9) == pytest.approx(0.015)
    assert TABLE.decode_s(11, kv_tokens=500, steps=4) == pytest.approx(4 * 0.011)
    # below the first row: the first row's time; one row: that time everywhere
    assert StepTable((8, 16), (0.5, 0.7)).at(1) == 0.5
    assert StepTable((8,), (0.5,)).at(1000) == 0.5
    # a falling last segment is extrapolated flat, never below the last row
    assert StepTable((1, 2, 3), (1.0, 3.0, 2.0)).at(10) == 2.0


def test_ttft_and_tpot_come_from_the_table_by_hand() -> None:
    # Two requests at t = 0, 40 prompt / 3 output tokens, 16-token blocks, 64 tokens a step:
    # step 0: R0 prefills 40, R1 24 -> 64 tokens, 16.3 ms; R0's first token at 16.3 ms
    # step 1: R0 decodes 1, R1 prefills its last 16 -> 17 tokens, 11.6 ms; R1's first at 27.9
    # step 2: both decode -> 2 tokens, 10.1 ms (38.0 ms); R0 has its 3 tokens and finishes
    # step 3: R1 decodes alone -> 1 token, 10.0 ms; R1 finishes at 48.0 ms
    w = Workload(name="t", source="t", requests=(Request(40, 3), Request(40, 3)))
    config = sim_config(20, null_block=False, max_num_seqs=8, max_model_len=300, roofline=TABLE)
    r = simulate(w, config)
    assert r.steps == 4 and list(r.finish_steps) == [2, 3]
    assert r.duration_s == pytest.approx(0.048)
    assert r.ttft_s.p50 == pytest.approx(0.0163) and r.ttft_s.max == pytest.approx(0.0279)
    # TPOT: R0 (38.0 - 16.3) / 2 = 10.85 ms, R1 (48.0 - 27.9) / 2 = 10.05 ms
    assert r.tpot_s.p50 == pytest.approx(0.01005) and r.tpot_s.max == pytest.approx(0.01085)
    assert r.e2e_s.max == pytest.approx(0.048)
    assert r.output_tokens_per_s == pytest.approx(6 / 0.048)
    # the same replay under a constant 1 s roofline schedules identically
    same = simulate(w, SimConfig(**{**config.__dict__, "roofline": Roofline.constant(1.0)}))
    assert same.finish_steps == r.finish_steps and same.duration_s == 4.0


def test_a_long_decode_stretch_is_the_sum_of_its_steps() -> None:
    # One request, 10 prompt / 1,000 output tokens: a 10-token prefill step (10.9 ms), then
    # 999 decode steps of 1 token (10 ms each), run by the engine as one stretch
    w = Workload(name="t", source="t", requests=(Request(10, 1000),))
    config = sim_config(200, null_block=False, max_num_seqs=8, max_model_len=2000, roofline=TABLE)
    r = simulate(w, config)
    assert r.steps == 1000
    assert r.ttft_s.p50 == pytest.approx(0.0109)
    assert r.duration_s == pytest.approx(0.0109 + 999 * 0.010)
    assert r.tpot_s.p50 == pytest.approx(0.010)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("t.csv", CSV),
        ("t.csv", "# from vllm bench\nseconds,tokens,note\n0.020,101,x\n\n0.010,1,y\n"),
        ("t.json", '[{"tokens": 101, "seconds": 0.02}, {"tokens": 1, "seconds": 0.01}]'),
        ("t.json", '{"1": 0.01, "101": 0.02}'),
    ],
)
def test_formats(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    table = load_step_times(path)
    assert (table.tokens, table.seconds) == ((1, 101), (0.01, 0.02))
    assert table.timing == f"measured step times ({path})"


@pytest.mark.parametrize(
    ("text", "as_json", "message"),
    [
        ("", False, "no step times"),
        ("a,b\n1,2\n", False, "must name the columns tokens and seconds"),
        ("tokens,seconds\n1\n", False, "line 2: expected 2 columns"),
        ("tokens,seconds\nx,1\n", False, "line 2: tokens must be a number"),
        ("tokens,seconds\n1.5,1\n", False, "tokens must be a whole number >= 1"),
        ("tokens,seconds\n0,1\n", False, "tokens must be a whole number >= 1"),
        ("tokens,seconds\n1,0\n", False, "seconds must be > 0"),
        ("tokens,seconds\n1,nan\n", False, "seconds must be > 0"),
        ("tokens,seconds\n1,1\n1,2\n", False, "line 3: tokens 1 is given twice"),
        ("tokens,seconds\n", False, "no step times"),
        ("[1, 2]", True, "item 0: expected an object with tokens and seconds"),
        ("3", True, "expected a list"),
        ("{", True, "not JSON"),
        ('{"1": true}', True, "seconds must be a number"),
        ("[]", True, "no step times"),
    ],
)
def test_bad_tables(text: str, as_json: bool, message: str) -> None:
    with pytest.raises(InputFileError, match=message):
        parse_step_times(text, "t", as_json=as_json)


runner = CliRunner()


def _run(tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    trace = tmp_path / "w.jsonl"
    trace.write_text('{"prompt_tokens": 40, "output_tokens": 3}\n' * 2)
    args = [
        "simulate",
        "llama-3.1-8b",
        "-w",
        str(trace),
        "--num-gpu-blocks",
        "100",
        "--max-model-len",
        "1024",
        "--max-num-batched-tokens",
        "64",
        "--max-num-seqs",
        "8",
        "--no-enable-prefix-caching",
        *extra,
    ]
    result = runner.invoke(app, args)
    return result.exit_code, result.stdout, result.stderr


def test_cli_reports_the_timing_model(tmp_path: Path) -> None:
    table = tmp_path / "steps.csv"
    table.write_text(CSV)
    code, out, err = _run(tmp_path, "--step-times", str(table), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["timing"] == f"measured step times ({table})"
    result = data["runs"][0]["result"]
    assert result["duration_s"] == pytest.approx(0.048)  # as in the hand-worked replay above
    assert result["ttft_s"]["max"] == pytest.approx(0.0279)
    assert not any("roofline" in note for note in data["notes"])

    code, out, err = _run(tmp_path, "--step-times", str(table))
    assert code == 0, err
    assert f"Times are measured step times ({table}) by tokens per step" in " ".join(out.split())
    assert "roofline model, not a measurement" not in out

    code, out, err = _run(tmp_path, "--json")
    assert code == 0, err
    assert json.loads(out)["timing"] == "step-time model"


@pytest.mark.parametrize(
    ("text", "message"),
    [(None, "no such file"), ("tokens,seconds\n1,-1\n", "seconds must be > 0, got -1")],
)
def test_cli_bad_table_is_one_line(tmp_path: Path, text: str | None, message: str) -> None:
    table = tmp_path / "steps.csv"
    if text is not None:
        table.write_text(text)
    code, out, err = _run(tmp_path, "--step-times", str(table))
    assert code == 2
    assert err.startswith("Error: ") and message in err and err.count("\n") == 1
    assert "Traceback" not in err and out == ""


CONTEXT_CSV = "context,tokens,seconds\n0,1,0.010\n0,101,0.020\n1000,1,0.030\n1000,101,0.040\n"


def test_context_axis_interpolates_between_contexts_by_hand() -> None:
    # rows at context 0: (1, 10 ms), (101, 20 ms); at context 1,000: (1, 30 ms), (101, 40 ms)
    t = parse_step_times(CONTEXT_CSV, "c.csv", as_json=False)
    assert [c for c, _ in t.by_context] == [0, 1000]
    # 51 tokens of 51 sequences at 500 context tokens each: halfway both ways, 25 ms
    assert t.step_s(51, kv_tokens=51 * 500, pairs=0, seqs=51) == pytest.approx(0.025)
    # past the last context: extrapolated from the last two (20 ms per 1,000 tokens), 2,000
    # tokens of context at 1 token: 30 + 20 = 50 ms; below the first: the first
    assert t.step_s(1, kv_tokens=2000, pairs=0, seqs=1) == pytest.approx(0.050)
    assert t.at(1, context=-5) == pytest.approx(0.010)
    # 10 decode steps of 1 request from context 995: contexts 995..1004, i.e. 5 steps between
    # the rows (29.9, 29.92, ... 29.98 ms) and 5 past the last (30.0 ... 30.08 ms)
    by_step = sum(t.step_s(1, 995 + k, 0, 1) for k in range(10))
    assert t.decode_s(1, 995, 10) == pytest.approx(by_step)
    assert by_step == pytest.approx(sum(0.010 + 0.00002 * (995 + k) for k in range(10)))


def test_context_axis_in_json_and_its_errors() -> None:
    text = json.dumps(
        [
            {"context": 0, "tokens": 1, "seconds": 0.01},
            {"context": 64, "tokens": 1, "seconds": 0.02},
        ]
    )
    t = parse_step_times(text, "c.json", as_json=True)
    assert t.step_s(1, 32, 0) == pytest.approx(0.015)
    mixed = json.dumps([{"context": 0, "tokens": 1, "seconds": 0.01}, {"tokens": 2, "seconds": 1}])
    with pytest.raises(InputFileError, match="give a context for every row or for none"):
        parse_step_times(mixed, "c.json", as_json=True)
    with pytest.raises(InputFileError, match="context must be a number, got ''"):
        parse_step_times("context,tokens,seconds\n0,1,0.01\n,2,0.02\n", "c.csv", as_json=False)
    with pytest.raises(InputFileError, match="tokens 1 is given twice at context 0"):
        parse_step_times("context,tokens,seconds\n0,1,0.01\n0,1,0.02\n", "c.csv", as_json=False)
    with pytest.raises(InputFileError, match="context must be a whole number >= 0"):
        parse_step_times("context,tokens,seconds\n-1,1,0.01\n", "c.csv", as_json=False)
