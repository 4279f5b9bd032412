"""A slow, literal model of vLLM V1's scheduler and block pool, to check the event-driven one.

Every step walks every request; every block is an object with a reference count and a content
hash; the free queue is an ordered dict (least recently freed first), as ``BlockPool`` keeps it.
Only full-attention layouts (one group, no windows, no state) are modelled. Steps take 1 s
(a step that schedules nothing, 0 s). The release-dependent rules (``reserve_full_isl``,
``prepend_uncached_free``, ``async_scheduling``) and the speculative lookahead
(``num_lookahead_tokens``: slots for min(computed + new + k, max_model_len) tokens, as
``KVCacheManager.allocate_slots``) are those of ``planner.simulate.engine``.

With ``cpu_blocks`` a CPU tier (vLLM's native KV offloading) holds block keys in an ordered
dict, least recently stored first: a request releasing its blocks (finish or preemption)
writes every full block it computed, its tail first (a key already there moves to the end),
evicting the oldest when full; an admission whose GPU lookup stops inside its shared prefix
goes on through the prefix's keys in the tier and loads those into new blocks, as
``planner.simulate.engine._TierEngine`` documents.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from planner.simulate.engine import SimConfig
from planner.simulate.workload import Workload


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(eq=False)
class Block:
    id: int
    ref: int = 0
    hash: tuple | None = None


@dataclass(eq=False)
class Req:
    index: int
    arrival: float
    prompt: int
    output: int
    prefix_id: str | None
    prefix_tokens: int
    num_tokens: int = 0
    computed: int = 0
    generated: int = 0
    blocks: list[Block] = field(default_factory=list)
    first_token: float = -1.0
    preemptions: int = 0
    hw: int = 0  # most tokens computed before a preemption


@dataclass
class RefResult:
    finish_steps: list[int]
    preemptions: int
    peak_blocks: int
    completed: int
    rejected: int
    steps: int
    hit_tokens: int
    query_tokens: int
    blocks_saved: int
    recomputed_tokens: int
    ttft: list[float]
    cpu_hit_tokens: int = 0


class Pool:
    def __init__(self, usable: int) -> None:
        self.free: OrderedDict[int, Block] = OrderedDict()
        for i in range(usable):
            self.free[i] = Block(i)
        self.cache: dict[tuple, Block] = {}
        self.usable = usable

    def alloc(self) -> Block:
        _, block = self.free.popitem(last=False)
        if block.hash is not None:
            if self.cache.get(block.hash) is block:
                del self.cache[block.hash]
            block.hash = None
        block.ref = 1
        return block

    def touch(self, block: Block) -> None:
        if block.ref == 0:
            del self.free[block.id]
        block.ref += 1

    def release(self, block: Block) -> bool:
        """Drop one reference; True when the block went back to the free queue's tail."""
        block.ref -= 1
        if block.ref == 0:
            self.free[block.id] = block
            return True
        return False

    def to_front(self, blocks: list[Block]) -> None:
        """Move freed blocks to the front of the free queue, the first of ``blocks`` first."""
        for block in reversed(blocks):
            self.free.move_to_end(block.id, last=False)

    def cache_block(self, block: Block, key: tuple) -> None:
        if block.hash is not None:
            return
        old = self.cache.get(key)
        if old is not None:
            old.hash = None  # newest copy wins
        block.hash = key
        self.cache[key] = block


def block_key(r: Req, k: int, block_size: int) -> tuple:
    if r.prefix_id is not None and (k + 1) * block_size <= r.prefix_tokens:
        return ("prefix", r.prefix_id, k)
    return ("own", r.index, k)


def run_reference(
    workload: Workload,
    *,
    num_gpu_blocks: int,
    block_size: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    max_model_len: int,
    prefix_caching: bool,
    reserve_full_isl: bool = False,
    prepend_uncached_free: bool = False,
    async_scheduling: bool = False,
    num_lookahead_tokens: int = 0,
    cpu_blocks: int = 0,
) -> RefResult:
    bs = block_size

    def slots(tokens: int) -> int:
        """Token slots a request computing up to ``tokens`` tokens holds."""
        return min(tokens + num_lookahead_tokens, max_model_len)

    pool = Pool(num_gpu_blocks - 1)
    reqs = []
    rejected = 0
    for i, q in enumerate(workload.requests):
        if q.prompt_tokens + q.output_tokens > max_model_len:
            rejected += 1
            continue
        reqs.append(
            Req(i, q.arrival_s, q.prompt_tokens, q.output_tokens, q.prefix_id, q.prefix_tokens)
        )
        reqs[-1].num_tokens = q.prompt_tokens
    finish = [-1] * len(workload.requests)
    waiting: deque[Req] = deque()
    running: list[Req] = []
    zombies: list[Req] = []  # async: finished last step, released once this one is scheduled
    now, step, nxt = 0.0, 0, 0
    preemptions = peak = hits_total = queries = saved = recomputed = completed = 0
    ttft: list[float] = []

    cpu: OrderedDict[tuple, bool] = OrderedDict()
    cpu_hits = 0

    def write_through(r: Req) -> None:
        if not (cpu_blocks and prefix_caching):
            return
        for k in reversed(range(r.computed // bs)):
            key = block_key(r, k, bs)
            if key in cpu:
                cpu.move_to_end(key)
            else:
                if len(cpu) == cpu_blocks:
                    cpu.popitem(last=False)
                cpu[key] = True

    def free_all(r: Req) -> None:
        write_through(r)
        front = []
        for block in reversed(r.blocks):  # the tail first
            if pool.release(block) and block.hash is None:
                front.append(block)
        if prepend_uncached_free:
            pool.to_front(front)
        r.blocks = []

    def cache_full(r: Req, tokens: int) -> None:
        if prefix_caching:
            for k in range(tokens // bs):
                pool.cache_block(r.blocks[k], block_key(r, k, bs))

    while True:
        while nxt < len(reqs) and reqs[nxt].arrival <= now:
            waiting.append(reqs[nxt])
            nxt += 1
        if not running and not waiting and not zombies:
            if nxt == len(reqs):
                break
            now = reqs[nxt].arrival
            continue
        budget = max_num_batched_tokens
        scheduled: list[tuple[Req, int]] = []
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            new = min(r.num_tokens - r.computed, budget)
            need = max(0, cdiv(slots(r.computed + new), bs) - len(r.blocks))
            ok = True
            while need > len(pool.free):
                victim = running.pop()
                free_all(victim)
                victim.hw = max(victim.hw, victim.computed)
                victim.computed = 0
                victim.preemptions += 1
                preemptions += 1
                waiting.appendleft(victim)
                preempted = True
                if victim is r:
                    ok = False
                    break
            if not ok:
                break
            r.blocks += [pool.alloc() for _ in range(need)]
            if r.hw > r.computed:
                recomputed += min(r.computed + new, r.hw) - r.computed
            cache_full(r, r.computed + new)
            scheduled.append((r, new))
            budget -= new
            i += 1
        if not preempted:
            while waiting and budget > 0 and len(running) + len(zombies) < max_num_seqs:
                r = waiting[0]
                hit: list[Block] = []
                if prefix_caching:
                    for k in range((r.num_tokens - 1) // bs):
                        block = pool.cache.get(block_key(r, k, bs))
                        if block is None:
                            break
                        hit.append(block)
                loaded = 0
                if cpu_blocks and prefix_caching and r.prefix_id is not None:
                    k = len(hit)
                    while (k + 1) * bs <= r.prefix_tokens and ("prefix", r.prefix_id, k) in cpu:
                        loaded += 1
                        k += 1
                start = (len(hit) + loaded) * bs
                new = min(r.num_tokens - start, budget)
                need = cdiv(slots(start + new), bs) - len(hit)
                evictable = sum(1 for b in hit if b.ref == 0)
                if need + evictable > len(pool.free):
                    break
                whole = cdiv(r.num_tokens, bs) - len(hit) + evictable
                if reserve_full_isl and whole > len(pool.free):
                    break
                waiting.popleft()
                for block in hit:
                    pool.touch(block)
                r.blocks = hit + [pool.alloc() for _ in range(need)]
                r.computed = start
                cache_full(r, start + new)
                queries += r.num_tokens
                hits_total += start
                cpu_hits += loaded * bs
                saved += len(hit)
                if r.hw > start:
                    recomputed += min(start + new, r.hw) - start
                running.append(r)
                scheduled.append((r, new))
                budget -= new
        peak = max(peak, pool.usable - len(pool.free))
        if scheduled:
            now += 1.0
        for r in zombies:
            free_all(r)
        zombies = []
        step += 1
        for r, new in scheduled:
            r.computed += new
            if r.computed == r.num_tokens:
                r.generated += 1
                r.num_tokens += 1
                if r.first_token < 0:
                    r.first_token = now
                if r.generated == r.output:
                    if async_scheduling:
                        zombies.append(r)
                    else:
                        free_all(r)
                    running.remove(r)
                    finish[r.index] = step - 1
                    completed += 1
                    ttft.append(r.first_token - r.arrival)
    return RefResult(
        finish_steps=finish,
        preemptions=preemptions,
        peak_blocks=peak,
        completed=completed,
        rejected=rejected,
        steps=step,
        hit_tokens=hits_total,
        query_tokens=queries,
        blocks_saved=saved,
        recomputed_tokens=recomputed,
        ttft=ttft,
        cpu_hit_tokens=cpu_hits,
    )


def reference_for(workload: Workload, config: SimConfig) -> RefResult:
    """:func:`run_reference` with the settings of the fast engine's ``config``, so a test
    compares the two on exactly the same pool, limits and rules."""
    return run_reference(
        workload,
        num_gpu_blocks=config.num_gpu_blocks,
        block_size=config.layout.block_size,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_model_len=config.max_model_len,
        prefix_caching=config.prefix_caching,
        reserve_full_isl=config.reserve_full_isl,
        prepend_uncached_free=config.prepend_uncached_free,
        async_scheduling=config.async_scheduling,
        num_lookahead_tokens=config.num_lookahead_tokens,
        cpu_blocks=config.cpu_blocks,
    )
