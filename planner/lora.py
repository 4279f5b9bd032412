"""LoRA as vLLM 0.33 serves it: ``--enable-lora --max-loras N --max-lora-rank R``.

What LoRA costs (``../shared/ENGINES-SCALE.md`` §4.4, confirmed in vLLM 0.33's sources):

- **When.** ``GPUModelRunner.load_model`` builds the LoRA manager inside the weight-loading
  profiler, so the stacked buffers are part of "Model loading took" and come out of the KV
  budget one for one. There are ``max_loras`` slots (``vllm/lora/model_manager.py:
  lora_slots``), allocated whether or not an adapter is ever loaded.
- **Which modules.** Every linear layer and MoE runner of the language model
  (``vllm/lora/utils.py: get_supported_lora_modules``), plus the model class's
  ``embedding_modules`` (``embed_tokens`` and ``lm_head`` for Llama, Qwen3, Mixtral ...;
  none for Qwen2, Gemma, Mistral, DeepSeek, gpt-oss). ``--lora-target-modules`` keeps only
  the modules it names (a packed module such as ``qkv_proj`` is kept when it or one of its
  parts, ``q_proj``, is named: ``is_in_target_modules``). Vision towers only with
  ``--enable-tower-connector-lora`` (not sized here).
- **Bytes per GPU rank** (``n`` slots, rank ``r``, the model dtype; ``vllm/lora/layers/*.py:
  create_lora_weights``), each module an ``lora_a`` and an ``lora_b``:

  ========================  ================================  ===============================
  module                    lora_a                            lora_b
  ========================  ================================  ===============================
  column-parallel, k slices  k x n x r x in (r/tp: fully        n x (sum of the slices' out/tp)
  (qkv 3, gate_up 2)         sharded)                           x r
  row-parallel (o, down)     n x r x in/tp                      n x out x r (out/tp: fully sh.)
  router (replicated)        n x r x H                          n x E x r
  embed_tokens               n x vocab x r                      n x H x r
  lm_head (logits)           n x r x H                          n x vocab x r
  MoE experts, per layer     n x E_local x (2 r H + r I_p)      n x E_local x (2 I_p r + H r)
  ========================  ================================  ===============================

  ``E_local`` is the experts on the GPU (all of them without EP, ``ceil((E + R) / ep)`` with
  it), ``I_p`` the expert width on it (``I / (dp x tp)`` without EP, ``I`` with it); a
  non-gated MoE has one w13 slice (``FusedMoEWithLoRA._w13_slices``), a 3D-weight MoE
  (gpt-oss) one fused w13 slice of ``2 I_p``. Embeddings and ``lm_head`` are not sharded.
- **Host RAM.** Every worker keeps up to ``max_cpu_loras`` adapters (default ``max_loras``) in
  pinned CPU memory, whole (``worker_manager._load_adapter`` loads them on the CPU,
  ``lora_model.py`` pins them).
- **Refused by vLLM.** A rank outside {1, 8, 16, 32, 64, 128, 256, 320, 512}
  (``vllm/config/lora.py: MaxLoRARanks``); ``max_cpu_loras < max_loras``; expert parallelism
  with ``--fully-sharded-loras`` on an MoE model (``fused_moe.py: _verify_ep_fs``); a vocab
  above 258,048 with an ``lm_head`` LoRA (``logits_processor.py``); a model class without
  ``SupportsLoRA`` (Falcon, BLOOM, Mamba).

Worked example: Llama-3.1-8B (H 4,096, 32 layers, 32 / 8 heads of 128, I 14,336, vocab
128,256), rank 16, one slot, TP 1, bf16: per layer qkv 3 x 16 x 4,096 + 6,144 x 16, o 16 x
4,096 + 4,096 x 16, gate_up 2 x 16 x 4,096 + 28,672 x 16, down 16 x 14,336 + 4,096 x 16 =
1,310,720 elements; x 32 layers + embeddings and lm_head 2 x (128,256 + 4,096) x 16 =
46,178,304 elements x 2 B = 92,356,608 B = 88.08 MiB.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.config.lora import ALLOWED_RANKS as ALLOWED_RANKS
from planner.config.lora import DEFAULT_RANK as DEFAULT_RANK
from planner.config.lora import LoraAdapter as LoraAdapter
from planner.config.lora import rank_for as rank_for
from planner.config.lora import read_adapter as read_adapter
from planner.errors import UsageError
from planner.kv_layout import get_pp_indices
from planner.layer_shapes import (
    UNGATED_MLP,
    config_int,
    dense_intermediate,
    is_moe_layer,
    num_experts_of,
    placement_of,
)
from planner.model.specs import MLA, GatedDeltaNetState, Mamba1State, Mamba2State, ModelSpec
from planner.units import fmt_bytes

if TYPE_CHECKING:
    from planner.deployment import Deployment, ServeSettings

# LogitsProcessorWithLoRA.create_lora_weights refuses a larger vocabulary.
MAX_LORA_VOCAB = 258_048

# Model classes whose ``embedding_modules`` name embed_tokens / lm_head (vLLM 0.33
# vllm/model_executor/models/*.py; Phi3 and Llama 4's text model inherit Llama's). Any other
# class gets LoRA on its linear layers only.
EMBEDDING_LORA = frozenset(
    {
        "ApertusForCausalLM",
        "CohereForCausalLM",
        "Exaone4ForCausalLM",
        "ExaoneMoeForCausalLM",
        "FalconH1ForCausalLM",
        "GraniteForCausalLM",
        "GraniteMoeForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "GraniteMoeSharedForCausalLM",
        "JambaForCausalLM",
        "Lfm2ForCausalLM",
        "Lfm2MoeForCausalLM",
        "LlamaForCausalLM",
        "Llama4ForCausalLM",
        "MiniCPMForCausalLM",
        "MixtralForCausalLM",
        "NemotronForCausalLM",
        "NemotronHForCausalLM",
        "Phi3ForCausalLM",
        "PhiMoEForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "SolarForCausalLM",
    }
)
# CohereForCausalLM lists embed_tokens only; ExaoneForCausalLM lm_head only.
NO_LM_HEAD_LORA = frozenset({"CohereForCausalLM"})
# Model classes without SupportsLoRA in vLLM 0.33 ("LoRA is not supported for ...").
NO_LORA = frozenset(
    {
        "BloomForCausalLM",
        "FalconForCausalLM",
        "RWForCausalLM",
        "MambaForCausalLM",
        "FalconMambaForCausalLM",
        "MllamaForConditionalGeneration",
    }
)
# One packed slice where the checkpoint stores q/k/v (and gate/up) fused: vLLM's
# packed_modules_mapping lists a single part, so QKVParallelLinearWithLoRA /
# ColumnParallelLinearWithLoRA keep one lora_a (phi3.py, chatglm.py, internlm2.py).
FUSED_QKV = frozenset({"phi3", "chatglm", "internlm2"})
FUSED_GATE_UP = frozenset({"phi3", "chatglm"})
# MoE weights stored 3D (w13 fused on disk): FusedMoE3DWithLoRA, one w13 slice of 2 x I.
MOE_3D = frozenset({"gpt_oss", "qwen3_vl_moe", "qwen3_5_moe"})
# MoE whose experts are not gated (one w13 slice) and whose router takes no LoRA.
NON_GATED_MOE = frozenset({"nemotron_h"})
# PEFT names of the expert projections (HF ``experts.N.gate_proj`` / Mixtral ``w1``).
EXPERT_UP = frozenset({"gate_proj", "up_proj", "w1", "w3"})
EXPERT_DOWN = frozenset({"down_proj", "w2"})


# --------------------------------------------------------------------------- modules


@dataclass(frozen=True, kw_only=True)
class _Module:
    """One LoRA-wrapped module of a decoder layer (or the embeddings / head).

    ``family`` is vLLM's module suffix (what ``--lora-target-modules`` matches), ``parts`` the
    PEFT names it packs with their full output sizes, ``kind`` how vLLM shards it: ``column``
    (output over ``tp``; ``tp`` 1 for a replicated or ``disable_tp`` layer), ``row`` (input
    over ``tp``), ``embed``, ``head`` or ``experts``."""

    family: str
    kind: str
    in_features: int
    parts: tuple[tuple[str, int], ...]
    tp: int = 1
    rank_outs: tuple[int, ...] = ()  # per-rank output of each part (column), when not out/tp
    experts: int = 0  # experts: the whole model's routed experts
    gated: bool = True
    fused_w13: bool = False

    def matches(self, targets: Sequence[str] | None) -> bool:
        """Whether vLLM wraps this module under ``--lora-target-modules targets``."""
        if targets is None:
            return True
        return self.family in targets or any(name in targets for name, _ in self.parts)


def _mlp(
    family_up: str, parts: tuple[tuple[str, int], ...], hidden: int, width: int, tp: int
) -> Iterator[_Module]:
    """A dense (or shared-expert) MLP: the column up projection, the row down projection."""
    yield _Module(family=family_up, kind="column", in_features=hidden, parts=parts, tp=tp)
    yield _Module(
        family="down_proj", kind="row", in_features=width, parts=(("down_proj", hidden),), tp=tp
    )


def _layer_modules(spec: ModelSpec, i: int, tp: int) -> Iterator[_Module]:
    """The LoRA modules of decoder layer ``i`` at attention TP ``tp`` (a Mamba or
    linear-attention mixer as one in_proj and one out_proj: approximate)."""
    c, mt, name = spec.config, spec.model_type, spec.name
    hidden = spec.hidden_size
    s = spec.layers[i]
    heads, head = spec.num_attention_heads, spec.head_dim
    if isinstance(s, MLA):
        nope = config_int(c, "qk_nope_head_dim", name) or 128
        rope = s.qk_rope_head_dim
        v_dim = config_int(c, "v_head_dim", name) or nope
        q_lora = config_int(c, "q_lora_rank", name)
        kv_a = s.kv_lora_rank + rope
        if q_lora:  # fused_qkv_a_proj: MergedColumnParallelLinear(disable_tp=True)
            yield _Module(
                family="fused_qkv_a_proj",
                kind="column",
                in_features=hidden,
                parts=(("q_a_proj", q_lora), ("kv_a_proj_with_mqa", kv_a)),
            )
            yield _Module(
                family="q_b_proj",
                kind="column",
                in_features=q_lora,
                parts=(("q_b_proj", heads * (nope + rope)),),
                tp=tp,
            )
        else:
            yield _Module(
                family="q_proj",
                kind="column",
                in_features=hidden,
                parts=(("q_proj", heads * (nope + rope)),),
                tp=tp,
            )
            yield _Module(
                family="kv_a_proj_with_mqa",
                kind="column",
                in_features=hidden,
                parts=(("kv_a_proj_with_mqa", kv_a),),
            )
        yield _Module(
            family="kv_b_proj",
            kind="column",
            in_features=s.kv_lora_rank,
            parts=(("kv_b_proj", heads * (nope + v_dim)),),
            tp=tp,
        )
        yield _Module(
            family="o_proj",
            kind="row",
            in_features=heads * v_dim,
            parts=(("o_proj", hidden),),
            tp=tp,
        )
    elif isinstance(s, Mamba2State):
        inner = s.intermediate_size
        out = 2 * inner + 2 * s.n_groups * s.state_size + s.num_heads
        yield _Module(
            family="in_proj", kind="column", in_features=hidden, parts=(("in_proj", out),), tp=tp
        )
        yield _Module(
            family="out_proj", kind="row", in_features=inner, parts=(("out_proj", hidden),), tp=tp
        )
    elif isinstance(s, GatedDeltaNetState):
        key, value = s.num_k_heads * s.head_k_dim, s.num_v_heads * s.head_v_dim
        out = 2 * key + 2 * value + 2 * s.num_v_heads
        yield _Module(
            family="in_proj", kind="column", in_features=hidden, parts=(("in_proj", out),), tp=tp
        )
        yield _Module(
            family="out_proj", kind="row", in_features=value, parts=(("out_proj", hidden),), tp=tp
        )
    elif isinstance(s, Mamba1State):
        pass  # Mamba-1 models have no LoRA in vLLM (refused before this)
    elif s is not None:
        kv = spec.num_kv_heads
        kv_rank = max(1, kv // tp) * head  # KV heads replicate when tp exceeds them
        q_out, kv_out = heads * head, kv * head
        if mt in FUSED_QKV:
            yield _Module(
                family="qkv_proj",
                kind="column",
                in_features=hidden,
                parts=(("qkv_proj", q_out + 2 * kv_out),),
                tp=tp,
                rank_outs=(q_out // tp + 2 * kv_rank,),
            )
        else:
            yield _Module(
                family="qkv_proj",
                kind="column",
                in_features=hidden,
                parts=(("q_proj", q_out), ("k_proj", kv_out), ("v_proj", kv_out)),
                tp=tp,
                rank_outs=(q_out // tp, kv_rank, kv_rank),
            )
        yield _Module(
            family="o_proj", kind="row", in_features=q_out, parts=(("o_proj", hidden),), tp=tp
        )
    # the MLP (Nemotron-H layers are a mixer or an MLP, never both)
    pattern = c.get("hybrid_override_pattern")
    block = pattern[i] if isinstance(pattern, str) and i < len(pattern) else None
    if block in ("M", "*") or mt in ("mamba", "falcon_mamba", "mamba2"):
        return
    gated = mt not in UNGATED_MLP
    experts = num_experts_of(c, name)
    if block == "E" or (block is None and is_moe_layer(c, mt, i, name)):
        moe_i = config_int(c, "moe_intermediate_size", name) or config_int(
            c, "intermediate_size", name
        )
        shared_i = config_int(c, "shared_expert_intermediate_size", name)
        shared_i += config_int(c, "n_shared_experts", name) * moe_i
        if mt in ("llama4", "llama4_text"):
            shared_i = config_int(c, "intermediate_size", name)
            moe_i = shared_i
        non_gated = mt in NON_GATED_MOE
        if not non_gated:
            yield _Module(
                family="gate", kind="column", in_features=hidden, parts=(("gate", experts),)
            )  # the router
        yield _Module(
            family="experts",
            kind="experts",
            in_features=hidden,
            parts=(("experts", moe_i),),
            experts=experts,
            gated=not non_gated,
            fused_w13=mt in MOE_3D,
        )
        if shared_i:
            if non_gated:
                yield from _mlp("up_proj", (("up_proj", shared_i),), hidden, shared_i, tp)
            else:
                parts = (("gate_proj", shared_i), ("up_proj", shared_i))
                yield from _mlp("gate_up_proj", parts, hidden, shared_i, tp)
        return
    dense = dense_intermediate(c, hidden, name)
    if not gated:
        yield from _mlp("up_proj", (("up_proj", dense),), hidden, dense, tp)
    elif mt in FUSED_GATE_UP:
        yield from _mlp("gate_up_proj", (("gate_up_proj", 2 * dense),), hidden, dense, tp)
    else:
        parts = (("gate_proj", dense), ("up_proj", dense))
        yield from _mlp("gate_up_proj", parts, hidden, dense, tp)


def _vocab(spec: ModelSpec) -> int:
    return config_int(spec.config, "vocab_size", spec.name) or config_int(
        spec.config, "padded_vocab_size", spec.name
    )


def _edge_modules(spec: ModelSpec, first: bool, last: bool) -> Iterator[_Module]:
    """embed_tokens on the first stage and lm_head on the last, where the model class lists
    them in ``embedding_modules``."""
    if spec.architecture not in EMBEDDING_LORA:
        return
    vocab, hidden = _vocab(spec), spec.hidden_size
    if first:
        yield _Module(
            family="embed_tokens",
            kind="embed",
            in_features=vocab,
            parts=(("embed_tokens", hidden),),
        )
    if last and spec.architecture not in NO_LM_HEAD_LORA:
        yield _Module(
            family="lm_head", kind="head", in_features=hidden, parts=(("lm_head", vocab),)
        )


def _elements(m: _Module, r: int, fully_sharded: bool, local_experts: int, moe_tp: int) -> int:
    """lora_a + lora_b elements of one slot of ``m`` on one GPU (see the module table)."""
    if m.kind == "embed":
        return m.in_features * r + m.parts[0][1] * r
    if m.kind == "head":
        return r * m.in_features + m.parts[0][1] * r
    if m.kind == "experts":
        hidden, width = m.in_features, m.parts[0][1] // moe_tp
        slices = 1 if (m.fused_w13 or not m.gated) else 2
        ra = r // moe_tp if fully_sharded else r
        w13_a = slices * ra * hidden
        w13_b = (2 if m.gated else 1) * width * r
        w2_a = r * width
        w2_b = (hidden // moe_tp if fully_sharded else hidden) * r
        return local_experts * (w13_a + w13_b + w2_a + w2_b)
    if m.kind == "row":
        out = m.parts[0][1]
        return r * (m.in_features // m.tp) + (out // m.tp if fully_sharded else out) * r
    # column: one lora_a per slice over the whole input, lora_b over each slice's shard
    ra = r // m.tp if fully_sharded else r
    outs = m.rank_outs or tuple(out // m.tp for _, out in m.parts)
    return len(m.parts) * ra * m.in_features + sum(outs) * r


@dataclass(frozen=True, kw_only=True)
class LoraBuffers:
    """The stacked LoRA buffers of one deployment, per GPU (JSON ``lora``).

    Attributes:
        max_loras, max_lora_rank: the slots and rank they are sized for.
        target_modules: ``--lora-target-modules`` as vLLM receives it (None: every module).
        stage_bytes: the buffers on one GPU of each pipeline stage.
        by_module: the most-loaded stage's bytes by vLLM module (qkv_proj, experts ...).
        adapter_bytes: one adapter as the CPU cache holds it (whole, unsharded).
        max_cpu_loras: adapters each worker keeps in host RAM.
    """

    max_loras: int
    max_lora_rank: int
    target_modules: tuple[str, ...] | None
    stage_bytes: tuple[int, ...]
    by_module: dict[str, int]
    adapter_bytes: int
    max_cpu_loras: int
    fully_sharded: bool = False

    @property
    def bytes_per_rank(self) -> int:
        return max(self.stage_bytes)


def check_supported(spec: ModelSpec, settings: ServeSettings) -> None:
    """Refuse what vLLM 0.33 refuses about LoRA on this model with these settings."""
    if spec.architecture in NO_LORA:
        raise UsageError(
            f"--enable-lora: vLLM has no LoRA for {spec.architecture} ({spec.name}); "
            "run it without LoRA"
        )

    moe = num_experts_of(spec.config, spec.name) > 0
    if moe and settings.enable_expert_parallel and settings.fully_sharded_loras:
        raise UsageError(
            "--fully-sharded-loras with --enable-expert-parallel: vLLM's MoE LoRA refuses the "
            "pair (fused_moe.py: _verify_ep_fs); drop one"
        )
    r, tp = settings.lora_rank, settings.tp
    moe_tp = 1 if settings.enable_expert_parallel else settings.dp * tp
    if settings.fully_sharded_loras and (r % tp or (moe and r % moe_tp)):
        over = tp if r % tp else moe_tp
        raise UsageError(
            f"--fully-sharded-loras splits the rank over {over} GPUs: --max-lora-rank {r} must "
            f"be divisible by {over}"
        )
    if settings.lora_target_modules is None or "lm_head" in settings.lora_target_modules:
        vocab = _vocab(spec)
        if spec.architecture in EMBEDDING_LORA and vocab > MAX_LORA_VOCAB:
            raise UsageError(
                f"--enable-lora: {spec.name}'s vocabulary of {vocab:,} is above the "
                f"{MAX_LORA_VOCAB:,} vLLM's lm_head LoRA takes; restrict "
                "--lora-target-modules to the decoder's modules"
            )


def buffers(spec: ModelSpec, settings: ServeSettings) -> LoraBuffers:
    """The LoRA buffers ``settings`` allocate on each GPU, stage by stage (ENGINES-SCALE
    §4.4); the model dtype's bytes per element (``lora_dtype auto``).

    Qwen3-30B-A3B (48 MoE layers of 128 experts, H 2,048, I 768), rank 16, one slot, TP 1:
    the experts are 128 x (2 x 16 x 2,048 + 16 x 768 + 2 x 768 x 16 + 2,048 x 16) = 17,301,504
    elements a layer, 98 % of the 1.58 GiB.
    """
    check_supported(spec, settings)
    r, n = settings.lora_rank, settings.max_loras
    dtype = spec.dtype_bytes
    tp, pp = settings.tp, settings.pp
    ep = settings.enable_expert_parallel

    experts = num_experts_of(spec.config, spec.name)
    where = placement_of(settings)
    local = -(-(experts + where.redundant_experts) // where.expert_gpus) if ep else experts
    moe_tp = 1 if ep else where.expert_gpus
    targets = settings.lora_target_modules
    stages: list[int] = []
    by_stage: list[dict[str, int]] = []
    for stage in range(pp):
        start, end = get_pp_indices(spec.num_layers, stage, pp)
        mods: list[_Module] = list(_edge_modules(spec, stage == 0, stage == pp - 1))
        for i in range(start, end):
            mods.extend(_layer_modules(spec, i, tp))
        found: dict[str, int] = {}
        for m in mods:
            if m.matches(targets):
                size = n * _elements(m, r, settings.fully_sharded_loras, local, moe_tp) * dtype
                found[m.family] = found.get(m.family, 0) + size
        by_stage.append(found)
        stages.append(sum(found.values()))
    busiest = max(range(pp), key=lambda k: stages[k])
    adapter = settings.lora_adapter
    return LoraBuffers(
        max_loras=n,
        max_lora_rank=r,
        target_modules=targets,
        stage_bytes=tuple(stages),
        by_module=by_stage[busiest],
        adapter_bytes=adapter_bytes(
            spec,
            adapter.rank if adapter else r,
            adapter.target_modules if adapter else targets,
        ),
        max_cpu_loras=settings.max_cpu_loras or n,
        fully_sharded=settings.fully_sharded_loras,
    )


def _peft_targets(part: str, family: str, targets: Sequence[str] | None) -> bool:
    """Whether a PEFT adapter with ``targets`` trains ``part`` (of vLLM module ``family``)."""
    if targets is None:
        return True
    if "all-linear" in targets:
        return family != "lm_head"  # PEFT's all-linear leaves the output layer out
    if family == "experts":
        return any(t in EXPERT_UP or t in EXPERT_DOWN or t == "experts" for t in targets)
    return part in targets or family in targets


def adapter_bytes(spec: ModelSpec, rank: int, targets: Sequence[str] | None) -> int:
    """One adapter as vLLM holds it on the CPU: ``rank x (in + out)`` elements for every
    matrix it trains, whole (no TP split), in the model dtype.

    AswaniSahoo/llama-task-agent (Llama-3.1-8B, r 16, q/k/v/o_proj): per layer 16 x (4,096 +
    4,096) for q and o, 16 x (4,096 + 1,024) for k and v = 425,984 elements; x 32 layers x 2 B
    = 27,262,976 B = 26 MiB."""
    elements = 0
    mods: list[_Module] = list(_edge_modules(spec, True, True))
    for i in range(spec.num_layers):
        mods.extend(_layer_modules(spec, i, 1))
    every = targets is None or "all-linear" in targets or "experts" in targets
    for m in mods:
        if m.kind == "experts":
            up = every or any(t in EXPERT_UP for t in targets or ())
            down = every or any(t in EXPERT_DOWN for t in targets or ())
            matrices = (2 if m.gated else 1) * up + down  # gate + up (or up), down
            elements += m.experts * matrices * rank * (m.in_features + m.parts[0][1])
            continue
        for part, out in m.parts:
            if _peft_targets(part, m.family, targets):
                elements += rank * (m.in_features + out)
    return elements * spec.dtype_bytes


def families(spec: ModelSpec) -> tuple[str, ...]:
    """vLLM's LoRA module names for this model, in layer order (``--lora-target-modules``
    takes these or the PEFT names they pack)."""
    seen: dict[str, None] = {}
    for m in _edge_modules(spec, True, False):
        seen[m.family] = None
    for i in range(spec.num_layers):
        for m in _layer_modules(spec, i, 1):
            seen[m.family] = None
    for m in _edge_modules(spec, False, True):
        seen[m.family] = None
    return tuple(seen)


def targets_from_adapter(spec: ModelSpec, adapter: LoraAdapter) -> tuple[str, ...] | None:
    """The ``--lora-target-modules`` that cover what ``adapter`` trains on this model, in
    vLLM's module names (``q_proj`` -> ``qkv_proj``; an expert projection -> ``experts``);
    None when it trains every module vLLM would wrap anyway."""
    targets = adapter.target_modules
    if targets is None or "all-linear" in targets:
        return None
    mods: list[_Module] = list(_edge_modules(spec, True, True))
    for i in range(spec.num_layers):
        mods.extend(_layer_modules(spec, i, 1))
    chosen: dict[str, None] = {}
    for m in mods:
        if any(_peft_targets(part, m.family, targets) for part, _ in m.parts):
            chosen[m.family] = None
    wanted = tuple(f for f in families(spec) if f in chosen)
    return wanted if set(wanted) != set(families(spec)) else None


def describe(b: LoraBuffers) -> dict[str, Any]:
    """JSON ``lora`` (byte figures per GPU of the most-loaded stage)."""
    return {
        "max_loras": b.max_loras,
        "max_lora_rank": b.max_lora_rank,
        "target_modules": list(b.target_modules) if b.target_modules else None,
        "fully_sharded_loras": b.fully_sharded,
        "bytes_per_rank": b.bytes_per_rank,
        "stage_bytes": list(b.stage_bytes),
        "by_module": b.by_module,
        "adapter_bytes": b.adapter_bytes,
        "max_cpu_loras": b.max_cpu_loras,
    }


def with_adapter(dep: Deployment) -> Deployment:
    """``dep`` with what ``--lora-adapter`` tells: the modules it trains as
    ``--lora-target-modules`` when none are given (vLLM would otherwise allocate every module)."""
    s = dep.settings
    adapter = s.lora_adapter
    if adapter is None or s.lora_target_modules is not None:
        return dep
    targets = targets_from_adapter(dep.spec, adapter)
    return dep if targets is None else dep.with_settings(lora_target_modules=targets)


def lora_notes(dep: Deployment, b: LoraBuffers) -> tuple[list[str], list[str]]:
    """(notes, warnings) about the LoRA buffers: a rank above the adapter's (PR#22782's
    warning), targets taken from the adapter and what they save, MoE experts' share."""
    s, spec = dep.settings, dep.spec
    notes: list[str] = []
    warnings: list[str] = []
    if b.target_modules is not None:
        known = set(families(spec))
        for i in range(spec.num_layers):
            known.update(name for m in _layer_modules(spec, i, 1) for name, _ in m.parts)
        unknown = [t for t in b.target_modules if t not in known]
        if unknown:
            warnings.append(
                f"--lora-target-modules {' '.join(unknown)}: no such module in {spec.name} (vLLM "
                f"skips it silently); its LoRA modules: {' '.join(families(spec))}"
            )
    adapter = s.lora_adapter
    if adapter is not None and b.max_lora_rank > rank_for(adapter.rank):
        lower = rank_for(adapter.rank)
        saved = b.bytes_per_rank - buffers(spec, s.but(max_lora_rank=lower)).bytes_per_rank
        warnings.append(
            f"--max-lora-rank {b.max_lora_rank} is above the adapter's rank {adapter.rank} "
            f"({adapter.path}): every slot is sized for {b.max_lora_rank}; "
            f"--max-lora-rank {lower} frees {fmt_bytes(saved)} per GPU"
        )
    if adapter is not None and s.lora_target_modules is not None:
        if s.lora_target_modules == targets_from_adapter(spec, adapter):
            whole = buffers(spec, s.but(lora_target_modules=None)).bytes_per_rank
            notes.append(
                f"--lora-target-modules {' '.join(s.lora_target_modules)}: what the adapter "
                f"trains ({', '.join(adapter.target_modules or ())}); it saves "
                f"{fmt_bytes(whole - b.bytes_per_rank)} per GPU against every module (drop it "
                "to serve adapters that train more)"
            )
    if adapter is None:
        notes.append(
            f"LoRA CPU cache: each worker keeps up to {b.max_cpu_loras} adapter(s), assumed of "
            f"rank {b.max_lora_rank} on the modules the buffers cover "
            f"({fmt_bytes(b.adapter_bytes)} each); --lora-adapter DIR sizes them from yours"
        )
    experts = b.by_module.get("experts", 0)
    if experts * 2 > b.bytes_per_rank:
        notes.append(
            f"LoRA: the MoE experts hold {experts / b.bytes_per_rank:.0%} of the buffers "
            f"({fmt_bytes(experts)} per GPU); --lora-target-modules without experts (e.g. "
            "qkv_proj o_proj) leaves them out, if your adapters do not train them"
        )
    return notes, warnings
