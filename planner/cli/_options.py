"""What the commands share: the option aliases of the serving flags, ``user_errors()`` (a
KvplanError as one ``Error:`` line) and small flag parsers."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from planner.config.fields import for_command, setting
from planner.config.setting import Command, Setting
from planner.errors import KvplanError, UsageError

if TYPE_CHECKING:
    from planner.deployment import ServeSettings
    from planner.gpus import Gpu


ModelArg = Annotated[
    str,
    typer.Argument(
        help="Catalog name (llama-3.1-8b), Hub id (org/name), or local dir / config.json.",
        show_default=False,
        metavar="MODEL",
    ),
]
BatchOpt = Annotated[
    str, typer.Option("--batch", help="Comma-separated batch sizes for the worked example.")
]
RevisionOpt = Annotated[
    str | None,
    typer.Option(
        "--revision", help="Hub branch, tag or commit (skips the catalog).", show_default=False
    ),
]
OfflineOpt = Annotated[
    bool, typer.Option("--offline", help="Use only the local HF cache (like HF_HUB_OFFLINE=1).")
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON (integer bytes) instead of tables.")
]
GpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        help="GPU from the catalog (h100, l4, rtx-4090 ...; `kvplan gpus`) or as nvidia-smi "
        "names it ('NVIDIA H100 80GB HBM3').",
        show_default=False,
    ),
]
GpuMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu-memory",
        help="Total GPU memory for a GPU not in the catalog (24GiB, 80GB, or bytes).",
        show_default=False,
    ),
]
GpusOpt = Annotated[
    int | None,
    typer.Option(
        "--gpus",
        help="GPUs to spread over: every TP x DP split of them is planned and the one that "
        "holds the most KV named.",
        show_default=False,
    ),
]
NodesOpt = Annotated[
    int, typer.Option("--nodes", help="Nodes (with --gpus-per-node): one command per node.")
]
GpusPerNodeOpt = Annotated[
    int | None,
    typer.Option("--gpus-per-node", help="GPUs per node; TP stays inside one.", show_default=False),
]


SwapSpaceOpt = Annotated[
    str | None,
    typer.Option(
        "--swap-space",
        help="Refused: vLLM's V1 engine has no swap space (it preempts by recomputing); see "
        "--kv-offloading-size.",
        show_default=False,
    ),
]
# vLLM options that take several words (argparse nargs="+"), as kvplan accepts them too.
NARGS_OPTIONS = ("--lora-target-modules",)


def join_nargs(args: list[str]) -> list[str]:
    """``--lora-target-modules qkv_proj o_proj`` (vLLM's spelling) as one word click can
    read: ``--lora-target-modules qkv_proj,o_proj``; the words up to the next option."""
    out: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        out.append(word)
        i += 1
        if word in NARGS_OPTIONS:
            words = []
            while i < len(args) and not args[i].startswith("-"):
                words.append(args[i])
                i += 1
            if words:
                out.append(",".join(words))
    return out


def refuse_swap_space(value: str | None) -> None:
    """``--swap-space`` is gone: say why, and what to use instead."""
    if value is not None:
        raise UsageError(
            "--swap-space: vLLM 0.33 has no swap space (the V1 engine preempts by recomputing "
            "a request, never by swapping its blocks to the CPU); for a CPU tier of prefix "
            "blocks use --kv-offloading-size GIB"
        )


def lora_targets(values: list[str] | None) -> str | None:
    """``--lora-target-modules`` as given (repeated, comma- or space-separated) in one word."""
    return ",".join(values) if values else None


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Show a KvplanError as one `Error:` line and exit 1 (usage: 2); KVPLAN_DEBUG re-raises.
    The library's notes (:mod:`planner.notes`: which entry an ambiguous GPU name picked) go to
    stderr as `note:` lines, each once."""
    from planner.notes import notes_to

    seen: set[str] = set()

    def note(text: str) -> None:
        from planner.render._output import err_console, print_wrapped
        from planner.secrets import error_line

        line = error_line(text)
        if line not in seen:
            seen.add(line)
            print_wrapped(err_console(), f"note: {line}", hang="  ")

    try:
        with notes_to(note):
            yield
    except KvplanError as exc:
        if os.environ.get("KVPLAN_DEBUG"):
            raise
        from planner.secrets import error_line

        typer.echo(f"Error: {error_line(str(exc))}", err=True)
        raise typer.Exit(exc.exit_code) from None


def batch_sizes_arg(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--batch takes comma-separated integers, got {text!r}") from None
    return sizes


def comma_values(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def size_arg(text: str | None, flag: str) -> int | None:
    from planner.units import parse_size

    return parse_size(text, flag=flag) if text else None


def gpu_arg(gpu: str | None, gpu_memory: str | None) -> Gpu | None:
    """--gpu / --gpu-memory as a Gpu (memory overrides the catalog's; an A100 stays one)."""
    from planner.gpus import resolve_gpu
    from planner.units import parse_size

    memory = parse_size(gpu_memory, flag="--gpu-memory", unit_required=True) if gpu_memory else None
    return resolve_gpu(gpu, memory)


# --------------------------------------------------------------------------- generated options


def _option_type(s: Setting) -> tuple[Any, Any]:
    """The typer annotation type and default of one declared setting's option; every default
    means "not given" (the settings' own default then applies)."""
    if s.kind in ("count", "count0", "length"):
        return int | None, None
    if s.kind == "bool" and s.negatable:
        return bool | None, None
    if s.kind in ("bool", "eager"):
        return bool, False
    if s.kind in ("fraction", "gib"):
        return float | None, None
    if s.kind == "modules":
        return list[str] | None, None
    return str | None, None


def _compares(s: Setting, command: Command) -> bool:
    """Whether ``command`` takes a comma list of ``s``'s values and compares them: its
    ``--compare`` axes (:data:`planner.config.fields.COMPARE_AXES`), in ``kvplan simulate``;
    a boolean axis is compared with ``--compare KEY=on,off`` only."""
    return command == "simulate" and s.axis is not None and s.kind not in ("bool", "eager")


def _option(s: Setting, command: Command) -> Any:
    """``Annotated[type, typer.Option(...)]`` for one declared setting."""
    kind, _ = _option_type(s)
    flags = (f"{s.cli}/--no-{s.cli.removeprefix('--')}",) if s.negatable else s.flags
    text = s.help + (f" [default: {s.default}]" if s.default else "")
    if _compares(s, command):
        kind = str | None
        text += f" A comma list compares them (as --compare {s.axis}=V1,V2)."
    return Annotated[kind, typer.Option(*flags, help=text, show_default=False)]


def serve_options(command: Command) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the options of every setting declared for it
    (:func:`planner.config.fields.for_command`), after its own parameters.

    The command function takes ``serve: ServeArgs`` instead of one parameter per setting;
    ``serve.settings()`` parses them (inside the command's ``user_errors()``), as vLLM's
    ``EngineArgs.add_cli_args`` builds its flags from the config fields.
    """
    declared = for_command(command)

    def decorate(func: Callable[..., None]) -> Callable[..., None]:
        own = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in inspect.signature(func, eval_str=True).parameters.values()
            if p.name != "serve"
        ]
        taken = {p.name for p in own}
        generated = [
            inspect.Parameter(
                s.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=_option_type(s)[1],
                annotation=_option(s, command),
            )
            for s in declared
            if s.name not in taken
        ]
        names = [p.name for p in generated]
        compared = frozenset(s.name for s in declared if _compares(s, command))

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> None:
            given = {name: kwargs.pop(name) for name in names}
            func(serve=ServeArgs(given, compared), **kwargs)

        params = own + generated
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate


@dataclass(frozen=True)
class ServeArgs:
    """The declared settings' options as a command received them (None / False: not given)."""

    values: Mapping[str, Any]
    compared: frozenset[str] = frozenset()  # the settings given as comma lists to compare

    def axes(self) -> dict[str, list[str]]:
        """The compared settings' values by ``--compare`` key (``kv-cache-dtype``: ``["auto",
        "fp8"]``; empty when not given)."""
        return {
            str(setting(name).axis): comma_values(self.values.get(name))
            for name in sorted(self.compared)
        }

    def given(self) -> dict[str, Any]:
        """The options the user gave, by setting name (a list option as one comma word); the
        compared ones are :meth:`axes`'."""
        out: dict[str, Any] = {}
        for name, value in self.values.items():
            if name in self.compared:
                continue
            flag_off = value is False and not setting(name).negatable  # a plain flag not given
            if value is None or flag_off:
                continue
            out[name] = lora_targets(value) if isinstance(value, list) else value
        return out

    def typed(self) -> dict[str, Any]:
        """The options the user gave, each typed as :class:`ServeSettings` holds it, by setting
        name (``--kv-cache-dtype fp8`` is ``KVDtype.FP8``, ``--kv-cache-memory 20GiB`` bytes;
        ``--enforce-eager`` True, ``--max-model-len -1`` as given): the overrides diagnose
        layers over a log's settings."""
        out: dict[str, Any] = {}
        for name, value in self.given().items():
            s = setting(name)
            if s.kind in ("eager", "length"):
                out[name] = value
                if s.kind == "length" and value != -1:
                    settings_from({name: value})  # refuses 0 as vLLM would
                continue
            out[name] = getattr(settings_from({name: value}), name)
        return out

    def settings(self, **overrides: Any) -> ServeSettings:
        """The options as :class:`ServeSettings`, over ``overrides`` (a command's own
        defaults, by setting name), by the parser plans files and boot logs go through; the
        first problem is the error."""
        return settings_from(self.given(), defaults=overrides)


def settings_from(given: Mapping[str, Any], *, defaults: Mapping[str, Any] = {}) -> ServeSettings:
    """Settings from values by setting name as a user typed them (``{"tp": 2,
    "kv_cache_memory_bytes": "20GiB"}``), read in the CLI spelling: ``--enforce-eager`` after
    ``--cuda-graph-memory`` (eager wins), ``--max-model-len -1`` vLLM's auto-fit."""
    from planner.deployment import ServeSettings, refuse_fp32_kv

    values = {**defaults, **given}
    ordered = sorted(values.items(), key=lambda kv: kv[0] == "enforce_eager")
    raw = {setting(name).cli: value for name, value in ordered}
    settings, problems = ServeSettings.from_mapping(raw, spelling="cli")
    if problems:
        raise UsageError(problems[0][1])
    refuse_fp32_kv(settings.kv_cache_dtype, settings.engine)
    return settings
