"""The three outcomes of a deployment, in the words every view uses (one meaning per word).

- **won't start**: vLLM refuses (the weights, one ``max_model_len`` request, or a hybrid's Mamba
  blocks do not fit; or what runs after the pool is allocated does not);
- **starts, queues at worst case**: with every request at ``max_model_len`` only so many run at
  once and the rest wait;
- **fits at worst case**: every running request fits at ``max_model_len`` at once.

``Outcome`` is a ``str`` enum, so the JSON contract keeps its strings (``"wont_start"``) and a
member compares equal to them.
"""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    WONT_START = "wont_start"
    QUEUES_AT_WORST_CASE = "queues_at_worst_case"
    FITS_AT_WORST_CASE = "fits_at_worst_case"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def phrase(self) -> str:
        """The words a view prints: ``won't start``, ``starts, queues at worst case``, ..."""
        return PHRASES[self]


PHRASES: dict[Outcome, str] = {
    Outcome.WONT_START: "won't start",
    Outcome.QUEUES_AT_WORST_CASE: "starts, queues at worst case",
    Outcome.FITS_AT_WORST_CASE: "fits at worst case",
}
