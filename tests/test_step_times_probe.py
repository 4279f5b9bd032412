"""kvplan verify --step-times on CPU: a 2-layer model, a few points (a few seconds in all).

What is checked is the shape of what is written and read back, never a timing: the grid
(batches x contexts, capped by the plan), the row each point becomes in the format
``kvplan simulate --step-times`` reads, the prediction's inputs, and that errors are one line
and leave nothing behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import UsageError
from planner.simulate.steptimes import load_step_times
from probes.stepgrid import (
    StepPoint,
    StepTimesResult,
    file_text,
    parse_counts,
    plan_grid,
    step_inputs,
)
from tests.probe_helpers import tiny_config

runner = CliRunner()
GRID = ["--step-batches", "1,4", "--step-contexts", "64,256"]
FLAGS = ["--device", "cpu", "--memory-budget", "64MiB", "--max-model-len", "1024"]


@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(tiny_config("llama")))
    return tmp_path


# ---------------------------------------------------------------- the grid (no torch)


def test_grid_caps_contexts_and_batches_by_the_plan() -> None:
    grid = plan_grid((1, 8, 32, 128), (512, 2048, 8192), max_model_len=4096, max_num_seqs=64)
    # 8192 > max_model_len 4096 and 128 > max_num_seqs 64 are dropped
    assert grid.contexts == (512, 2048)
    assert grid.decode == ((1, 512), (8, 512), (32, 512), (1, 2048), (8, 2048), (32, 2048))
    assert grid.prefill == (512, 2048)
    assert len(grid.notes) == 2


def test_grid_falls_back_to_the_limits_and_skips_a_colliding_prefill() -> None:
    # every context above 256: max_model_len itself; batch 256 would be row (256, 256) too
    grid = plan_grid((1, 256), (512,), max_model_len=256, max_num_seqs=256)
    assert grid.contexts == (256,)
    assert grid.decode == ((1, 256), (256, 256))
    assert grid.prefill == ()
    assert any("no prefill of 256 tokens" in n for n in grid.notes)


@pytest.mark.parametrize(
    ("kind", "batch", "context", "expected"),
    [
        # decode: 8 sequences x 512 keys read and scored; 8 tokens scheduled
        ("decode", 8, 512, (8, 8 * 512, 8 * 512)),
        # prefill of 4 tokens from scratch: causal pairs 1 + 2 + 3 + 4 = 10
        ("prefill", 1, 4, (4, 4, 10)),
    ],
)
def test_step_inputs_count_as_the_simulator_does(kind, batch, context, expected) -> None:
    assert step_inputs(kind, batch, context) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [("1,x", "whole numbers >= 1"), ("0", "whole numbers >= 1"), ("", "whole numbers")],
)
def test_bad_counts_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_counts(text, "--step-batches", (1,))


def test_counts_are_sorted_and_unique() -> None:
    assert parse_counts("32, 1,8,8", "--step-batches", (1,)) == (1, 8, 32)


def _result(points: list[StepPoint]) -> StepTimesResult:
    return StepTimesResult(
        model="m", device="cpu", device_name="CPU", predicted_for="h100", comparable=False,
        tensor_parallel_size=1, dtype="bfloat16", kv_cache_dtype="bf16", block_size=16,
        max_model_len=1024, num_layers=2, layers_timed=2, warmup=2, repeats=5,
        timer="time.perf_counter", out="x.csv", points=points,
    )  # fmt: skip


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_the_file_reads_back_with_a_context_axis(tmp_path: Path, suffix: str) -> None:
    points = [
        StepPoint("decode", 1, 64, 1, 64, 64, 0.002),
        StepPoint("decode", 4, 64, 4, 256, 256, 0.003),
        StepPoint("prefill", 1, 64, 64, 64, 2080, 0.010),
        StepPoint("decode", 1, 256, 1, 256, 256, 0.004),
    ]
    path = tmp_path / f"steps{suffix}"
    path.write_text(file_text(_result(points), as_json=suffix == ".json"))
    table = load_step_times(path)
    assert [c for c, _ in table.by_context] == [64, 256]
    at64 = dict(table.by_context)[64]
    assert at64.tokens == (1, 4, 64) and at64.seconds == (0.002, 0.003, 0.010)
    # a 4-token step at context 64 is the measured row
    assert table.at(4, 64) == 0.003


# ---------------------------------------------------------------- the probe on CPU


def _torch() -> None:
    pytest.importorskip("torch")


def test_cli_writes_out_and_simulate_replays_it(tiny_dir: Path, tmp_path: Path) -> None:
    _torch()
    out = tmp_path / "steps.csv"
    result = runner.invoke(
        app, ["verify", str(tiny_dir), *FLAGS, *GRID, "--step-times", str(out), "--json"]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    # 2 batch sizes x 2 contexts of decode + a prefill per context
    kinds = sorted((p["kind"], p["batch"], p["context"]) for p in data["points"])
    assert kinds == [
        ("decode", 1, 64), ("decode", 1, 256), ("decode", 4, 64), ("decode", 4, 256),
        ("prefill", 1, 64), ("prefill", 1, 256),
    ]  # fmt: skip
    assert data["layers_timed"] == data["num_layers"] == 2
    # on CPU the model predicts for an H100: its seconds are shown, the ratio is not
    assert data["comparable"] is False and data["predicted_for"] == "h100"
    assert all(p["ratio"] is None and p["predicted_s"] > 0 for p in data["points"])
    table = load_step_times(out)
    by = dict(table.by_context)
    assert [c for c, _ in table.by_context] == [64, 256]
    assert by[64].tokens == (1, 4, 64) and by[256].tokens == (1, 4, 256)
    written = {(p["context"], p["tokens"]): p["seconds"] for p in data["points"]}
    for c, t in by.items():
        for tokens, seconds in zip(t.tokens, t.seconds, strict=True):
            assert seconds == pytest.approx(written[(c, tokens)], rel=1e-5)
    sim = runner.invoke(
        app,
        [
            "simulate", str(tiny_dir), "--num-gpu-blocks", "500", "--max-model-len", "1024",
            "--avg-prompt-tokens", "100", "--avg-output-tokens", "10", "--num-requests", "20",
            "--step-times", str(out), "--json",
        ],
    )  # fmt: skip
    assert sim.exit_code == 0, sim.stderr
    assert str(out) in json.dumps(json.loads(sim.stdout))


def test_cli_table_says_the_ratio_means_nothing_on_cpu(tiny_dir: Path, tmp_path: Path) -> None:
    _torch()
    out = tmp_path / "steps.json"
    grid = ["--step-batches", "2", "--step-contexts", "32"]
    result = runner.invoke(app, ["verify", str(tiny_dir), *FLAGS, *grid, "--step-times", str(out)])
    assert result.exit_code == 0, result.stderr
    assert "Measured vs step-time model (h100)" in result.stdout
    assert "pred/meas is n/a" in result.stdout and "n/a" in result.stdout
    assert [(p["context"], p["tokens"]) for p in json.loads(out.read_text())] == [
        (32, 2),
        (32, 32),
    ]


def test_cli_overwrites_the_named_file_whole(tiny_dir: Path, tmp_path: Path) -> None:
    _torch()
    out = tmp_path / "steps.csv"
    out.write_text("old\n" * 1000)
    grid = ["--step-batches", "1", "--step-contexts", "32"]
    result = runner.invoke(app, ["verify", str(tiny_dir), *FLAGS, *grid, "--step-times", str(out)])
    assert result.exit_code == 0, result.stderr
    assert "old" not in out.read_text() and load_step_times(out).by_context
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "steps.csv"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--step-times", "{tmp}/no/such/dir/s.csv"], 2, "cannot write there: no such folder"),
        (["--step-times", "-"], 2, "--step-times -: name a file"),
        (["--step-times", "{tmp}/s.csv", "--step-batches", "1,x"], 2, "--step-batches '1,x'"),
        (["--step-times", "{tmp}/s.csv", "--step-gpu", "h1OO"], 2, "unknown GPU 'h1OO'"),
        (["--step-batches", "1"], 2, "go with --step-times OUT"),
        # 9 batches x 7 contexts + 7 prefills = 70 > 64
        (
            [
                "--step-times",
                "{tmp}/s.csv",
                "--step-batches",
                "1,2,3,4,5,6,7,8,9",
                "--step-contexts",
                "16,32,48,64,80,96,112",
            ],
            2,
            "70 steps to time",
        ),  # fmt: skip
        # half of 1 KiB for weights: not even the embedding (256 x 64 x 2 B = 32 KiB) fits
        (["--step-times", "{tmp}/s.csv", "--memory-budget", "1KiB"], 1, "not even one layer"),
    ],
)
def test_cli_errors_are_one_line_and_write_nothing(
    tiny_dir: Path, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    _torch()
    work = tmp_path / "work"
    work.mkdir()
    argv = [a.replace("{tmp}", str(work)) for a in args]
    result = runner.invoke(app, ["verify", str(tiny_dir), *FLAGS, *argv])
    assert result.exit_code == code, result.stdout + result.stderr
    assert result.stderr.startswith("Error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert list(work.iterdir()) == []


def test_no_point_fits_is_one_line_exit_1(tiny_dir: Path, tmp_path: Path) -> None:
    _torch()
    out = tmp_path / "s.csv"
    # 2 MiB: 1,000 sequences of 1,024 tokens hold 1,000 x 1,024 x 2 layers x K and V x
    # 2 heads x 16 x 2 B = 250 MiB of KV, and one 1,024-token prefill's activations take
    # more than the ~1.8 MiB the weights (213,632 B) leave
    big = ["--step-batches", "1000", "--max-num-seqs", "1000", "--step-contexts", "1024"]
    argv = ["verify", str(tiny_dir), *FLAGS, "--memory-budget", "2MiB", *big]
    result = runner.invoke(app, [*argv, "--step-times", str(out)])
    assert result.exit_code == 1, result.stdout + result.stderr
    assert "no step of the grid fits" in result.stderr and result.stderr.count("\n") == 1
    assert not out.exists()


def test_weights_over_half_the_budget_time_a_subset_and_say_so(tiny_dir: Path) -> None:
    _torch()
    from probes.plan import VerifyRequest
    from probes.steptimes import measure_step_times
    from tests.helpers import settings
    from tests.probe_helpers import tiny_spec

    # the 2-layer model's weights are 213,632 B; half of 360 KiB (184,320 B) holds the
    # embedding, head and final norm (2 x 256 x 64 + 64 = 32,832 params) and one layer
    req = VerifyRequest(
        device="cpu", memory_budget_bytes=360 << 10, settings=settings(max_model_len=1024)
    )
    result = measure_step_times(tiny_spec("llama"), req, (1,), (32,), out="x.csv")
    assert (result.layers_timed, result.num_layers) == (1, 2)
    assert any("timed 1 of 2 layers" in n and "x 2 / 1" in n for n in result.notes)
    assert [(p.kind, p.batch, p.context) for p in result.points] == [
        ("decode", 1, 32),
        ("prefill", 1, 32),
    ]
    assert all(p.seconds > 0 for p in result.points)


@pytest.mark.parametrize("name", ["mla", "hybrid", "gemma3", "moe"])
def test_every_cache_kind_times_decode_and_prefill(name: str) -> None:
    _torch()
    from probes.plan import VerifyRequest
    from probes.steptimes import measure_step_times
    from tests.helpers import settings
    from tests.probe_helpers import tiny_spec

    req = VerifyRequest(
        device="cpu", memory_budget_bytes=64 << 20, settings=settings(max_model_len=1024)
    )
    result = measure_step_times(tiny_spec(name), req, (2,), (48,), out="x.csv")
    assert [(p.kind, p.tokens, p.context) for p in result.points] == [
        ("decode", 2, 48),
        ("prefill", 48, 48),
    ]
    assert not result.skipped and result.layers_timed == result.num_layers


def test_out_of_memory_drops_the_largest_batch_and_goes_on(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    import probes.steptimes as steptimes
    from probes.plan import VerifyRequest
    from tests.helpers import settings
    from tests.probe_helpers import tiny_spec

    real = steptimes._time_context

    def short_of_memory(model, head, layout, context, batches, *rest):
        if batches and max(batches) > 1:  # as a device would refuse the largest pool
            raise torch.OutOfMemoryError("no room")
        return real(model, head, layout, context, batches, *rest)

    monkeypatch.setattr(steptimes, "_time_context", short_of_memory)
    req = VerifyRequest(
        device="cpu", memory_budget_bytes=64 << 20, settings=settings(max_model_len=1024)
    )
    result = steptimes.measure_step_times(tiny_spec("llama"), req, (1, 2, 4), (32,), out="x")
    assert [(p.kind, p.batch) for p in result.points] == [("decode", 1), ("prefill", 1)]
    assert result.skipped == ["decode 4 x 32: out of memory", "decode 2 x 32: out of memory"]
