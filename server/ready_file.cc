#include "server/ready_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace dedup {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("--ready_file: ", what, " ", path, ": ", strerror(errno)));
}

}  // namespace

std::string ReadyJson(const ReadyInfo& info) {
  const nlohmann::ordered_json json = {
      {"pid", info.pid},
      {"mode", info.mode},
      {"node_id", info.node_id},
      {"address", info.address},
      {"metrics_address", info.metrics_address},
      {"health_address", info.health_address},
      {"raft_address", info.raft_address},
      {"data_dir", info.data_dir},
      {"durability", info.durability},
      {"tls", info.tls},
      {"auth", info.auth},
      {"version", info.version},
      {"data_format", info.data_format},
  };
  return json.dump() + "\n";
}

absl::Status WriteReadyFile(const std::string& path, const ReadyInfo& info) {
  const std::string tmp = absl::StrCat(path, ".tmp.", info.pid);
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  const std::string text = ReadyJson(info);
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const absl::Status error = Errno("cannot write", tmp);
      close(fd);
      unlink(tmp.c_str());
      return error;
    }
    written += static_cast<size_t>(n);
  }
  // Synced before the rename, so a reader after a crash never finds the
  // name with no contents.
  if (fsync(fd) != 0 || close(fd) != 0) {
    const absl::Status error = Errno("cannot sync", tmp);
    unlink(tmp.c_str());
    return error;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const absl::Status error = Errno("cannot rename to", path);
    unlink(tmp.c_str());
    return error;
  }
  return absl::OkStatus();
}

void RemoveReadyFile(const std::string& path, int64_t pid) {
  std::ifstream in(path);
  if (!in) return;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json json =
      nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.value("pid", int64_t{0}) == pid) {
    unlink(path.c_str());
  }
}

}  // namespace dedup
