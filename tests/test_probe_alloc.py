"""The budgeted CPU allocator: what it counts, when it raises, and that memory comes back."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from planner.errors import KvplanError, UsageError  # noqa: E402
from probes.alloc import BudgetedAllocator, open_device, require_cuda  # noqa: E402

MIB = 1 << 20


def test_budget_counts_new_storages_once() -> None:
    # The module docstring's worked example: 1,024 float32 = 4,096 B; views and in-place ops
    # are free; x + 1 is a new 4,096 B storage until dropped.
    with BudgetedAllocator(MIB) as mem:
        x = torch.empty(1024, dtype=torch.float32)
        assert mem.allocated() == 4096
        view = x.view(2, 512)
        x.add_(1)
        assert mem.allocated() == 4096
        y = x + 1
        assert mem.allocated() == 8192 and mem.peak() == 8192
        del y
        gc.collect()
        assert mem.allocated() == 4096
        del view
        assert mem.allocated() == 4096  # x is still alive


def test_budget_refuses_an_empty_before_allocating() -> None:
    with BudgetedAllocator(MIB) as mem:
        x = torch.empty(1024, dtype=torch.float32)  # 4,096 B
        with pytest.raises(torch.OutOfMemoryError, match="1,048,576 B"):
            torch.empty(MIB, dtype=torch.uint8)  # 4,096 + 1,048,576 > 1,048,576
        assert mem.allocated() == 4096 and mem.peak() == 4096
        del x


def test_budget_drops_an_op_result_that_does_not_fit() -> None:
    # 200 x 1,024 float32 = 819,200 B fits; the matmul result (another 819,200 B) does not.
    with BudgetedAllocator(MIB) as mem:
        a = torch.ones(200, 1024)
        with pytest.raises(torch.OutOfMemoryError):
            a * 2
        gc.collect()
        assert mem.allocated() == 819_200
        del a
        gc.collect()
        assert mem.allocated() == 0


def test_views_of_outside_tensors_cost_nothing() -> None:
    outside = torch.zeros(4096)
    with BudgetedAllocator(MIB) as mem:
        outside.view(64, 64)[0].add_(1)
        assert mem.allocated() == 0


def test_released_memory_returns_to_baseline_after_oom() -> None:
    with BudgetedAllocator(8 * MIB) as mem:
        keep = torch.empty(MIB, dtype=torch.uint8)
        baseline = mem.allocated()
        for _ in range(3):
            try:
                chunks = [torch.empty(MIB, dtype=torch.uint8) for _ in range(16)]
            except torch.OutOfMemoryError:
                pass
            else:  # pragma: no cover - the 8th MiB must fail
                del chunks
            mem.release()
            assert mem.allocated() == baseline == MIB
        del keep


def test_budget_must_be_positive() -> None:
    with pytest.raises(UsageError, match="positive"):
        BudgetedAllocator(0)


def test_unknown_device_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="use cpu or cuda"):
        open_device("tpu", MIB)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_requested_without_cuda_is_one_clear_error() -> None:
    with pytest.raises(KvplanError, match="torch sees no CUDA device"):
        require_cuda()
    with pytest.raises(KvplanError, match="use --device cpu --memory-budget"):
        open_device("cuda", MIB)
