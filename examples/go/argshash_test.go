package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The shared vectors (tests/vectors/args_hash.json) every client passes.
func TestSharedVectors(t *testing.T) {
	path := os.Getenv("DEDUP_ARGS_HASH_VECTORS")
	if path == "" {
		path = "../../tests/vectors/args_hash.json"
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors []struct{ Name, Input, Canonical, Sha256 string }
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Vectors) < 12 {
		t.Fatalf("only %d vectors in %s", len(file.Vectors), path)
	}
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			canonical, err := CanonicalJSON([]byte(v.Input))
			if err != nil {
				t.Fatal(err)
			}
			if canonical != v.Canonical {
				t.Errorf("canonical %s, want %s", canonical, v.Canonical)
			}
			hash, err := ArgsHashOfJSON([]byte(v.Input))
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(hash); got != v.Sha256 {
				t.Errorf("sha256 %s, want %s", got, v.Sha256)
			}
			// A Go value that marshals to the input hashes the same.
			var value interface{}
			if err := json.Unmarshal([]byte(v.Input), &value); err != nil {
				t.Fatal(err)
			}
			hash, err = ArgsHash(value)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(hash); got != v.Sha256 {
				t.Errorf("ArgsHash of the decoded value %s, want %s", got, v.Sha256)
			}
			if sum := sha256.Sum256([]byte(v.Canonical)); hex.EncodeToString(sum[:]) != v.Sha256 {
				t.Errorf("the vector itself is inconsistent")
			}
		})
	}
}

func TestNumbersAsECMAScript(t *testing.T) {
	cases := map[string]string{
		"1e16":                   "10000000000000000",
		"1e21":                   "1e+21",
		"123e-20":                "1.23e-18",
		"-1e-7":                  "-1e-7",
		"1e-6":                   "0.000001",
		"0.30000000000000004":    "0.30000000000000004",
		"5e-324":                 "5e-324",
		"1.7976931348623157e308": "1.7976931348623157e+308",
		"-0.0":                   "0",
		"333333333.33333329":     "333333333.3333333",
		"18446744073709551615":   "18446744073709552000",
		"-9223372036854775808":   "-9223372036854776000",
		"123456789e-15":          "1.23456789e-7",
		"100":                    "100",
		"2.5E-3":                 "0.0025",
	}
	for text, want := range cases {
		if got, err := CanonicalJSON([]byte(text)); err != nil || got != want {
			t.Errorf("%s: got %q (%v), want %q", text, got, err, want)
		}
	}
}

func TestKeysSortByUTF16CodeUnits(t *testing.T) {
	// U+1F600 (D83D DE00) sorts before U+FB01 in UTF-16, after it in UTF-8.
	got, err := CanonicalJSON([]byte("{\"\uFB01\":1,\"\U0001F600\":2}"))
	if want := "{\"\U0001F600\":2,\"\uFB01\":1}"; err != nil || got != want {
		t.Errorf("got %q (%v), want %q", got, err, want)
	}
}

func TestNestingIsBounded(t *testing.T) {
	nested := func(depth int) []byte {
		return []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
	}
	if _, err := CanonicalJSON(nested(maxDepth)); err != nil {
		t.Errorf("depth %d refused: %v", maxDepth, err)
	}
	if _, err := CanonicalJSON(nested(maxDepth + 1)); err == nil {
		t.Errorf("depth %d accepted", maxDepth+1)
	}
}

// Texts without one canonical form are refused, as by the other clients.
func TestRejections(t *testing.T) {
	bad := []string{
		"", "{", "[1,]", "1 2", "01", "/* c */ 1", "NaN", "Infinity", "-Infinity",
		"[1e400]", strings.Repeat("1", 400), `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`,
		`"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, "\"a\x01\"", "'single'", "\uFEFF{}",
		"\"\xff\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"", "[tru]", "1.", "-", "1e",
	}
	for _, text := range bad {
		if got, err := CanonicalJSON([]byte(text)); err == nil {
			t.Errorf("%q accepted as %q", text, got)
		}
	}
}
