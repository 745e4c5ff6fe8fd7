// The ready file: how tests, scripts and supervisors learn that dedupd is
// serving and where (--ready_file=PATH). Parsing a log line for this broke
// each time the line changed; a JSON file written once is a contract.
//
// Format (one JSON object, one line, keys may be added but never renamed):
//   {"pid": 1234, "mode": "single"|"cluster", "node_id": 0,
//    "address": "127.0.0.1:50051",      gRPC (dedup.v1 and the rest)
//    "metrics_address": "127.0.0.1:9464" or "" (no metrics endpoint),
//    "health_address": "" or host:port   (plaintext health listener),
//    "raft_address": "" or host:port     (cluster mode),
//    "data_dir": "...", "durability": "sync"|"async"|"none"|"raft",
//    "tls": "off"|"on"|"mtls", "auth": "off"|"tenants", "version": "...",
//    "data_format": 1}                  the data dir's format, as recorded
//                                        (storage/format_version.h)
// Every address is the bound one (a port 0 flag shows the port picked).
#ifndef DEDUP_SERVER_READY_FILE_H_
#define DEDUP_SERVER_READY_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace dedup {

struct ReadyInfo {
  int64_t pid = 0;
  std::string mode;  // "single" or "cluster"
  uint64_t node_id = 0;
  std::string address;
  std::string metrics_address;
  std::string health_address;
  std::string raft_address;
  std::string data_dir;
  std::string durability;
  std::string tls;
  std::string auth;
  std::string version;
  uint32_t data_format = 0;
};

// The file's contents: one line of JSON and a newline.
[[nodiscard]] std::string ReadyJson(const ReadyInfo& info);

// Writes `info` to `path` atomically: a reader sees no file or the whole
// file, never a part (a temp file in the same directory, fsynced, then
// renamed over `path`). Thread-compatible.
[[nodiscard]] absl::Status WriteReadyFile(const std::string& path,
                                          const ReadyInfo& info);

// Removes `path` if it still names this process (a newer dedupd may have
// written it since). Best effort: errors are ignored.
void RemoveReadyFile(const std::string& path, int64_t pid);

}  // namespace dedup

#endif  // DEDUP_SERVER_READY_FILE_H_
