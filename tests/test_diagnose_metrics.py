"""kvplan diagnose --metrics: recorded vLLM scrapes (tests/data/metrics, written by hand from
the metric definitions of vLLM 0.6.3, 0.8.5, 0.10.1 and 0.11.0: see its README.md) read from
files and from a fake /metrics server on 127.0.0.1 that each test starts and stops.

Expected figures come from the numbers in tests/data/metrics/make_scrapes.py, by the arithmetic
written beside each assert; Prometheus' histogram_quantile interpolates linearly within the
bucket the rank falls in."""

from __future__ import annotations

import http.server
import json
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.diagnose import diagnose_file
from planner.diagnose import metrics as m
from planner.diagnose.metrics import observed, read
from planner.gpus import get_gpu
from planner.simulate.trace import load_workload

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "metrics"
LOGS = Path(__file__).parent / "fixtures" / "logs"
V0 = DATA / "vllm-0.6.3-v0.prom"
V085 = DATA / "vllm-0.8.5-v1.prom"
V011 = DATA / "vllm-0.11.0-dp2.prom"
SERIES = DATA / "vllm-0.11.0-dp2-series.prom"
RANGE = DATA / "vllm-0.11.0-dp2-range.json"
T0 = 1764632400  # the series' first time marker


def scrapes_of_series() -> list[str]:
    """The series file's three scrapes, without their time markers."""
    parts = SERIES.read_text().split(f"# {T0}\n")[1]
    first, rest = parts.split(f"# {T0 + 10}\n")
    second, third = rest.split(f"# {T0 + 20}\n")
    return [first, second, third]


# --------------------------------------------------------------------------- fake server


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict[str, Any] = {}
    hits: dict[str, int] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path
        self.hits[path] = self.hits.get(path, 0) + 1
        route = self.routes.get(path)
        if route is None:
            self.send_error(404)
            return
        try:
            route(self, self.hits[path])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first (the timeout tests)


def _body(text: str | bytes, status: int = 200) -> Any:
    data = text.encode() if isinstance(text, str) else text

    def send(h: _Handler, _: int) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "text/plain; version=0.0.4")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    return send


def _rotating(texts: list[str]) -> Any:
    def send(h: _Handler, n: int) -> None:
        _body(texts[min(n, len(texts)) - 1])(h, n)

    return send


def _slow(h: _Handler, _: int) -> None:
    time.sleep(1.5)
    _body("vllm:num_requests_running 1\n")(h, 0)


def _drip(h: _Handler, _: int) -> None:
    h.send_response(200)
    h.send_header("Content-Length", "100000")
    h.end_headers()
    for _ in range(60):
        h.wfile.write(b"# " + b"x" * 60 + b"\n")
        h.wfile.flush()
        time.sleep(0.1)


def _redirect(h: _Handler, _: int) -> None:
    h.send_response(302)
    h.send_header("Location", "http://example.invalid/metrics")
    h.send_header("Content-Length", "0")
    h.end_headers()


def _cut(h: _Handler, _: int) -> None:
    h.send_response(200)
    h.send_header("Content-Length", "5000")
    h.end_headers()
    h.wfile.write(V085.read_bytes()[:100])
    h.close_connection = True


@pytest.fixture
def server() -> Iterator[str]:
    """A /metrics server on 127.0.0.1 serving the recorded scrapes; yields its base URL."""
    _Handler.hits = {}
    _Handler.routes = {
        "/v0/metrics": _body(V0.read_text()),
        "/v085/metrics": _body(V085.read_text()),
        "/v011/metrics": _rotating(scrapes_of_series()),
        "/malformed": _body((DATA / "malformed.prom").read_text()),
        "/truncated": _body((DATA / "truncated.prom").read_text()),
        "/not-vllm": _body((DATA / "not-vllm.prom").read_text()),
        "/big": _body("# " + "x" * 4000 + "\n"),
        "/binary": _body(b"vllm:num_requests_running 1\n\0"),
        "/slow": _slow,
        "/drip": _drip,
        "/redirect": _redirect,
        "/cut": _cut,
        "/500": _body("oops", status=500),
    }
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def run_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["diagnose", *args, "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def kinds(findings: list[dict[str, Any]]) -> list[str]:
    return [f["kind"] for f in findings]


def finding(findings: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(f for f in findings if f["kind"] == kind)


# --------------------------------------------------------------------------- releases


def test_v0_scrape_from_the_server(server: str) -> None:
    """vLLM 0.6.3 (V0): gpu_cache_usage_perc 0.97, 45 running, 12 waiting, 37 preemptions
    over 800 + 200 finished requests, prefix caching off in cache_config_info."""
    data = run_json("--metrics", f"{server}/v0/metrics")
    assert (data["kind"], data["scrapes"], data["names"]) == ("scrape", 1, "v0")
    assert data["model"] == "Qwen/Qwen2.5-7B-Instruct"
    c = data["cluster"]
    assert [r["engine"] for r in data["ranks"]] == ["0"]  # V0 has no engine label
    assert (c["kv_usage_p50_pct"], c["kv_usage_p90_pct"], c["kv_usage_max_pct"]) == (97, 97, 97)
    assert (c["running_max"], c["waiting_max"], c["waiting_scrapes"]) == (45, 12, 1)
    assert c["requests_finished"] == 800 + 200
    assert c["preemptions"] == 37
    assert c["preemptions_per_1k_requests"] == 1000 * 37 / 1000
    assert c["preemptions_per_s"] is None  # one scrape: no window
    assert c["prefix_hit_pct"] is None  # V0's hit-rate gauge is -1: prefix caching off
    assert "prefix-off" in kinds(data["findings"])
    pinned = finding(c["findings"], "kv-pinned")
    assert pinned["data"]["preemptions"] == 37 and pinned["data"]["max_waiting"] == 12
    assert finding(c["findings"], "kv-usage")["data"]["band"] == "above"
    # TTFT: 500 in (0.1, 0.25], 300 in (0.25, 0.5], 150 in (0.75, 1.0], 50 in (1.0, 2.5]
    ttft = c["ttft"]
    assert ttft["count"] == 1000 and ttft["mean"] == pytest.approx(420 / 1000)
    assert ttft["p50"] == pytest.approx(0.1 + 0.15 * 500 / 500)
    assert ttft["p90"] == pytest.approx(0.75 + 0.25 * (900 - 800) / 150)
    assert ttft["p99"] == pytest.approx(1.0 + 1.5 * (990 - 950) / 50)
    # prompt lengths: 200 in (500, 1000], 600 in (1000, 2000], 200 in (2000, 5000]
    prompt = c["prompt"]
    assert prompt["p50"] == pytest.approx(1000 + 1000 * (500 - 200) / 600)
    assert prompt["p90"] == pytest.approx(2000 + 3000 * (900 - 800) / 200)


def test_v085_names_and_starved_by_max_num_seqs(server: str) -> None:
    """vLLM 0.8.5 (V1, gpu_cache_usage_perc, gpu_prefix_cache_* counters): 64 running at
    --max-num-seqs 64 with 20 waiting and KV at 21 %: starved by max_num_seqs, not the pool."""
    data = run_json("--metrics", f"{server}/v085/metrics", "--max-num-seqs", "64")
    assert data["names"] == "gpu_cache_usage_perc"
    c = data["cluster"]
    assert c["kv_usage_max_pct"] == 21.0
    assert c["prefix_hit_pct"] == 100 * 2000 / 100_000
    assert c["max_num_seqs"] == 64 and c["max_num_seqs_source"] == "command line"
    starved = finding(c["findings"], "starved-max-num-seqs")
    # KV grows about in step with running requests: 64 x 90 / 21 = 274.3 -> 274
    assert starved["data"]["suggested_max_num_seqs"] == math.floor(64 * 90 / 21)
    assert "max_num_seqs 274" in starved["fix"][0]
    assert "kv-pinned" not in kinds(c["findings"])
    assert finding(c["findings"], "prefix-low-hit")["data"]["mean_hit_pct"] == 2.0
    # queue p50 (1.75 s) is all of TTFT p50 (1.75 s): TTFT is queueing
    assert "mostly queueing" in finding(c["findings"], "latency")["fix"][0]


def test_v085_without_max_num_seqs_blames_the_token_budget() -> None:
    """With no limit known (no flag, no GPU for vLLM's default) and one scrape, the waiting
    requests with KV at 21 % point at the per-step token budget, as information only."""
    dg = m.diagnose_metrics(str(V085))
    starved = next(f for f in dg.cluster.findings if f.kind == "starved-token-budget")
    assert starved.severity == "info" and starved.data["max_num_seqs"] is None


def test_newer_name_wins_when_both_are_exported() -> None:
    """vLLM 0.10.1 exports gpu_cache_usage_perc (deprecated) beside kv_cache_usage_perc
    (v1/metrics/loggers.py lines 212 and 245); the file has 0.21 and 0.99: 0.21 is read."""
    dg = m.diagnose_metrics(str(DATA / "vllm-0.10.1-both-names.prom"))
    assert dg.names == "kv_cache_usage_perc"
    assert dg.cluster.kv_usage_max_pct == 21.0


def _check_dp2_series(data: dict[str, Any], *, counters: bool = True) -> None:
    """The 0.11.0 DP-2 series: KV engine 0 [82, 86, 88] %, engine 1 [80, 84, 90] %."""
    assert data["scrapes"] == 3 and data["window_s"] == 20
    r0, r1 = data["ranks"]
    assert (r0["engine"], r1["engine"]) == ("0", "1")
    # p90 at position 0.9 x 2 = 1.8: 86 + 0.8 x (88 - 86); 84 + 0.8 x (90 - 84)
    assert (r0["kv_usage_p50_pct"], r0["kv_usage_p90_pct"]) == (86.0, 87.6)
    assert (r1["kv_usage_p50_pct"], r1["kv_usage_p90_pct"]) == (84.0, 88.8)
    c = data["cluster"]
    # equal pools (26,305 blocks each): the cluster is the mean, [81, 85, 89] %
    assert (c["kv_usage_p50_pct"], c["kv_usage_p90_pct"], c["kv_usage_max_pct"]) == (
        85.0,
        85 + 0.8 * 4,
        89.0,
    )
    assert c["running_max"] == 33 + 34
    assert finding(c["findings"], "kv-usage")["data"]["band"] == "on-target"
    assert not {"kv-pinned", "kv-low", "starved-max-num-seqs"} & set(kinds(c["findings"]))
    # finished requests over the window: 1,200 - 1,000 and 1,060 - 900
    assert (r0["requests_finished"], r1["requests_finished"]) == (200, 160)
    assert c["requests_finished"] == 360
    if counters:
        assert r0["prefix_hit_pct"] == 100 * (52_000 - 40_000) / (120_000 - 100_000)
        assert r1["prefix_hit_pct"] == 100 * (40_000 - 30_000) / (100_000 - 80_000)
        assert c["prefix_hit_pct"] == 100 * 22_000 / 40_000
        assert c["preemptions"] == 0 and c["preemptions_per_s"] == 0
        assert c["prompt"]["count"] == 360  # the window's requests, not since the start
        assert c["num_gpu_blocks"] == 2 * 26_305


def test_series_file_with_time_markers() -> None:
    _check_dp2_series(run_json("--metrics", str(SERIES)))


def test_series_directory_timed_by_modification(tmp_path: Path) -> None:
    """A directory of scrapes without markers: each file one scrape, in name order, timed by
    its modification time (10 s apart here)."""
    for i, text in enumerate(scrapes_of_series()):
        path = tmp_path / f"scrape-{i}.prom"
        path.write_text(text)
        os.utime(path, (T0 + 10 * i, T0 + 10 * i))
    _check_dp2_series(run_json("--metrics", str(tmp_path)))


def test_range_query_export() -> None:
    """A query_range export of the gauges and request_success_total (no histograms)."""
    data = run_json("--metrics", str(RANGE))
    assert data["kind"] == "range-json"
    _check_dp2_series(data, counters=False)


def test_scrapes_concatenated_without_times() -> None:
    """Two scrapes appended without markers split where a # HELP comes again; untimed, so the
    per-second rates are left out, with a note; counters are the last less the first."""
    text = V085.read_text()
    later = text.replace('vllm:request_success_total{engine="0",finished_reason="stop"', "X")
    later = later.replace("X", 'vllm:request_success_total{engine="0",finished_reason="stop"')
    later = later.replace(
        'finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 500.0',
        'finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 650.0',
    )
    scrapes = read.parse_text(text + later, "two", default_time=None)
    assert len(scrapes) == 2
    dg = m.diagnose_metrics("two", scrapes=scrapes)
    assert dg.cluster.requests_finished == 650 - 500
    assert dg.window_s is None
    assert any("carry no times" in n for n in dg.notes)


def test_sample_timestamps_make_scrapes() -> None:
    """Samples with Prometheus timestamps (ms) group into one scrape per timestamp."""
    text = "".join(
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="x"}} {u} {(T0 + 5 * i) * 1000}\n'
        for i, u in enumerate([0.5, 0.6, 0.7, 0.8])
    )
    scrapes = read.parse_text(text, "stamped", default_time=None)
    assert [s.time_s for s in scrapes] == [T0, T0 + 5, T0 + 10, T0 + 15]
    dg = m.diagnose_metrics("stamped", scrapes=scrapes)
    assert dg.window_s == 15
    # [50, 60, 70, 80]: p50 at 1.5 -> 65; p90 at 2.7 -> 70 + 0.7 x 10
    assert (dg.cluster.kv_usage_p50_pct, dg.cluster.kv_usage_p90_pct) == (65.0, 77.0)


def test_counter_reset_uses_the_scrapes_since() -> None:
    """A counter that falls means the server restarted: the increase is counted from there."""
    base = 'vllm:num_preemptions_total{{engine="0",model_name="x"}} {}\n'
    text = "".join(f"# {T0 + 10 * i}\n{base.format(v)}" for i, v in enumerate([50, 60, 3, 9]))
    dg = m.diagnose_metrics("reset", scrapes=read.parse_text(text, "reset", default_time=None))
    assert dg.cluster.preemptions == 9 - 3


def test_kv_low_suggests_a_lower_utilization_with_a_plan() -> None:
    """KV never above 40 % over three scrapes: kv-low, as the log diagnosis has it."""
    text = "".join(
        f'# {T0 + 10 * i}\nvllm:kv_cache_usage_perc{{engine="0",model_name="x"}} {u}\n'
        for i, u in enumerate([0.30, 0.40, 0.35])
    )
    dg = m.diagnose_metrics("low", scrapes=read.parse_text(text, "low", default_time=None))
    low = next(f for f in dg.cluster.findings if f.kind == "kv-low")
    assert low.data["peak_pct"] == 40.0 and low.data["samples"] == 3


# --------------------------------------------------------------------------- the plan's pool


def test_pool_against_the_plan_matches_the_boot_log_diagnosis() -> None:
    """The V0 scrape carries the boot log's pool (num_gpu_blocks 22211 = '# cuda blocks:
    22211' in vllm-v0-qwen7b-a100.log): with the same GPU and length, the plan's blocks beside
    it are the log diagnosis' plan blocks, and the available KV the blocks imply is
    22,211 x the plan's bytes per block."""
    a100 = get_gpu("a100-40gb")
    log = diagnose_file(LOGS / "vllm-v0-qwen7b-a100.log", gpu=a100, offline=True)
    # a scrape names no release: the log's (0.6.6.post1) is given, as its plan uses it
    dg = m.diagnose_metrics(
        str(V0), gpu=a100, max_model_len=8192, offline=True, vllm_version=log.log.version
    )
    blocks = {t.name: t for t in dg.terms}
    log_blocks = next(t for t in log.terms if t.name == "GPU blocks")
    assert blocks["GPU blocks"].log == 22_211
    assert blocks["GPU blocks"].plan == log_blocks.plan
    assert blocks["KV cache tokens"].log == 22_211 * 16
    budget = next(f for f in dg.findings if f.kind in ("budget", "matches"))
    log_budget = next(f for f in log.findings if f.kind in ("budget", "matches"))
    assert budget.data["available_implied_by_blocks"] is True
    assert budget.data["plan_available_bytes"] == log_budget.data["plan_available_bytes"]
    assert dg.sources["gpu_memory_utilization"] == "cache_config_info"
    assert dg.sources["model"] == "model_name label"
    assert dg.outcome == log.outcome and dg.worst_case_running == log.worst_case_running
    # the plan's default max_num_seqs is what the waiting finding compares with
    assert dg.cluster.max_num_seqs_source == "plan"


def test_dp_pool_per_rank(tmp_path: Path) -> None:
    """0.11.0 labels cache_config_info per engine: each rank's 26,305 blocks, summed for the
    cluster (420,880 tokens / 16 = 26,305, the DP-2 boot log's)."""
    dg = m.diagnose_metrics(str(V011))
    assert [r.num_gpu_blocks for r in dg.ranks] == [26_305, 26_305]
    assert dg.cluster.num_gpu_blocks == 2 * 26_305


# --------------------------------------------------------------------------- --save-workload


def test_save_workload_round_trips_through_estimate_and_simulate(tmp_path: Path) -> None:
    """The V0 scrape's lengths as empirical histograms: a bucket (a, b] is a + 1 .. b."""
    out = tmp_path / "observed.yaml"
    result = runner.invoke(app, ["diagnose", "--metrics", str(V0), "--save-workload", str(out)])
    assert result.exit_code == 0, result.output
    import yaml

    spec = yaml.safe_load(out.read_text())
    # prompt: 200 in (500, 1000], 600 in (1000, 2000], 200 in (2000, 5000]
    assert spec["prompt_tokens"]["histogram"] == [
        [501, 1000, 200],
        [1001, 2000, 600],
        [2001, 5000, 200],
    ]
    # output: 400 in (100, 200], 500 in (200, 500], 100 in (500, 1000]
    assert spec["output_tokens"]["histogram"] == [
        [101, 200, 400],
        [201, 500, 500],
        [501, 1000, 100],
    ]
    w = load_workload(out)
    assert len(w.requests) == 1000
    assert all(
        501 <= r.prompt_tokens <= 5000 and 101 <= r.output_tokens <= 1000 for r in w.requests
    )
    est = runner.invoke(
        app,
        ["estimate", "qwen2.5-7b-instruct", "--gpu", "a100-40gb", "--max-model-len", "8192"]
        + ["-w", str(out), "--offline", "--json"],
    )
    assert est.exit_code == 0, est.output
    workload = json.loads(est.stdout)["workload"]
    assert (workload["name"], workload["requests"], workload["rejected"]) == ("observed", 1000, 0)
    assert workload["recommended"]["max_num_seqs"] >= 1
    sim = runner.invoke(
        app,
        [
            "simulate",
            "qwen2.5-7b-instruct",
            "--gpu",
            "a100-40gb",
            "-w",
            str(out),
            "--num-requests",
            "50",
            "--offline",
            "--json",
        ],
    )
    assert sim.exit_code == 0, sim.output
    assert json.loads(sim.stdout)


def test_save_workload_poisson_rate_from_a_timed_series(tmp_path: Path) -> None:
    """360 requests finished in 20 s: Poisson arrivals at 18 a second."""
    dg = m.diagnose_metrics(str(SERIES))
    spec = observed.workload_spec(dg)
    assert spec["arrival"] == {"process": "poisson", "rate_per_s": 360 / 20}


def test_inf_bucket_ends_below_the_next_125_value() -> None:
    """vLLM's largest length bucket is the largest 1-2-5 value within max_model_len, so what
    the +Inf bucket holds is at most the next 1-2-5 value less 1 (5,000 -> 9,999)."""
    rows = observed.histogram_rows({1000.0: 0, 2000.0: 10, 5000.0: 10, math.inf: 12})
    assert rows == [[1001, 2000, 10], [5001, 9999, 2]]
    assert observed.histogram_rows({5000.0: 10, math.inf: 12}, 8192)[-1] == [5001, 8192, 2]


def test_save_workload_without_histograms_is_one_error(tmp_path: Path) -> None:
    out = tmp_path / "w.yaml"
    result = runner.invoke(app, ["diagnose", "--metrics", str(RANGE), "--save-workload", str(out)])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and len(result.stderr.strip().splitlines()) == 1
    assert "no prompt and output length histograms" in result.stderr
    assert not out.exists()


# --------------------------------------------------------------------------- --watch


def test_watch_polls_and_accumulates(server: str) -> None:
    """Three polls of a server whose scrapes advance: the last diagnosis is over all three."""
    slept: list[float] = []
    seen = list(m.watch(f"{server}/v011/metrics", interval_s=2, polls=3, sleep=slept.append))
    assert [d.scrapes for d in seen] == [1, 2, 3]
    assert slept == [2, 2]
    last = seen[-1]
    assert [r.requests_finished for r in last.ranks] == [200, 160]
    assert last.ranks[0].kv_usage_max_pct == 88.0


def test_watch_piped_prints_once_on_ctrl_c(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped, --watch draws nothing while it polls and prints the last report when Ctrl-C
    stops it (exit 0, no traceback)."""
    calls = {"n": 0}

    def sleep(_: float) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(m.time, "sleep", sleep)
    result = runner.invoke(
        app, ["diagnose", "--metrics", f"{server}/v011/metrics", "--watch", "--interval", "1"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count("vLLM metrics") == 1
    assert "2 scrapes" in result.stdout
    assert "Traceback" not in result.output


def test_watch_needs_a_url() -> None:
    result = runner.invoke(app, ["diagnose", "--metrics", str(V0), "--watch"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: --watch polls a server")


# --------------------------------------------------------------------------- bad inputs


def _one_error(result: Any, code: int, starts: str) -> None:
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {starts}"), result.stderr
    assert "Traceback" not in result.output


def test_malformed_line_named(server: str) -> None:
    text = (DATA / "malformed.prom").read_text().splitlines()
    line = next(i for i, x in enumerate(text, 1) if x.endswith(" twenty"))
    for source in (str(DATA / "malformed.prom"), f"{server}/malformed"):
        result = runner.invoke(app, ["diagnose", "--metrics", source])
        _one_error(result, 2, f"{source}: line {line:,} is not Prometheus text format")


def test_truncated_and_not_vllm(server: str) -> None:
    result = runner.invoke(app, ["diagnose", "--metrics", f"{server}/truncated"])
    _one_error(result, 2, f"{server}/truncated: line ")
    result = runner.invoke(app, ["diagnose", "--metrics", f"{server}/not-vllm"])
    _one_error(result, 1, f"{server}/not-vllm: no vLLM metric")


def test_partial_histogram_is_left_out() -> None:
    """A scrape cut inside the TTFT histogram (no +Inf bucket, no _count) still reads: the
    figures before it are kept, that histogram is not used."""
    dg = m.diagnose_metrics(str(DATA / "partial-histogram.prom"))
    assert dg.cluster.kv_usage_max_pct == 21.0 and dg.cluster.waiting_max == 20
    assert dg.cluster.ttft is None and dg.cluster.prompt is not None


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/500", "HTTP 500"),
        ("/redirect", "HTTP 302 Found to http://example.invalid/metrics"),
        ("/cut", "the response was cut short"),
        ("/binary", "binary response"),
    ],
)
def test_url_failures_are_one_line(server: str, path: str, expected: str) -> None:
    result = runner.invoke(app, ["diagnose", "--metrics", f"{server}{path}"])
    _one_error(result, 2, f"{server}{path}: {expected}")


def test_url_timeouts_and_size_bound(server: str) -> None:
    with pytest.raises(read.MetricsFileError, match="response within 0.5 s"):
        read.fetch_url(f"{server}/slow", timeout_s=0.5)
    start = time.monotonic()
    with pytest.raises(read.MetricsFileError, match="no complete response within 1 s"):
        read.fetch_url(f"{server}/drip", timeout_s=1)
    assert time.monotonic() - start < 4.5  # the deadline is for the whole body (6 s drip)
    with pytest.raises(read.MetricsFileError, match="larger than the 1,000-byte limit"):
        read.fetch_url(f"{server}/big", limit=1000)


def test_unreachable_and_not_http() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    result = runner.invoke(app, ["diagnose", "--metrics", f"http://127.0.0.1:{port}/metrics"])
    _one_error(result, 2, f"http://127.0.0.1:{port}/metrics: cannot connect")
    result = runner.invoke(app, ["diagnose", "--metrics", "ftp://127.0.0.1/metrics"])
    _one_error(result, 2, "ftp://127.0.0.1/metrics: not an http:// or https:// URL")


def test_files_that_cannot_be_read(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", "--metrics", str(tmp_path / "none.prom")])
    _one_error(result, 2, f"{tmp_path / 'none.prom'}: no such file")
    bad = tmp_path / "bad.json"
    bad.write_text('{"status": "success", "data": {"result": 3}}')
    result = runner.invoke(app, ["diagnose", "--metrics", str(bad)])
    _one_error(result, 2, f"{bad}: response 1 is not a Prometheus query result")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["diagnose", "--metrics", str(empty)])
    _one_error(result, 2, f"{empty}: the directory holds no scrape files")


def test_missing_extra_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client.parser", None)
    result = runner.invoke(app, ["diagnose", "--metrics", str(V0)])
    _one_error(result, 2, "reading Prometheus text needs prometheus-client: pip install")
    assert "kvplan[metrics]" in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["x.log", "--metrics", str(V0)], "give a LOG or --metrics, not both"),
        ([], "give a vLLM LOG, or --metrics FILE|URL"),
        (["x.log", "--save-workload", "w.yaml"], "--save-workload needs --metrics"),
    ],
)
def test_flag_combinations(args: list[str], expected: str) -> None:
    _one_error(runner.invoke(app, ["diagnose", *args]), 2, expected)


def test_mutated_scrapes_fail_only_as_kvplan_errors() -> None:
    """Recorded scrapes with values swapped for NaN, infinities, huge or negative numbers,
    lines dropped or repeated, bucket bounds broken: a diagnosis, its JSON, text and workload,
    or one KvplanError, never another exception."""
    import random

    from planner.errors import KvplanError
    from planner.render._output import to_json
    from planner.render.metrics import lines, metrics_dict

    texts = [p.read_text() for p in (V0, V085, SERIES)]
    values = ["0", "-1", "1e308", "1e309", "NaN", "+Inf", "-Inf", "1e-300", "-1e308"]
    rng = random.Random(5)
    for _ in range(150):
        t = rng.choice(texts).splitlines()
        for _ in range(rng.randint(1, 8)):
            j = rng.randrange(len(t))
            op = rng.random()
            if op < 0.5 and not t[j].startswith("#") and " " in t[j]:
                t[j] = t[j].rsplit(" ", 1)[0] + " " + rng.choice(values)
            elif op < 0.7:
                del t[j]
            elif op < 0.85:
                t[j] = t[j].replace('le="', rng.choice(['le="x', 'le="9']), 1)
            else:
                t.insert(j, t[rng.randrange(len(t))])
        try:
            scrapes = read.parse_text("\n".join(t) + "\n", "mutated", default_time=None)
            dg = m.diagnose_metrics("mutated", scrapes=scrapes, max_num_seqs=rng.choice([None, 64]))
            to_json(metrics_dict(dg))
            lines(dg)
            observed.workload_yaml(dg)
        except KvplanError:
            pass


# --------------------------------------------------------------------------- as users see it


def test_text_at_80_columns_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80 columns, NO_COLOR: table rows fit, identifiers whole, no escape codes."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    result = runner.invoke(app, ["diagnose", "--metrics", str(SERIES)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "\x1b[" not in out
    assert "meta-llama/Llama-3.1-8B-Instruct" in out
    table = out[out.index("Per DP rank") :].split("note:")[0].splitlines()[1:]
    assert table and all(len(line) <= 80 for line in table)
    assert [line.split()[0] for line in table[1:4]] == ["0", "1", "all"]
    # prose wraps between words: a line over 80 is one word alone (this checkout's path)
    assert all(len(line) <= 80 or len(line.split()) == 1 for line in out.splitlines())
    assert "on the 80–90 % target" in " ".join(out.split())


def test_json_numbers_match_the_text() -> None:
    """Every number the text shows comes from --json: the cluster's p90 here."""
    data = run_json("--metrics", str(SERIES))
    text = runner.invoke(app, ["diagnose", "--metrics", str(SERIES)]).stdout
    p90 = finding(data["cluster"]["findings"], "kv-usage")
    assert p90["text"] in text
    assert f"{data['cluster']['kv_usage_p90_pct']:.1f} %" in text
