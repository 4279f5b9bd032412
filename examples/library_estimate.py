"""Use kvplan as a library: compare KV per token across TP sizes and KV dtypes.

python examples/library_estimate.py [model]
"""

from __future__ import annotations

import sys

import planner


def main(model: str = "llama-3.1-70b") -> None:
    spec = planner.load_model_spec(model)  # catalog name, hub id or local path
    print(f"{spec.name}: {spec.attention_type}, {spec.num_layers} layers")
    for dtype in (planner.KVDtype.AUTO, planner.KVDtype.FP8):
        for tp in (1, 2, 4, 8):
            try:
                est = planner.estimate(spec, tp=tp, kv_cache_dtype=dtype, max_model_len=32_768)
            except planner.KvplanError as exc:  # e.g. TP that does not divide the heads
                print(f"  {dtype.value:>4} TP{tp}: {exc}")
                continue
            print(
                f"  {est.kv_cache_dtype:>4} TP{tp}: {est.kv_bytes_per_token:>9,} B/token/rank, "
                f"{est.kv_bytes_per_sequence / 2**30:6.2f} GiB per 32k-token sequence"
            )


if __name__ == "__main__":
    main(*sys.argv[1:2])
