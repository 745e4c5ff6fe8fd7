// Fixed-width integers as bytes, independent of the host's byte order (after
// LevelDB's util/coding.h).
//
// Little-endian (Fixed16/32/64) for values inside records and log entries;
// big-endian for numbers inside keys, where RocksDB's bytewise key order must
// follow the numbers' order (a storage key's slot, a member id).
//
// Encode* writes exactly sizeof(value) bytes at `dst`; Decode* reads exactly
// that many at `src`. The caller guarantees the room; nothing is checked.
// Pure functions: thread-safe.
#ifndef DEDUP_STORAGE_CODING_H_
#define DEDUP_STORAGE_CODING_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace dedup {
namespace coding_internal {

template <typename T>
inline void EncodeLittleEndian(char* dst, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    dst[i] = static_cast<char>(static_cast<uint8_t>(value >> (8 * i)));
  }
}

template <typename T>
inline T DecodeLittleEndian(const char* src) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value |=
        static_cast<T>(static_cast<T>(static_cast<uint8_t>(src[i])) << (8 * i));
  }
  return value;
}

template <typename T>
inline void EncodeBigEndian(char* dst, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    dst[i] = static_cast<char>(
        static_cast<uint8_t>(value >> (8 * (sizeof(T) - 1 - i))));
  }
}

template <typename T>
inline T DecodeBigEndian(const char* src) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value = static_cast<T>((value << 8) | static_cast<uint8_t>(src[i]));
  }
  return value;
}

}  // namespace coding_internal

inline void EncodeFixed16(char* dst, uint16_t value) {
  coding_internal::EncodeLittleEndian(dst, value);
}
inline void EncodeFixed32(char* dst, uint32_t value) {
  coding_internal::EncodeLittleEndian(dst, value);
}
inline void EncodeFixed64(char* dst, uint64_t value) {
  coding_internal::EncodeLittleEndian(dst, value);
}

[[nodiscard]] inline uint16_t DecodeFixed16(const char* src) {
  return coding_internal::DecodeLittleEndian<uint16_t>(src);
}
[[nodiscard]] inline uint32_t DecodeFixed32(const char* src) {
  return coding_internal::DecodeLittleEndian<uint32_t>(src);
}
[[nodiscard]] inline uint64_t DecodeFixed64(const char* src) {
  return coding_internal::DecodeLittleEndian<uint64_t>(src);
}

// Appends the encoding to `dst`.
inline void PutFixed16(std::string* dst, uint16_t value) {
  char buf[sizeof(value)];
  EncodeFixed16(buf, value);
  dst->append(buf, sizeof(buf));
}
inline void PutFixed32(std::string* dst, uint32_t value) {
  char buf[sizeof(value)];
  EncodeFixed32(buf, value);
  dst->append(buf, sizeof(buf));
}
inline void PutFixed64(std::string* dst, uint64_t value) {
  char buf[sizeof(value)];
  EncodeFixed64(buf, value);
  dst->append(buf, sizeof(buf));
}

inline void EncodeBigEndian16(char* dst, uint16_t value) {
  coding_internal::EncodeBigEndian(dst, value);
}
inline void EncodeBigEndian64(char* dst, uint64_t value) {
  coding_internal::EncodeBigEndian(dst, value);
}

[[nodiscard]] inline uint16_t DecodeBigEndian16(const char* src) {
  return coding_internal::DecodeBigEndian<uint16_t>(src);
}
[[nodiscard]] inline uint64_t DecodeBigEndian64(const char* src) {
  return coding_internal::DecodeBigEndian<uint64_t>(src);
}

inline void PutBigEndian16(std::string* dst, uint16_t value) {
  char buf[sizeof(value)];
  EncodeBigEndian16(buf, value);
  dst->append(buf, sizeof(buf));
}
inline void PutBigEndian64(std::string* dst, uint64_t value) {
  char buf[sizeof(value)];
  EncodeBigEndian64(buf, value);
  dst->append(buf, sizeof(buf));
}

}  // namespace dedup

#endif  // DEDUP_STORAGE_CODING_H_
