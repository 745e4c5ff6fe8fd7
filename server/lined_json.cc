#include "server/lined_json.h"

#include <cstddef>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace dedup {
namespace {

constexpr size_t kMaxDepth = 64;

// Where the parser is in the text. The parser reads through a
// CountingIterator, so at each SAX event this says which line the token just
// read ended on (whitespace read ahead is not counted against it).
struct ReadPosition {
  int line = 1;
  int token_line = 1;
};

class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* at, ReadPosition* position)
      : at_(at), position_(position) {}
  reference operator*() const { return *at_; }
  CountingIterator& operator++() {
    if (*at_ == '\n') {
      ++position_->line;
    } else if (*at_ != ' ' && *at_ != '\t' && *at_ != '\r') {
      position_->token_line = position_->line;
    }
    ++at_;
    return *this;
  }
  bool operator==(const CountingIterator& other) const {
    return at_ == other.at_;
  }
  bool operator!=(const CountingIterator& other) const {
    return at_ != other.at_;
  }

 private:
  const char* at_;
  ReadPosition* position_;
};

// Builds the LinedJson tree from SAX events.
class TreeBuilder final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit TreeBuilder(const ReadPosition* position) : position_(position) {}

  absl::StatusOr<LinedJson> Take() && {
    if (!error_.ok()) return error_;
    return std::move(root_);
  }

  bool null() override { return Add(Scalar(LinedJson::Type::kNull)); }
  bool boolean(bool v) override {
    LinedJson value = Scalar(LinedJson::Type::kBool);
    value.boolean = v;
    return Add(std::move(value));
  }
  bool number_integer(number_integer_t v) override {
    LinedJson value = Scalar(LinedJson::Type::kNumber);
    value.number = static_cast<double>(v);
    value.is_integer = true;
    value.is_negative = v < 0;
    value.integer = v < 0 ? 0 : static_cast<uint64_t>(v);
    return Add(std::move(value));
  }
  bool number_unsigned(number_unsigned_t v) override {
    LinedJson value = Scalar(LinedJson::Type::kNumber);
    value.number = static_cast<double>(v);
    value.is_integer = true;
    value.integer = v;
    return Add(std::move(value));
  }
  bool number_float(number_float_t v, const string_t&) override {
    LinedJson value = Scalar(LinedJson::Type::kNumber);
    value.number = v;
    value.is_negative = v < 0;
    return Add(std::move(value));
  }
  bool string(string_t& v) override {
    LinedJson value = Scalar(LinedJson::Type::kString);
    value.string = std::move(v);
    return Add(std::move(value));
  }
  bool binary(binary_t&) override { return Fail("binary values are not JSON"); }
  bool start_object(std::size_t) override {
    return Open(LinedJson::Type::kObject);
  }
  bool key(string_t& key) override {
    LinedJson& object = *stack_.back();
    for (const auto& member : object.members) {
      if (member.first == key) {
        return Fail(absl::StrCat("key \"", key, "\" appears twice"));
      }
    }
    pending_key_ = std::move(key);
    pending_key_line_ = position_->token_line;
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override {
    return Open(LinedJson::Type::kArray);
  }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::json::exception& e) override {
    // nlohmann's text: "[json.exception.parse_error.101] parse error at
    // line 3, column 5: syntax error while parsing ...". Keep from "line".
    absl::string_view what = e.what();
    const size_t at = what.find("line ");
    error_ = absl::InvalidArgumentError(
        at == absl::string_view::npos ? what : what.substr(at));
    return false;
  }

 private:
  LinedJson Scalar(LinedJson::Type type) const {
    LinedJson value;
    value.type = type;
    value.line = position_->token_line;
    return value;
  }

  bool Fail(const std::string& what) {
    error_ = absl::InvalidArgumentError(
        absl::StrCat("line ", position_->token_line, ": ", what));
    return false;
  }

  // Puts `value` in its parent (or makes it the root); returns where it is.
  LinedJson* Place(LinedJson value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    LinedJson& parent = *stack_.back();
    if (parent.type == LinedJson::Type::kArray) {
      parent.items.push_back(std::move(value));
      return &parent.items.back();
    }
    parent.members.emplace_back(std::move(pending_key_), std::move(value));
    parent.member_lines.push_back(pending_key_line_);
    return &parent.members.back().second;
  }

  bool Add(LinedJson value) {
    Place(std::move(value));
    return true;
  }

  // Containers are filled in place: a pointer to one stays valid because
  // its parent's vector does not grow until this container is closed.
  bool Open(LinedJson::Type type) {
    if (stack_.size() >= kMaxDepth) {
      return Fail(absl::StrCat("nesting deeper than ", kMaxDepth, " levels"));
    }
    stack_.push_back(Place(Scalar(type)));
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  const ReadPosition* const position_;
  LinedJson root_;
  std::vector<LinedJson*> stack_;
  std::string pending_key_;
  int pending_key_line_ = 0;
  absl::Status error_;
};

}  // namespace

const LinedJson* LinedJson::Find(absl::string_view key) const {
  if (type != Type::kObject) return nullptr;
  for (const auto& member : members) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

absl::string_view LinedJson::TypeName(Type type) {
  switch (type) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return "a boolean";
    case Type::kNumber:
      return "a number";
    case Type::kString:
      return "a string";
    case Type::kArray:
      return "an array";
    case Type::kObject:
      return "an object";
  }
  return "unknown";
}

absl::StatusOr<LinedJson> ParseLinedJson(absl::string_view text) {
  ReadPosition position;
  TreeBuilder builder(&position);
  CountingIterator begin(text.data(), &position);
  CountingIterator end(text.data() + text.size(), &position);
  nlohmann::json::sax_parse(begin, end, &builder);
  return std::move(builder).Take();
}

absl::Status JsonErrorAt(const LinedJson& where, absl::string_view path,
                         absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("line ", where.line, ": ", path, ": ", what));
}

absl::Status ExpectJsonType(const LinedJson& value, absl::string_view path,
                            LinedJson::Type type) {
  if (value.type == type) return absl::OkStatus();
  return JsonErrorAt(value, path,
                     absl::StrCat("must be ", LinedJson::TypeName(type),
                                  ", got ", LinedJson::TypeName(value.type)));
}

absl::Status CheckJsonKeys(const LinedJson& object, absl::string_view path,
                           const std::set<absl::string_view>& allowed) {
  for (size_t i = 0; i < object.members.size(); ++i) {
    const std::string& key = object.members[i].first;
    if (allowed.count(key) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", object.member_lines[i], ": ", path, ": unknown key \"", key,
          "\" (allowed: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace dedup
