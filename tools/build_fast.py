"""Build kvplan's optional compiled event loop in place, or remove it.

    python tools/build_fast.py            # compile planner.simulate.fast.COMPILED with mypyc
    python tools/build_fast.py --clean    # remove the build: pure Python again

Needs mypy (it ships mypyc; in the dev extra) and a C compiler. It compiles the modules in
``planner.simulate.fast.COMPILED`` (the simulator's engine) to C extensions beside their
sources (``planner/simulate/engine.cpython-*.so`` and the shared ``_fast__mypyc`` library) and
records each source's SHA-256 in ``planner/simulate/_fast_build.json``; Python then imports
the extension. Nothing else changes: the same results to the last bit, sooner
(benchmarks/simulate_rates.py). Edit a compiled module afterwards and kvplan imports its
source again (the recorded hash no longer matches) until you rebuild; ``KVPLAN_PURE_PYTHON=1``
imports the sources whatever is built. Installs (``pip install -e .``, wheels) never compile:
pure Python is the default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.simulate import fast  # noqa: E402  (the checkout's, not an installed one)

# no fused multiply-adds (the default on aarch64 and with -march=native): a * b + c rounded
# once would not be CPython's two roundings, and results would differ in the last bit
NO_CONTRACT = "-ffp-contract=off"
# mypyc type-checks the whole import graph from source, with no cache: the big third-party
# packages the planner imports (torch alone: minutes) are skipped, as they are not compiled and
# the compiled modules use none of their types
MYPY_CONFIG = """[mypy]
strict = True
[mypy-torch.*,transformers.*,matplotlib.*,huggingface_hub.*,numpy.*,typer.*,rich.*,probes.*]
follow_imports = skip
ignore_missing_imports = True
"""


def artifacts() -> list[Path]:
    """The files a build leaves in the checkout."""
    here = fast.HERE
    names = [m.rsplit(".", 1)[1] for m in fast.COMPILED] + [fast.GROUP.rsplit(".", 1)[1]]
    found = [p for n in names for p in here.glob(f"{n}*.so")]
    found += [p for n in names for p in here.glob(f"{n}*.pyd")]
    return found + ([fast.STAMP] if fast.STAMP.exists() else [])


def clean() -> None:
    for path in artifacts():
        path.unlink()
        print(f"removed {path.relative_to(ROOT)}")


def build(opt_level: str) -> None:
    try:
        from mypyc.build import mypycify
    except ImportError:
        sys.exit("build_fast: needs mypyc (pip install mypy, or the dev extra)")
    from setuptools import Distribution

    clean()  # the sources, not a previous build, are what gets type-checked and compiled
    os.chdir(ROOT)
    sources = [str(fast.source_of(m).relative_to(ROOT)) for m in fast.COMPILED]
    with tempfile.TemporaryDirectory(prefix="kvplan-fast-") as tmp:
        config = Path(tmp) / "mypy.ini"
        config.write_text(MYPY_CONFIG)
        exts = mypycify(
            ["--config-file", str(config), *sources],
            opt_level=opt_level,
            group_name=fast.GROUP,
            target_dir=f"{tmp}/c",
        )
        for ext in exts:
            if os.name != "nt":
                ext.extra_compile_args.append(NO_CONTRACT)
        dist = Distribution({"name": "kvplan-fast", "ext_modules": exts})
        cmd = dist.get_command_obj("build_ext")
        cmd.inplace = True  # type: ignore[attr-defined]
        cmd.build_temp = f"{tmp}/temp"  # type: ignore[attr-defined]
        cmd.build_lib = f"{tmp}/lib"  # type: ignore[attr-defined]
        dist.run_command("build_ext")
    fast.STAMP.write_text(
        json.dumps({m: fast.digest(fast.source_of(m)) for m in fast.COMPILED}, indent=2) + "\n"
    )
    for path in artifacts():
        print(f"built {path.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clean", action="store_true", help="remove the build")
    parser.add_argument("--opt", default="3", help="mypyc's opt level (C -O)")
    args = parser.parse_args()
    if args.clean:
        clean()
    else:
        build(args.opt)


if __name__ == "__main__":
    main()
