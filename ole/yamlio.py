"""Strict, bounded YAML for bundles: a document is either read exactly or rejected.

PyYAML's `safe_load` is not enough for LLM-written bundles, which are untrusted input: it keeps
the last of duplicate keys, coerces YAML 1.1 scalars (`no` -> False, `012` -> 10, a date
-> `datetime.date`), expands a 271-byte alias bomb into hundreds of megabytes, and lets
`RecursionError`/`ValueError` escape on deep or huge input. This module builds plain
Python values (dict, list, str, int, float, bool, None) from the parser's event stream
itself, so every limit is checked before anything is built:

* size, depth and node count are capped (named constants below);
* anchors, aliases, merge keys and explicit tags are rejected (bundles need none);
* a duplicate key is an error naming both lines;
* a plain scalar is read as YAML 1.2 core would read it (null, true/false, decimal
  int, decimal float); any other plain scalar that YAML 1.1 would coerce (`yes`, `off`,
  `012`, `0x1f`, `1_000`, `2024-01-02`, `.nan`) is rejected with "quote it";
* BOM, NUL, invalid UTF-8, multiple documents, an empty document or a top-level
  non-mapping are rejected.

`dump_yaml` quotes every string this loader would otherwise read as a non-string, so
load -> dump -> load is the identity.
"""
from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path

import yaml
from yaml import events as ev
from yaml.resolver import Resolver

from ole.errors import NotFound, ValidationError

MAX_BYTES = 256 * 1024
"""Largest document accepted; a seed bundle is about 3 KB."""
MAX_DEPTH = 16
"""Deepest nesting of mappings/sequences; a bundle needs 3."""
MAX_NODES = 20_000
"""Most scalars + collections in one document."""
MAX_INT_DIGITS = 18
"""Longest integer literal (fits int64; a 5000-digit int is rejected, not parsed)."""

_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})
_STR_TAG = "tag:yaml.org,2002:str"
_YAML11 = Resolver()
_NO_KEY = object()


def _where(event: ev.Event) -> str:
    return f"line {event.start_mark.line + 1}" if event.start_mark else "document"


def _plain(value: str, where: str) -> object:
    """Read one plain (unquoted) scalar; raise on anything YAML 1.1 and 1.2 disagree on."""
    if value in _NULLS:
        return None
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    if _INT.fullmatch(value):
        if len(value.lstrip("+-")) > MAX_INT_DIGITS:
            raise ValidationError(f"{where}: integer with {len(value)} digits (at most {MAX_INT_DIGITS})",
                                  hint="bundle numbers are small; check the value")
        return int(value)
    if _FLOAT.fullmatch(value):
        number = float(value)
        if not math.isfinite(number):
            raise ValidationError(f"{where}: number {value} overflows a float", hint="use a finite value")
        return number
    tag = _YAML11.resolve(yaml.ScalarNode, value, (True, False))
    if tag != _STR_TAG:
        kind = tag.rsplit(":", 1)[-1]
        raise ValidationError(f"{where}: plain scalar `{value}` is ambiguous (YAML 1.1 reads it as {kind})",
                              hint="write true/false, a decimal number, or quote the string")
    return value


def _scalar(event: ev.ScalarEvent, where: str) -> object:
    if event.style is None and event.implicit[0]:
        return _plain(event.value, where)
    return event.value


class _Builder:
    """Turns a parser event stream into plain values, enforcing every limit on the way."""

    def __init__(self) -> None:
        self.root: object = _NO_KEY
        self.stack: list[list] = []  # frames: [container, pending key or _NO_KEY, key lines]
        self.nodes = 0
        self.documents = 0

    def feed(self, event: ev.Event) -> None:
        where = _where(event)
        if isinstance(event, ev.DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                raise ValidationError(f"{where}: more than one YAML document", hint="keep one bundle per file")
            return
        if isinstance(event, (ev.StreamStartEvent, ev.StreamEndEvent, ev.DocumentEndEvent)):
            return
        if isinstance(event, ev.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise ValidationError(f"{where}: anchors and aliases are not allowed", hint="write values out in full")
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise ValidationError(f"{where}: explicit tag `{tag}` is not allowed", hint="remove the tag")
        if isinstance(event, (ev.MappingEndEvent, ev.SequenceEndEvent)):
            self.stack.pop()
            return
        self._count(where)
        if isinstance(event, ev.ScalarEvent):
            self._add(_scalar(event, where), where)
        elif isinstance(event, (ev.MappingStartEvent, ev.SequenceStartEvent)):
            if len(self.stack) >= MAX_DEPTH:
                raise ValidationError(f"{where}: nesting deeper than {MAX_DEPTH} levels", hint="flatten the document")
            container: object = {} if isinstance(event, ev.MappingStartEvent) else []
            self._add(container, where)
            self.stack.append([container, _NO_KEY, {}])

    def _count(self, where: str) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ValidationError(f"{where}: more than {MAX_NODES} nodes", hint="a bundle is a small document")

    def _add(self, value: object, where: str) -> None:
        if not self.stack:
            self.root = value
            return
        frame = self.stack[-1]
        container = frame[0]
        if isinstance(container, list):
            container.append(value)
        elif frame[1] is _NO_KEY:
            self._key(frame, value, where)
        else:
            container[frame[1]] = value
            frame[1] = _NO_KEY

    @staticmethod
    def _key(frame: list, key: object, where: str) -> None:
        if not isinstance(key, str):
            raise ValidationError(f"{where}: mapping key {key!r} is not a string",
                                  hint="keys are plain field names; quote it if it must be a string")
        if key == "<<":
            raise ValidationError(f"{where}: merge keys (<<) are not allowed", hint="write the fields out")
        if key in frame[0]:
            raise ValidationError(f"{where}: duplicate key `{key}` (first at {frame[2][key]})",
                                  hint="keep one of them; YAML would silently use the last")
        frame[0][key] = None
        frame[2][key] = where
        frame[1] = key


def _decode(data: str | bytes, source: str) -> str:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > MAX_BYTES:
        raise ValidationError(f"{source}: document is {len(raw)} bytes (at most {MAX_BYTES})",
                              hint="a bundle is a few KB; check what was written")
    if raw.startswith(b"\xef\xbb\xbf") or data[:1] == "\ufeff":
        raise ValidationError(f"{source}: starts with a byte-order mark", hint="save as UTF-8 without BOM")
    if b"\x00" in raw:
        raise ValidationError(f"{source}: contains a NUL byte", hint="save as plain UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{source}: not valid UTF-8 at byte {exc.start}", hint="save as UTF-8") from None


def load_yaml(data: str | bytes, *, source: str = "<yaml>") -> dict:
    """Parse one strict YAML document whose top level is a mapping; raise `ValidationError`."""
    text = _decode(data, source)
    builder = _Builder()
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            builder.feed(event)
    except ValidationError as exc:
        raise ValidationError(f"{source}: {exc.message}", hint=exc.hint) from None
    except (yaml.YAMLError, RecursionError, ValueError, MemoryError) as exc:
        first = str(exc).strip().splitlines()
        raise ValidationError(f"{source}: not valid YAML: {' '.join(first)[:300]}",
                              hint="fix the syntax (indent with spaces, one document)") from None
    if builder.root is _NO_KEY or builder.root is None:
        raise ValidationError(f"{source}: empty document", hint="a bundle is a mapping with name, loop_policy, ...")
    if not isinstance(builder.root, dict):
        raise ValidationError(f"{source}: top level is a {type(builder.root).__name__}, expected a mapping",
                              hint="a bundle is a mapping with name, loop_policy, ...")
    return builder.root


def read_yaml_file(path: Path) -> dict:
    """Read and parse a YAML file without reading more than `MAX_BYTES` + 1 bytes."""
    try:
        # O_NONBLOCK: a FIFO named *.yaml (in a registry root every command scans) must not block
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise NotFound(f"no file {path}", hint="check the path") from None
    except IsADirectoryError:
        raise ValidationError(f"{path} is a directory, expected a YAML file", hint="name a .yaml file") from None
    except OSError as exc:
        raise ValidationError(f"cannot read {path}: {exc.strerror or exc}", hint="check its permissions") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # before fdopen, which refuses a directory with an IsADirectoryError of its own
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise ValidationError(f"{path} is {kind}, expected a YAML file", hint="name a .yaml file")
    with os.fdopen(fd, "rb") as handle:
        try:
            raw = handle.read(MAX_BYTES + 1)
        except OSError as exc:
            raise ValidationError(f"cannot read {path}: {exc.strerror or exc}", hint="check the file") from None
    return load_yaml(raw, source=str(path))


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes every string `load_yaml` would not read back as that string."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    try:
        plain_ok = _plain(value, "") == value
    except ValidationError:
        plain_ok = False
    style = "|" if "\n" in value else (None if plain_ok else "'")
    return dumper.represent_scalar(_STR_TAG, value, style=style)


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(tuple, yaml.SafeDumper.represent_list)


def dump_yaml(data: dict) -> str:
    """Dump plain values as block YAML in insertion order; `load_yaml` reads it back exactly."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
                     width=100)
