// gzip (RFC 1952) for the metrics page: Prometheus asks for it, and the
// page compresses about tenfold.
#ifndef DEDUP_SERVER_METRICS_GZIP_H_
#define DEDUP_SERVER_METRICS_GZIP_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace dedup {

// `data` gzip-compressed; nullopt if zlib fails. Thread-safe.
[[nodiscard]] std::optional<std::string> Gzip(absl::string_view data);

}  // namespace dedup

#endif  // DEDUP_SERVER_METRICS_GZIP_H_
