// Human-readable rendering of dedup.v1 responses for dedupctl: one
// "field: value" line per field, fields that do not apply left out.
#ifndef DEDUP_CLIENT_DEDUPCTL_FORMAT_H_
#define DEDUP_CLIENT_DEDUPCTL_FORMAT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dedup/v1/admin.pb.h"
#include "dedup/v1/dedup.pb.h"

namespace dedup::ctl {

// Unix milliseconds as "2024-01-02T03:04:05.678Z (1704164645678)".
[[nodiscard]] std::string FormatUnixMillis(int64_t unix_ms);

// True when every byte is printable ASCII (0x20..0x7E), so it fits one line.
[[nodiscard]] bool IsPrintable(absl::string_view bytes);

// Writes "name: text" when `bytes` is printable, else "name_hex: <hex>".
// Rows as left-aligned columns two spaces apart, one line each.
void PrintTable(std::ostream& out,
                const std::vector<std::vector<std::string>>& rows);

void PrintBytes(std::ostream& out, absl::string_view name,
                absl::string_view bytes);

// Decodes hex (either case, even length); INVALID_ARGUMENT otherwise.
[[nodiscard]] absl::StatusOr<std::string> ParseHex(absl::string_view hex);

void PrintResponse(std::ostream& out, const v1::BeginResponse& response);
void PrintResponse(std::ostream& out, const v1::CompleteResponse& response);
void PrintResponse(std::ostream& out, const v1::ReleaseResponse& response);
void PrintResponse(std::ostream& out, const v1::RenewResponse& response);
void PrintResponse(std::ostream& out, const v1::CheckpointResponse& response);
void PrintResponse(std::ostream& out, const v1::GetResponse& response);
void PrintResponse(std::ostream& out, const v1::ForgetResponse& response);
// A table of the key figures, aligned for reading.
void PrintResponse(std::ostream& out, const v1::StatsResponse& response);
void PrintResponse(std::ostream& out, const v1::GetPolicyResponse& response);
void PrintResponse(std::ostream& out, const v1::ReloadPolicyResponse& response);
void PrintResponse(std::ostream& out, const v1::CompactResponse& response);

}  // namespace dedup::ctl

#endif  // DEDUP_CLIENT_DEDUPCTL_FORMAT_H_
