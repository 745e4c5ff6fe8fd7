"""The canonical args_hash every dedup client computes.

    args_hash = SHA-256(UTF-8 of the RFC 8785 (JCS) canonical JSON of the
                        tool arguments), 32 raw bytes

Equal arguments (as JSON values: whatever the key order, whitespace or number
spelling) hash the same in every client language; the shared vectors in
tests/vectors/args_hash.json pin the exact bytes, and the C++ twin is
client/args_hash.h.

Canonical form (what ECMAScript's JSON.stringify writes, with keys sorted):
- object members sorted by key as UTF-16 code units (not code points or UTF-8
  bytes: they differ for U+E000..U+FFFF vs. characters beyond U+FFFF);
- every number is an IEEE-754 double written as ECMAScript Number::toString
  (Python ints are rounded to doubles first; 1e16 is "10000000000000000",
  1e21 is "1e+21", -0 is "0");
- strings escape only '"', '\\' and U+0000..U+001F (\\b \\t \\n \\f \\r, the
  rest as \\u00xx), everything else literal;
- no whitespace.

Rejected with CanonicalJsonError, so a hash never depends on a parser's whim:
invalid JSON or UTF-8, a byte order mark, lone surrogates, duplicate object
keys (RFC 8785 requires I-JSON, which forbids them), NaN and infinities,
numbers beyond the double range, non-string object keys, values of other
Python types, and nesting deeper than MAX_DEPTH.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, NoReturn

__all__ = [
    "MAX_DEPTH",
    "CanonicalJsonError",
    "args_hash",
    "args_hash_hex",
    "args_hash_of_json_text",
    "canonicalize",
    "canonicalize_json_text",
    "format_number",
]

# Deepest accepted nesting of arrays/objects (a scalar is depth 0, "[]" is 1).
# Same limit as the C++ client (kMaxCanonicalJsonDepth).
MAX_DEPTH = 256


class CanonicalJsonError(ValueError):
    """The value has no canonical JSON form (see the module docstring)."""


def args_hash(value: Any) -> bytes:
    """SHA-256 of canonicalize(value): 32 raw bytes for BeginRequest.args_hash."""
    return hashlib.sha256(canonicalize(value).encode("utf-8")).digest()


def args_hash_hex(value: Any) -> str:
    """args_hash(value) as 64 lowercase hex digits (usable as a dedup key)."""
    return args_hash(value).hex()


def args_hash_of_json_text(text: str | bytes) -> bytes:
    """SHA-256 of canonicalize_json_text(text): 32 raw bytes."""
    return hashlib.sha256(canonicalize_json_text(text).encode("utf-8")).digest()


def canonicalize(value: Any) -> str:
    """RFC 8785 form of a Python JSON value.

    Accepts None, bool, int, float, str, list/tuple and dict with str keys.
    Raises CanonicalJsonError for anything else or anything the module
    docstring rejects.
    """
    out: list[str] = []
    _write(value, 0, out)
    return "".join(out)


def canonicalize_json_text(text: str | bytes) -> str:
    """RFC 8785 form of a JSON text (bytes must be UTF-8).

    Raises CanonicalJsonError when the text is not JSON or has no canonical
    form (duplicate keys, NaN, 1e400, lone surrogates, ...).
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CanonicalJsonError(f"JSON text is not valid UTF-8: {e}") from None
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object_without_duplicates,
            # Every JSON number is a double in RFC 8785: float(str) rounds
            # correctly, so 9007199254740993 becomes 9007199254740992.0.
            parse_int=_parse_number,
            parse_float=_parse_number,
            parse_constant=_reject_constant,
        )
    except json.JSONDecodeError as e:
        raise CanonicalJsonError(f"not JSON: {e}") from None
    except RecursionError:
        raise CanonicalJsonError(f"nesting deeper than {MAX_DEPTH}") from None
    return canonicalize(value)


def format_number(x: float) -> str:
    """ECMAScript Number::toString(x) for a finite double."""
    if x == 0:
        return "0"  # Also -0.0, which ECMAScript writes as "0".
    # repr gives the shortest digits that round-trip (closest to x among
    # those), which is ECMAScript's choice of digits; only the layout differs.
    mantissa, _, exp = repr(abs(x)).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = int_part + frac_part
    # x = 0.<digits> * 10**n
    n = len(int_part) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    n -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k = len(digits)

    sign = "-" if x < 0 else ""
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * -n + digits
    else:
        e = n - 1
        head = digits[0] + ("." + digits[1:] if k > 1 else "")
        body = f"{head}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + body


# JSON.stringify's escapes; other control characters become \u00xx.
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _escape_char(match: re.Match[str]) -> str:
    c = match.group(0)
    return _SHORT_ESCAPES.get(c) or f"\\u{ord(c):04x}"


def _write_string(s: str, out: list[str]) -> None:
    try:
        # Strict UTF-8 refuses lone surrogates, which have no UTF-8 form.
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalJsonError("string contains a lone surrogate") from None
    out.append('"')
    out.append(_NEEDS_ESCAPE.sub(_escape_char, s))
    out.append('"')


def _write(value: Any, depth: int, out: list[str]) -> None:
    # bool before int: bool is a subclass of int.
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        try:
            as_double = float(value)
        except OverflowError:
            raise CanonicalJsonError(f"integer beyond the double range: {value}") from None
        out.append(format_number(as_double))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalJsonError(f"{value} is not JSON")
        out.append(format_number(value))
    elif isinstance(value, str):
        _write_string(value, out)
    elif isinstance(value, (list, tuple, dict)):
        if depth + 1 > MAX_DEPTH:
            raise CanonicalJsonError(f"nesting deeper than {MAX_DEPTH}")
        if isinstance(value, dict):
            _write_object(value, depth + 1, out)
        else:
            out.append("[")
            for i, item in enumerate(value):
                if i:
                    out.append(",")
                _write(item, depth + 1, out)
            out.append("]")
    else:
        raise CanonicalJsonError(f"{type(value).__name__} is not a JSON value")


def _utf16_sort_key(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare exactly like the code unit sequence.
    # surrogatepass: a lone surrogate is reported by _write_string instead.
    return key.encode("utf-16-be", "surrogatepass")


def _write_object(obj: dict[Any, Any], depth: int, out: list[str]) -> None:
    for key in obj:
        if not isinstance(key, str):
            raise CanonicalJsonError(f"object key {key!r} is not a string")
    out.append("{")
    for i, key in enumerate(sorted(obj, key=_utf16_sort_key)):
        if i:
            out.append(",")
        _write_string(key, out)
        out.append(":")
        _write(obj[key], depth, out)
    out.append("}")


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise CanonicalJsonError(f"duplicate object key {key!r}")
        obj[key] = value
    return obj


def _parse_number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise CanonicalJsonError(f"number beyond the double range: {text}")
    return value


def _reject_constant(name: str) -> NoReturn:
    raise CanonicalJsonError(f"{name} is not JSON")
