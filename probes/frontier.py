"""Find the true frontier: the largest pool, to one block, that still allocates and runs.

``fits(n)`` is one trial: allocate an ``n``-block pool, run one decode step over it, release
everything. A trial that raises ``torch.OutOfMemoryError`` is a "no"; after every trial,
passed or failed, memory is released (``gc`` + ``empty_cache``) and the allocator must be back
at its baseline -- the recovery the probe reports for every OOM.

The search starts at the plan's prediction ``p`` because the frontier is usually close to it:
it gallops away from ``p`` (``p+1, p+2, p+4, ...`` while trials pass, ``p-1, p-2, p-4, ...``
while they fail) until it brackets the frontier, then bisects the bracket. A frontier ``d``
blocks from the prediction costs about ``2 log2(d) + 2`` trials instead of ``log2(upper)``; an
upper bound (the free bytes over the bytes per block) caps the gallop.

A ``guess`` (the probe passes the plan plus the activation headroom a decode step leaves
unused) starts the gallop there instead, downwards when the guess does not fit.

Worked examples (``test_bisection_finds_planted_frontier``): frontier 1,000, prediction 990 ->
trials 990 (yes), 991, 993, 997 (yes), 1,005 (no), then 1,001 (no), 999, 1,000 (yes): 8
trials, answer 1,000. With guess 1,010: 990 (yes), 1,010 (no), 1,009, 1,007, 1,003 (no),
995 (yes), then 999 (yes), 1,001 (no), 1,000 (yes): 9 trials.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from probes.plan import Trial


@dataclass
class FrontierSearch:
    """The result: the frontier, every trial, and whether memory always came back."""

    num_blocks: int
    trials: list[Trial] = field(default_factory=list)
    baseline_bytes: int = 0

    @property
    def num_ooms(self) -> int:
        return sum(1 for t in self.trials if not t.fits)

    @property
    def recovered(self) -> bool:
        """Allocated memory returned to the baseline after every trial (OOM or not)."""
        return all(t.allocated_after_bytes == self.baseline_bytes for t in self.trials)


def find_frontier(
    fits: Callable[[int], tuple[bool, int, str | None]],
    *,
    start: int,
    upper: int,
    guess: int | None = None,
    allocated: Callable[[], int],
    release: Callable[..., None],
    on_trial: Callable[[Trial], None] | None = None,
) -> FrontierSearch:
    """Largest ``n`` in ``[0, upper)`` with ``fits(n)`` true, assuming fits is monotone.

    Args:
        fits: one trial; returns (ran, peak bytes during the trial, OOM message or None).
        start: where to begin (the plan's prediction), clamped to ``[1, upper - 1]``.
        upper: a size known not to fit (free bytes // bytes per block + 1).
        guess: where the frontier probably is, if ``start`` fits (the probe's: the plan plus
            the activation headroom a decode step does not use); the gallop starts there.
        allocated: bytes the allocator holds now (checked against the baseline after trials).
        release: free cached memory (``gc`` + ``empty_cache``); ``release(full=True)`` also
            collects old reference cycles, tried when memory is not back at the baseline.
        on_trial: called after each trial (the CLI's progress bar).

    Returns:
        The :class:`FrontierSearch`; ``num_blocks`` is 0 when not even one block fits.
    """
    release(full=True)
    search = FrontierSearch(num_blocks=0, baseline_bytes=allocated())
    cache: dict[int, bool] = {}

    def trial(n: int) -> bool:
        if n in cache:
            return cache[n]
        if n <= 0:
            return True
        if n >= upper:
            return False
        ok, peak, error = fits(n)
        release()
        if allocated() != search.baseline_bytes:
            release(full=True)
        result = Trial(
            num_blocks=n,
            fits=ok,
            peak_bytes=peak,
            allocated_after_bytes=allocated(),
            error=error,
        )
        search.trials.append(result)
        if on_trial is not None:
            on_trial(result)
        cache[n] = ok
        return ok

    if upper <= 1:
        return search
    p = min(max(1, start), upper - 1)
    if trial(p):
        lo, step = p, 1
        if guess is not None and p < guess < upper and not trial(guess):
            hi = guess  # gallop down from the guess towards the plan
            while hi - step > lo and not trial(hi - step):
                hi -= step
                step *= 2
            lo = max(lo, hi - step)
        else:
            if guess is not None and p < guess < upper:
                lo = guess
            while trial(lo + step):
                lo += step
                step *= 2
            hi = min(lo + step, upper)
    else:
        hi, step = p, 1
        while not trial(hi - step):
            hi -= step
            step *= 2
        lo = max(hi - step, 0)
    while hi - lo > 1:  # invariant: trial(lo) is true, trial(hi) is false
        mid = (lo + hi) // 2
        if trial(mid):
            lo = mid
        else:
            hi = mid
    search.num_blocks = lo
    return search


def oom_trial(run: Callable[[], int]) -> tuple[bool, int, str | None]:
    """Run one trial; an out-of-memory error is a 'no', anything else propagates."""
    try:
        return True, run(), None
    except torch.OutOfMemoryError as exc:
        return False, 0, str(exc).splitlines()[0][:200]
