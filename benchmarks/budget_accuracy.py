"""How close kvplan's vLLM budget comes to "Available KV cache memory" in public start-up logs.

Reads ``tests/data/vllm_startups.json`` (each record cites the log it came from), rebuilds each
deployment with the planner's API (catalog or fixture config, the logged GPU total when there
is one, the logged settings) and compares :func:`planner.budget.vllm_budget`'s
``available_kv_bytes`` with the logged value, per GPU rank. Prints one row per record, then
the share within +-5 % and the median absolute error, for the calibration and held-out sets
apart.

    python benchmarks/budget_accuracy.py                      # planner weights
    python benchmarks/budget_accuracy.py --use-logged-weights # "Model loading took" instead
    python benchmarks/budget_accuracy.py --batch-from-version # vLLM's batch defaults of the
                                                              # record's release and entrypoint
    python benchmarks/budget_accuracy.py --json               # the rows, for tests
    python benchmarks/budget_accuracy.py --terms              # held out, term by term
                                                              # (docs/budget-held-out.md)

``--use-logged-weights`` isolates the activation, non-torch and CUDA-graph terms: the weights
then are what vLLM measured. Records whose checkpoint has no config (AWQ/GPTQ stand-ins) need
it; without it they are skipped. A record with neither a logged total nor a catalog GPU is
skipped too. Rows whose log quotes only "Current kv cache memory in use" (not "Available")
are marked ``*``: vLLM prints the same available_kv_cache_memory_bytes there
(``gpu_worker.py`` 0.11.0:390-391, 0.31.0:951-952).

``--batch-from-version`` fills ``max_num_batched_tokens`` / ``max_num_seqs`` the record leaves
unset from ``EngineArgs.get_batch_defaults`` of the record's release and entrypoint (``LLM``
class 8,192 / 256 under 70 GiB, 16,384 / 1,024 above; ``vllm serve`` 2,048 / 256 and
8,192 / 1,024; A100s take the small row; >= 160 GiB 16,384 / 1,024 from 0.28), for planners
that only model ``vllm serve``'s defaults. Where ``ServeSettings`` has ``vllm_version`` and
``entrypoint`` fields the record's are passed through as well.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # appended: a PYTHONPATH planner (another checkout) wins
    sys.path.append(str(ROOT))

from planner.budget import estimate_ranges, is_rocm, vllm_budget  # noqa: E402
from planner.deployment import Deployment, ServeSettings  # noqa: E402
from planner.errors import KvplanError  # noqa: E402
from planner.gpus import Gpu, get_gpu  # noqa: E402
from planner.kv_layout import estimate  # noqa: E402
from planner.model.load import load_model  # noqa: E402
from planner.model.specs import KVDtype  # noqa: E402
from planner.multimodal import parse_tokens  # noqa: E402
from planner.weights import for_deployment  # noqa: E402

DATA = ROOT / "tests" / "data" / "vllm_startups.json"
GIB = 1 << 30
WITHIN = 5.0  # percent


def load_records(path: Path = DATA) -> list[dict[str, Any]]:
    """The start-up records (see tests/data/vllm_startups.json)."""
    records: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return records


def _version(text: str | None) -> tuple[int, ...] | None:
    """``"0.11.0+582e4e37.nv25.11"`` -> (0, 11, 0); None when absent."""
    if not text:
        return None
    m = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def release_batch_defaults(
    version: tuple[int, ...] | None, entrypoint: str | None, gpu: Gpu
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of ``EngineArgs.get_batch_defaults`` for a
    V1 release (0.9 to 0.33) and entrypoint; an unknown version reads as the newest."""
    gib = gpu.memory_bytes / GIB
    llm = entrypoint == "llm"
    if (version is None or version >= (0, 28)) and gib >= 160:
        return 16384, 1024
    if gib >= 70 and not gpu.is_a100:
        return (16384 if llm else 8192), 1024
    return (8192 if llm else 2048), 256


def _gpu(rec: dict[str, Any]) -> Gpu | None:
    total = rec.get("gpu_total_gib")
    base = get_gpu(rec["gpu_catalog"]) if rec.get("gpu_catalog") else None
    if total is None:
        return base
    memory = int(total * GIB)
    if base is not None:
        return base.with_memory(memory, "log")
    return Gpu(name=rec["gpu"], memory_bytes=memory, source="log")


def _settings(rec: dict[str, Any], gpu: Gpu, batch_from_version: bool) -> ServeSettings:
    fields = {f.name for f in dataclasses.fields(ServeSettings)}
    kw: dict[str, Any] = {
        "tp": rec["tp"],
        "pp": rec["pp"],
        "max_model_len": rec["max_model_len"],
        "max_num_seqs": rec["max_num_seqs"],
        "max_num_batched_tokens": rec["max_num_batched_tokens"],
        "gpu_memory_utilization": rec["gpu_memory_utilization"],
        "kv_cache_dtype": KVDtype(rec.get("kv_cache_dtype") or "auto"),
    }
    if rec["enforce_eager"]:
        kw["cuda_graph_bytes"] = 0
    version = _version(rec.get("vllm_version"))
    if batch_from_version:
        tokens, seqs = release_batch_defaults(version, rec.get("entrypoint"), gpu)
        if kw["max_num_batched_tokens"] is None:
            kw["max_num_batched_tokens"] = tokens
        if kw["max_num_seqs"] is None:
            kw["max_num_seqs"] = seqs
    if "vllm_version" in fields and version is not None:
        kw["vllm_version"] = ".".join(str(p) for p in version)
    if "entrypoint" in fields and rec.get("entrypoint"):
        kw["entrypoint"] = rec["entrypoint"]
    if "interconnect" in fields and rec.get("interconnect"):
        kw["interconnect"] = rec["interconnect"]
    if "enable_expert_parallel" in fields and rec.get("enable_expert_parallel"):
        kw["enable_expert_parallel"] = True  # whole experts per GPU (--enable-expert-parallel)
    if rec.get("disable_custom_all_reduce"):
        kw["disable_custom_all_reduce"] = True
    if "sampler" in fields and rec.get("sampler"):
        kw["sampler"] = rec["sampler"]  # the sampler the log says ran
    if "gpu_free_memory_bytes" in fields and rec.get("gpu_free_memory_gib") is not None:
        # memory free on the GPU at start-up, as vLLM logged it ('Free memory on device (X/Y GiB)')
        kw["gpu_free_memory_bytes"] = int(rec["gpu_free_memory_gib"] * GIB)
    if "mm_tokens_per_item" in fields and rec.get("mm_tokens_per_item") is not None:
        # the largest multimodal item, where the log states it (its encoder budget line)
        kw["mm_tokens_per_item"] = parse_tokens(rec["mm_tokens_per_item"])
    if "mxfp4_backend" in fields and rec.get("mxfp4_backend"):
        kw["mxfp4_backend"] = rec["mxfp4_backend"]  # the MoE kernel the log's install runs
    return ServeSettings(**kw)


def _config_path(rec: dict[str, Any]) -> str:
    name: str = rec["config_model"]
    return str(ROOT / name) if name.startswith("tests/") else name


def _setup(rec: dict[str, Any]) -> str:
    parts = [rec["entrypoint"] or "?", f"tp{rec['tp']}"]
    if rec["pp"] > 1:
        parts.append(f"pp{rec['pp']}")
    parts.append(f"gmu {rec['gpu_memory_utilization']}")
    if rec["max_num_seqs"]:
        parts.append(f"seqs {rec['max_num_seqs']}")
    if rec["enforce_eager"]:
        parts.append("eager")
    if rec.get("quantization"):
        parts.append(rec["quantization"])
    return " ".join(parts)


def predict(
    rec: dict[str, Any], *, use_logged_weights: bool = False, batch_from_version: bool = False
) -> dict[str, Any]:
    """One row: the record's logged available KV against kvplan's, or why it was skipped."""
    logged = rec["logged"]
    target, in_use = logged.get("available_kv_gib"), False
    if target is None and logged.get("kv_in_use_gib") is not None:
        target, in_use = logged["kv_in_use_gib"], True
    row: dict[str, Any] = {
        "id": rec["id"],
        "set": rec["set"],
        "gpu": rec["gpu"],
        "model": rec["model"],
        "setup": _setup(rec),
        "vllm_version": rec.get("vllm_version"),
        "source": rec["source"],
        "logged_gib": target,
        "logged_is_kv_in_use": in_use,
        "predicted_gib": None,
        "error_pct": None,
        "error_gib": None,
        "weights": None,
        "skipped": None,
        # CALIBRATION.md's rule: a start-up of unknown release is no regression target (its
        # rules, sampler and non-torch figures are the newest kvplan knows, a guess)
        "release_known": _version(rec.get("vllm_version")) is not None,
        "rocm": False,
    }
    if target is None:
        row["skipped"] = "no available KV in the log"
        return row
    gpu = _gpu(rec)
    if gpu is None:
        row["skipped"] = "no GPU total (not logged, GPU not in the catalog)"
        return row
    row["rocm"] = is_rocm(gpu)
    logged_w = logged.get("weights_gib")
    if use_logged_weights and logged_w is not None:
        source = "logged"
    elif rec["weights_from_config"]:
        source = "planner"
    else:
        row["skipped"] = "quantized checkpoint without its config: needs --use-logged-weights"
        return row
    try:
        model = load_model(_config_path(rec), offline=True)
        settings = _settings(rec, gpu, batch_from_version)
        dep = Deployment(model=model, gpu=gpu, settings=settings)
        est = estimate(dep.spec, settings, gpu, batch_sizes=())
        weights = for_deployment(dep)  # as every command: placement, the GPU's MoE kernel
        if source == "logged":
            weights = dataclasses.replace(weights, bytes_per_rank=int(logged_w * GIB))
        cap = vllm_budget(dep, est, weights)
    except KvplanError as e:
        row["skipped"] = f"{type(e).__name__}: {e}"
        return row
    predicted = cap.available_kv_bytes / GIB
    ranges = estimate_ranges(cap, settings.tp * settings.pp)
    low, high = ranges["available_kv_bytes"]
    # each estimated term's stated range, GiB: what the log's own terms must fall in
    act_lo, act_hi = ranges["activation_peak_bytes"]
    if logged.get("activation_includes_graph_estimate"):
        # 0.2x logs the subtracted graph estimate inside "peak activation" (gpu_worker.py
        # 0.27.1:527-529): compare it with activation + graphs
        act_lo += ranges["cuda_graph_bytes"][0]
        act_hi += ranges["cuda_graph_bytes"][1]
    row.update(
        term_ranges_gib={
            "activation_peak_gib": (round(act_lo / GIB, 2), round(act_hi / GIB, 2)),
            "non_torch_gib": tuple(round(b / GIB, 2) for b in ranges["non_torch_bytes"]),
            # the CUDA-graph memory the budget subtracts (0.20 on): what a log's "Estimated
            # CUDA graph memory: X GiB total" line states (0, 0 where none is subtracted)
            "cuda_graph_estimate_gib": tuple(round(b / GIB, 2) for b in ranges["cuda_graph_bytes"]),
        },
    )
    row.update(
        low_gib=round(low / GIB, 2),
        high_gib=round(high / GIB, 2),
        # the log states 2 decimals: within the range up to that rounding
        in_range=low / GIB - 0.005 <= target <= high / GIB + 0.005,
    )
    row.update(
        predicted_gib=round(predicted, 2),
        error_pct=round((predicted - target) / target * 100, 1),
        error_gib=round(predicted - target, 2),
        weights=source,
        predicted_weights_gib=round(cap.weights_bytes / GIB, 2),
        predicted_activation_gib=round(cap.activation_peak_bytes / GIB, 2),
        predicted_non_torch_gib=round(cap.non_torch_bytes / GIB, 2),
        predicted_cuda_graph_gib=round(cap.cuda_graph_bytes / GIB, 2),
        predicted_tokens=cap.kv_cache_size_tokens,
        logged_tokens=logged.get("kv_cache_tokens"),
        max_num_batched_tokens=cap.max_num_batched_tokens,
        max_num_seqs=cap.max_num_seqs,
    )
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per set: rows scored, share within +-5 %, median absolute error (% and GiB). Rows of
    unknown release count in ``unknown_release`` only (no regression target); the held-out
    set is also split by platform (``held_out_cuda``, ``held_out_rocm``)."""
    out: dict[str, dict[str, Any]] = {}

    def member(r: dict[str, Any], name: str) -> bool:
        if name == "unknown_release":
            return not r.get("release_known", True)
        if name in ("held_out_cuda", "held_out_rocm"):
            rocm = name == "held_out_rocm"
            return member(r, "held_out") and bool(r.get("rocm")) == rocm
        return r.get("release_known", True) and name in ("all", r["set"])

    for name in (
        "calibration",
        "held_out",
        "held_out_cuda",
        "held_out_rocm",
        "all",
        "unknown_release",
    ):
        errs = [abs(r["error_pct"]) for r in rows if r["error_pct"] is not None and member(r, name)]
        gib = [abs(r["error_gib"]) for r in rows if r["error_gib"] is not None and member(r, name)]
        out[name] = {
            "scored": len(errs),
            "within_5pct": round(sum(e <= WITHIN for e in errs) / len(errs), 3) if errs else None,
            "median_abs_error_pct": round(statistics.median(errs), 1) if errs else None,
            "median_abs_error_gib": round(statistics.median(gib), 2) if gib else None,
        }
    return out


def _logged_kv(r: dict[str, Any]) -> str:
    """The row's logged KV in GiB, ``*`` where the log quotes the KV memory in use."""
    return f"{r['logged_gib']:.2f}" + ("*" if r["logged_is_kv_in_use"] else "")


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def render(rows: list[dict[str, Any]]) -> str:
    head = f"{'id':<44} {'set':<5} {'GPU':<24} {'model':<30} {'setup':<28} {'logged':>7} "
    head += f"{'kvplan':>7} {'err %':>7} {'GiB':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        logged = "-"  # a start-up that failed before the line
        if r["logged_gib"] is not None:
            logged = _logged_kv(r)
        if r["skipped"]:
            pred, err = "-", f"skip: {r['skipped']}"
        else:
            pred = f"{r['predicted_gib']:.2f}"
            err = f"{r['error_pct']:+.1f} {r['error_gib']:+6.2f}"
        lines.append(
            f"{_short(r['id'], 44):<44} {r['set'][:5]:<5} {_short(r['gpu'], 24):<24} "
            f"{_short(r['model'], 30):<30} {_short(r['setup'], 28):<28} {logged:>7} "
            f"{pred:>7} {err:>7}"
        )
    lines.append("")
    for name, s in summary(rows).items():
        within = "-" if s["within_5pct"] is None else f"{s['within_5pct']:.0%}"
        median = (
            "-"
            if s["median_abs_error_pct"] is None
            else f"{s['median_abs_error_pct']}% ({s['median_abs_error_gib']:.2f} GiB)"
        )
        lines.append(
            f"{name:<15} scored {s['scored']:>2}   within +-{WITHIN:.0f}%: {within:>4}   "
            f"median |error|: {median}"
        )
    return "\n".join(lines)


def _pair(logged: float | None, planned: float | None) -> str:
    """``logged / kvplan`` in GiB, ``-`` for a side that has no figure."""
    left = "-" if logged is None else f"{logged:.2f}"
    right = "-" if planned is None else f"{planned:.2f}"
    return f"{left} / {right}"


TERMS_HEADER = """# vLLM's start-up budget against held-out public logs, term by term

Generated by `python benchmarks/budget_accuracy.py --terms > docs/budget-held-out.md`
(`tests/test_startup_logs.py` checks it is current). One row per held-out start-up of known
release that kvplan scores (tests/data/vllm_startups.json, each record citing its log; none
was fitted on), with kvplan's own weights. Each cell is `logged / kvplan` in GiB; `-` where
the log does not state the term. Activation marked `+g` is a release that logs the subtracted
CUDA-graph estimate inside its peak activation (0.27 on), set against
kvplan's activation + graphs. The logged CUDA-graph figure is what the log calls CUDAGraph
memory or an estimate line; before 0.20 graphs were captured after sizing and kvplan subtracts
none (0.00). Available KV marked `*` is the log's "Current kv cache memory in use", the same
figure (gpu_worker.py 0.11.0:390-391). The
summary and the other sets: [vllm-budget.md](vllm-budget.md#how-far-off).

"""


def render_terms(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> str:
    """The held-out start-ups of known release that were scored, term by term, as a Markdown
    table (issue 23 item 7: source, GPU, release, setup, logged against kvplan per term).
    Where the release logs the subtracted graph estimate inside its peak activation
    (``activation_includes_graph_estimate``) the activation column sets it against kvplan's
    activation + CUDA graphs and says so with ``+g``; a 0.27+ record's non-torch is its
    "consumed memory" less the weights."""
    by_id = {r["id"]: r for r in records}
    lines = [
        "| record (source) | release | GPU | setup | weights | activation | non-torch "
        "| CUDA graphs | available KV | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["set"] != "held_out" or not r["release_known"] or r["error_pct"] is None:
            continue
        logged = by_id[r["id"]]["logged"]
        act_planned = r["predicted_activation_gib"]
        act_note = ""
        if logged.get("activation_includes_graph_estimate"):
            act_planned = round(act_planned + r["predicted_cuda_graph_gib"], 2)
            act_note = " +g"
        kv = _logged_kv(r)
        cells = [
            f"[{r['id']}]({r['source']})",
            str(r["vllm_version"]),
            r["gpu"].replace("|", "/"),
            r["setup"],
            _pair(logged.get("weights_gib"), r["predicted_weights_gib"]),
            _pair(logged.get("activation_peak_gib"), act_planned) + act_note,
            _pair(logged.get("non_torch_gib"), r["predicted_non_torch_gib"]),
            _pair(logged.get("cuda_graph_gib"), r["predicted_cuda_graph_gib"]),
            f"{kv} / {r['predicted_gib']:.2f}",
            f"{r['error_pct']:+.1f} %",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--use-logged-weights", action="store_true")
    ap.add_argument("--batch-from-version", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the rows and summary as JSON")
    ap.add_argument(
        "--terms",
        action="store_true",
        help="print the scored held-out start-ups term by term as a Markdown table",
    )
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    records = load_records(args.data)
    rows = [
        predict(
            r,
            use_logged_weights=args.use_logged_weights,
            batch_from_version=args.batch_from_version,
        )
        for r in records
    ]
    if args.terms:
        print(TERMS_HEADER + render_terms(rows, records))
    elif args.json:
        print(json.dumps({"rows": rows, "summary": summary(rows)}, indent=2))
    else:
        print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
