"""Reading and writing the files users name on the command line, with bounds.

Every reader refuses what it cannot use with one line naming the file (missing, a directory,
binary, not UTF-8, over its size limit), and never holds more than it has to: text files are
read up to a limit, traces 32 KiB of lines at a time (:func:`iter_lines`), YAML with its
aliases counted before they are expanded (:func:`load_yaml`). Outputs are written whole or not
at all (:func:`write_atomic`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from planner.errors import InputFileError, KvplanError, UsageError
from planner.secrets import redact

if TYPE_CHECKING:
    import yaml

ErrorType = Callable[[str], KvplanError]
MAX_YAML_NODES = 1_000_000  # after expanding aliases: refuses "billion laughs"
CHUNK_BYTES = 1 << 15  # iter_lines reads plain text in chunks of this many bytes (32 KiB)


def _open(path: Path, what: str, error: ErrorType) -> IO[bytes]:
    """``path`` opened for reading, or ``error`` with the reason in one line."""
    try:
        if path.is_dir():
            raise error(f"{path}: is a directory, not a {what}")
        return path.open("rb")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except ValueError:  # an embedded NUL byte in the name
        raise error(f"{str(path)!r}: not a usable file name") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_text_file(path: Path, *, limit: int, what: str, error: ErrorType = InputFileError) -> str:
    """The UTF-8 text of ``path``, refusing missing, oversized and binary files with one line
    that names the file. At most ``limit + 1`` bytes are read, whatever the file claims to be
    (``/dev/zero`` has no size)."""
    with _open(path, what, error) as f:
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
    if b"\0" in raw:
        raise error(f"{path}: binary file (NUL bytes), not a {what}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start:,}); a {what} must be text") from None


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

    with _open(path, what, error) as f:
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


def write_atomic(path: str | Path, data: bytes | str, *, flag: str = "") -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: a
    reader, or a run that fails half-way, never sees a partial file. Errors are one
    :class:`UsageError` line naming the file (after the ``flag`` that named it)."""
    write_all_atomic([(flag, path, data)])


def write_all_atomic(outputs: Sequence[tuple[str, str | Path, bytes | str]]) -> None:
    """Write several outputs (``(flag, path, data)``) all or none: every one goes to a
    temporary file beside its target first, and only when all are written are they renamed."""
    staged: list[tuple[str, Path]] = []
    try:
        for flag, path, data in outputs:
            staged.append((_stage(flag, path, data), Path(path)))
        while staged:
            tmp, target = staged[0]
            os.replace(tmp, target)
            staged.pop(0)
    except OSError as exc:  # a rename; _stage words its own errors
        raise UsageError(f"{exc.filename2 or exc.filename}: cannot write: {exc.strerror}") from None
    finally:
        for tmp, _ in staged:  # not renamed: an error stopped the run
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def check_output_name(flag: str, path: str | Path) -> None:
    """Refuse an output path that can never be written (empty, a folder, a NUL byte) before
    any work is done, with the words the write itself would use."""
    if not str(path).strip() or Path(path).is_dir():
        raise UsageError(f"{f'{flag} {path}'.strip()}: cannot write there: not a file name")
    if "\0" in str(path):
        raise UsageError(f"{flag} {str(path)!r}: cannot write there: not a file name")


def _stage(flag: str, path: str | Path, data: bytes | str) -> str:
    """``data`` in a temporary file beside ``path`` (mode as a plain file would have)."""
    name = f"{flag} {path}".strip()
    target = Path(path)
    check_output_name(flag, path)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except ValueError:  # an embedded NUL byte
        raise UsageError(f"{flag} {str(path)!r}: cannot write there: not a file name") from None
    except OSError as exc:
        raise UsageError(f"{name}: cannot write there: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(redact(data).encode("utf-8") if isinstance(data, str) else data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a plain file follows the umask
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise UsageError(f"{name}: cannot write: {exc.strerror or exc}") from None
        raise
    return tmp


# --------------------------------------------------------------------------- YAML with lines


class MarkedMap(dict[Any, Any]):
    """A YAML mapping that remembers its own line and the line of each key (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]


def _loader_class() -> type[yaml.SafeLoader]:
    """A SafeLoader whose mappings are :class:`MarkedMap` and refuse duplicate keys (built
    lazily so ``kvplan --help`` never imports yaml)."""
    import yaml

    class MarkedLoader(yaml.SafeLoader):
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

    MarkedLoader.add_constructor("tag:yaml.org,2002:map", construct_map)
    return MarkedLoader


def _expanded_nodes(root: yaml.Node, limit: int) -> int:
    """Nodes in the document once every alias is expanded; refuses cycles and totals over
    ``limit`` (an anchor/alias bomb is tiny on disk and exponential when expanded)."""
    import yaml

    size: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        if finished:
            in_progress.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            if size[key] > limit:
                raise _YamlLimit(node, f"more than {limit:,} YAML nodes once aliases are expanded")
            continue
        if key in size:
            continue
        if key in in_progress:
            raise _YamlLimit(node, "an alias refers to a node that contains it (recursive)")
        in_progress.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children)
    return size[id(root)]


class _YamlLimit(Exception):
    def __init__(self, node: yaml.Node, message: str) -> None:
        super().__init__(message)
        self.line = node.start_mark.line + 1


def load_yaml(path: Path, *, limit_bytes: int, what: str, error: ErrorType = InputFileError) -> Any:
    """Parse ``path`` with a SafeLoader that records lines (mappings are :class:`MarkedMap`);
    errors name the file and line. Files over ``limit_bytes`` and documents that expand to
    more than :data:`MAX_YAML_NODES` nodes are refused."""
    import yaml

    text = read_text_file(path, limit=limit_bytes, what=what, error=error)
    loader = None
    try:
        loader = _loader_class()(text)  # the reader rejects control characters here
        root = loader.get_single_node()
        if root is None:
            return None
        _expanded_nodes(root, MAX_YAML_NODES)
        return loader.construct_document(root)
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
    finally:
        if loader is not None:
            loader.dispose()
