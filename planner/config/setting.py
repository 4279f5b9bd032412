"""What a serve setting is (:class:`Setting`: its kind, concern, spellings and the commands
that take it); every setting is declared in :mod:`planner.config.fields`.

This module imports nothing from kvplan: every layer may read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal[
    "count",  # a whole number in [1, 2^40]
    "count0",  # a whole number in [0, 2^40]
    "length",  # a count, or -1 (vLLM's auto-fit of max_model_len)
    "bool",  # true or false
    "fraction",  # a number in (0, 1]
    "gib",  # a number of GiB >= 0 (vLLM's float GiB flags)
    "size",  # a byte size with a unit (24GiB, 80GB) or integer bytes
    "choice",  # one of ``choices`` (a name)
    "version",  # a vLLM release, 0.10.2
    "json",  # a JSON object on the command line, a mapping in YAML, a dict in a log
    "modules",  # module names: several words, a comma list, a YAML list
    "path",  # a file or folder
    "eager",  # a boolean that means cuda_graph_bytes 0
]


Concern = Literal[
    "engine",
    "parallel",
    "cache",
    "scheduler",
    "lora",
    "offload",
    "multimodal",
    "speculative",
    "release",
]


Spelling = Literal["cli", "yaml", "log"]


EngineName = Literal["vllm", "sglang", "trtllm"]


ENGINES: tuple[EngineName, ...] = ("vllm", "sglang", "trtllm")


# The commands whose options come from the declarations, and which settings each takes.
Command = Literal["estimate", "simulate", "verify", "diagnose"]


ALL: frozenset[Command] = frozenset({"estimate", "simulate", "verify", "diagnose"})


PLANNING: frozenset[Command] = frozenset({"estimate", "simulate"})


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One serve setting and all its spellings.

    ``engines`` maps each engine to its serve flag for this setting, or None where that
    engine has none; ``no_flag`` says why for each None (a test holds every None to a
    reason). ``field`` is the ServeSettings field the value lands in (``enforce_eager`` lands
    in ``cuda_graph_bytes``).
    """

    name: str
    kind: Kind
    help: str
    cli: str
    yaml: str
    log: str | None
    concern: Concern
    engines: Mapping[EngineName, str | None]
    no_flag: Mapping[EngineName, str] = field(default_factory=dict)
    short: tuple[str, ...] = ()
    unit: str = ""
    choices: tuple[str, ...] = ()
    default: str = ""
    negatable: bool = False  # --flag/--no-flag (a bool whose default is on)
    commands: frozenset[Command] = ALL
    # the example value the registry's test feeds through every spelling
    example: Any = None
    # simulate --compare KEY (a comma list of values compares them)
    axis: str | None = None

    @property
    def flags(self) -> tuple[str, ...]:
        """Every command-line spelling: kvplan's short ones first, then vLLM's."""
        return (*self.short, self.cli)

    @property
    def message_flag(self) -> str:
        """The flag a message about this setting names (kvplan's short one where it has one)."""
        return self.short[0] if self.short else self.cli

    def spelled(self, spelling: Spelling) -> str | None:
        return {"cli": self.cli, "yaml": self.yaml, "log": self.log}[spelling]
