"""Fuzzed file kinds: whatever kind of file sits where kvplan reads one by itself (a
model folder's config.json and model.safetensors, an adapter folder's adapter_config.json, the
token file) or where the user names one, every reader ends, at once, in a result or one
KvplanError: a FIFO without a writer never hangs it, /dev/zero never feeds it forever, and a
FIFO or device kvplan found by itself is refused as "not a regular file".

The devices here are only read (/dev/zero, /dev/null through links); nothing is written.
"""

from __future__ import annotations

import json
import os
import signal
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import files, secrets
from planner.errors import KvplanError
from planner.lora import read_adapter
from planner.model.resolve import load_model_spec
from planner.simulate.steptimes import load_step_times
from planner.simulate.trace import load_workload
from planner.weights import read_safetensors_header
from tests.conftest import fixture_config
from tests.fuzz_helpers import DEFAULT, SLOW, scratch

LLAMA = fixture_config("meta-llama--Llama-3.1-8B").read_text()
HEADER = (
    b'{"model.embed_tokens.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}'
)
ADAPTER = json.dumps({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"]})
KINDS = [
    "regular",
    "empty",
    "garbage",
    "fifo",
    "link-to-fifo",
    "dev-zero",
    "dev-null",
    "directory",
    "dangling-link",
    "link-loop",
]
NOT_REGULAR = {"fifo", "link-to-fifo", "dev-zero", "dev-null"}


def make(path: Path, kind: str, good: bytes, garbage: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "regular":
        path.write_bytes(good)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage":
        path.write_bytes(garbage)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-to-fifo":
        os.mkfifo(path.with_name(path.name + ".fifo"))
        os.symlink(path.with_name(path.name + ".fifo"), path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "dev-null":
        os.symlink("/dev/null", path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling-link":
        os.symlink(path.with_name("nothing-here"), path)
    else:
        os.symlink(path.with_name(path.name + ".b"), path)
        os.symlink(path, path.with_name(path.name + ".b"))


@contextmanager
def at_most(seconds: int) -> Iterator[None]:
    """Fail, instead of hanging the suite, if the block takes longer than ``seconds``."""

    def hung(*args: object) -> None:
        raise AssertionError(f"a read did not end within {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def model(folder: Path, kind: str, garbage: bytes) -> Callable[[], Any]:
    make(folder / "m" / "config.json", kind, LLAMA.encode(), garbage)
    return lambda: load_model_spec(str(folder / "m"))


def header(folder: Path, kind: str, garbage: bytes) -> Callable[[], Any]:
    good = struct.pack("<Q", len(HEADER)) + HEADER
    make(folder / "model.safetensors", kind, good, garbage)
    return lambda: read_safetensors_header(folder / "model.safetensors")


def adapter(folder: Path, kind: str, garbage: bytes) -> Callable[[], Any]:
    make(folder / "ad" / "adapter_config.json", kind, ADAPTER.encode(), garbage)
    return lambda: read_adapter(str(folder / "ad"))


def trace(folder: Path, kind: str, garbage: bytes) -> Callable[[], Any]:
    make(folder / "t.jsonl", kind, b'{"prompt_tokens": 5, "output_tokens": 5}\n', garbage)
    return lambda: load_workload(folder / "t.jsonl")


def steps(folder: Path, kind: str, garbage: bytes) -> Callable[[], Any]:
    make(folder / "s.csv", kind, b"tokens,seconds\n1,0.01\n", garbage)
    return lambda: load_step_times(folder / "s.csv")


READERS = {"model": model, "header": header, "adapter": adapter, "trace": trace, "steps": steps}
CASES = st.tuples(
    st.sampled_from(sorted(READERS)),
    st.sampled_from(KINDS),
    st.binary(max_size=64),
    st.booleans(),  # named on the command line
)


@contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    """``obj.name`` set to ``value`` for one example (hypothesis runs many per test call, so a
    function-scoped monkeypatch would not reset between them)."""
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def check(case: tuple[str, str, bytes, bool]) -> None:
    reader, kind, garbage, named = case
    with scratch() as folder, patched(files, "_NAMED", set()):
        read = READERS[reader](folder, kind, garbage)
        if named:  # the user typed every path: the readers may read a pipe or a device
            files.name_on_command_line([str(p) for p in folder.rglob("*")])
        with at_most(20):
            try:
                read()
            except KvplanError as exc:
                if kind in NOT_REGULAR and not named:
                    assert "not a regular file" in str(exc), (case, str(exc))
                return
        assert kind in ("regular", "dev-null") or reader == "steps" or named, case


def check_token(kind: str, garbage: bytes) -> None:
    with scratch() as folder, patched(secrets, "_FILE_TOKENS", {}):
        make(folder / "token", kind, b"hf_FUZZEDTOKEN0123456789", garbage)
        with patched(os, "environ", {**os.environ, "HF_TOKEN_PATH": str(folder / "token")}):
            with at_most(10):
                found = secrets.secrets()
        if kind == "regular":
            assert found == ["hf_FUZZEDTOKEN0123456789"]
        elif kind not in ("empty", "garbage"):
            assert found == []


@settings(DEFAULT, max_examples=100)  # each loads a model: 100 cover the 5 x 10 x 2 cases
@given(case=CASES)
def test_fuzzed_file_kinds_never_hang_or_crash(case: tuple[str, str, bytes, bool]) -> None:
    check(case)


@pytest.mark.slow  # ~20 s of FIFOs and timeouts
@DEFAULT
@given(kind=st.sampled_from(KINDS), garbage=st.binary(max_size=64))
def test_fuzzed_token_files_never_hang(kind: str, garbage: bytes) -> None:
    check_token(kind, garbage)


@pytest.mark.slow
@SLOW
@given(case=CASES)
def test_fuzzed_file_kinds_never_hang_or_crash_long(case: tuple[str, str, bytes, bool]) -> None:
    check(case)
