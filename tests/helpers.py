"""Builders the tests share: a Deployment or a Plan from a model name, a GPU name and flags."""

from __future__ import annotations

import functools
import json
import re
import shlex
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from planner.deployment import Deployment, ServeSettings
from planner.gpus import Gpu, get_gpu
from planner.model.load import LoadedModel, load_model, with_headers
from planner.model.specs import ModelSpec
from planner.plan_types import Plan, PlanOptions
from planner.recommend import plan
from planner.simulate.engine import BlockLayout, SimConfig
from planner.simulate.roofline import Roofline
from tests.conftest import fixture_config
from tests.test_weights import write_safetensors

_OPTIONS = {f.name for f in fields(PlanOptions)}


def settings(**flags: Any) -> ServeSettings:
    """ServeSettings from ``vllm serve``-named flags (``prefix_caching`` for
    ``enable_prefix_caching``; ``max_model_len=-1`` for auto-fit)."""
    if "prefix_caching" in flags:
        flags["enable_prefix_caching"] = flags.pop("prefix_caching")
    if flags.get("max_model_len") == -1:
        flags["max_model_len"], flags["auto_fit_max_model_len"] = None, True
    return ServeSettings(**flags)


def deployment(
    model: str | ModelSpec | LoadedModel, gpu: str | Gpu | None = None, **flags: Any
) -> Deployment:
    """A Deployment of a catalog model (or a spec) on a catalog GPU (or a Gpu, or none)."""
    if isinstance(model, str):
        model = load_model(model)
    elif isinstance(model, ModelSpec):
        model = with_headers(model)
    return Deployment(
        model=model, gpu=get_gpu(gpu) if isinstance(gpu, str) else gpu, settings=settings(**flags)
    )


def plan_for(
    model: str | ModelSpec | LoadedModel, gpu: str | Gpu | None = None, **kwargs: Any
) -> Plan:
    """:func:`planner.recommend.plan` for ``model`` on ``gpu``; keyword arguments are serve
    flags or :class:`PlanOptions` fields."""
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in _OPTIONS}
    return plan(deployment(model, gpu, **kwargs), PlanOptions(**options))


ENGINE_OPTIONS = Path(__file__).parent / "data" / "engine_options"


class CommandError(ValueError):
    """An engine command its engine would refuse, or one kvplan must not emit (an abbreviated
    option, an option twice)."""


@dataclass(frozen=True)
class OptionTable:
    """One engine's vendored option table (``tests/data/engine_options/<engine>.json``): the
    program words, positionals, and each option by its exact name with ``dest``, ``type``
    (int, float, str, flag, bool-negatable), and where the engine restricts them ``choices``,
    ``min``/``max``/``min_exclusive``, ``aliases`` and ``negations``."""

    engine: str
    program: tuple[str, ...]
    positional: tuple[str, ...]
    options: dict[str, dict[str, Any]]
    config_file: dict[str, dict[str, dict[str, Any]]]

    def spellings(self) -> dict[str, tuple[str, dict[str, Any], bool]]:
        """Every exact spelling -> (option name, its spec, whether it is a negation)."""
        out: dict[str, tuple[str, dict[str, Any], bool]] = {}
        for name, spec in self.options.items():
            for spelling in (name, *spec.get("aliases", ())):
                out[spelling] = (name, spec, False)
            for spelling in spec.get("negations", ()):
                out[spelling] = (name, spec, True)
        return out


@functools.cache
def option_table(engine: str) -> OptionTable:
    data = json.loads((ENGINE_OPTIONS / f"{engine}.json").read_text())
    return OptionTable(
        engine=data["engine"],
        program=tuple(data["program"]),
        positional=tuple(data["positional"]),
        options=data["options"],
        config_file=data.get("config_file", {}),
    )


ENGINES = ("vllm", "sglang", "trtllm")


def _typed(spelling: str, raw: str, spec: dict[str, Any]) -> object:
    """``raw`` as the option's type, within its choices and bounds."""
    kind = spec["type"]
    value: object
    if kind == "int":
        if not re.fullmatch(r"-?[0-9]+", raw):
            raise CommandError(f"{spelling} takes an integer, got {raw!r}")
        value = int(raw)
    elif kind == "float":
        if not re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", raw):
            raise CommandError(f"{spelling} takes a number, got {raw!r}")
        value = float(raw)
    elif kind == "str":
        value = raw
    elif kind == "json":
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise CommandError(f"{spelling} takes a JSON object, got {raw!r}") from None
        if not isinstance(value, dict):
            raise CommandError(f"{spelling} takes a JSON object, got {raw!r}")
    else:
        raise AssertionError(f"{spelling}: no value type {kind!r}")
    if "choices" in spec and value not in spec["choices"]:
        raise CommandError(f"{spelling} takes one of {spec['choices']}, got {raw!r}")
    number = value if isinstance(value, int | float) else None
    if number is not None:
        if "min" in spec and number < spec["min"]:
            raise CommandError(f"{spelling} must be at least {spec['min']}, got {raw}")
        if "max" in spec and number > spec["max"]:
            raise CommandError(f"{spelling} must be at most {spec['max']}, got {raw}")
        if "min_exclusive" in spec and number <= spec["min_exclusive"]:
            raise CommandError(f"{spelling} must be above {spec['min_exclusive']}, got {raw}")
    return value


def check_command(command: str, table: OptionTable | None = None) -> dict[str, object]:
    """Parse an engine command as strictly as kvplan promises to write it, against the engine's
    option table (found from the program when ``table`` is None): the program, the positionals,
    every option by its exact name (an abbreviation argparse would expand is refused), each value
    of its type, within its choices and bounds, no option twice (aliases and negations count as
    the option), no value after a flag. Returns {option name or positional: typed value}; a flag
    is True, its negation False. Raises :class:`CommandError`."""
    words = shlex.split(command)
    table = table or _table_for(words)
    if tuple(words[: len(table.program)]) != table.program:
        raise CommandError(f"not a {table.engine} command: {command}")
    spellings = table.spellings()
    positionals = list(table.positional)
    out: dict[str, object] = {}
    seen: dict[str, str] = {}
    rest = words[len(table.program) :]
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if not word.startswith("-"):
            if not positionals:
                raise CommandError(f"unexpected argument {word!r}")
            out[positionals.pop(0)] = word
            continue
        spelling, eq, inline = word.partition("=")
        if spelling not in spellings:
            raise CommandError(f"{table.engine} has no option {spelling} (exact names only)")
        name, spec, negated = spellings[spelling]
        if spec["dest"] in seen:
            raise CommandError(f"{spelling}: {seen[spec['dest']]} is already given")
        seen[spec["dest"]] = spelling
        if spec["type"] in ("flag", "bool-negatable"):
            if eq:
                raise CommandError(f"{spelling} takes no value, got {inline!r}")
            out[name] = not negated
            continue
        if spec["type"] == "str-list":  # nargs "+": the words up to the next option
            values = [inline] if eq else []
            while not eq and i < len(rest) and not rest[i].startswith("-"):
                values.append(rest[i])
                i += 1
            if not values:
                raise CommandError(f"{spelling} needs at least one value")
            out[name] = values
            continue
        if eq:
            raw = inline
        elif i < len(rest) and not rest[i].startswith("--"):
            raw, i = rest[i], i + 1
        else:
            raise CommandError(f"{spelling} needs a value")
        out[name] = _typed(spelling, raw, spec)
    if positionals:
        raise CommandError(f"missing {', '.join(positionals)}")
    return out


def _table_for(words: list[str]) -> OptionTable:
    for table in map(option_table, ENGINES):
        if tuple(words[: len(table.program)]) == table.program:
            return table
    raise CommandError(f"not an engine command: {shlex.join(words)}")


_IS = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
}


def check_config_file(text: str, table: OptionTable) -> dict[str, dict[str, object]]:
    """A YAML options file (TRT-LLM's ``--extra_llm_api_options``) against the table's
    ``config_file`` schema: known sections and keys, each value of its type, within its choices
    and bounds. Raises :class:`CommandError`."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise CommandError(f"not a mapping: {text!r}")
    for section, values in data.items():
        if section not in table.config_file or not isinstance(values, dict):
            raise CommandError(f"{table.engine} options file has no section {section!r}")
        for key, value in values.items():
            spec = table.config_file[section].get(key)
            if spec is None:
                raise CommandError(f"{section} has no key {key!r}")
            if not _IS[spec["type"]](value):
                raise CommandError(f"{section}.{key} takes a {spec['type']}, got {value!r}")
            if spec["type"] != "bool":
                _typed(f"{section}.{key}", str(value), spec)
    return data


# The field guide's card: Qwen2.5-7B-Instruct on a 24 GiB GPU at gpu_memory_utilization 0.9
# (kvplan's budget: 6,275 blocks of 896 KiB, 6,274 usable).
GUIDE_ARGS = [
    "estimate",
    "qwen2.5-7b-instruct",
    "--gpu-memory",
    "24GiB",
    "--gpu-memory-utilization",
    "0.9",
]


def guide_pool_blocks(max_num_seqs: int) -> int:
    """vLLM's pool on the guide's card by hand (``vllm serve`` on a 24 GiB GPU: a 2,048-token
    budget), for ``max_num_seqs``, as the newest release kvplan knows budgets it
    (planner.vllm_rules: FlashInfer's sampler, 1.5 fp32 logits copies; 0.25 GiB non-torch):

    requested  ceil(24 GiB x 0.9)                                   = 23,192,823,399 B
    weights    7,615,487,488 parameters (from the config) x 2 B    = 15,230,974,976 B
               + vLLM's rotary cos/sin cache, 32,768 positions x 128 x 2 B = 8,388,608 B
    activation the larger of the forward over 2,048 tokens, 2,048 x 2 B x (3 x 18,944
               intermediate + 4 x 3,584 hidden), and the sampler warm-up, rows x 152,064
               vocab x 4 B x 1.5 + 2,048 x 3,584 x 2.553 B held; + 27.1 MB. rows =
               min(2,048, max_num_seqs): the forward (0.27 GiB) is the larger up to 256
    non-torch  0.25 GiB = 268,435,456 B
    graphs     28 layers x graphs x 209,715 B (0.20 MiB); a PIECEWISE graph per size (1, 2,
               4, every 8 below 256, every 16 from 256, up to min(2 x max_num_seqs, 512)) and
               a FULL one per size up to max_num_seqs: 51 + 35 at 256, 19 + 11 at 64
    blocks     what is left // 917,504 B (28 layers x 16 tokens x 4 KV heads x 128 x 2 x 2 B)

    256 (vLLM's default) -> 7,478 blocks; 64 -> 7,836; 32 -> 7,913; 16 -> 7,951; 8 -> 7,971.
    """
    requested = -(-24 * (1 << 30) * 9 // 10)
    rows = min(2048, max_num_seqs)
    forward = 2048 * 2 * (3 * 18_944 + 4 * 3584)
    sampler = rows * 152_064 * 4 * 1500 // 1000
    held = 2048 * 3584 * 2553 // 1000
    activation = max(forward, sampler + held) + 27_100_000
    top = min(2 * max_num_seqs, 512, 2048)
    grid = [n for n in (1, 2, 4) if n <= top]
    grid += [*range(8, min(top + 1, 256), 8), *range(256, top + 1, 16)]
    graphs = 28 * (len(grid) + len([n for n in grid if n <= max_num_seqs])) * 209_715
    left = requested - 15_230_974_976 - 32_768 * 128 * 2 - activation - 268_435_456 - graphs
    return left // 917_504


def guide_plan(**kwargs: Any) -> Plan:
    """:func:`plan_for` on the field guide's card (``GUIDE_ARGS``), with more flags/options."""
    from planner.gpus import custom_gpu

    return plan_for(
        "qwen2.5-7b-instruct", custom_gpu(24 << 30), gpu_memory_utilization=0.9, **kwargs
    )


def parse_command(command: str) -> dict[str, str]:
    """An engine command back into {option without dashes: value as written}, checked against
    its engine's option table (:func:`check_command`); a flag reads "true", its negation
    "false", SGLang's ``model-path`` is ``model``."""
    out = {
        name.lstrip("-"): str(value).lower() if isinstance(value, bool) else str(value)
        for name, value in check_command(command).items()
    }
    if "model-path" in out:
        out["model"] = out.pop("model-path")
    return out


def sim_config(
    usable_blocks: int,
    *,
    block_size: int = 16,
    max_num_seqs: int = 4,
    max_num_batched_tokens: int = 64,
    max_model_len: int = 64,
    step_s: float = 1.0,
    prefix_caching: bool = False,
    null_block: bool = True,
    **overrides: Any,
) -> SimConfig:
    """The one :class:`SimConfig` factory of the scheduler tests: ``usable_blocks`` blocks of
    ``block_size`` tokens plus vLLM's null block (``null_block=False``: exactly that many),
    every step ``step_s`` seconds (``Roofline.constant``), prefix caching off; any other
    field by keyword. Each test file fixes its own defaults with ``functools.partial``."""
    values: dict[str, Any] = dict(
        num_gpu_blocks=usable_blocks + (1 if null_block else 0),
        layout=BlockLayout(block_size),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        roofline=Roofline.constant(step_s),
        prefix_caching=prefix_caching,
    )
    return SimConfig(**{**values, **overrides})  # a layout= or roofline= replaces the default


def moe_checkpoint(tmp_path: Path, *, mtp_layer: bool = True, tower: bool = True) -> Path:
    """A 2-layer MoE with 4 experts per layer, one MTP layer and a vision tower, every tensor
    a whole number of MiB (bf16: 1 MiB = 512 x 1,024 elements)."""
    config = json.loads(fixture_config("Qwen--Qwen3-30B-A3B").read_text())
    config.update(num_hidden_layers=2, num_experts=4, num_nextn_predict_layers=1)
    (tmp_path / "config.json").write_text(json.dumps(config))
    one = ("BF16", [512, 1024])  # 1 MiB
    tensors = {
        "model.embed_tokens.weight": ("BF16", [1024, 1024]),  # 2 MiB
        "lm_head.weight": ("BF16", [1024, 1024]),  # 2 MiB
    }
    for layer in (0, 1):
        tensors[f"model.layers.{layer}.self_attn.qkv.weight"] = ("BF16", [4096, 1024])  # 8 MiB
        tensors[f"model.layers.{layer}.mlp.shared_experts.up.weight"] = one
        for e in range(4):
            tensors[f"model.layers.{layer}.mlp.experts.{e}.up_proj.weight"] = one
    if mtp_layer:
        tensors["model.layers.2.self_attn.qkv.weight"] = ("BF16", [2048, 1024])  # 4 MiB
        for e in range(4):
            tensors[f"model.layers.2.mlp.experts.{e}.up_proj.weight"] = one
    if tower:
        tensors["visual.blocks.0.attn.qkv.weight"] = ("BF16", [1024, 1024])  # 2 MiB
        tensors["visual.blocks.1.attn.qkv.weight"] = ("BF16", [1024, 1024])  # 2 MiB
        tensors["multi_modal_projector.linear.weight"] = one
    write_safetensors(tmp_path / "model.safetensors", tensors)
    return tmp_path


def notes_of(stderr: str) -> list[str]:
    """The ``note:`` lines of ``stderr`` as notes: a note wraps at the terminal's width, its
    lines after the first two spaces in; each note comes back as its words joined by one
    space."""
    notes: list[list[str]] = []
    for line in stderr.splitlines():
        if line.startswith("note: "):
            notes.append(line.split())
        elif line.startswith("  ") and notes:
            notes[-1] += line.split()
    return [" ".join(words) for words in notes]
