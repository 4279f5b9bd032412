"""Workloads: trace and spec parsing, distributions, seeded generation, bad input."""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import asdict
from pathlib import Path

import pytest

from planner.errors import WorkloadError
from planner.simulate import BlockLayout, Roofline, SimConfig, simulate
from planner.simulate.spec import (
    Distribution,
    Empirical,
    LogNormal,
    generate,
    parse_distribution,
    parse_spec,
)
from planner.simulate.trace import load_workload, parse_trace, trace_lines
from planner.simulate.workload import Request

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "workloads").glob("*.yaml"))


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --------------------------------------------------------------------------- trace


def test_trace_fields_defaults_and_arrival_order(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "t.jsonl",
        '{"prompt_tokens": 100, "output_tokens": 5, "arrival_s": 2.5}\n'
        "\n"
        '{"prompt_tokens": 900, "output_tokens": 7, "prefix_id": "sys", "prefix_tokens": 800}\n',
    )
    w = load_workload(path)
    assert w.requests == (
        Request(900, 7, 0.0, "sys", 800),  # no arrival_s: t = 0, so it sorts first
        Request(100, 5, 2.5),
    )
    assert w.name == "t" and w.skipped == ()


BAD_LINES = (
    '{"prompt_tokens": 10, "output_tokens": 2}\n'
    '{"prompt_tokens": -4, "output_tokens": 2}\n'
    '{"output_tokens": 2}\n'
    "not json\n"
    '{"prompt_tokens": 10, "output_tokens": 2, "prefix_id": "s", "prefix_tokens": 10}\n'
)


def test_bad_trace_lines_are_named_and_fail(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.jsonl", BAD_LINES)
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    assert str(info.value) == (
        f"{path}: 4 bad line(s): line 2: prompt_tokens -4 is negative; line 3: prompt_tokens "
        "missing; line 4: not JSON (Expecting value); line 5: prefix_tokens 10 is not less "
        "than prompt_tokens 10 (the prompt includes the prefix and at least one token of its "
        "own). Fix them, or pass --skip-bad-lines to leave them out"
    )


def test_bad_trace_lines_can_be_skipped(tmp_path: Path) -> None:
    w = load_workload(write(tmp_path, "bad.jsonl", BAD_LINES), skip_bad_lines=True)
    assert w.requests == (Request(10, 2),)
    assert [s.split(":")[0] for s in w.skipped] == ["line 2", "line 3", "line 4", "line 5"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"prompt_tokens": 1.5, "output_tokens": 2}', "prompt_tokens 1.5 is not a whole number"),
        ('{"prompt_tokens": true, "output_tokens": 2}', "prompt_tokens true is not a whole number"),
        ('{"prompt_tokens": 5, "output_tokens": 0}', "output_tokens 0 is less than 1"),
        ('{"prompt_tokens": 5, "output_tokens": 2, "arrival_s": -1}', "arrival_s -1 is not a"),
        ('{"prompt_tokens": 5, "output_tokens": 2, "arrival_s": 1e999}', "is not a finite time"),
        ('{"prompt_tokens": 5, "output_tokens": 2, "prefix_id": "a"}', "go together"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_each_bad_field(line: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message.replace("(", r"\(")):
        parse_trace([line], "t.jsonl")


@pytest.mark.parametrize("bad", [1, 16, 17, 4080, 4081, 5000])
def test_a_bad_line_among_batches_of_plain_lines_is_named(bad: int) -> None:
    # plain lines are read in batches of 16, 32, ... up to 4,096 lines (lines 1-16, 17-48,
    # ..., 2,033-4,080, 4,081-8,176); the batch holding a bad line is read line by line, so
    # the message names it wherever it falls
    lines = [
        f'{{"prompt_tokens": {n + 1}, "output_tokens": 2, "arrival_s": {n / 10}}}\n'
        for n in range(6000)
    ]
    lines[bad - 1] = '{"prompt_tokens": 0, "output_tokens": 2}\n'
    with pytest.raises(WorkloadError, match=rf"1 bad line\(s\): line {bad}: prompt_tokens 0 "):
        parse_trace(lines, "t.jsonl")
    w = parse_trace(lines, "t.jsonl", skip_bad_lines=True)
    assert len(w.requests) == 5999 and w.requests[-1] == Request(6000, 2, 599.9)


def test_keeping_the_first_requests_of_batches_of_plain_lines() -> None:
    # 6,000 in-order lines read in batches (the 5,000th line, the last kept, in the middle
    # of one)
    lines = [
        f'{{"prompt_tokens": {n + 1}, "output_tokens": 2, "arrival_s": {n}}}\n' for n in range(6000)
    ]
    w = parse_trace(lines, "t.jsonl", num_requests=5000)
    assert len(w.requests) == 5000 and w.requests[-1] == Request(5000, 2, 4999.0)
    # a line past the 5,000th arriving earlier is one of the earliest 5,000: kept, in its
    # place by arrival, and the latest (the 5,000th line, t = 4,999) dropped
    lines[5499] = '{"prompt_tokens": 7, "output_tokens": 2, "arrival_s": 0.5}\n'
    w = parse_trace(lines, "t.jsonl", num_requests=5000)
    assert w.requests[1] == Request(7, 2, 0.5) and w.requests[-1] == Request(4999, 2, 4998.0)


def test_one_prefix_id_must_keep_its_length() -> None:
    lines = [
        '{"prompt_tokens": 900, "output_tokens": 1, "prefix_id": "s", "prefix_tokens": 800}',
        '{"prompt_tokens": 900, "output_tokens": 1, "prefix_id": "s", "prefix_tokens": 700}',
    ]
    with pytest.raises(WorkloadError, match="line 2: prefix_id 's' has prefix_tokens 700 here but"):
        parse_trace(lines, "t.jsonl")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("empty.jsonl", "\n\n", "has no requests"),
        ("empty.yaml", "", "the workload spec is empty"),
        ("w.csv", "a,b", "unknown workload format"),
        ("bad.yaml", "prompt_tokens: [1\n", "bad.yaml:2: invalid YAML"),
    ],
)
def test_unusable_files(tmp_path: Path, name: str, text: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        load_workload(write(tmp_path, name, text))


def test_missing_file() -> None:
    with pytest.raises(WorkloadError, match="traffic.jsonl: no such file"):
        load_workload("/nonexistent/traffic.jsonl")


# --------------------------------------------------------------------------- spec

SPEC = {
    "name": "s",
    "seed": 3,
    "num_requests": 400,
    "arrival": {"process": "poisson", "rate_per_s": 4},
    "prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.5},
    "output_tokens": {"dist": "uniform", "min": 10, "max": 20},
    "prefixes": [{"id": "sys", "tokens": 800, "fraction": 0.7}],
}


def test_spec_generation_is_seeded() -> None:
    spec = parse_spec(SPEC, "s.yaml")
    a, b = generate(spec), generate(spec)
    assert a.requests == b.requests
    assert generate(spec, seed=4).requests != a.requests
    assert len(generate(spec, num_requests=10).requests) == 10


def test_spec_draws_follow_their_distributions() -> None:
    w = generate(parse_spec(SPEC, "s.yaml"))
    rs = w.requests
    assert all(10 <= r.output_tokens <= 20 for r in rs)
    with_prefix = [r for r in rs if r.prefix_id == "sys"]
    assert all(r.prefix_tokens == 800 and r.prompt_tokens > 800 for r in with_prefix)
    assert len(with_prefix) / len(rs) == pytest.approx(0.7, abs=0.07)
    own = [r.prompt_tokens - r.prefix_tokens for r in rs]
    assert statistics.mean(own) == pytest.approx(300, rel=0.1)  # lognormal keeps its mean
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(rs, rs[1:], strict=False)]
    assert statistics.mean(gaps) == pytest.approx(1 / 4, rel=0.15)  # Poisson at 4 / s


@pytest.mark.parametrize(
    ("data", "check"),
    [
        (64, lambda xs: set(xs) == {64}),
        ({"dist": "fixed", "value": 7}, lambda xs: set(xs) == {7}),
        ({"dist": "uniform", "min": 3, "max": 5}, lambda xs: set(xs) == {3, 4, 5}),
        ({"dist": "normal", "mean": 100, "std": 0, "max": 90}, lambda xs: set(xs) == {90}),
        ({"dist": "normal", "mean": 0.3, "std": 0.1}, lambda xs: set(xs) == {1}),
        (
            {"dist": "empirical", "histogram": [[5, 5, 1], [9, 10, 3]]},
            lambda xs: set(xs) <= {5, 9, 10} and 0.15 < xs.count(5) / len(xs) < 0.35,
        ),
    ],
)
def test_distributions(data: object, check: object) -> None:
    dist = parse_distribution(data, "x")
    xs = dist.sample(random.Random(1), 2000)
    assert check(xs)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"dist": "gaussian", "mean": 1},
            'x: unknown distribution "gaussian"; use one of: '
            "fixed, uniform, normal, lognormal, empirical",
        ),
        ({"dist": "uniform", "min": 3}, "needs 'max'"),
        ({"dist": "normal", "mean": 3}, "'std' is missing"),
        ({"dist": "lognormal", "mean": -3, "sigma": 1}, "'mean' must be positive"),
        ({"dist": "fixed", "value": 0}, "'value' must be at least 1"),
        ({"dist": "fixed", "value": 3, "extra": 1}, "unknown key"),
        ({"dist": "empirical", "histogram": [[5, 2, 1]]}, "histogram row 1"),
        ({"dist": "empirical", "histogram": [[1, 2, 0]]}, "add up to 0"),
        ({"dist": "uniform", "min": 9, "max": 3}, "max 3 is less than min 9"),
    ],
)
def test_bad_distributions(data: object, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_distribution(data, "x")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"arrival": {"process": "weibull"}}, "unknown arrival process"),
        ({"arrival": {"process": "poisson"}}, "'rate_per_s' is missing"),
        ({"num_requests": 0}, "'num_requests' must be at least 1"),
        ({"prefixes": [{"id": "a", "tokens": 8, "fraction": 0.8}] * 2}, "add up to more than 1"),
        ({"typo": 1}, "unknown key"),
        ({"output_tokens": None}, "expected a mapping"),
    ],
)
def test_bad_specs(change: dict, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_spec({**SPEC, **change}, "s.yaml")


def test_burst_arrivals() -> None:
    spec = parse_spec({**SPEC, "arrival": {"process": "burst", "size": 3, "interval_s": 2}}, "s")
    times = [r.arrival_s for r in generate(spec, num_requests=7).requests]
    assert times == [0, 0, 0, 2, 2, 2, 4]


def test_lognormal_mean_parameterisation() -> None:
    xs = LogNormal(low=1, mean=1000, sigma=0.8).sample(random.Random(0), 20000)
    assert statistics.mean(xs) == pytest.approx(1000, rel=0.03)


@pytest.mark.parametrize("sigma", [0.0, 0.3, 1.0, 2.5])
def test_lognormal_sample_draws_as_normalvariate_does(sigma: float) -> None:
    # LogNormal.sample inlines random.normalvariate: the same numbers as one draw() (which
    # calls rng.normalvariate) at a time, clipping at low and high included
    dist = LogNormal(low=5, high=3000, mean=700, sigma=sigma)
    drawn = Distribution.sample(dist, random.Random(7), 5000)
    assert dist.sample(random.Random(7), 5000) == drawn
    assert min(drawn) >= 5 and max(drawn) <= 3000


@pytest.mark.parametrize("sigma", [0.0, 0.8, 1.0, 3.0])
def test_bulk_lognormal_draws_are_the_loops(monkeypatch: pytest.MonkeyPatch, sigma: float) -> None:
    # from spec.BULK_DRAWS draws LogNormal.sample runs on numpy's MT19937 started from the
    # Random's state: the same numbers, and the Random left where the loop leaves it
    pytest.importorskip("numpy")
    from planner.simulate import spec

    dist = LogNormal(low=3, high=2000, mean=300, sigma=sigma)
    monkeypatch.setattr(spec, "BULK_DRAWS", 1 << 60)
    loop_rng = random.Random("kvplan:3:prompt_tokens")
    loop = dist.sample(loop_rng, 30000)
    monkeypatch.setattr(spec, "BULK_DRAWS", 1)
    bulk_rng = random.Random("kvplan:3:prompt_tokens")
    assert dist.sample(bulk_rng, 30000) == loop
    assert bulk_rng.getstate() == loop_rng.getstate()
    monkeypatch.setattr(spec, "BULK_CHUNK", 999)  # chunks going on from the last one's draws
    chunked_rng = random.Random("kvplan:3:prompt_tokens")
    assert dist.sample(chunked_rng, 30000) == loop
    assert chunked_rng.getstate() == loop_rng.getstate()


def test_bulk_log_and_exp_decide_as_maths_at_the_edges() -> None:
    # numpy's log and exp decide a draw only away from the edge of its decision (spec.NEAR);
    # at the edge, within an ulp of it, math's: the acceptance test z^2 / 4 <= -log(u2), and
    # the whole number exp(x) rounds to (half to even) between whole bounds
    np = pytest.importorskip("numpy")
    from planner.simulate import spec

    rng = random.Random(11)
    u2 = np.array([1.0 - rng.random() for _ in range(2000)] + [1.0, 2.0**-53])
    exact = np.array([-math.log(u) for u in u2.tolist()])
    for lhs in (exact, np.nextafter(exact, -1.0), np.nextafter(exact, 9.0), exact * 0.5):
        want = [a <= -math.log(u) for a, u in zip(lhs.tolist(), u2.tolist(), strict=True)]
        assert spec._accepted(np, lhs, u2).tolist() == want
    # x whose exp is within an ulp or two of k + 0.5, and the rest of the range it is used in
    halves = [math.log(k + 0.5) for k in range(1, 3000)]
    xs = halves + [math.nextafter(x, 0) for x in halves] + [math.nextafter(x, 9) for x in halves]
    xs += [rng.uniform(-5, 709.0) for _ in range(2000)] + [709.0, -800.0, math.nan]
    x = np.array(xs)
    got = spec._exp_rounding(np, x)
    for low, high in ((1, 2000), (3, 10**9), (1, 1 << 40)):
        want = [low if math.isnan(v) else round(min(max(math.exp(v), low), high)) for v in xs]
        rounded = np.where(np.isnan(got), low, np.rint(np.clip(got, low, high)))
        assert rounded.astype(np.int64).tolist() == want


def test_empirical_picks_bins_by_weight() -> None:
    dist = parse_distribution({"dist": "empirical", "histogram": [[1, 1, 1], [2, 2, 0]]}, "x")
    assert isinstance(dist, Empirical)
    assert set(dist.sample(random.Random(0), 200)) == {1}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_shipped_examples_load(path: Path) -> None:
    w = load_workload(path)
    assert len(w.requests) > 0 and w.seed is not None


# --------------------------------------------------------------------------- trace == spec


def test_a_trace_and_its_spec_give_the_same_results(tmp_path: Path) -> None:
    spec_path = ROOT / "examples" / "workloads" / "chat.yaml"
    from_spec = load_workload(spec_path, num_requests=300)
    trace = tmp_path / "chat.jsonl"
    trace.write_text("\n".join(trace_lines(from_spec)) + "\n")
    from_trace = load_workload(trace)
    assert from_trace.requests == from_spec.requests
    config = SimConfig(
        num_gpu_blocks=3000,
        layout=BlockLayout(16),
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        max_model_len=16384,
        roofline=Roofline(15 * 10**9, 131072, 864 * 10**9, 362 * 10**12, 16 * 10**9, 0),
    )
    a, b = asdict(simulate(from_spec, config)), asdict(simulate(from_trace, config))
    assert a == b
    assert a["completed"] == 300 and a["prefix_hit_tokens"] > 0
    assert json.loads(trace.read_text().splitlines()[0])["prompt_tokens"] >= 1


@pytest.mark.parametrize(
    "dist",
    [
        {"dist": "lognormal", "mean": 1e308, "sigma": 3},  # exp() of the draw overflowed
        {"dist": "lognormal", "mean": 5, "sigma": 1e200},  # sigma ** 2 overflowed
        {"dist": "normal", "mean": 1e308, "std": 1e308},  # the draw was infinite
    ],
)
def test_extreme_distributions_clip_instead_of_crashing(dist: dict) -> None:
    spec = parse_spec({**SPEC, "prompt_tokens": dist, "prefixes": [], "num_requests": 200}, "x")
    lengths = [r.prompt_tokens for r in generate(spec).requests]
    assert all(1 <= n <= 1 << 40 for n in lengths)


def test_a_prefix_id_must_be_a_name() -> None:
    line = '{"prompt_tokens": 9, "output_tokens": 1, "prefix_id": {"a": 1}, "prefix_tokens": 2}'
    with pytest.raises(WorkloadError, match="prefix_id a mapping is not a string"):
        parse_trace([line], "t.jsonl")
