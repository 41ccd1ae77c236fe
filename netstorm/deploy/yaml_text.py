"""YAML text of Kubernetes manifests: :func:`dump_all` writes documents made of dicts, lists,
strings, integers and booleans in block style, the way ``kubectl`` users read them.

No YAML library is needed to install netstorm: this writer emits a small, safe subset.
Plain (unquoted) scalars are used only where no YAML 1.1 or 1.2 reader can take them for
anything but a string (they start with a letter and are not ``yes``/``no``/``on``/``off``/
``true``/``false``/``null`` or the like); every other string is a JSON string, which YAML
reads as a double-quoted scalar; text of several lines is a literal block (``|``). Key order
is kept, so the output of equal documents is byte-identical. Pure; O(size of the output).
"""
from __future__ import annotations

import json
import re

__all__ = ["dump", "dump_all"]

_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf"}
_BLOCK_SAFE = re.compile(r"[\x20-\x7e\t\n]*")     # printable ASCII, tabs, newlines
INDENT = "  "


def _scalar(value) -> str:
    """One scalar as YAML text; TypeError for anything a manifest never holds."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value.lower() not in _RESERVED:
            return value
        return json.dumps(value)
    raise TypeError(f"no YAML text for {type(value).__name__} {value!r}")


def _key(key) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a mapping key must be a string, got {key!r}")
    return key if _PLAIN_KEY.fullmatch(key) and key.lower() not in _RESERVED \
        else json.dumps(key)


def _block(text: str, depth: int) -> list | None:
    """``text`` of several lines as a literal block scalar (its lines, the first being the
    indicator), or None when a literal block cannot carry it exactly."""
    if "\n" not in text.rstrip("\n") or not _BLOCK_SAFE.fullmatch(text) or \
            text[:1] in (" ", "\t") or "\n\n" in text[-2:] or "\n\t" in text:
        return None
    chomp = "" if text.endswith("\n") else "-"
    pad = INDENT * depth
    return [f"|{chomp}"] + [pad + line if line else "" for line in text.rstrip("\n").split("\n")]


def _lines(value, depth: int) -> list:
    """``value`` (a mapping or a list) as lines indented ``depth`` levels."""
    pad = INDENT * depth
    out = []
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        for key, item in value.items():
            out += _entry(pad + _key(key) + ":", item, depth)
        return out
    if isinstance(value, list):
        if not value:
            return [pad + "[]"]
        for item in value:
            if isinstance(item, dict) and item:
                inner = _lines(item, depth + 1)
                out.append(pad + "- " + inner[0][len(pad) + len(INDENT):])
                out += inner[1:]
            else:
                out += _entry(pad + "-", item, depth)
        return out
    raise TypeError(f"not a mapping or a list: {value!r}")


def _entry(head: str, item, depth: int) -> list:
    """``head`` (``key:`` or ``-``) followed by ``item``: on the same line if it is a scalar,
    else below it, one level deeper (a list under a key stays at the key's level, as
    ``kubectl`` writes it)."""
    if isinstance(item, dict) and item:
        return [head] + _lines(item, depth + 1)
    if isinstance(item, list) and item:
        return [head] + _lines(item, depth if head.endswith(":") else depth + 1)
    if isinstance(item, (dict, list)):
        return [f"{head} {'{}' if isinstance(item, dict) else '[]'}"]
    if isinstance(item, str):
        block = _block(item, depth + 1)
        if block is not None:
            return [f"{head} {block[0]}"] + block[1:]
    return [f"{head} {_scalar(item)}"]


def dump(document: dict) -> str:
    """One document as YAML text (ending with a newline)."""
    return "\n".join(_lines(document, 0)) + "\n"


def dump_all(documents, header: str = "") -> str:
    """Several documents, each introduced by ``---``; ``header`` (lines of text) first, as
    comments."""
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comments + "".join("---\n" + dump(doc) for doc in documents)
