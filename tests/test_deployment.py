"""The value objects every command shares: Gpu, ServeSettings, Deployment, their spellings, and
the promise they exist for: the same deployment gets the same defaults, budget and blocks in
every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.cli import app
from planner.deployment import ServeSettings, as_flags, as_yaml, vllm_batch_defaults
from planner.errors import SettingError, UsageError
from planner.gpus import Gpu, custom_gpu, get_gpu, resolve_gpu
from planner.model.specs import Engine, KVDtype

GIB = 1 << 30
runner = CliRunner()


# ------------------------------------------------------------------ Gpu


def test_catalog_gpus_carry_is_a100_and_the_roofline() -> None:
    a100 = get_gpu("a100-80gb")
    assert a100.is_a100 and not get_gpu("h100").is_a100
    assert a100.bandwidth_bytes_per_s and a100.bf16_flops
    # --gpu a100-80gb --gpu-memory 80GiB is still an A100 (vLLM's defaults follow the name)
    custom = resolve_gpu("a100-80gb", 80 * GIB)
    assert custom is not None and custom.is_a100 and custom.memory_bytes == 80 * GIB
    assert custom.source == "--gpu-memory"
    plain = resolve_gpu(None, 24 * GIB)
    assert plain == Gpu(name="custom", memory_bytes=24 * GIB, source="--gpu-memory")
    assert not plain.is_a100 and plain.bandwidth_bytes_per_s is None
    assert resolve_gpu(None, None) is None
    # a detected GPU goes by its driver name
    assert Gpu(name="NVIDIA A100-SXM4-80GB", memory_bytes=80 * GIB).is_a100
    assert not Gpu(name="NVIDIA H100 80GB HBM3", memory_bytes=80 * GIB).is_a100


def test_gpu_memory_must_be_positive() -> None:
    with pytest.raises(UsageError, match="--gpu-memory must be positive"):
        custom_gpu(0)
    with pytest.raises(UsageError, match="--gpu-memory must be positive"):
        get_gpu("h100").with_memory(-1, "--gpu-memory")


# ------------------------------------------------------------------ batch defaults


@pytest.mark.parametrize(
    ("gpu", "length", "seqs", "expected"),
    [
        # EngineArgs.get_batch_defaults (vLLM 0.33): >= 160 GiB 16,384 / 1,024; >= 70 GiB and not
        # an A100 8,192 / 1,024; otherwise (and with no GPU) 2,048 / 256.
        ("h100", 131_072, None, (8_192, 1_024)),  # 79.18 GiB
        ("h200", 131_072, None, (8_192, 1_024)),  # 139.80 GiB < 160
        ("b200", 131_072, None, (16_384, 1_024)),  # 178 GiB >= 160
        ("a100-80gb", 131_072, None, (2_048, 256)),  # an A100, whatever its size
        ("l4", 131_072, None, (2_048, 256)),
        (None, 131_072, None, (2_048, 256)),
        # tokens = min(tokens, seqs x len): 4 x 1,000 = 4,000 on an H100
        ("h100", 1_000, 4, (4_000, 4)),
    ],
)
def test_vllm_batch_defaults(
    gpu: str | None, length: int, seqs: int | None, expected: tuple[int, int]
) -> None:
    g = get_gpu(gpu) if gpu else None
    assert vllm_batch_defaults(length, g, None, seqs) == expected
    assert ServeSettings(max_num_seqs=seqs).batch_defaults(length, g) == expected


def test_a_small_token_budget_caps_the_default_seqs() -> None:
    # seqs = min(256, 100) = 100 when only the token budget is given
    assert ServeSettings(max_num_batched_tokens=100).batch_defaults(8_192, None) == (100, 100)


# ------------------------------------------------------------------ ServeSettings


def test_defaults_are_the_engines() -> None:
    s = ServeSettings()
    assert (s.engine, s.tp, s.pp, s.kv_cache_dtype) == (Engine.VLLM, 1, 1, KVDtype.AUTO)
    assert s.gpu_memory_utilization is None and s.gmu == 0.92  # vLLM 0.33 CacheConfig
    assert s.cuda_graph_bytes is None and not s.enforce_eager
    assert ServeSettings(cuda_graph_bytes=0).enforce_eager


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tp": 0}, "--tp must be a positive integer, got 0"),
        ({"pp": -1}, "--pp must be a positive integer, got -1"),
        ({"block_size": 0}, "--block-size must be a positive integer, got 0"),
        ({"max_model_len": 0}, "--max-model-len must be a positive integer, got 0"),
        ({"max_num_seqs": True}, "--max-num-seqs must be a positive integer, got True"),
        (
            {"max_num_batched_tokens": 1 << 41},
            r"--max-num-batched-tokens must be at most 1,099,511,627,776 \(2\^40\), got "
            "2,199,023,255,552",
        ),
        ({"gpu_memory_utilization": 1.5}, r"--gpu-memory-utilization must be in \(0, 1\], got 1.5"),
        ({"gpu_memory_utilization": 0.0}, r"must be in \(0, 1\], got 0.0"),
        (
            {"engine": Engine.SGLANG, "auto_fit_max_model_len": True},
            r"--max-model-len -1 \(auto-fit\) is vLLM's; give a length",
        ),
        ({"kv_cache_memory_bytes": -1}, "--kv-cache-memory must not be negative"),
        ({"headroom_bytes": -5}, "--headroom must not be negative"),
    ],
)
def test_settings_refuse_what_no_engine_runs(changes: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ServeSettings(**changes)


def test_cli_refuses_fp32_kv_outside_transformers() -> None:
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--kv-cache-dtype", "fp32"])
    assert result.exit_code == 2
    assert "Error: --kv-cache-dtype fp32 is only meaningful with --engine hf" in result.stderr


# ------------------------------------------------------------------ spellings


def test_suggestions_render_in_each_spelling() -> None:
    changes = {"tp": 2, "kv_cache_dtype": KVDtype.FP8, "enable_prefix_caching": False}
    assert as_flags(changes) == (
        "--tensor-parallel-size 2 --kv-cache-dtype fp8 --no-enable-prefix-caching"
    )
    assert as_yaml(changes) == "tp: 2, kv_cache_dtype: fp8, enable_prefix_caching: false"
    assert as_flags({"gpu": "h200"}) == "--gpu h200" and as_yaml({"gpu": "h200"}) == "gpu: h200"


@pytest.mark.parametrize(
    ("raw", "spelling"),
    [
        (
            {
                "tp": 2,
                "max_model_len": 8192,
                "kv_cache_dtype": "fp8",
                "enforce_eager": True,
                "enable_prefix_caching": False,
                "gpu_memory_utilization": 0.9,
                "kv_cache_memory": "4GiB",
            },
            "yaml",
        ),
        (
            {
                "tensor_parallel_size": "2",
                "max_model_len": "8192",
                "kv_cache_dtype": "fp8",
                "enforce_eager": "True",
                "enable_prefix_caching": "False",
                "gpu_memory_utilization": "0.9",
                "kv_cache_memory_bytes": str(4 * GIB),
            },
            "log",
        ),
        (
            {
                "--tensor-parallel-size": "2",
                "--max-model-len": "8192",
                "--kv-cache-dtype": "fp8",
                "--enforce-eager": "true",
                "--enable-prefix-caching": "off",
                "--gpu-memory-utilization": "0.9",
                "--kv-cache-memory": "4GiB",
            },
            "cli",
        ),
    ],
    ids=["yaml", "log", "cli"],
)
def test_one_parser_serves_every_spelling(raw: dict, spelling: str) -> None:
    parsed, problems = ServeSettings.from_mapping(raw, spelling=spelling)  # type: ignore[arg-type]
    assert problems == []
    assert parsed == ServeSettings(
        tp=2,
        max_model_len=8192,
        kv_cache_dtype=KVDtype.FP8,
        cuda_graph_bytes=0,
        enable_prefix_caching=False,
        gpu_memory_utilization=0.9,
        kv_cache_memory_bytes=4 * GIB,
    )


def test_from_mapping_reports_each_bad_key_and_keeps_the_rest() -> None:
    parsed, problems = ServeSettings.from_mapping(
        {"tp": "two", "max_num_seqs": 0, "kv_cache_dtype": "fp7", "block_size": 32, "name": "x"},
        spelling="yaml",
    )
    assert parsed == ServeSettings(block_size=32)
    assert [key for key, _ in problems] == ["tp", "max_num_seqs", "kv_cache_dtype"]
    assert "expected a whole number, got 'two'" in problems[0][1]
    assert "--max-num-seqs must be a positive integer, got 0" in problems[1][1]
    # -1 is vLLM's auto-fit, in any spelling
    fitted, _ = ServeSettings.from_mapping({"max_model_len": "-1"}, spelling="log")
    assert fitted.auto_fit_max_model_len and fitted.max_model_len is None


@pytest.mark.parametrize("text", ["²", "--5", "-", ""])
def test_a_count_that_int_cannot_read_is_a_problem_not_a_crash(text: str) -> None:
    # was: ValueError from int() ("²" is a digit to str.isdigit, not a decimal; "--5" lost
    # both dashes to lstrip)
    parsed, problems = ServeSettings.from_mapping({"tp": text}, spelling="yaml")
    assert parsed == ServeSettings()
    assert problems == [("tp", f"expected a whole number, got {text!r}")]


def test_a_typed_document_refuses_what_a_log_would_parse() -> None:
    # A log's "2" and "on" are strings by nature; in YAML they are a mistake, and null is a
    # value to refuse, not "not given".
    raw = {"tp": "2", "enforce_eager": "on", "engine": "", "gpu_memory_utilization": None}
    loose, problems = ServeSettings.from_mapping(raw | {"engine": "vllm"}, spelling="yaml")
    assert problems == [] and loose == ServeSettings(tp=2, cuda_graph_bytes=0)
    _, problems = ServeSettings.from_mapping(raw, spelling="yaml", typed=True)
    assert problems == [
        ("tp", "expected a whole number, got '2'"),
        ("enforce_eager", "expected true or false, got 'on'"),
        ("engine", "expected a name, got ''"),
        ("gpu_memory_utilization", "expected a number, got None"),
    ]


@pytest.mark.parametrize(
    ("raw", "rule", "value"),
    [
        ({"tp": 0}, "min", 0),
        ({"max_num_seqs": 1 << 41}, "max", 1 << 41),
        ({"block_size": 1.5}, "whole", 1.5),
        ({"max_model_len": -1}, "min", -1),  # auto_fit=False: a length, not vLLM's -1
        ({"gpu_memory_utilization": 90}, "fraction", 90),  # the value as given, not 90.0
        ({"gpu_memory_utilization": 0}, "positive", 0),
        ({"gpu_memory_utilization": float("nan")}, "number", None),
        ({"gpu_memory_utilization": 10**400}, "fraction", 10**400),  # no OverflowError
        ({"enable_prefix_caching": 1}, "bool", 1),
    ],
)
def test_refusals_carry_their_rule_for_the_caller_to_word(
    raw: dict, rule: str, value: object
) -> None:
    seen: list[SettingError] = []

    def word(exc: SettingError) -> str:
        seen.append(exc)
        return f"{exc.rule}!"

    parsed, problems = ServeSettings.from_mapping(
        raw, spelling="yaml", typed=True, auto_fit=False, word=word
    )
    assert parsed == ServeSettings() and problems == [(next(iter(raw)), f"{rule}!")]
    assert [e.rule for e in seen] == [rule]
    if value is not None:
        assert seen[0].value == value and type(seen[0].value) is type(value)
    assert isinstance(seen[0], UsageError)  # the command line still shows its message


# ------------------------------------------------------------------ every command agrees


def _json(args: list[str]) -> dict:
    result = runner.invoke(app, [*args, "--json"] if args[0] != "check" else args)
    assert result.exit_code in (0, 1), (args, result.stderr, result.exception)
    return json.loads(result.stdout)


def _trace(tmp_path: Path) -> str:
    path = tmp_path / "w.jsonl"
    path.write_text(
        "\n".join(
            json.dumps({"prompt_tokens": 200 + 10 * i, "output_tokens": 20, "arrival_s": i * 0.1})
            for i in range(4)
        )
        + "\n"
    )
    return str(path)


def _plans(tmp_path: Path, model: str, entry: dict[str, object]) -> str:
    lines = [f"  - name: d\n    model: {model}\n"] + [f"    {k}: {v}\n" for k, v in entry.items()]
    path = tmp_path / "plans.yaml"
    path.write_text("deployments:\n" + "".join(lines))
    return str(path)


def test_a100_gets_the_small_batch_defaults_in_every_command(tmp_path: Path) -> None:
    # The example: vLLM gives an A100-80GB 2,048 batched tokens and 256 sequences;
    # simulate used to run the H100's 8,192 / 1,024 there and size a different pool.
    est = _json(["estimate", "llama-3.1-8b", "--gpu", "a100-80gb"])
    sim = _json(["simulate", "llama-3.1-8b", "--gpu", "a100-80gb", "-w", _trace(tmp_path)])
    check = _json(
        ["check", _plans(tmp_path, "llama-3.1-8b", {"gpu": "a100-80gb"}), "--format", "json"]
    )
    run = sim["runs"][0]
    assert (run["max_num_batched_tokens"], run["max_num_seqs"]) == (2_048, 256)
    assert check["deployments"][0]["settings"]["max_num_batched_tokens"] == 2_048
    assert check["deployments"][0]["settings"]["max_num_seqs"] == 256
    blocks = est["num_gpu_blocks"]
    assert run["num_gpu_blocks"] == blocks == check["deployments"][0]["figures"]["num_gpu_blocks"]


def test_a_kv_pool_without_a_gpu_uses_vllms_no_gpu_defaults(tmp_path: Path) -> None:
    # --kv-cache-memory 20GiB and no --gpu: 2,048 / 256 in estimate and simulate (simulate used
    # its H100 roofline's size: 8,192 / 1,024). 20 GiB / 2 MiB blocks = 10,240 blocks.
    est = _json(["estimate", "llama-3.1-8b", "--kv-cache-memory", "20GiB"])
    sim = _json(["simulate", "llama-3.1-8b", "--kv-cache-memory", "20GiB", "-w", _trace(tmp_path)])
    run = sim["runs"][0]
    assert est["vllm"]["max_num_batched_tokens"] == run["max_num_batched_tokens"] == 2_048
    assert est["vllm"]["max_num_seqs"] == run["max_num_seqs"] == 256
    assert est["num_gpu_blocks"] == run["num_gpu_blocks"] == 20 * GIB // (2 << 20) == 10_240


MODELS = ["llama-3.1-8b", "gemma-2-9b-it", "deepseek-v2-lite", "qwen3-30b-a3b", "qwen3-8b"]
GPUS = ["h100", "a100-80gb", "l40s", "h200", "b200", "a100-40gb"]


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    length=st.sampled_from([4_096, 8_192, 32_768]),
    seqs=st.sampled_from([None, 16, 128]),
    dtype=st.sampled_from(["auto", "fp8"]),
    gmu=st.sampled_from([None, 0.8, 0.95]),
)
def test_estimate_simulate_and_check_size_the_same_pool(
    tmp_path: Path,
    model: str,
    gpu: str,
    length: int,
    seqs: int | None,
    dtype: str,
    gmu: float | None,
) -> None:
    flags = ["--gpu", gpu, "--max-model-len", str(length), "--kv-cache-dtype", dtype]
    entry: dict[str, object] = {"gpu": gpu, "max_model_len": length, "kv_cache_dtype": dtype}
    if seqs is not None:
        flags += ["--max-num-seqs", str(seqs)]
        entry["max_num_seqs"] = seqs
    if gmu is not None:
        flags += ["--gpu-memory-utilization", str(gmu)]
        entry["gpu_memory_utilization"] = gmu
    est = runner.invoke(app, ["estimate", model, *flags, "--json"])
    if est.exit_code != 0:  # the weights do not fit this GPU: every command must say so
        assert "weights need" in est.stderr
        return
    blocks = json.loads(est.stdout)["num_gpu_blocks"]
    sim = runner.invoke(app, ["simulate", model, "-w", _trace(tmp_path), *flags, "--json"])
    check = _json(["check", _plans(tmp_path, model, entry), "--format", "json"])
    assert check["deployments"][0]["figures"]["num_gpu_blocks"] == blocks
    if sim.exit_code == 0:
        assert json.loads(sim.stdout)["runs"][0]["num_gpu_blocks"] == blocks
    else:  # simulate refuses a max_model_len the pool cannot hold, as vLLM does
        assert "Largest that fits" in sim.stderr and not json.loads(est.stdout)["fits"]
