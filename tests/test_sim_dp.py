"""Data parallelism in ``kvplan simulate``: ranks with their own pools,
requests dispatched as vLLM 0.33's DP load balancer does (``planner.simulate.cluster``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings

from planner.simulate import cluster
from planner.simulate.engine import SimConfig, SimEngine, SimRequest
from planner.simulate.run import simulate
from planner.simulate.workload import Request, Workload
from tests.helpers import sim_config
from tests.test_simulate import scenarios


def workload(*requests: Request) -> Workload:
    return Workload(name="test", source="test", requests=tuple(requests))


@pytest.mark.parametrize(
    ("loads", "start", "rank"),
    [
        # idle ranks tie: the scan's first, and the scan starts one rank later per request
        ([(0, 0, 0.0), (0, 0, 0.0)], 0, 0),
        ([(0, 0, 0.0), (0, 0, 0.0)], 1, 1),
        # waiting + running = 10, 11, 10; rank 0's 2 waiting at 90 % usage add
        # 2 x 6 x (0.9 - 0.5) = 4.8; rank 2's 40 % is under the 50 % knee: 14.8, 11, 10
        ([(2, 8, 0.9), (0, 11, 0.95), (1, 9, 0.4)], 0, 2),
        # 3 requests against 4, but 1 waiting at 90 %: 3 + 6 x 0.4 = 5.4 > 4
        ([(1, 2, 0.9), (0, 4, 0.1)], 0, 1),
        # the same at 50 % usage: no penalty, 3 < 4
        ([(1, 2, 0.5), (0, 4, 0.1)], 0, 0),
    ],
)
def test_the_load_balancers_choice_by_hand(
    loads: list[tuple[int, int, float]], start: int, rank: int
) -> None:
    assert cluster.pick_rank(loads, start) == rank


def test_requests_at_once_alternate_between_two_ranks() -> None:
    # 4 requests at t = 0 (40-token prompts, 10 outputs), 2 ranks. Dispatch: request 0 to
    # rank 0 (tie, scan from 0); request 1: rank 0 has 1 waiting, rank 1 none -> rank 1;
    # request 2: 1 and 1, scan from rank 0 -> 0; request 3: 2 against 1 -> rank 1.
    # Each rank then runs 2 requests with a 64-token budget: step 0 prefills the first (40)
    # and 24 of the second, step 1 the second's last 16; they decode 9 more tokens each and
    # finish in steps 9 and 10; 11 steps of 1 s per rank.
    cfg = sim_config(20, null_block=False, max_num_seqs=8, max_model_len=300, data_parallel_size=2)
    r = simulate(workload(*(Request(40, 10) for _ in range(4))), cfg)
    assert list(r.finish_steps) == [9, 9, 10, 10]
    assert [(x.requests, x.completed, x.steps, x.output_tokens) for x in r.ranks] == [
        (2, 2, 11, 20),
        (2, 2, 11, 20),
    ]
    assert (r.requests, r.completed, r.steps, r.duration_s) == (4, 4, 11, 11.0)
    assert r.output_tokens_per_s == 4 * 10 / 11.0  # all ranks' tokens over the cluster's time
    # one rank holds 3 + 3 blocks after step 1 and a 4th for the first request's 49th token
    # (step 9): 7 at most, on each rank
    assert r.peak_blocks == max(x.peak_blocks for x in r.ranks) == 7
    # 2 requests running on each rank for 11 s: 4 in the cluster, less the first request's
    # last step (it finished in step 9, the second in 10): (4 x 10 + 2 x 1) / 11
    assert r.mean_concurrency == pytest.approx((4 * 10 + 2 * 1) / 11)


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_each_rank_replays_as_a_lone_engine_fed_its_requests(
    case: tuple[Workload, SimConfig],
) -> None:
    # the ranks are the engine, fed by the dispatcher instead of reading the trace: each
    # rank's requests replayed alone give the same finish steps, preemptions, peak and steps
    # (whole-second arrivals and steps: splitting a decode stretch at another rank's arrival
    # changes no time)
    w, cfg = case
    fed: dict[int, list[int]] = {}
    feed = SimEngine.feed

    def record(self: SimEngine, r: SimRequest) -> None:
        fed.setdefault(id(self), []).append(r.index)
        feed(self, r)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SimEngine, "feed", record)
        got = simulate(w, replace(cfg, data_parallel_size=3))
    assert got.completed == len(w.requests)
    assert sorted(x.requests for x in got.ranks) == sorted(
        [len(v) for v in fed.values()] + [0] * (3 - len(fed))
    )
    for indices in fed.values():
        alone = simulate(workload(*(w.requests[i] for i in indices)), cfg)
        assert [got.finish_steps[i] for i in indices] == list(alone.finish_steps)
        assert any(
            (x.requests, x.steps, x.preemptions, x.peak_blocks)
            == (len(indices), alone.steps, alone.preemptions, alone.peak_blocks)
            for x in got.ranks
        )
