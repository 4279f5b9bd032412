"""torch probes behind ``kvplan verify``: prove a KV-cache plan against a real allocator.

A plan is a claim ("this GPU holds N blocks of this model's KV cache next to its weights and
activations"). The probes test it the way an engine would live it, without launching one:

- :mod:`probes.alloc` -- where bytes come from: the CUDA caching allocator, or on CPU a
  *budgeted* allocator that counts every tensor torch creates and raises the same
  ``torch.OutOfMemoryError`` when a ``--memory-budget`` would be exceeded;
- :mod:`probes.paged` -- vLLM's paged KV pool: one raw tensor per layer position shared by the
  KV-cache groups, per-layer views (``[num_blocks, 2, block_size, kv_heads, head_size]``, MLA
  latents, Mamba state slots), a block allocator and per-sequence block tables;
- :mod:`probes.attention` -- paged attention in pure torch (gather by block table, online
  softmax over chunks that bound the extra memory): prefill, decode, GQA/MQA, windows, MLA;
- :mod:`probes.weights` -- the weight tensors of one rank by name and shape (no torch);
- :mod:`probes.model` -- real-shaped random weights for one GPU rank and the forward passes
  (vLLM's profile step, decode steps, chunked prefill);
- :mod:`probes.plan` -- what a plan predicts, the plan files ``--plan`` reads, and the
  request and result types of ``kvplan verify`` (no torch);
- :mod:`probes.frontier` -- bisection for the largest pool that still allocates and runs;
- :mod:`probes.probe` -- the orchestration (predicted vs measured);
- :mod:`probes.hfcache` -- cross-check of the byte layout against transformers' real cache.

The torch modules import it at the top; nothing outside ``probes/`` imports them except inside
``kvplan verify``'s function body, so ``kvplan --help`` and ``kvplan estimate`` never load torch.
"""
