"""The probe on a real CUDA device (``pytest -m gpu``; skipped without CUDA by conftest).

No GPU was available when these were written: they have not been run yet. Each one is small
(well under a minute on any CUDA GPU with 8 GiB free) so it can gate a device run.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import planner  # noqa: E402
from planner.deployment import ServeSettings  # noqa: E402
from probes.alloc import CudaMemory  # noqa: E402
from probes.attention import paged_attention  # noqa: E402
from probes.probe import VerifyRequest, verify  # noqa: E402
from tests.probe_helpers import tiny_spec  # noqa: E402

pytestmark = pytest.mark.gpu
MIB = 1 << 20
GIB = 1 << 30


def test_cuda_memory_counts_and_releases() -> None:
    with CudaMemory(torch.cuda.mem_get_info()[1]) as mem:
        base = mem.allocated()
        x = torch.empty(64 * MIB, dtype=torch.uint8, device=mem.device)
        assert mem.allocated() - base == 64 * MIB
        assert mem.peak() >= base + 64 * MIB
        del x
        mem.release()
        assert mem.allocated() == base


def test_cuda_cap_raises_oom_and_memory_returns() -> None:
    # cap torch at what it holds now + 256 MiB; a 512 MiB tensor must fail, then release
    with CudaMemory(torch.cuda.mem_get_info()[1]) as mem:
        base = mem.allocated()
        mem.set_limit(torch.cuda.memory_reserved(mem.device) + 256 * MIB)
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(512 * MIB, dtype=torch.uint8, device=mem.device)
        mem.release()
        assert mem.allocated() == base
        y = torch.empty(128 * MIB, dtype=torch.uint8, device=mem.device)  # still usable
        del y


def test_paged_attention_on_cuda_matches_cpu() -> None:
    gen = torch.Generator().manual_seed(0)
    k_cache = torch.randn(20, 16, 2, 32, generator=gen)
    v_cache = torch.randn(20, 16, 2, 32, generator=gen)
    table = torch.randperm(19, generator=gen)[:12].view(3, 4) + 1
    q = torch.randn(3, 1, 8, 32, generator=gen)
    pos = torch.tensor([[63], [40], [7]])
    start = torch.zeros(3, dtype=torch.long)
    cpu = paged_attention(q, pos, k_cache, v_cache, table, start, scale=32**-0.5)
    gpu = paged_attention(
        q.cuda(),
        pos.cuda(),
        k_cache.cuda(),
        v_cache.cuda(),
        table.cuda(),
        start.cuda(),
        scale=32**-0.5,
    )
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["llama", "mla", "hybrid"])
def test_verify_tiny_model_on_gpu(name: str) -> None:
    # a 64 MiB budget keeps the bisection to a few hundred MiB at most
    result = verify(
        tiny_spec(name),
        VerifyRequest(
            device="cuda",
            memory_budget_bytes=64 * MIB,
            settings=ServeSettings(max_model_len=256, max_num_batched_tokens=64, max_num_seqs=8),
        ),
    )
    assert result.pool_bytes_per_block == result.bytes_per_block
    assert result.planned_run.ran and result.oom_recovered
    assert result.memory.final_allocated_bytes == result.memory.baseline_bytes
    assert result.measured.num_gpu_blocks > 0


def test_verify_qwen3_0_6b_on_gpu_meets_plan() -> None:
    # Qwen3-0.6B in a 4 GiB budget at 4,096 tokens: weights 1.19 GB, KV 1,835,008 B per block
    spec = planner.load_model_spec("qwen3-0.6b")
    result = verify(
        spec,
        VerifyRequest(
            device="cuda", memory_budget_bytes=4 * GIB, settings=ServeSettings(max_model_len=4096)
        ),
    )
    assert result.pool_bytes_per_block == 1_835_008
    assert result.passed and result.oom_recovered
    assert result.memory.non_torch_bytes >= 0


def test_step_times_qwen3_0_6b_on_gpu(tmp_path) -> None:
    # kvplan verify qwen3-0.6b --gpu --step-times OUT on a small grid: 2 batch sizes x 2
    # contexts of decode + 2 prefills, every layer (1.19 GB of weights fit anywhere)
    from planner.simulate.steptimes import load_step_times
    from probes.stepgrid import file_text
    from probes.steptimes import measure_step_times

    spec = planner.load_model_spec("qwen3-0.6b")
    req = VerifyRequest(
        device="cuda", memory_budget_bytes=8 * GIB, settings=ServeSettings(max_model_len=4096)
    )
    out = tmp_path / "steps.csv"
    result = measure_step_times(spec, req, (1, 8), (512, 2048), out=str(out))
    assert result.layers_timed == result.num_layers == 28
    assert len(result.points) == 6 and not result.skipped
    assert all(p.seconds > 0 and (p.predicted_s or 0) > 0 for p in result.points)
    # the device's catalog entry is the GPU predicted for, so the ratios are given
    if result.comparable:
        assert all(p.ratio is not None and p.ratio > 0 for p in result.points)
    out.write_text(file_text(result, as_json=False))
    assert [c for c, _ in load_step_times(out).by_context] == [512, 2048]
