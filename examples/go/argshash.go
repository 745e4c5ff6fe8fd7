package main

// The canonical args_hash every dedup client computes:
//
//	args_hash = SHA-256(UTF-8 bytes of the RFC 8785 (JCS) canonical JSON
//	                    of the tool arguments), 32 raw bytes
//
// Equal arguments (as JSON values, whatever their key order, whitespace or
// number spelling) hash the same in every language; the shared vectors in
// tests/vectors/args_hash.json pin the exact bytes. The C++, Python and
// TypeScript clients implement the same rules (client/args_hash.h).
//
// Canonical form (what ECMAScript's JSON.stringify writes, keys sorted):
//   - object members sorted by key as UTF-16 code units;
//   - every number is an IEEE-754 double written as ECMAScript's
//     Number::toString (shortest round-trip digits; exponent form iff the
//     decimal exponent is >= 21 or <= -7; -0 is "0"), so integers beyond
//     2^53 round like doubles;
//   - strings escape only '"', '\\' and U+0000..U+001F (\b \t \n \f \r, the
//     rest \u00xx in lower case); everything else is literal UTF-8;
//   - no whitespace.
//
// Rejected, so a hash never depends on one parser's leniency: text that is
// not JSON, a byte order mark, invalid UTF-8, lone surrogates, duplicate
// object keys, numbers beyond the double range, and nesting deeper than
// maxDepth. encoding/json is not used to parse: it replaces invalid UTF-8
// and lone surrogates with U+FFFD and keeps the last of duplicate keys,
// both silently.

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is the deepest accepted nesting of arrays and objects (a scalar
// is depth 0, "[]" depth 1); the other clients use the same limit.
const maxDepth = 256

// ArgsHashOfJSON returns the 32-byte args_hash of a JSON text.
func ArgsHashOfJSON(text []byte) ([]byte, error) {
	canonical, err := CanonicalJSON(text)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(canonical))
	return sum[:], nil
}

// ArgsHash returns the args_hash of a Go value, as encoding/json marshals it
// (a map, a struct with json tags, ...). Strings must be valid UTF-8:
// json.Marshal would silently replace invalid bytes.
func ArgsHash(value interface{}) ([]byte, error) {
	text, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	return ArgsHashOfJSON(text)
}

// CanonicalJSON returns the RFC 8785 form of a JSON text (UTF-8).
func CanonicalJSON(text []byte) (string, error) {
	if bytes.HasPrefix(text, []byte("\xEF\xBB\xBF")) {
		return "", fmt.Errorf("JSON text starts with a byte order mark")
	}
	p := &parser{in: text}
	var out strings.Builder
	p.skipSpace()
	if err := p.value(0, &out); err != nil {
		return "", err
	}
	p.skipSpace()
	if p.pos != len(p.in) {
		return "", p.errorf("text after the JSON value")
	}
	return out.String(), nil
}

// parser reads one JSON value (RFC 8259, strictly) and writes its canonical
// form as it goes; objects are buffered to sort their members.
type parser struct {
	in  []byte
	pos int
}

func (p *parser) errorf(format string, args ...interface{}) error {
	return fmt.Errorf("not canonicalizable JSON at byte %d: %s", p.pos,
		fmt.Sprintf(format, args...))
}

func (p *parser) skipSpace() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses the value at p.pos; depth counts the containers around it.
func (p *parser) value(depth int, out *strings.Builder) error {
	if p.pos >= len(p.in) {
		return p.errorf("unexpected end of text")
	}
	switch c := p.in[p.pos]; {
	case c == '{' || c == '[':
		if depth+1 > maxDepth {
			return p.errorf("nesting deeper than %d", maxDepth)
		}
		if c == '{' {
			return p.object(depth+1, out)
		}
		return p.array(depth+1, out)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return err
		}
		writeString(s, out)
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number(out)
	}
	for _, literal := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(p.in[p.pos:], []byte(literal)) {
			p.pos += len(literal)
			out.WriteString(literal)
			return nil
		}
	}
	return p.errorf("unexpected character %q", p.in[p.pos])
}

func (p *parser) array(depth int, out *strings.Builder) error {
	p.pos++ // '['
	out.WriteByte('[')
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		out.WriteByte(']')
		return nil
	}
	for first := true; ; first = false {
		if !first {
			out.WriteByte(',')
		}
		p.skipSpace()
		if err := p.value(depth, out); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.in) {
			return p.errorf("unterminated array")
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			out.WriteByte(']')
			return nil
		default:
			return p.errorf("expected ',' or ']'")
		}
	}
}

type member struct {
	sortKey []uint16 // the key's UTF-16 code units: RFC 8785's order
	key     string
	value   string // already canonical
}

func (p *parser) object(depth int, out *strings.Builder) error {
	p.pos++ // '{'
	var members []member
	seen := map[string]bool{}
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		out.WriteString("{}")
		return nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return p.errorf("expected a string key")
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		if seen[key] {
			return p.errorf("duplicate object key %q", key)
		}
		seen[key] = true
		p.skipSpace()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return p.errorf("expected ':'")
		}
		p.pos++
		p.skipSpace()
		var value strings.Builder
		if err := p.value(depth, &value); err != nil {
			return err
		}
		members = append(members, member{utf16.Encode([]rune(key)), key, value.String()})
		p.skipSpace()
		if p.pos >= len(p.in) {
			return p.errorf("unterminated object")
		}
		if p.in[p.pos] == '}' {
			p.pos++
			break
		}
		if p.in[p.pos] != ',' {
			return p.errorf("expected ',' or '}'")
		}
		p.pos++
	}
	sort.Slice(members, func(i, j int) bool {
		return lessUTF16(members[i].sortKey, members[j].sortKey)
	})
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		writeString(m.key, out)
		out.WriteByte(':')
		out.WriteString(m.value)
	}
	out.WriteByte('}')
	return nil
}

func lessUTF16(a, b []uint16) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// str parses the string at p.pos (its opening quote) into UTF-8.
func (p *parser) str() (string, error) {
	p.pos++ // '"'
	var s strings.Builder
	for {
		if p.pos >= len(p.in) {
			return "", p.errorf("unterminated string")
		}
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return s.String(), nil
		case c == '\\':
			if err := p.escape(&s); err != nil {
				return "", err
			}
		case c < 0x20:
			return "", p.errorf("control character in a string")
		default:
			r, size := utf8.DecodeRune(p.in[p.pos:])
			// DecodeRune refuses overlong forms, surrogates and values
			// beyond U+10FFFF with (RuneError, 1).
			if r == utf8.RuneError && size == 1 {
				return "", p.errorf("invalid UTF-8")
			}
			s.Write(p.in[p.pos : p.pos+size])
			p.pos += size
		}
	}
}

var shortUnescapes = map[byte]byte{
	'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t',
}

func (p *parser) escape(s *strings.Builder) error {
	if p.pos+1 >= len(p.in) {
		return p.errorf("unterminated escape")
	}
	if c, ok := shortUnescapes[p.in[p.pos+1]]; ok {
		s.WriteByte(c)
		p.pos += 2
		return nil
	}
	if p.in[p.pos+1] != 'u' {
		return p.errorf("unknown escape")
	}
	r, err := p.hex4()
	if err != nil {
		return err
	}
	if utf16.IsSurrogate(r) {
		// Only a high surrogate followed by an escaped low one is a
		// character; anything else is a lone surrogate.
		var low rune = -1
		if r < 0xDC00 && bytes.HasPrefix(p.in[p.pos:], []byte(`\u`)) {
			if low, err = p.hex4(); err != nil {
				return err
			}
		}
		if r = utf16.DecodeRune(r, low); r == utf8.RuneError {
			return p.errorf("lone surrogate")
		}
	}
	s.WriteRune(r)
	return nil
}

// hex4 parses `\uXXXX` at p.pos.
func (p *parser) hex4() (rune, error) {
	if p.pos+6 > len(p.in) {
		return 0, p.errorf("short \\u escape")
	}
	v, err := strconv.ParseUint(string(p.in[p.pos+2:p.pos+6]), 16, 32)
	if err != nil {
		return 0, p.errorf("bad \\u escape")
	}
	p.pos += 6
	return rune(v), nil
}

// number parses an RFC 8259 number and writes it as ECMAScript would.
func (p *parser) number(out *strings.Builder) error {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.in) && p.in[p.pos] >= '0' && p.in[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.in[p.pos] == '-' {
		p.pos++
	}
	intStart := p.pos
	if n := digits(); n == 0 || (n > 1 && p.in[intStart] == '0') {
		return p.errorf("bad number")
	}
	if p.pos < len(p.in) && p.in[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return p.errorf("bad number")
		}
	}
	if p.pos < len(p.in) && (p.in[p.pos] == 'e' || p.in[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.in) && (p.in[p.pos] == '+' || p.in[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return p.errorf("bad number")
		}
	}
	// ParseFloat rounds correctly (ties to even) and reports ErrRange with
	// an infinity for numbers beyond the double range.
	d, err := strconv.ParseFloat(string(p.in[start:p.pos]), 64)
	if err != nil && math.IsInf(d, 0) {
		return p.errorf("number beyond the double range")
	}
	out.WriteString(FormatNumber(d))
	return nil
}

// FormatNumber writes a finite double as ECMAScript's Number::toString.
func FormatNumber(d float64) string {
	if d == 0 {
		return "0" // also -0
	}
	// 'e' with precision -1: the shortest digits that round-trip, which are
	// ECMAScript's digits; only the layout differs. E.g. "-1.2345e+02".
	sci := strconv.FormatFloat(d, 'e', -1, 64)
	sign := ""
	if sci[0] == '-' {
		sign, sci = "-", sci[1:]
	}
	mantissa, exponent, _ := strings.Cut(sci, "e")
	digits := strings.TrimRight(strings.Replace(mantissa, ".", "", 1), "0")
	if digits == "" {
		digits = "0"
	}
	exp10, _ := strconv.Atoi(exponent)
	k, n := len(digits), exp10+1 // d = 0.digits * 10^n
	switch {
	case k <= n && n <= 21:
		return sign + digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		return sign + digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		return sign + "0." + strings.Repeat("0", -n) + digits
	}
	head := digits[:1]
	if k > 1 {
		head += "." + digits[1:]
	}
	if n-1 >= 0 {
		return fmt.Sprintf("%s%se+%d", sign, head, n-1)
	}
	return fmt.Sprintf("%s%se-%d", sign, head, 1-n)
}

// writeString writes s (valid UTF-8) as JSON.stringify does.
func writeString(s string, out *strings.Builder) {
	out.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\b':
			out.WriteString(`\b`)
		case '\t':
			out.WriteString(`\t`)
		case '\n':
			out.WriteString(`\n`)
		case '\f':
			out.WriteString(`\f`)
		case '\r':
			out.WriteString(`\r`)
		default:
			if r < 0x20 {
				fmt.Fprintf(out, `\u%04x`, r)
			} else {
				out.WriteRune(r)
			}
		}
	}
	out.WriteByte('"')
}
