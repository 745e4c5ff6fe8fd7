#include "server/event_log.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "storage/durable_dir.h"

namespace dedup {
namespace {

std::string KeyHash(absl::string_view secret, absl::string_view key) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest,
       &length);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), 8));
}

constexpr size_t kSecretBytes = 32;
constexpr size_t kMinSecretBytes = 16;

// Keys are printable ASCII (validated), so escaping '"' and '\' suffices.
std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kSuccess:
      return "SUCCESS";
    case Outcome::kError:
      return "ERROR";
    case Outcome::kNone:
      break;
  }
  return "NONE";
}

// Writes a new secret to `path` crash-safely (storage/durable_dir.h): a
// crash or power cut leaves no name without its bytes.
absl::Status CreateEventLogSecret(const std::string& path) {
  unsigned char secret[kSecretBytes];
  if (RAND_bytes(secret, sizeof(secret)) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "event log key file ", path, ": cannot make a random key"));
  }
  const absl::Status s = CreateFileDurably(
      path, std::string(reinterpret_cast<const char*>(secret), sizeof(secret)),
      0600);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(
      absl::StrCat("event log key file ", path, ": ", s.message(),
                   absl::IsResourceExhausted(s)
                       ? " (its filesystem is full: make room, or give "
                         "--event_log_key_file on another filesystem)"
                       : ""));
}

}  // namespace

absl::StatusOr<std::string> LoadOrCreateEventLogSecret(
    const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) {
    if (errno != ENOENT) {
      return absl::InvalidArgumentError(absl::StrCat(
          "event log key file ", path, ": ", std::strerror(errno)));
    }
    if (absl::Status s = CreateEventLogSecret(path); !s.ok()) return s;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || text.str().size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("event log key file ", path,
                                                   ": must hold at least ",
                                                   kMinSecretBytes, " bytes"));
  }
  return text.str();
}

absl::StatusOr<std::unique_ptr<EventLog>> EventLog::Open(
    const EventLogOptions& options, Metrics* metrics) {
  if (options.destination == "off" || options.sample_rate <= 0) return nullptr;
  if (options.sample_rate > 1) {
    return absl::InvalidArgumentError("event log sample rate must be 0..1");
  }
  if (options.destination == "stdout" || options.destination == "stderr") {
    std::FILE* stream = options.destination == "stdout" ? stdout : stderr;
    return std::unique_ptr<EventLog>(
        new EventLog(options, stream, /*owns_sink=*/false, metrics));
  }
  std::FILE* file = std::fopen(options.destination.c_str(), "a");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open event log ", options.destination));
  }
  return std::unique_ptr<EventLog>(
      new EventLog(options, file, /*owns_sink=*/true, metrics));
}

EventLog::EventLog(const EventLogOptions& options, std::FILE* sink,
                   bool owns_sink, Metrics* metrics)
    : options_(options),
      sink_(sink),
      owns_sink_(owns_sink),
      metrics_(metrics),
      writer_([this] { WriteLoop(); }) {}

EventLog::~EventLog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_.join();
  if (owns_sink_) std::fclose(sink_);
}

std::string EventLog::Start(absl::string_view event, absl::string_view ns,
                            absl::string_view key, int64_t now_ms) const {
  std::string line = absl::StrCat(
      "{\"ts\":\"",
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(now_ms),
                       absl::UTCTimeZone()),
      "\",\"event\":\"", event, "\",\"namespace\":", JsonString(ns));
  if (options_.raw_keys) {
    absl::StrAppend(&line, ",\"key\":", JsonString(key));
  } else {
    absl::StrAppend(&line, ",\"key_hash\":\"",
                    KeyHash(options_.key_hash_secret, key), "\"");
  }
  return line;
}

bool EventLog::Sampled() {
  if (options_.sample_rate >= 1) return true;
  const uint64_t n = seen_.fetch_add(1, std::memory_order_relaxed);
  return std::floor((n + 1) * options_.sample_rate) >
         std::floor(n * options_.sample_rate);
}

void EventLog::OnBegin(absl::string_view ns, absl::string_view key,
                       const BeginResult& result, int64_t now_ms) {
  const BeginDecision& d = result.decision;
  const char* event = nullptr;
  if (d.status == BeginStatus::kDuplicate) event = "duplicate";
  if (d.status == BeginStatus::kConflict) event = "conflict";
  if (d.status == BeginStatus::kStarted && d.takeover) event = "takeover";
  if (d.status == BeginStatus::kExpired) event = "expired";
  if (d.status == BeginStatus::kStarted && d.rerun) event = "rerun";
  if (event == nullptr || !Sampled()) return;
  const Record& r = d.record;
  std::string line = Start(event, ns, key, now_ms);
  absl::StrAppend(&line, ",\"fence\":", r.fence, ",\"attempts\":", r.attempts,
                  ",\"age_ms\":", now_ms - r.created_at_ms);
  if (d.status == BeginStatus::kDuplicate ||
      d.status == BeginStatus::kExpired) {
    absl::StrAppend(&line, ",\"outcome\":\"", OutcomeName(r.outcome),
                    "\",\"since_completed_ms\":", now_ms - r.completed_at_ms);
  }
  if (result.waited) absl::StrAppend(&line, ",\"waited\":true");
  line.append("}");
  Enqueue(std::move(line));
}

void EventLog::OnFenced(Method method, absl::string_view ns,
                        absl::string_view key, uint64_t given_fence,
                        const FencedDecision& d, int64_t now_ms) {
  if (d.status != FencedStatus::kStaleFence || !Sampled()) return;
  std::string line = Start("stale_fence", ns, key, now_ms);
  absl::StrAppend(&line, ",\"method\":\"", MethodName(method),
                  "\",\"fence\":", given_fence,
                  ",\"current_fence\":", d.record.fence,
                  ",\"attempts\":", d.record.attempts,
                  ",\"age_ms\":", now_ms - d.record.created_at_ms, "}");
  Enqueue(std::move(line));
}

void EventLog::Enqueue(std::string line) {
  {
    absl::MutexLock lock(&mu_);
    if (queue_.size() < options_.max_queued_lines) {
      queue_.push_back(std::move(line));
      return;
    }
  }
  if (metrics_ != nullptr) metrics_->RecordEventLogDropped();
}

void EventLog::WriteLoop() {
  for (;;) {
    std::deque<std::string> lines;
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](EventLog* log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(log->mu_) {
            return !log->queue_.empty() || log->stopping_;
          },
          this));
      lines.swap(queue_);
      stopping = stopping_;
    }
    for (const std::string& line : lines) {
      std::fputs(line.c_str(), sink_);
      std::fputc('\n', sink_);
    }
    std::fflush(sink_);
    if (stopping) return;
  }
}

}  // namespace dedup
