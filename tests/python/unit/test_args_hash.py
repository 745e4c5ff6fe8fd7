"""args_hash: the shared vectors byte for byte, ECMAScript number layout,
UTF-16 key order and every rejection the C++ twin makes too."""

from __future__ import annotations

import hashlib
import json
import os
import unittest
from pathlib import Path

from dedup_client.args_hash import (
    MAX_DEPTH,
    CanonicalJsonError,
    args_hash,
    args_hash_hex,
    args_hash_of_json_text,
    canonicalize,
    canonicalize_json_text,
    format_number,
)

VECTORS = Path(
    os.environ.get("DEDUP_ARGS_HASH_VECTORS")
    or Path(__file__).resolve().parents[2] / "vectors" / "args_hash.json"
)


class VectorsTest(unittest.TestCase):
    def test_every_shared_vector_byte_for_byte(self) -> None:
        vectors = json.loads(VECTORS.read_text(encoding="utf-8"))["vectors"]
        self.assertGreaterEqual(len(vectors), 12)
        for v in vectors:
            with self.subTest(v["name"]):
                canonical = canonicalize_json_text(v["input"])
                self.assertEqual(canonical, v["canonical"])
                self.assertEqual(args_hash_of_json_text(v["input"]).hex(), v["sha256"])
                self.assertEqual(
                    args_hash_of_json_text(v["input"].encode("utf-8")).hex(), v["sha256"])
                # Self-consistent vector; canonical text is a fixed point.
                self.assertEqual(
                    hashlib.sha256(v["canonical"].encode("utf-8")).hexdigest(), v["sha256"])
                self.assertEqual(canonicalize_json_text(v["canonical"]), v["canonical"])
                # Python values (plain json.loads keeps big ints exact) agree.
                value = json.loads(v["input"])
                self.assertEqual(args_hash(value).hex(), v["sha256"])
                self.assertEqual(args_hash_hex(value), v["sha256"])


class NumbersTest(unittest.TestCase):
    CASES = {
        "1e16": "10000000000000000",  # repr(1e16) is '1e+16'
        "1e21": "1e+21",
        "123e-20": "1.23e-18",
        "-1e-7": "-1e-7",
        "1e-6": "0.000001",
        "0.30000000000000004": "0.30000000000000004",
        "5e-324": "5e-324",
        "1.7976931348623157e308": "1.7976931348623157e+308",
        "-0.0": "0",
        "333333333.33333329": "333333333.3333333",
        "18446744073709551615": "18446744073709552000",
        "-9223372036854775808": "-9223372036854776000",
        "123456789e-15": "1.23456789e-7",
        "100": "100",
        "2.5E-3": "0.0025",
    }

    def test_ecmascript_layout(self) -> None:
        for text, want in self.CASES.items():
            with self.subTest(text):
                self.assertEqual(canonicalize_json_text(text), want)
                self.assertEqual(format_number(float(text)), want)

    def test_python_ints_round_like_doubles(self) -> None:
        self.assertEqual(canonicalize(2**53 + 1), "9007199254740992")
        self.assertEqual(canonicalize(10**21), "1e+21")
        self.assertEqual(canonicalize(True), "true")  # bool is not a number
        with self.assertRaises(CanonicalJsonError):
            canonicalize(10**400)


class StructureTest(unittest.TestCase):
    def test_keys_sort_by_utf16_code_units(self) -> None:
        # U+1F600 (D83D DE00) sorts before U+FB01 in UTF-16, after it in
        # code points and UTF-8.
        self.assertEqual(
            canonicalize({"\ufb01": 1, "\U0001f600": 2}), '{"\U0001f600":2,"\ufb01":1}')

    def test_tuples_are_arrays_and_strings_escape_like_json_stringify(self) -> None:
        self.assertEqual(canonicalize((1, "a")), '[1,"a"]')
        self.assertEqual(
            canonicalize("\"\\\b\t\n\f\r\x00\x1f\x7f/é"),
            '"\\"\\\\\\b\\t\\n\\f\\r\\u0000\\u001f\x7f/é"')

    def test_same_key_in_separate_objects_is_fine(self) -> None:
        self.assertEqual(canonicalize_json_text('[{"a":1},{"a":2}]'), '[{"a":1},{"a":2}]')

    def test_nesting_is_bounded(self) -> None:
        def nested(depth: int) -> str:
            return "[" * depth + "]" * depth

        self.assertEqual(canonicalize_json_text(nested(MAX_DEPTH)), nested(MAX_DEPTH))
        for depth in (MAX_DEPTH + 1, 100_000):
            with self.subTest(depth), self.assertRaises(CanonicalJsonError):
                canonicalize_json_text(nested(depth))


class RejectionTest(unittest.TestCase):
    BAD_TEXT = [
        "", "{", "[1,]", "1 2", "01", "/* c */ 1", "NaN", "Infinity", "-Infinity",
        "[1e400]", "1" * 400, '{"a":1,"a":2}', '{"a":{"b":1,"b":1}}', '"\\ud800"',
        '"\\udc00x"', '"a\x01"', "'single'", "\ufeff{}",
    ]
    BAD_BYTES = [b'"\xff"', b'"\xed\xa0\x80"', b'"\xc0\xaf"', b"\xef\xbb\xbf{}"]

    def test_rejects_text_without_a_single_canonical_form(self) -> None:
        for text in self.BAD_TEXT + self.BAD_BYTES:
            with self.subTest(text), self.assertRaises(CanonicalJsonError):
                canonicalize_json_text(text)

    def test_rejects_python_values_without_a_json_form(self) -> None:
        bad = [float("nan"), float("inf"), {1: "x"}, {"a": {1, 2}}, b"bytes",
               "\ud800", {"\udc00": 1}, object()]
        for value in bad:
            with self.subTest(repr(value)), self.assertRaises(CanonicalJsonError):
                canonicalize(value)
        deep: list = []
        for _ in range(MAX_DEPTH):
            deep = [deep]
        with self.assertRaises(CanonicalJsonError):
            canonicalize(deep)

    def test_error_is_a_value_error(self) -> None:
        self.assertTrue(issubclass(CanonicalJsonError, ValueError))


if __name__ == "__main__":
    unittest.main()
