#include "client/args_hash.h"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dedup {
namespace {

using nlohmann::json;

// Builds a json tree from nlohmann's SAX events, rejecting what the DOM parser
// would accept silently: duplicate keys (it keeps the last one) and unbounded
// nesting.
class TreeBuilder final : public nlohmann::json_sax<json> {
 public:
  absl::StatusOr<json> Take() && {
    if (!status_.ok()) return status_;
    return std::move(root_);
  }

  bool null() override { return Add(json(nullptr)); }
  bool boolean(bool v) override { return Add(json(v)); }
  bool number_integer(number_integer_t v) override { return Add(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Add(json(v)); }
  bool number_float(number_float_t v, const string_t& text) override {
    if (!std::isfinite(v))
      return Fail(absl::StrCat("number out of range: ", text));
    return Add(json(v));
  }
  bool string(string_t& v) override { return Add(json(std::move(v))); }
  bool binary(binary_t& v) override {
    return Fail("binary values are not JSON");
  }

  bool start_object(std::size_t) override { return Open(json::object()); }
  bool key(string_t& k) override {
    Frame& top = stack_.back();
    if (!top.keys.insert(k).second) {
      return Fail(absl::StrCat("duplicate object key \"", k, "\""));
    }
    top.pending_key = std::move(k);
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(json::array()); }
  bool end_array() override { return Close(); }

  bool parse_error(std::size_t position, const std::string& last_token,
                   const json::exception& e) override {
    // nlohmann's message already names the position and the token.
    return Fail(e.what());
  }

 private:
  struct Frame {
    json* container;
    std::string pending_key;
    std::unordered_set<std::string> keys;
  };

  // Places `v` in the innermost open container (or as the root) and returns
  // where it landed. Pointers stay valid: only the innermost container grows
  // while a frame is open.
  json* Place(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& top = stack_.back();
    if (top.container->is_array()) {
      top.container->push_back(std::move(v));
      return &top.container->back();
    }
    json& slot = (*top.container)[top.pending_key];
    slot = std::move(v);
    return &slot;
  }

  bool Add(json v) {
    Place(std::move(v));
    return true;
  }

  bool Open(json empty) {
    if (stack_.size() >= static_cast<size_t>(kMaxCanonicalJsonDepth)) {
      return Fail(absl::StrCat("nesting deeper than ", kMaxCanonicalJsonDepth));
    }
    json* container = Place(std::move(empty));
    stack_.push_back(Frame{container, {}, {}});
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  bool Fail(std::string message) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(std::move(message));
    return false;
  }

  json root_;
  std::vector<Frame> stack_;
  absl::Status status_;
};

// Decodes the UTF-8 sequence at s[*i], advancing *i. Rejects overlong forms,
// surrogates (U+D800..U+DFFF) and values above U+10FFFF, as RFC 3629 does.
bool NextCodePoint(absl::string_view s, size_t* i, char32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(*i);
  if (lead < 0x80) {
    *cp = lead;
    ++*i;
    return true;
  }
  // Sequence length, payload bits of the lead byte, smallest value allowed
  // for that length (anything smaller is an overlong form).
  struct Form {
    unsigned char mask, tag;
    size_t len;
    char32_t min;
  };
  static constexpr Form kForms[] = {
      {0xE0, 0xC0, 2, 0x80}, {0xF0, 0xE0, 3, 0x800}, {0xF8, 0xF0, 4, 0x10000}};
  for (const Form& form : kForms) {
    if ((lead & form.mask) != form.tag) continue;
    if (s.size() - *i < form.len) return false;
    char32_t value = lead & static_cast<unsigned char>(~form.mask);
    for (size_t k = 1; k < form.len; ++k) {
      const unsigned char b = byte(*i + k);
      if ((b & 0xC0) != 0x80) return false;
      value = (value << 6) | (b & 0x3F);
    }
    if (value < form.min || value > 0x10FFFF ||
        (value >= 0xD800 && value <= 0xDFFF)) {
      return false;
    }
    *cp = value;
    *i += form.len;
    return true;
  }
  return false;  // A continuation byte or 0xF8..0xFF cannot lead.
}

absl::Status InvalidUtf8(absl::string_view s) {
  return absl::InvalidArgumentError(
      absl::StrCat("string is not valid UTF-8 (", s.size(), " bytes)"));
}

// The UTF-16 code units of `s`, the order RFC 8785 sorts keys by.
absl::StatusOr<std::u16string> Utf16Of(absl::string_view s) {
  std::u16string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    if (!NextCodePoint(s, &i, &cp)) return InvalidUtf8(s);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out.push_back(static_cast<char16_t>(0xD800 + (cp >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + (cp & 0x3FF)));
    } else {
      out.push_back(static_cast<char16_t>(cp));
    }
  }
  return out;
}

// Appends `s` as JSON.stringify writes it; validates UTF-8 on the way.
absl::Status AppendString(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    char32_t cp;
    if (!NextCodePoint(s, &i, &cp)) return InvalidUtf8(s);
    switch (cp) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\r':
        out->append("\\r");
        break;
      default:
        if (cp < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
          out->append(buf);
        } else {
          out->append(s.data() + start, i - start);
        }
    }
  }
  out->push_back('"');
  return absl::OkStatus();
}

// ECMAScript Number::toString(d) for a finite d.
std::string FormatNumber(double d) {
  if (d == 0) return "0";  // Also -0, which ES writes as "0".
  // Scientific form gives the shortest round-trip digits (and, among those,
  // the closest to d), exactly ES's choice of digits; ES then decides the
  // layout from the exponent.
  char buf[64];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const absl::string_view sci(buf, r.ptr - buf);  // e.g. "-1.2345e+02"

  std::string out;
  size_t pos = 0;
  if (sci[pos] == '-') {
    out.push_back('-');
    ++pos;
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t k = pos; k < e_pos; ++k) {
    if (sci[k] != '.') digits.push_back(sci[k]);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const bool negative_exp = sci[e_pos + 1] == '-';
  int exp10 = 0;
  std::from_chars(sci.data() + e_pos + 2, sci.data() + sci.size(), exp10);
  if (negative_exp) exp10 = -exp10;

  // In ES terms: d = 0.digits * 10^n, with k digits.
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;
  if (k <= n && n <= 21) {
    out.append(digits).append(n - k, '0');
  } else if (0 < n && n <= 21) {
    out.append(digits, 0, n).append(".").append(digits, n);
  } else if (-6 < n && n <= 0) {
    out.append("0.").append(-n, '0').append(digits);
  } else {
    const int e = n - 1;
    out.push_back(digits[0]);
    if (k > 1) out.append(".").append(digits, 1);
    absl::StrAppend(&out, e >= 0 ? "e+" : "e-", e >= 0 ? e : -e);
  }
  return out;
}

absl::Status AppendValue(const json& v, int depth, std::string* out);

absl::Status AppendObject(const json& v, int depth, std::string* out) {
  struct Member {
    std::u16string sort_key;
    const std::string* key;
    const json* value;
  };
  std::vector<Member> members;
  members.reserve(v.size());
  for (const auto& [key, value] : v.items()) {
    absl::StatusOr<std::u16string> sort_key = Utf16Of(key);
    if (!sort_key.ok()) return sort_key.status();
    members.push_back(Member{*std::move(sort_key), &key, &value});
  }
  // Keys are unique, so a plain sort is deterministic.
  std::sort(
      members.begin(), members.end(),
      [](const Member& a, const Member& b) { return a.sort_key < b.sort_key; });
  out->push_back('{');
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) out->push_back(',');
    if (absl::Status s = AppendString(*members[i].key, out); !s.ok()) return s;
    out->push_back(':');
    if (absl::Status s = AppendValue(*members[i].value, depth, out); !s.ok()) {
      return s;
    }
  }
  out->push_back('}');
  return absl::OkStatus();
}

// `depth` counts the containers enclosing `v`.
absl::Status AppendValue(const json& v, int depth, std::string* out) {
  switch (v.type()) {
    case json::value_t::null:
      out->append("null");
      return absl::OkStatus();
    case json::value_t::boolean:
      out->append(v.get<bool>() ? "true" : "false");
      return absl::OkStatus();
    case json::value_t::number_integer:
      // Every JSON number is a double in RFC 8785 (static_cast rounds to
      // nearest, ties to even, like ES's parser).
      out->append(FormatNumber(static_cast<double>(v.get<int64_t>())));
      return absl::OkStatus();
    case json::value_t::number_unsigned:
      out->append(FormatNumber(static_cast<double>(v.get<uint64_t>())));
      return absl::OkStatus();
    case json::value_t::number_float: {
      const double d = v.get<double>();
      if (!std::isfinite(d)) {
        return absl::InvalidArgumentError("NaN and infinities are not JSON");
      }
      out->append(FormatNumber(d));
      return absl::OkStatus();
    }
    case json::value_t::string:
      return AppendString(v.get_ref<const std::string&>(), out);
    case json::value_t::array:
    case json::value_t::object:
      if (depth + 1 > kMaxCanonicalJsonDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat("nesting deeper than ", kMaxCanonicalJsonDepth));
      }
      if (v.is_object()) return AppendObject(v, depth + 1, out);
      out->push_back('[');
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out->push_back(',');
        if (absl::Status s = AppendValue(v[i], depth + 1, out); !s.ok()) {
          return s;
        }
      }
      out->push_back(']');
      return absl::OkStatus();
    case json::value_t::binary:
    case json::value_t::discarded:
      break;
  }
  return absl::InvalidArgumentError("value is not representable in JSON");
}

absl::StatusOr<json> Parse(absl::string_view json_text) {
  // nlohmann skips a leading UTF-8 BOM; RFC 8259 lets parsers choose, so
  // refuse it for the same answer in every client (Python's json rejects it).
  if (absl::StartsWith(json_text, "\xEF\xBB\xBF")) {
    return absl::InvalidArgumentError(
        "JSON text starts with a byte order mark");
  }
  TreeBuilder builder;
  // strict: trailing non-whitespace is an error. The return value repeats
  // what the builder recorded.
  (void)json::sax_parse(json_text.data(), json_text.data() + json_text.size(),
                        &builder, json::input_format_t::json,
                        /*strict=*/true);
  return std::move(builder).Take();
}

}  // namespace

absl::StatusOr<std::string> CanonicalJson(absl::string_view json_text) {
  absl::StatusOr<json> value = Parse(json_text);
  if (!value.ok()) return value.status();
  return CanonicalJsonOfValue(*value);
}

absl::StatusOr<std::string> CanonicalJsonOfValue(const json& value) {
  std::string out;
  if (absl::Status s = AppendValue(value, 0, &out); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::string> ArgsHash(absl::string_view json_text) {
  absl::StatusOr<std::string> canonical = CanonicalJson(json_text);
  if (!canonical.ok()) return canonical.status();
  return Sha256(*canonical);
}

absl::StatusOr<std::string> ArgsHashOfValue(const json& value) {
  absl::StatusOr<std::string> canonical = CanonicalJsonOfValue(value);
  if (!canonical.ok()) return canonical.status();
  return Sha256(*canonical);
}

std::string Sha256(absl::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  // EVP_Digest with SHA-256 only fails on allocation failure inside OpenSSL;
  // there is no sensible recovery, so treat it like std::bad_alloc would be.
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(),
                 nullptr) != 1) {
    std::abort();
  }
  return std::string(reinterpret_cast<const char*>(digest), size);
}

}  // namespace dedup
