#include "tests/testing/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dedup::testing {

absl::StatusOr<std::string> HttpGet(int port, const std::string& path,
                                    const std::string& headers) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect: ", error));
  }
  const std::string request = absl::StrCat(
      "GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n", headers, "\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string response;
  char buf[8192];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos || response.find(" 200 ") > body) {
    return absl::InternalError(
        absl::StrCat("bad HTTP answer: ", response.substr(0, 200)));
  }
  return response.substr(body + 4);
}

absl::StatusOr<double> SampleValue(const std::string& exposition,
                                   const std::string& series) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.size() <= series.size() + 1 || line[series.size()] != ' ' ||
        line.substr(0, series.size()) != series) {
      continue;
    }
    double value = 0;
    if (!absl::SimpleAtod(line.substr(series.size() + 1), &value)) {
      return absl::InternalError(absl::StrCat("bad sample: ", line));
    }
    return value;
  }
  return absl::NotFoundError(absl::StrCat("no sample ", series));
}

absl::StatusOr<double> ScrapeSample(int port, const std::string& series) {
  absl::StatusOr<std::string> page = HttpGet(port, "/metrics");
  if (!page.ok()) return page.status();
  return SampleValue(*page, series);
}

}  // namespace dedup::testing
