"""The bisection finds a planted frontier exactly, and memory comes back after every OOM."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from probes.alloc import BudgetedAllocator  # noqa: E402
from probes.frontier import find_frontier, oom_trial  # noqa: E402

KIB = 1 << 10


def planted(frontier: int):
    seen: list[int] = []

    def fits(n: int) -> tuple[bool, int, str | None]:
        seen.append(n)
        return n <= frontier, 0, None

    return fits, seen


@pytest.mark.parametrize(
    ("start", "guess", "trials"),
    [
        # the frontier module's worked examples (frontier 1,000)
        (990, None, [990, 991, 993, 997, 1005, 1001, 999, 1000]),
        (990, 1010, [990, 1010, 1009, 1007, 1003, 995, 999, 1001, 1000]),
        # the plan is above the frontier: gallop down 1,020 -> 1,019 -> 1,017 -> 1,013 -> 1,005
        # -> 989 (fits), then bisect (989, 1,005)
        (1020, None, [1020, 1019, 1017, 1013, 1005, 989, 997, 1001, 999, 1000]),
    ],
)
def test_bisection_trial_sequence(start: int, guess: int | None, trials: list[int]) -> None:
    fits, seen = planted(1000)
    search = find_frontier(
        fits, start=start, upper=10**6, guess=guess, allocated=lambda: 0, release=lambda **_: None
    )
    assert search.num_blocks == 1000
    assert seen == trials


@pytest.mark.parametrize("frontier", [0, 1, 2, 7, 500, 4095])
def test_bisection_finds_any_planted_frontier(frontier: int) -> None:
    fits, _ = planted(frontier)
    for start in (1, frontier, frontier + 3, 3000):
        search = find_frontier(
            fits, start=start, upper=4096, allocated=lambda: 0, release=lambda **_: None
        )
        assert search.num_blocks == frontier


def test_bisection_finds_planted_frontier_under_the_budgeted_allocator() -> None:
    # Budget 1,000 KiB; 100 KiB stay allocated (the "weights"); a trial allocates n blocks of
    # 3 KiB and a 2 KiB scratch tensor. Largest n: 100 + 3n + 2 <= 1,000 -> n = 299.
    with BudgetedAllocator(1000 * KIB) as mem:
        weights = torch.empty(100 * KIB, dtype=torch.uint8)

        def fits(n: int) -> tuple[bool, int, str | None]:
            def run() -> int:
                pool = torch.empty(n, 3 * KIB, dtype=torch.uint8)
                scratch = torch.empty(2 * KIB, dtype=torch.uint8)
                del pool, scratch
                return mem.peak()

            mem.reset_peak()
            return oom_trial(run)

        search = find_frontier(
            fits,
            start=250,
            upper=400,
            allocated=mem.allocated,
            release=mem.release,
        )
        assert search.num_blocks == 299
        assert search.num_ooms >= 1
        # every trial, the failed ones included, left exactly the weights allocated
        assert search.recovered and search.baseline_bytes == 100 * KIB
        assert all(t.allocated_after_bytes == 100 * KIB for t in search.trials)
        assert any(t.error and "memory budget" in t.error for t in search.trials)
        del weights


def test_non_oom_errors_propagate() -> None:
    def fits(n: int) -> tuple[bool, int, str | None]:
        return oom_trial(lambda: 1 // 0)

    with pytest.raises(ZeroDivisionError):
        find_frontier(fits, start=5, upper=10, allocated=lambda: 0, release=lambda **_: None)
