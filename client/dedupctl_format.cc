#include "client/dedupctl_format.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace dedup::ctl {

void PrintTable(std::ostream& out,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line.append(widths[c] - row[c].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

namespace {

void PrintLine(std::ostream& out, absl::string_view name,
               absl::string_view value) {
  // No trailing blank for empty values (e.g. an empty result).
  out << name << ":";
  if (!value.empty()) out << " " << value;
  out << "\n";
}

// Timestamps of 0 mean "does not apply to this answer".
void PrintTime(std::ostream& out, absl::string_view name, int64_t unix_ms) {
  if (unix_ms != 0) PrintLine(out, name, FormatUnixMillis(unix_ms));
}

const char* Bool(bool value) { return value ? "true" : "false"; }

void PrintCheckpoint(std::ostream& out, const v1::CheckpointInfo& c) {
  PrintLine(out, "checkpoint_step", c.step());
  PrintBytes(out, "checkpoint_data", c.data());
  PrintLine(out, "checkpoint_fence", absl::StrCat(c.fence()));
  PrintTime(out, "checkpoint_recorded_at", c.recorded_at());
}

}  // namespace

std::string FormatUnixMillis(int64_t unix_ms) {
  return absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                       absl::UTCTimeZone()),
      " (", unix_ms, ")");
}

bool IsPrintable(absl::string_view bytes) {
  for (char c : bytes) {
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

void PrintBytes(std::ostream& out, absl::string_view name,
                absl::string_view bytes) {
  if (IsPrintable(bytes)) {
    PrintLine(out, name, bytes);
  } else {
    PrintLine(out, absl::StrCat(name, "_hex"), absl::BytesToHexString(bytes));
  }
}

absl::StatusOr<std::string> ParseHex(absl::string_view hex) {
  if (hex.size() % 2 != 0) {
    return absl::InvalidArgumentError("hex string has an odd length");
  }
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a hex digit: '", absl::string_view(&c, 1), "'"));
    }
  }
  return absl::HexStringToBytes(hex);
}

void PrintResponse(std::ostream& out, const v1::BeginResponse& response) {
  PrintLine(out, "status", v1::BeginResponse::Status_Name(response.status()));
  PrintLine(out, "fence", absl::StrCat(response.fence()));
  if (response.status() == v1::BeginResponse::STARTED) {
    PrintLine(out, "takeover", Bool(response.takeover()));
    if (response.rerun()) PrintLine(out, "rerun", "true");
    if (response.has_checkpoint()) PrintCheckpoint(out, response.checkpoint());
  }
  if (response.status() == v1::BeginResponse::DUPLICATE) {
    PrintLine(out, "outcome", v1::Outcome_Name(response.outcome()));
    PrintBytes(out, "result", response.result());
  }
  if (response.status() == v1::BeginResponse::EXPIRED) {
    PrintLine(out, "outcome", v1::Outcome_Name(response.outcome()));
    PrintTime(out, "tombstone_expires_at", response.tombstone_expires_at());
  }
  PrintTime(out, "created_at", response.created_at());
  PrintTime(out, "completed_at", response.completed_at());
  PrintTime(out, "expires_at", response.expires_at());
  PrintTime(out, "lease_expires_at", response.lease_expires_at());
  if (response.attempts() != 0) {
    PrintLine(out, "attempts", absl::StrCat(response.attempts()));
  }
  if (response.status() == v1::BeginResponse::IN_USE) {
    PrintLine(out, "retry_after_ms", absl::StrCat(response.retry_after_ms()));
  }
}

void PrintResponse(std::ostream& out, const v1::CompleteResponse& response) {
  PrintLine(out, "status",
            v1::CompleteResponse::Status_Name(response.status()));
  PrintLine(out, "fence", absl::StrCat(response.fence()));
  PrintTime(out, "expires_at", response.expires_at());
}

void PrintResponse(std::ostream& out, const v1::ReleaseResponse& response) {
  PrintLine(out, "status", v1::ReleaseResponse::Status_Name(response.status()));
  PrintLine(out, "fence", absl::StrCat(response.fence()));
}

void PrintResponse(std::ostream& out, const v1::RenewResponse& response) {
  PrintLine(out, "status", v1::RenewResponse::Status_Name(response.status()));
  PrintLine(out, "fence", absl::StrCat(response.fence()));
  PrintTime(out, "lease_expires_at", response.lease_expires_at());
  PrintTime(out, "expires_at", response.expires_at());
}

void PrintResponse(std::ostream& out, const v1::CheckpointResponse& response) {
  PrintLine(out, "status",
            v1::CheckpointResponse::Status_Name(response.status()));
  PrintLine(out, "fence", absl::StrCat(response.fence()));
  PrintTime(out, "lease_expires_at", response.lease_expires_at());
}

void PrintResponse(std::ostream& out, const v1::GetResponse& response) {
  PrintLine(out, "found", Bool(response.found()));
  if (!response.found()) return;
  const v1::Record& record = response.record();
  PrintLine(out, "state", v1::RecordState_Name(record.state()));
  PrintLine(out, "fence", absl::StrCat(record.fence()));
  PrintLine(out, "args_hash_hex", absl::BytesToHexString(record.args_hash()));
  PrintLine(out, "owner", record.owner());
  if (record.state() == v1::COMPLETED) {
    PrintLine(out, "outcome", v1::Outcome_Name(record.outcome()));
    PrintBytes(out, "result", record.result());
  }
  PrintTime(out, "created_at", record.created_at());
  PrintTime(out, "completed_at", record.completed_at());
  PrintTime(out, "expires_at", record.expires_at());
  PrintTime(out, "lease_expires_at", record.lease_expires_at());
  PrintLine(out, "attempts", absl::StrCat(record.attempts()));
  if (record.has_checkpoint()) PrintCheckpoint(out, record.checkpoint());
}

void PrintResponse(std::ostream& out, const v1::ForgetResponse& response) {
  PrintLine(out, "existed", Bool(response.existed()));
}

namespace {

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B")
                   : absl::StrFormat("%.1f %s", value, units[unit]);
}

std::string HumanDuration(int64_t ms) {
  if (ms < 1000) return absl::StrCat(ms, " ms");
  return absl::FormatDuration(absl::Seconds(ms / 1000));
}

void Row(std::ostream& out, absl::string_view name, absl::string_view value) {
  out << absl::StrFormat("%-26s %s\n", name, value);
}

}  // namespace

void PrintResponse(std::ostream& out, const v1::GetPolicyResponse& r) {
  PrintLine(out, "policy", r.policy().empty() ? "(server flags)" : r.policy());
  if (!r.policy().empty())
    PrintLine(out, "prefix", absl::StrCat("\"", r.prefix(), "\""));
  PrintLine(out, "default_ttl_s", absl::StrCat(r.default_ttl_s()));
  PrintLine(out, "max_ttl_s", absl::StrCat(r.max_ttl_s()));
  PrintLine(out, "default_lease_ms", absl::StrCat(r.default_lease_ms()));
  PrintLine(out, "max_lease_ms", absl::StrCat(r.max_lease_ms()));
  PrintLine(out, "max_result_bytes", absl::StrCat(r.max_result_bytes()));
  PrintLine(out, "tombstone_retention_s",
            absl::StrCat(r.tombstone_retention_s()));
  PrintLine(out, "on_error", r.on_error());
}

void PrintResponse(std::ostream& out, const v1::ReloadPolicyResponse& r) {
  PrintLine(out, "policies", absl::StrCat(r.policies()));
}

void PrintResponse(std::ostream& out, const v1::StatsResponse& r) {
  Row(out, "version", absl::StrCat(r.version(), " (", r.git_sha(), ")"));
  Row(out, "uptime", HumanDuration(r.uptime_ms()));
  Row(out, "durability", r.durability());
  Row(out, "records (estimate)", absl::StrCat(r.estimated_records()));
  Row(out, "in flight, lease live", absl::StrCat(r.inflight_leases()));
  Row(out, "in flight, lease lapsed",
      r.lapsed_leases() == 0
          ? std::string("0")
          : absl::StrCat(r.lapsed_leases(), " (oldest lapsed ",
                         HumanDuration(r.oldest_lapsed_lease_ms()), " ago)"));
  Row(out, "waiting begins", absl::StrCat(r.waiting_begins()));
  Row(out, "expired records dropped", absl::StrCat(r.expired_dropped()));
  Row(out, "live SST files", HumanBytes(r.live_sst_bytes()));
  Row(out, "pending compaction", HumanBytes(r.pending_compaction_bytes()));
  Row(out, "block cache", HumanBytes(r.block_cache_usage_bytes()));
  Row(out, "memtables", HumanBytes(r.memtable_bytes()));
  uint64_t total = 0;
  for (const auto& [outcome, count] : r.begin_outcomes()) total += count;
  out << "begin answers since start:\n";
  for (const char* outcome :
       {"started", "takeover", "reentry", "in_use", "conflict", "duplicate"}) {
    const auto it = r.begin_outcomes().find(outcome);
    const uint64_t count = it == r.begin_outcomes().end() ? 0 : it->second;
    Row(out, absl::StrCat("  ", outcome),
        total == 0 ? absl::StrCat(count)
                   : absl::StrFormat("%d (%.1f%%)", count,
                                     100.0 * static_cast<double>(count) /
                                         static_cast<double>(total)));
  }
}

void PrintResponse(std::ostream& out, const v1::CompactResponse& r) {
  PrintLine(out, "expired_dropped", absl::StrCat(r.expired_dropped()));
  PrintLine(out, "duration_ms", absl::StrCat(r.duration_ms()));
}

}  // namespace dedup::ctl
