#include "replication/peer_hello.h"

#include <algorithm>
#include <cstring>

namespace dedup {
namespace {

constexpr size_t kMagicBytes = 8;

void PutLe(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

uint64_t GetLe(absl::string_view in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  }
  return value;
}

}  // namespace

const char* PeerHelloStatusName(PeerHelloStatus status) {
  switch (status) {
    case PeerHelloStatus::kOk:
      return "ok";
    case PeerHelloStatus::kBadMagic:
      return "bad magic or version";
    case PeerHelloStatus::kUnknownGroup:
      return "unknown group";
    case PeerHelloStatus::kUnauthorized:
      return "not authorized";
    case PeerHelloStatus::kMalformed:
      return "malformed hello";
    case PeerHelloStatus::kBusy:
      return "busy";
  }
  return "unknown status";
}

std::string EncodePeerHello(const PeerHello& hello) {
  std::string out(kPeerHelloMagic, kMagicBytes);
  PutLe(out, hello.group_id, 4);
  PutLe(out, hello.node_id, 8);
  PutLe(out, hello.address.size(), 2);
  out += hello.address;
  PutLe(out, hello.token.size(), 2);
  out += hello.token;
  return out;
}

HelloParse ParsePeerHello(absl::string_view bytes, PeerHello* hello,
                          size_t* consumed) {
  // The magic is checked as soon as its bytes arrive: a stranger speaking
  // another protocol is told at once, not after the deadline.
  const size_t magic_seen = std::min(bytes.size(), kMagicBytes);
  if (std::memcmp(bytes.data(), kPeerHelloMagic, magic_seen) != 0) {
    return HelloParse::kBadMagic;
  }
  size_t at = kMagicBytes + 4 + 8;
  if (bytes.size() < at + 2) return HelloParse::kIncomplete;
  const size_t address_len = GetLe(bytes, at, 2);
  if (address_len == 0 || address_len > kMaxHelloAddress) {
    return HelloParse::kMalformed;
  }
  at += 2;
  if (bytes.size() < at + address_len + 2) return HelloParse::kIncomplete;
  const size_t token_at = at + address_len;
  const size_t token_len = GetLe(bytes, token_at, 2);
  if (token_len > kMaxHelloToken) return HelloParse::kMalformed;
  const size_t end = token_at + 2 + token_len;
  if (bytes.size() < end) return HelloParse::kIncomplete;
  const uint64_t node_id = GetLe(bytes, kMagicBytes + 4, 8);
  if (node_id == 0) return HelloParse::kMalformed;
  hello->group_id = static_cast<uint32_t>(GetLe(bytes, kMagicBytes, 4));
  hello->node_id = node_id;
  hello->address = std::string(bytes.substr(at, address_len));
  hello->token = std::string(bytes.substr(token_at + 2, token_len));
  *consumed = end;
  return HelloParse::kDone;
}

}  // namespace dedup
