"""Reading user-supplied files safely: regular files only, bounded size, strict UTF-8, bounded JSON/YAML.

Every file primuspp reads on a user's behalf (configs, tables, pp_data dumps, result directories,
checkpoint meta) goes through here, so that a FIFO cannot block a command forever, a 100 MB file is not
read whole, and a malformed file ends in one line naming the file instead of an internal error.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from primuspp.errors import ConfigError

#: Largest input file read (configs, tables, one pp_rank file): 64 MiB. A 64×512 table is ~20 MB.
MAX_INPUT_BYTES = 64 * 1024 * 1024
#: Deepest nesting accepted in a JSON or YAML input (real files nest 4-6 levels).
MAX_NESTING = 64


def _where(path: Path, key: str | None) -> str:
    return f"{key} {path}" if key else str(path)


def check_regular(path: str | Path, key: str | None = None, max_bytes: int = MAX_INPUT_BYTES) -> Path:
    """The path as a Path if it names an existing regular file (symlinks followed) of at most `max_bytes`."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise ConfigError(f"{_where(p, key)}: no such file", key=key) from None
    except OSError as err:
        raise ConfigError(f"{_where(p, key)}: cannot read ({err.strerror})", key=key) from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{_where(p, key)}: is a directory, expected a file", key=key)
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(
            f"{_where(p, key)}: not a regular file (a FIFO, socket or device); only regular files are read",
            key=key,
        )
    if st.st_size > max_bytes:
        raise ConfigError(
            f"{_where(p, key)}: {st.st_size:,} bytes, over the {max_bytes:,}-byte limit for inputs", key=key
        )
    return p


_last_read: list[str] = []


def last_read() -> str | None:
    """The input file read most recently in this process (named by an unexpected error's one line)."""
    return _last_read[-1] if _last_read else None


def read_bytes(path: str | Path, key: str | None = None, max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """A regular file's bytes, refused (one line) when it is special, missing, unreadable or too large."""
    _last_read[:] = [str(path)]
    p = check_regular(path, key, max_bytes)
    try:
        # O_NONBLOCK: should the path be swapped for a FIFO after the check, open() still returns at once
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise ConfigError(f"{_where(p, key)}: cannot read ({err.strerror})", key=key) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ConfigError(f"{_where(p, key)}: not a regular file", key=key)
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{_where(p, key)}: over the {max_bytes:,}-byte limit for inputs", key=key)
    return data


def decode_text(data: bytes, where: str, key: str | None = None) -> str:
    """Strict UTF-8 (a BOM is dropped); the first bad byte's offset is named."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{where}: not UTF-8 text (bad byte at offset {err.start})", key=key) from None


def read_text(path: str | Path, key: str | None = None, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """A regular file's text: strict UTF-8, bounded size."""
    return decode_text(read_bytes(path, key, max_bytes), _where(Path(path), key), key)


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a parsed document, iteratively (a deep document must not exhaust the stack)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        stack.extend((c, d + 1) for c in children)
    return deepest


def _unique(keys: list) -> None:
    """A duplicate key of a JSON object or YAML mapping refused (its last value would silently win)."""
    if len(set(keys)) < len(keys):
        dup = next(k for i, k in enumerate(keys) if k in keys[:i])
        raise ConfigError(f"duplicate key '{dup}' (the last one would silently win)", key=str(dup))


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) < len(pairs):
        _unique([k for k, _ in pairs])
    return out


def parse_json(text: str, where: str, key: str | None = None, max_nesting: int = MAX_NESTING) -> Any:
    """JSON with NaN/Infinity and duplicate keys refused, nesting bounded, huge or overflowing numbers
    refused."""
    try:  # NaN, Infinity and overflowing numbers are read, then refused below with the key they stand under
        data = json.loads(text, object_pairs_hook=_object)
    except ConfigError as dup:
        raise ConfigError(f"{where}: {dup}", key=dup.key) from None
    except RecursionError:
        raise ConfigError(f"{where}: nested deeper than {max_nesting} levels", key=key) from None
    except ValueError as err:  # JSONDecodeError is a ValueError; so is int()'s digit limit
        raise ConfigError(f"{where}: not valid JSON ({' '.join(str(err).split())})", key=key) from None
    if _depth(data, max_nesting) > max_nesting:
        raise ConfigError(f"{where}: nested deeper than {max_nesting} levels", key=key)
    _check_finite(data, where, key)
    return data


def load_json(
    path: str | Path, key: str | None = None, max_bytes: int = MAX_INPUT_BYTES, max_nesting: int = MAX_NESTING
) -> Any:
    """Read and parse one JSON input file under the limits above."""
    return parse_json(read_text(path, key, max_bytes), _where(Path(path), key), key, max_nesting)


def finite(value: float, key: str, *, minimum: float | None = None, allow_equal: bool = True) -> float:
    """`value` if it is a finite number (and ≥ / > `minimum`); otherwise one line naming `key`."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{key}={value!r}: expected a finite number", key=key) from None
    if not math.isfinite(number):
        raise ConfigError(f"{key}={value!r}: expected a finite number", key=key)
    if minimum is not None and (number < minimum or (number == minimum and not allow_equal)):
        relation = "≥" if allow_equal else ">"
        raise ConfigError(f"{key}={value!r}: expected a number {relation} {minimum:g}", key=key)
    return number


#: Most values a YAML input may expand to through its aliases (a real config has a few hundred).
MAX_YAML_VALUES = 100_000


class _TooDeep(Exception):
    pass


def _bounded_loader(max_nesting: int) -> type:
    """A SafeLoader whose composer stops at `max_nesting` levels (PyYAML composes recursively)."""
    import yaml

    class Loader(yaml.SafeLoader):
        depth = 0

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            _unique([k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value != "<<"])
            return super().construct_mapping(node, deep)

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > max_nesting + 1:  # +1: a scalar is a node too, JSON does not count it
                    raise _TooDeep
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return Loader


def _children(node: Any) -> list:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _expanded(root: Any) -> tuple[int, int] | None:
    """(values, depth) of the document with every alias expanded, computed on the shared node graph (an alias
    bomb is measured without being expanded); None when an alias contains itself."""
    memo: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            kids = _children(node)
            memo[nid] = (
                1 + sum(memo[id(k)][0] for k in kids),
                1 + max((memo[id(k)][1] for k in kids), default=0),
            )
            on_path.discard(nid)
            continue
        if nid in memo:
            continue
        if nid in on_path:
            return None
        on_path.add(nid)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in memo)
    return memo[id(root)]


def _path(parts: list) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _check_finite(data: Any, where: str, key: str | None) -> None:
    bad = first_value(data, lambda v: isinstance(v, float) and not math.isfinite(v))
    if bad is not None:
        raise ConfigError(f"{where}: {bad[0]}={bad[1]!r}: expected a finite number", key=bad[0] or key)


def first_value(data: Any, test: Callable[[Any], bool]) -> tuple[str, Any] | None:
    """The key path and value of the first value of a parsed document that passes `test`."""
    stack: list[tuple[Any, list]] = [(data, [])]
    while stack:
        item, path = stack.pop()
        if test(item):
            return _path(path), item
        if isinstance(item, dict):
            stack.extend((v, [*path, str(k)]) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((v, [*path, i]) for i, v in reversed(list(enumerate(item))))
    return None


def parse_yaml(
    text: str,
    where: str,
    key: str | None = None,
    max_nesting: int = MAX_NESTING,
    max_values: int = MAX_YAML_VALUES,
) -> Any:
    """YAML (safe subset) with nesting and alias expansion bounded and non-finite numbers (.inf, .nan)
    refused, each in one line naming `where` (and the key inside for a number)."""
    import yaml

    loader = _bounded_loader(max_nesting)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded(node)
        if size is None:
            raise ConfigError(f"{where}: an alias contains itself (recursive YAML is not accepted)", key=key)
        if size[0] > max_values:
            raise ConfigError(
                f"{where}: expands to {size[0]:,} values through its aliases, over the limit of "
                f"{max_values:,} for YAML inputs",
                key=key,
            )
        if size[1] > max_nesting + 1:
            raise ConfigError(f"{where}: nested deeper than {max_nesting} levels", key=key)
        data = loader.construct_document(node)
    except ConfigError as dup:
        raise ConfigError(f"{where}: {dup}", key=dup.key) from None
    except _TooDeep:
        raise ConfigError(f"{where}: nested deeper than {max_nesting} levels", key=key) from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply", key=key) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "malformed YAML"
        raise ConfigError(f"{where}: malformed YAML{at}: {problem}", key=key) from None
    except (ValueError, TypeError, OverflowError) as err:  # e.g. an integer over Python's digit limit
        raise ConfigError(
            f"{where}: a value cannot be read ({' '.join(str(err).split())})", key=key
        ) from None
    finally:
        loader.dispose()
    _check_finite(data, where, key)
    return data
