"""Reading and writing the files users name on the command line, with bounds.

Every reader refuses what it cannot use with one line naming the file (missing, a directory,
binary, not UTF-8, over its size limit), and never holds more than it has to: text files are
read up to a limit, traces 32 KiB of lines at a time (:func:`iter_lines`), YAML with its
aliases counted before they are expanded (:func:`load_yaml`). Outputs are written whole or not
at all (:func:`write_atomic`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from planner.errors import InputFileError, KvplanError, UsageError, one_line
from planner.notes import say
from planner.secrets import redact

if TYPE_CHECKING:
    import yaml

ErrorType = Callable[[str], KvplanError]
MAX_YAML_NODES = 1_000_000  # after expanding aliases: refuses "billion laughs"
CHUNK_BYTES = 1 << 15  # iter_lines reads plain text in chunks of this many bytes (32 KiB)


# --------------------------------------------------------------------------- opening inputs

# Paths the user typed on the command line (see :func:`name_on_command_line`): only these may
# be a FIFO, a device or a process substitution (``-w <(zcat t.jsonl.gz)``). A file kvplan finds
# by itself (a model folder's config.json, an HF-cache link, the token file, a plans file's
# workload) must be a regular file, so a FIFO there cannot hang a run or a device feed it forever.
_NAMED: set[str] = set()
# (device, inode, change time) -> what it was read as, for every regular file read in this
# process: an output may not replace one (``check p.yaml -o p.yaml``; a plans file's
# workload as ``-o``).
_READ: dict[tuple[int, int, int], str] = {}
_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _identity(info: os.stat_result) -> tuple[int, int, int]:
    """A file as :data:`_READ` knows it: device, inode and change time (a file deleted after
    it was read may give its inode to a new one, which is another file)."""
    return info.st_dev, info.st_ino, info.st_ctime_ns


def name_on_command_line(args: Sequence[str]) -> None:
    """Remember the words of a command line that may be paths (``--flag=value`` too): the
    files the user named, which :func:`open_input` reads even when they are not regular."""
    for arg in args:
        for word in (arg, arg.partition("=")[2]) if arg.startswith("-") else (arg,):
            if word and "\0" not in word:
                _NAMED.add(os.path.abspath(word))


def _named(path: Path) -> bool:
    return os.path.abspath(path) in _NAMED


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_input(path: Path, what: str, error: ErrorType = InputFileError) -> IO[bytes]:
    """``path`` opened for reading without blocking, or ``error`` with the reason in one line.

    The one opener of every file kvplan reads. It opens with ``O_NONBLOCK`` (a FIFO without a
    writer cannot hang the open) and refuses what is not a regular file (a FIFO, a device, a
    socket) unless the user named it on the command line (:func:`name_on_command_line`); then
    reads block as they would for ``cat``, and the caller's byte limit still bounds them."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except ValueError:  # an embedded NUL byte in the name
        raise error(f"{str(path)!r}: not a usable file name") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a {what}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{path}: is a directory, not a {what}")
        if stat.S_ISREG(info.st_mode):
            _READ[_identity(info)] = what
        elif _named(path):
            os.set_blocking(fd, True)  # the user named the pipe: wait for its writer
        else:
            raise error(
                f"{path}: {_kind(info.st_mode)}, not a regular file; kvplan reads a file it "
                f"finds itself (this {what}) only when it is a regular file: name it on the "
                "command line to read it anyway"
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path, *, limit: int, what: str, error: ErrorType = InputFileError) -> bytes:
    """At most ``limit`` bytes of ``path`` (:func:`open_input`), refusing a longer file with one
    line that names it: at most ``limit + 1`` bytes are read, whatever the file claims to be
    (``/dev/zero`` has no size)."""
    with open_input(path, what, error) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise error(
                    f"{path}: {size:,} bytes is larger than the {limit:,}-byte limit for a {what}"
                )
            raw = f.read(limit + 1)
        except OSError as exc:
            raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise error(f"{path}: larger than the {limit:,}-byte limit for a {what}")
    return raw


def read_text_file(path: Path, *, limit: int, what: str, error: ErrorType = InputFileError) -> str:
    """The UTF-8 text of ``path``, refusing missing, oversized and binary files with one line
    that names the file. At most ``limit + 1`` bytes are read, whatever the file claims to be
    (``/dev/zero`` has no size)."""
    raw = read_bytes(path, limit=limit, what=what, error=error)
    if b"\0" in raw:
        raise error(f"{path}: binary file (NUL bytes), not a {what}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start:,}); a {what} must be text") from None


# --------------------------------------------------------------------------- numbers

MAX_INT = (1 << 63) - 1  # the largest number kvplan reads: an int64, as the engines count
MAX_DEPTH = 100  # arrays and objects inside each other; a real input is a few levels deep
_LIMIT_WORDS = f"kvplan reads numbers below 2^63 ({MAX_INT:,})"


class _Bad:
    """A number a reader refuses, kept (with its text and line) until the key holding it is
    known: the parser's hooks see the number, the walk after it sees the key."""

    __slots__ = ("line", "reason", "text", "value")

    def __init__(self, text: str, reason: str, line: int = 0, value: int | None = None) -> None:
        self.text, self.reason, self.line, self.value = text, reason, line, value


def _int_or_bad(text: str, line: int = 0) -> int | _Bad:
    """``text`` as an int, or a :class:`_Bad` for one of 2^63 or more (or so many digits that
    Python refuses to convert it: 4,300)."""
    digits = len(text.lstrip("+-"))
    if digits > 400:  # past any count, and far from Python's limit: never converted
        return _Bad(text, f"an integer of {digits:,} digits is out of range", line)
    value = int(text)
    if not -MAX_INT - 1 <= value <= MAX_INT:
        return _Bad(text, f"{value} is out of range", line)
    return value


_BAD_SEEN: list[_Bad] = []  # what the decoder's parse_int refused, for loads_json to look up


def _json_int(text: str) -> int | _Bad:
    value = _int_or_bad(text)
    if isinstance(value, _Bad):
        _BAD_SEEN.append(value)
    return value


# one decoder for every call (a decoder per call costs a scanner per trace line)
_DECODER = json.JSONDecoder(parse_int=_json_int)


def _find_bad(data: Any) -> tuple[str, _Bad | None, int]:
    """The first refused number in ``data`` with the key path holding it (``a.b[2]``), or the
    path at which ``data`` nests deeper than :data:`MAX_DEPTH` (then no number), else ``("",
    None, 0)``. Iterative: a deep document cannot exhaust the stack here."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, _Bad):
            return where, value, depth
        if isinstance(value, dict | list) and depth >= MAX_DEPTH:
            return where, None, depth
        if isinstance(value, dict):
            items = [(f"{where}.{k}" if where else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        nested = [(w, v) for w, v in items if isinstance(v, _Bad | dict | list)]
        stack.extend((v, w, depth + 1) for w, v in reversed(nested))
    return "", None, 0


def _replace_bad(data: Any, bad: _Bad) -> None:
    """Put the int ``bad`` stands for back in its place in ``data``."""
    stack = [data]
    while stack:
        value = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in list(items):
            if v is bad:
                value[k] = bad.value
                return
            if isinstance(v, dict | list):
                stack.append(v)


def _deep_line(text: str) -> int:
    """The line (1-based) at which ``text``'s brackets first nest deeper than
    :data:`MAX_DEPTH`, skipping strings; 1 if they never do."""
    depth, line, quoted, escaped = 0, 1, False, False
    for char in text:
        if char == "\n":
            line += 1
        if quoted:
            quoted = escaped or char != '"'
            escaped = not escaped and char == "\\"
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line
        elif char in "]}":
            depth -= 1
    return 1


def _where(name: str, line: int | None, key: str) -> str:
    head = f"{name}:{line}" if line is not None else name
    if len(key) > 80:  # a path 100 levels deep: its start says where
        key = key[:60] + "..."
    # the key path is the file's own text: a key "\n" is written as an escape, not a break
    return f"{head}: {one_line(key)}" if key else head


def loads_json(
    text: str | bytes,
    *,
    where: str,
    error: ErrorType = InputFileError,
    line: int | None = 1,
) -> Any:
    """``json.loads`` with every integer range-checked and nesting bounded: an integer of 2^63
    or more (or thousands of digits, which ``int`` refuses), or arrays and
    objects more than :data:`MAX_DEPTH` deep are one ``error`` line naming ``where`` (the file
    or flag), the line (``line`` is the first line's number; None: the text has no lines to
    name) and the key (``text_config.num_hidden_layers``). Invalid JSON raises
    ``json.JSONDecodeError`` for the caller to word."""
    source = text.decode("utf-8") if isinstance(text, bytes) else text
    _BAD_SEEN.clear()
    try:
        data = _DECODER.decode(source)
    except RecursionError:
        at = None if line is None else line + _deep_line(source) - 1
        raise error(
            f"{_where(where, at, '')}: nested more than {MAX_DEPTH} levels deep "
            "(arrays or objects inside each other)"
        ) from None
    if _BAD_SEEN or source.count("[") + source.count("{") > MAX_DEPTH:
        key, found, _ = _find_bad(data)
        if found is not None:
            at = None
            if line is not None:
                at = line + source.count("\n", 0, max(source.find(found.text), 0))
            raise error(f"{_where(where, at, key)}: {found.reason}; {_LIMIT_WORDS}")
        if key:
            at = None if line is None else line + _deep_line(source) - 1
            raise error(
                f"{_where(where, at, key)}: nested more than {MAX_DEPTH} levels deep "
                "(arrays or objects inside each other)"
            )
    return data


def iter_lines(
    path: Path, *, max_line_bytes: int, what: str, error: ErrorType = InputFileError
) -> Iterator[str]:
    """The lines of a UTF-8 text file, read a chunk of :data:`CHUNK_BYTES` at a time, or a line
    (memory stays a chunk or a line, whatever the file's size). A line longer than
    ``max_line_bytes`` is cut to ``max_line_bytes + 1`` characters, so the caller can report it,
    and the rest of it is skipped unread; NUL bytes or a line that is not UTF-8 end the file
    with ``error``."""

    def binary(number: int) -> KvplanError:
        return error(f"{path}: binary file (NUL bytes on line {number:,}), not a {what}")

    with open_input(path, what, error) as f:
        number = 0
        try:
            if f.seekable():
                for lines in _whole_lines(f, max_line_bytes):
                    if not number:
                        lines[0] = lines[0].removeprefix("\ufeff")
                    number += len(lines)
                    yield from lines
            # line by line: a file that is not seekable, or the rest of one from the first
            # chunk _whole_lines leaves (a line to cut, NUL bytes, not UTF-8, a last line
            # without a newline), the same lines and errors with the same line numbers
            while raw := f.readline(max_line_bytes + 1):
                number += 1
                cut = len(raw) > max_line_bytes and not raw.endswith(b"\n")
                while cut and (rest := f.readline(1 << 16)):
                    if b"\0" in rest:
                        raise binary(number)
                    if rest.endswith(b"\n"):
                        break
                if b"\0" in raw:
                    raise binary(number)
                if number == 1:
                    raw = raw.removeprefix(b"\xef\xbb\xbf")
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    if not cut:
                        raise error(
                            f"{path}: line {number:,} is not UTF-8 text (byte {exc.start + 1:,}); "
                            f"a {what} must be text"
                        ) from None
                    yield raw.decode("utf-8", "replace")  # cut inside a character
        except OSError as exc:
            raise error(f"{path}: cannot read: {exc.strerror or exc}") from None


def _whole_lines(f: IO[bytes], max_line_bytes: int) -> Iterator[list[str]]:
    """The lines of ``f`` from its position, :data:`CHUNK_BYTES` at a time: the lines
    :func:`iter_lines` yields, in a list per chunk, while every line of a chunk ends with a
    newline and is short, text and not ``\\r``-separated. At the first chunk that is not, ``f``
    is put back at its start and nothing more comes: its caller goes on line by line. One read,
    split and decode in C a chunk, where a line at a time costs a Python loop a line."""
    pos = f.tell()
    tail = b""
    while chunk := f.read(CHUNK_BYTES):
        data = tail + chunk
        end = data.rfind(b"\n") + 1
        if not end or b"\0" in data or b"\r" in data:
            break
        data, tail = data[:end], data[end:]
        raw = data.splitlines(keepends=True)  # at b"\n" only: there is no b"\r"
        if max(map(len, raw)) > max_line_bytes:
            break
        try:
            lines = list(map(bytes.decode, raw))
        except UnicodeDecodeError:
            break
        pos += end
        yield lines
    f.seek(pos)


# --------------------------------------------------------------------------- outputs

Inputs = Sequence[tuple[str, "str | Path | None"]]


@dataclass(frozen=True)
class Output:
    """An output path checked by :func:`check_outputs`: the flag and the path as typed, and
    the regular file it writes (symbolic links followed), or None for ``-`` (stdout)."""

    flag: str
    given: str
    target: Path | None

    @property
    def name(self) -> str:
        return f"{self.flag} {self.given}".strip()


def _refuse(name: str, reason: str) -> UsageError:
    return UsageError(f"{name}: cannot write there: {reason}")


def check_output(flag: str, given: str | Path) -> Output:
    """Resolve one output path before any work is done, refusing what kvplan must never
    replace or cannot write, in the words the write itself would use: not a file name, a
    directory, a device, a FIFO or a socket (``/dev/null``, ``/proc/self/fd/1``), a folder that
    does not exist or cannot be written. ``-`` is stdout. A symbolic link to a regular file (or
    to nothing yet) writes its target, and a ``note:`` says so."""
    text = str(given)
    name = f"{flag} {text}".strip()
    if text == "-":
        return Output(flag, text, None)
    if not text.strip():
        raise _refuse(name, "not a file name")
    if "\0" in text:
        raise _refuse(f"{flag} {text!r}".strip(), "not a file name")
    try:
        abspath = os.path.abspath(text)
        target = Path(os.path.realpath(text))
        info = os.stat(target) if target.exists() else None
    except (OSError, ValueError) as exc:
        raise _refuse(name, getattr(exc, "strerror", None) or str(exc)) from None
    if any(str(p).startswith(("/proc/", "/dev/fd/", "/dev/std")) for p in (target, abspath)):
        raise _refuse(
            name, f"a process's file descriptor, not a file (`{flag} -` writes to stdout)"
        )
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise _refuse(name, "is a directory, not a file name")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise _refuse(
            name,
            f"{_kind(info.st_mode)}; kvplan writes only regular files, which it replaces "
            f"whole (`{flag} -` writes to stdout)",
        )
    parent = target.parent
    if not parent.is_dir():
        raise _refuse(name, f"no such folder {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _refuse(name, f"the folder {parent} is not writable")
    if os.path.islink(text):
        say(f"{name} is a symbolic link: kvplan replaces its target, {target}")
    return Output(flag, text, target)


def check_outputs(outputs: Inputs, inputs: Inputs = ()) -> list[Output]:
    """:func:`check_output` for each ``(flag, path)`` given (None: not asked for), and
    refuse one that is another output of the run, or an input of it (``inputs``: ``(what,
    path)``, e.g. ``("the plans file", "p.yaml")``; inputs that are no file are skipped)."""
    checked = [check_output(flag, path) for flag, path in outputs if path is not None]
    for i, out in enumerate(checked):
        for other in checked[:i]:
            if (out.target, other.target) == (None, None) or (
                out.target is not None and out.target == other.target
            ):
                where = "stdout" if out.target is None else "the same file"
                raise UsageError(
                    f"{other.name} and {out.name}: both write {where}; give each output its own"
                )
        for what, path in inputs:
            if path is None or out.target is None or not str(path).strip():
                continue
            with contextlib.suppress(OSError, ValueError):
                if out.target.exists() and os.path.samefile(out.target, path):
                    raise UsageError(
                        f"{out.name}: is {what} ({path}), an input of this run; writing the "
                        "output there would replace it: name another file"
                    )
    return checked


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGINT (Ctrl-C) wait until the block ends, then act as they would
    have: the block renames or removes its temporary files whatever arrives meanwhile."""
    caught: list[int] = []
    names = ("SIGTERM", "SIGHUP", "SIGINT")
    signums = [getattr(signal, n) for n in names if hasattr(signal, n)]
    try:
        previous = {n: signal.signal(n, lambda number, _: caught.append(number)) for n in signums}
    except ValueError:  # not the main thread: signals are the main thread's to handle
        yield
        return
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for number in caught[:1]:
            signal.raise_signal(number)


def write_atomic(path: str | Path, data: bytes | str, *, flag: str = "") -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: a
    reader, or a run that fails half-way, never sees a partial file. Errors are one
    :class:`UsageError` line naming the file (after the ``flag`` that named it)."""
    write_all_atomic([(flag, path, data)])


def write_all_atomic(outputs: Sequence[tuple[str, str | Path, bytes | str]]) -> None:
    """Write several outputs (``(flag, path, data)``) all or none: each path is checked
    (:func:`check_outputs`: ``-`` is stdout), every file goes to a temporary file in its
    target's folder first, and only when all are written are they renamed. A file read as an
    input of this run is never replaced. The temporary files are gone on every way out,
    SIGTERM and SIGHUP included (:func:`_signals_deferred`)."""
    checked = check_outputs([(flag, path) for flag, path, _ in outputs])
    for out in checked:
        with contextlib.suppress(OSError):
            info = os.stat(out.target) if out.target is not None else None
            read = _READ.get(_identity(info)) if info is not None else None
            if read:
                raise UsageError(
                    f"{out.name}: is the {read} this run read; writing the output there would "
                    "replace it: name another file"
                )
    staged: list[tuple[str, Path]] = []
    with _signals_deferred():
        try:
            for out, (_, _, data) in zip(checked, outputs, strict=True):
                if out.target is not None:
                    staged.append((_stage(out, data), out.target))
            while staged:
                tmp, target = staged[0]
                os.replace(tmp, target)
                staged.pop(0)
        except OSError as exc:  # a rename; _stage words its own errors
            raise UsageError(
                f"{exc.filename2 or exc.filename}: cannot write: {exc.strerror}"
            ) from None
        finally:
            for tmp, _ in staged:  # not renamed: an error stopped the run
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
    for out, (_, _, data) in zip(checked, outputs, strict=True):
        if out.target is None:
            _to_stdout(data)


def _to_stdout(data: bytes | str) -> None:
    if isinstance(data, str):
        sys.stdout.write(redact(data))
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
    sys.stdout.flush()


def check_output_name(flag: str, path: str | Path) -> None:
    """Refuse an output path that can never be written before any work is done
    (:func:`check_output`)."""
    check_output(flag, path)


def _stage(out: Output, data: bytes | str) -> str:
    """``data`` in a temporary file beside ``out``'s target (mode as a plain file would
    have); an existing target's mode is kept."""
    assert out.target is not None
    target = out.target
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise _refuse(out.name, exc.strerror or str(exc)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(redact(data).encode("utf-8") if isinstance(data, str) else data)
        umask = os.umask(0)
        os.umask(umask)
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:
            mode = 0o666 & ~umask  # mkstemp makes 0600; a plain file follows the umask
        os.chmod(tmp, mode)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise UsageError(f"{out.name}: cannot write: {exc.strerror or exc}") from None
        raise
    return tmp


# --------------------------------------------------------------------------- YAML with lines


class MarkedMap(dict[Any, Any]):
    """A YAML mapping that remembers its own line and the line of each key (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]


@functools.cache
def _loader_class(fast: bool = True) -> type[yaml.SafeLoader]:
    """A SafeLoader whose mappings are :class:`MarkedMap` and refuse duplicate keys (built
    lazily so ``kvplan --help`` never imports yaml). ``fast``: on libyaml's parser where
    PyYAML has it (a plans file of 10,000 deployments parses ~3x faster); errors are worded
    by the pure-Python one (:func:`load_yaml` parses again with it)."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader) if fast else yaml.SafeLoader

    class MarkedLoader(base):  # type: ignore[valid-type,misc]
        pass

    def construct_map(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Iterator[MarkedMap]:
        data = MarkedMap()
        data.line = node.start_mark.line + 1
        data.key_lines = {}
        yield data
        first: dict[str, int] = {}
        for key_node, _ in node.value:  # the node's own keys; `<<` merges may be overridden
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in first:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {key_node.value!r} (first on line {first[key_node.value]})",
                        key_node.start_mark,
                    )
                first[key_node.value] = key_node.start_mark.line + 1
        data.update(loader.construct_mapping(node))  # flattens `<<` merge keys first
        for key_node, _ in node.value:
            data.key_lines[loader.construct_object(key_node)] = key_node.start_mark.line + 1

    def construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | _Bad:
        line, text = node.start_mark.line + 1, node.value
        if len(text) > 4000:  # SafeLoader's int() stops at 4,300 digits with a ValueError
            return _Bad(text, f"an integer of {len(text):,} characters is out of range", line)
        value = loader.construct_yaml_int(node)
        if abs(value) <= MAX_INT:
            return value
        digits = len(str(abs(value)))
        shown = str(value) if digits <= 40 else f"an integer of {digits:,} digits"
        return _Bad(text, f"{shown} is out of range", line, value)

    MarkedLoader.add_constructor("tag:yaml.org,2002:map", construct_map)
    MarkedLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    return MarkedLoader


def _expanded_nodes(root: yaml.Node, limit: int) -> int:
    """Nodes in the document once every alias is expanded; refuses cycles and totals over
    ``limit`` (an anchor/alias bomb is tiny on disk and exponential when expanded). Scalars,
    most of the nodes, count 1 each where their parent is summed, never stacked."""
    import yaml

    scalar = yaml.ScalarNode
    size: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    if isinstance(root, scalar):
        return 1
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = list(node.value)
        if finished:
            in_progress.discard(key)
            size[key] = 1 + sum(1 if isinstance(c, scalar) else size[id(c)] for c in children)
            if size[key] > limit:
                raise _YamlLimit(node, f"more than {limit:,} YAML nodes once aliases are expanded")
            continue
        if key in size:
            continue
        if key in in_progress:
            raise _YamlLimit(node, "an alias refers to a node that contains it (recursive)")
        in_progress.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if not isinstance(c, scalar))
    return size[id(root)]


class _YamlLimit(Exception):
    def __init__(self, node: yaml.Node, message: str) -> None:
        super().__init__(message)
        self.line = node.start_mark.line + 1


def _parse_yaml(text: str, *, fast: bool) -> Any:
    loader = _loader_class(fast)(text)  # the reader rejects control characters here
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _expanded_nodes(root, MAX_YAML_NODES)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def load_yaml(
    path: Path,
    *,
    limit_bytes: int,
    what: str,
    error: ErrorType = InputFileError,
    range_checked: bool = True,
) -> Any:
    """Parse ``path`` with a SafeLoader that records lines (mappings are :class:`MarkedMap`);
    errors name the file and line. Files over ``limit_bytes`` and documents that expand to
    more than :data:`MAX_YAML_NODES` nodes are refused, and so are integers of 2^63 or more
    (``range_checked=False``: only those too long for Python to read, over 4,000 characters;
    for a caller that range-checks every value in its own words)."""
    import yaml

    text = read_text_file(path, limit=limit_bytes, what=what, error=error)
    try:
        try:
            data = _parse_yaml(text, fast=True)
        except yaml.YAMLError:  # worded, and marked, by the pure-Python parser
            data = _parse_yaml(text, fast=False)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise error(f"{where}: invalid YAML: {problem}") from None
    except yaml.reader.ReaderError as exc:
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise error(
            f"{path}:{line}: invalid YAML: control character U+{char:04X} in column {column}; "
            "YAML allows printable text only"
        ) from None
    except yaml.YAMLError as exc:
        raise error(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None
    except _YamlLimit as exc:
        raise error(f"{path}:{exc.line}: refused: {exc}") from None
    except RecursionError:
        raise error(f"{path}: refused: YAML nested too deeply") from None
    key, found, depth = _find_bad(data)
    while found is not None and not range_checked and found.value is not None:
        _replace_bad(data, found)  # the caller words its own range errors
        key, found, depth = _find_bad(data)
    if found is not None:
        raise error(f"{path}:{found.line}: {key}: {found.reason}; {_LIMIT_WORDS}")
    if depth:
        raise error(f"{path}: {key}: nested more than {MAX_DEPTH} levels deep")
    return data
