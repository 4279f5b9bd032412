"""Where the probe's bytes come from, and the one OOM path every device shares.

A probe asks three questions of memory: how much torch holds now (``allocated``), the most it
held since a reset (``peak``), and whether the next tensor fits under the cap. On CUDA the
answers are the caching allocator's own (``torch.cuda.memory_allocated`` /
``max_memory_allocated`` / ``mem_get_info``) and the cap is
``torch.cuda.set_per_process_memory_fraction``, so an over-budget tensor raises
``torch.OutOfMemoryError`` from inside torch, exactly as it would in an engine. The probe never
uses managed (unified) memory: tensors come from torch's device allocator (``cudaMalloc``), and
a pluggable allocator backend is refused.

On CPU there is no allocator to ask, so :class:`BudgetedAllocator` is one: a
``TorchDispatchMode`` that sees every op torch runs under it and counts the bytes of each *new*
storage an op returns (a view, an in-place op or an ``out=`` write returns a storage that
already exists and costs nothing). A storage's bytes are released when torch frees it (a
``weakref.finalize`` on the storage object, which torch keeps alive exactly as long as the
storage), so ``allocated`` falls back to the baseline when the probe drops its tensors -- the
property the OOM-recovery test checks.

The budget is enforced the way the CUDA allocator enforces its cap: ``torch.empty`` (the only
way the probe creates pools and weights) is refused *before* it allocates; any other op whose
new outputs push the total over the cap has them dropped and raises the same
``torch.OutOfMemoryError``, so CPU runs exercise every line of the probe's OOM handling.

What the CPU budget does not see: scratch memory inside a kernel that never becomes a tensor
(a CPU matmul's packing buffers), and memory outside torch. Both are real on GPU and are what
``non_torch_bytes`` and the caching allocator's counters report there.

Worked example (the test ``test_budget_counts_new_storages_once``): under a 1 MiB budget,
``torch.empty(1024, dtype=float32)`` costs 4,096 B; ``x.view(2, 512)`` and ``x.add_(1)`` cost
nothing; ``x + 1`` costs another 4,096 B until it is dropped; ``torch.empty(2**18)`` (1 MiB)
then raises ``torch.OutOfMemoryError`` because 4,096 + 1,048,576 > 1,048,576.

:func:`fill_random_` gives memory values without allocating more of it (weights, pool pages).
"""

from __future__ import annotations

import gc
import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from planner.errors import KvplanError, UsageError

aten = torch.ops.aten

# Factory ops whose size is known before they run: refused before they allocate.
_EMPTY_OPS = {aten.empty.memory_format, aten.empty_strided.default}
PATTERN_ELEMENTS = 1 << 16


@dataclass(frozen=True)
class MemorySnapshot:
    """One reading of the device: torch bytes now and at peak, free device bytes (CUDA's
    ``mem_get_info``; on CPU what the budget has left) and memory outside torch."""

    allocated_bytes: int
    peak_bytes: int
    free_bytes: int
    non_torch_bytes: int


class DeviceMemory:
    """Common face of the CPU budget and the CUDA allocator (see the module docstring)."""

    device: torch.device
    limit_bytes: int

    def allocated(self) -> int:
        raise NotImplementedError

    def peak(self) -> int:
        raise NotImplementedError

    def reset_peak(self) -> None:
        raise NotImplementedError

    def free_bytes(self) -> int:
        raise NotImplementedError

    def non_torch_bytes(self) -> int:
        """Device memory this process uses outside torch's allocator (0 on CPU)."""
        return 0

    def release(self, full: bool = False) -> None:
        """Return freed memory to the device: collect reference cycles (the young generation,
        where a trial's cycles are, unless ``full``; a full collection costs ~0.1 s once torch
        is loaded), then ``empty_cache`` on CUDA."""
        gc.collect() if full else gc.collect(0)

    def snapshot(self) -> MemorySnapshot:
        return MemorySnapshot(
            allocated_bytes=self.allocated(),
            peak_bytes=self.peak(),
            free_bytes=self.free_bytes(),
            non_torch_bytes=self.non_torch_bytes(),
        )

    def __enter__(self) -> DeviceMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release(full=True)


class BudgetedAllocator(TorchDispatchMode, DeviceMemory):
    """CPU memory under a byte budget: counts new storages, raises ``torch.OutOfMemoryError``.

    Use as a context manager; only tensors created inside it count.
    """

    def __init__(self, limit_bytes: int) -> None:
        super().__init__()
        if limit_bytes < 1:
            raise UsageError(f"memory budget must be positive, got {limit_bytes:,} B")
        self.device = torch.device("cpu")
        self.limit_bytes = limit_bytes
        self._allocated = 0
        self._peak = 0
        # id(storage) -> [bytes]; the finalizer of each storage removes its entry.
        self._live: dict[int, list[int]] = {}

    # ------------------------------------------------------------------ DeviceMemory
    def allocated(self) -> int:
        return self._allocated

    def peak(self) -> int:
        return self._peak

    def reset_peak(self) -> None:
        self._peak = self._allocated

    def free_bytes(self) -> int:
        return self.limit_bytes - self._allocated

    def __enter__(self) -> BudgetedAllocator:  # type: ignore[override]
        TorchDispatchMode.__enter__(self)
        return self

    def __exit__(self, *exc: object) -> None:
        TorchDispatchMode.__exit__(self, *exc)
        self.release(full=True)

    # ------------------------------------------------------------------ accounting
    def _release(self, key: int) -> None:
        entry = self._live.pop(key, None)
        if entry is not None:
            self._allocated -= entry[0]

    def _oom(self, nbytes: int) -> torch.OutOfMemoryError:
        return torch.OutOfMemoryError(
            f"budgeted allocator: tried to allocate {nbytes:,} B with {self._allocated:,} B of "
            f"the {self.limit_bytes:,} B memory budget in use"
        )

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in _EMPTY_OPS:
            need = _empty_bytes(func, args, kwargs)
            if self._allocated + need > self.limit_bytes:
                raise self._oom(need)
        inputs = {id(t.untyped_storage()) for t in _tensors((args, kwargs))}
        out = func(*args, **kwargs)
        new: list[tuple[int, torch.UntypedStorage]] = []
        grown = 0
        for t in _tensors(out):
            storage = t.untyped_storage()
            key = id(storage)
            entry = self._live.get(key)
            if entry is not None:  # a storage we track, perhaps resized by an out= op
                grown += storage.nbytes() - entry[0]
                entry[0] = storage.nbytes()
                continue
            if key in inputs or any(key == k for k, _ in new):
                continue  # a view or in-place result of a storage from before the budget
            new.append((key, storage))
        need = grown + sum(s.nbytes() for _, s in new)
        if need > 0 and self._allocated + need > self.limit_bytes:
            del out, new
            raise self._oom(need)
        for key, storage in new:
            self._live[key] = [storage.nbytes()]
            weakref.finalize(storage, self._release, key)
        self._allocated += need
        self._peak = max(self._peak, self._allocated)
        return out


def _tensors(obj: object) -> list[torch.Tensor]:
    """Dense tensors in an op's (nested tuple / list / dict) arguments or results; a plain
    walk, several times faster than ``torch.utils._pytree`` on the probe's hot path."""
    found: list[torch.Tensor] = []
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.layout == torch.strided and item.device.type != "meta":
                found.append(item)
        elif isinstance(item, tuple | list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return found


def _empty_bytes(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Bytes ``aten.empty`` / ``aten.empty_strided`` will allocate, before they run."""
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    itemsize = torch.empty((), dtype=dtype, device="meta").element_size()
    size = list(args[0])
    if func is aten.empty_strided.default:
        stride = list(args[1])
        if any(s == 0 for s in size):
            return 0
        return (1 + sum((s - 1) * st for s, st in zip(size, stride, strict=True))) * itemsize
    return math.prod(size) * itemsize


class CudaMemory(DeviceMemory):
    """The CUDA caching allocator, capped at ``limit_bytes`` of reserved memory.

    ``non_torch_bytes`` is device memory in use that torch did not reserve (CUDA context,
    cuBLAS workspaces, other processes), the term vLLM's ``memory_profiling`` calls non-torch.
    """

    def __init__(self, limit_bytes: int, index: int | None = None) -> None:
        require_cuda()
        backend = torch.cuda.memory.get_allocator_backend()
        if backend not in ("native", "cudaMallocAsync"):
            raise KvplanError(
                f"torch uses the {backend!r} CUDA allocator; the probe only measures torch's "
                "own device allocator (no managed memory): unset PYTORCH_CUDA_ALLOC_CONF"
            )
        self.device = torch.device("cuda", torch.cuda.current_device() if index is None else index)
        self.total_bytes = torch.cuda.mem_get_info(self.device)[1]
        self.limit_bytes = min(limit_bytes, self.total_bytes)

    def allocated(self) -> int:
        return int(torch.cuda.memory_allocated(self.device))

    def peak(self) -> int:
        return int(torch.cuda.max_memory_allocated(self.device))

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def free_bytes(self) -> int:
        return int(torch.cuda.mem_get_info(self.device)[0])

    def non_torch_bytes(self) -> int:
        free, total = torch.cuda.mem_get_info(self.device)
        return int(total - free - torch.cuda.memory_reserved(self.device))

    def set_limit(self, limit_bytes: int) -> None:
        """Cap torch's reserved memory (the caching allocator raises OutOfMemoryError above)."""
        self.limit_bytes = min(limit_bytes, self.total_bytes)
        torch.cuda.set_per_process_memory_fraction(self.limit_bytes / self.total_bytes, self.device)

    def release(self, full: bool = False) -> None:
        gc.collect() if full else gc.collect(0)
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()

    def __enter__(self) -> CudaMemory:
        self.release(full=True)
        self.set_limit(self.limit_bytes)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release(full=True)
        torch.cuda.set_per_process_memory_fraction(1.0, self.device)


def require_cuda() -> None:
    """A one-line error when CUDA is asked for and torch has none."""
    if not torch.cuda.is_available():
        raise KvplanError(
            "CUDA was requested (--gpu / --device cuda) but torch sees no CUDA device "
            f"(torch {torch.__version__}); use --device cpu --memory-budget SIZE"
        )


def open_device(device: str, limit_bytes: int) -> DeviceMemory:
    """The memory of ``device`` (``cpu`` or ``cuda[:i]``) capped at ``limit_bytes``."""
    kind, _, index = device.partition(":")
    if kind == "cpu":
        return BudgetedAllocator(limit_bytes)
    if kind == "cuda":
        return CudaMemory(limit_bytes, int(index) if index else None)
    raise UsageError(f"--device {device!r}: use cpu or cuda (cuda:N for one device)")


def fill_random_(t: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Fill ``t`` with random values without allocating: N(0, 0.02) drawn in place into its
    first elements, then copied across the rest (``normal_`` over a gigabyte takes seconds on
    a CPU). 1-byte types get small positive bit patterns (finite in fp8 and int8)."""
    flat = t.view(-1)
    n = min(PATTERN_ELEMENTS, flat.numel())
    if n == 0:
        return t
    gen = torch.Generator(device=t.device).manual_seed(seed)
    head = flat[:n]
    if t.element_size() == 1:
        head.view(torch.uint8).random_(0, 0x38, generator=gen)
    else:
        head.normal_(0.0, 0.02, generator=gen)
    whole = flat.numel() // n * n
    if whole > n:
        flat[n:whole].view(-1, n).copy_(head)
    flat[whole:].copy_(head[: flat.numel() - whole])
    return t
