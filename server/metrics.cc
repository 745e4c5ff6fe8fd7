#include "server/metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace dedup {
namespace {

constexpr std::array<const char*, kMethodCount> kMethodNames = {
    "Begin",
    "Complete",
    "Release",
    "Renew",
    "Get",
    "Forget",
    "BeginBatch",
    "CompleteBatch",
    "Checkpoint",
    "CheckpointBatch",
    "Admin.Stats",
    "Admin.Compact",
    "Admin.ReloadPolicy",
    "Admin.GetPolicy",
    "Cluster.Status",
    "Cluster.Digest",
    "Cluster.AddNode",
    "Cluster.RemoveNode",
    "Cluster.TransferLeadership",
    "Cluster.FetchCheckpoint",
    "Admin.Backup",
    "Cluster.ShardMap",
    "Cluster.HostGroup",
    "Cluster.DropGroup",
    "Cluster.MoveReplica",
    "Cluster.SetGroupReplicas"};
constexpr std::array<const char*, kBeginOutcomeCount> kOutcomeNames = {
    "started",  "takeover",  "reentry", "in_use",
    "conflict", "duplicate", "expired", "rerun"};
constexpr std::array<const char*, 4> kFencedNames = {
    "ok", "stale_fence", "not_found", "already_completed"};
constexpr std::array<const char*, 4> kWaitNames = {"duplicate", "started",
                                                   "timeout", "conflict"};
constexpr std::array<const char*, 17> kCodeNames = {"OK",
                                                    "CANCELLED",
                                                    "UNKNOWN",
                                                    "INVALID_ARGUMENT",
                                                    "DEADLINE_EXCEEDED",
                                                    "NOT_FOUND",
                                                    "ALREADY_EXISTS",
                                                    "PERMISSION_DENIED",
                                                    "RESOURCE_EXHAUSTED",
                                                    "FAILED_PRECONDITION",
                                                    "ABORTED",
                                                    "OUT_OF_RANGE",
                                                    "UNIMPLEMENTED",
                                                    "INTERNAL",
                                                    "UNAVAILABLE",
                                                    "DATA_LOSS",
                                                    "UNAUTHENTICATED"};

// 50 µs to 5 s: a cached DUPLICATE answers in well under a millisecond, a
// parked Begin may legitimately take seconds.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const buckets =
      new prometheus::Histogram::BucketBoundaries{
          0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
          0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5};
  return *buckets;
}

int FencedIndex(FencedStatus status) {
  switch (status) {
    case FencedStatus::kOk:
      return 0;
    case FencedStatus::kStaleFence:
      return 1;
    case FencedStatus::kNotFound:
      return 2;
    case FencedStatus::kAlreadyCompleted:
      return 3;
  }
  return 0;
}

}  // namespace

const char* MethodName(Method method) {
  return kMethodNames[static_cast<int>(method)];
}

const char* BeginOutcomeName(BeginOutcome outcome) {
  return kOutcomeNames[static_cast<int>(outcome)];
}

BeginOutcome ClassifyBegin(const BeginDecision& d) {
  switch (d.status) {
    case BeginStatus::kStarted:
      if (d.takeover) return BeginOutcome::kTakeover;
      if (d.reentry) return BeginOutcome::kReentry;
      if (d.rerun) return BeginOutcome::kRerun;
      return BeginOutcome::kStarted;
    case BeginStatus::kInUse:
      return BeginOutcome::kInUse;
    case BeginStatus::kConflict:
      return BeginOutcome::kConflict;
    case BeginStatus::kDuplicate:
      return BeginOutcome::kDuplicate;
    case BeginStatus::kExpired:
      return BeginOutcome::kExpired;
  }
  return BeginOutcome::kInUse;
}

Metrics::Metrics(const std::vector<std::string>& labelled_namespaces)
    : registry_(std::make_shared<prometheus::Registry>()) {
  auto& begin = prometheus::BuildCounter()
                    .Name("dedup_begin_total")
                    .Help("Begin calls by answer")
                    .Register(*registry_);
  for (int i = 0; i < kBeginOutcomeCount; ++i) {
    begin_[i] = &begin.Add({{"outcome", kOutcomeNames[i]}});
  }
  auto& by_namespace =
      prometheus::BuildCounter()
          .Name("dedup_namespace_begin_total")
          .Help(
              "Begin calls by namespace (label dedup_namespace: listed "
              "namespaces, else 'other') and answer")
          .Register(*registry_);
  for (const std::string& ns : labelled_namespaces) {
    begin_by_namespace_.emplace(ns, AddOutcomes(by_namespace, ns));
  }
  begin_other_namespace_ = AddOutcomes(by_namespace, "other");

  auto& wait = prometheus::BuildCounter()
                   .Name("dedup_wait_total")
                   .Help("Begins that waited (wait_ms), by how the wait ended")
                   .Register(*registry_);
  for (size_t i = 0; i < kWaitNames.size(); ++i) {
    wait_[i] = &wait.Add({{"how", kWaitNames[i]}});
  }

  const std::array<std::pair<const char*, const char*>, 4> fenced_families = {{
      {"dedup_complete_total", "Complete calls by answer"},
      {"dedup_release_total", "Release calls by answer"},
      {"dedup_renew_total", "Renew calls by answer"},
      {"dedup_checkpoint_total", "Checkpoint calls by answer"},
  }};
  for (size_t f = 0; f < fenced_families.size(); ++f) {
    auto& family = prometheus::BuildCounter()
                       .Name(fenced_families[f].first)
                       .Help(fenced_families[f].second)
                       .Register(*registry_);
    for (size_t i = 0; i < kFencedNames.size(); ++i) {
      fenced_[f][i] = &family.Add({{"result", kFencedNames[i]}});
    }
  }

  auto& duration = prometheus::BuildHistogram()
                       .Name("dedup_request_duration_seconds")
                       .Help("Time from receiving a call to answering it")
                       .Register(*registry_);
  for (int i = 0; i < kMethodCount; ++i) {
    duration_[i] =
        &duration.Add({{"method", kMethodNames[i]}}, LatencyBuckets());
  }
  invalid_ = &prometheus::BuildCounter()
                  .Name("dedup_invalid_requests_total")
                  .Help(
                      "Calls refused with INVALID_ARGUMENT, by method and "
                      "offending field")
                  .Register(*registry_);
  errors_ = &prometheus::BuildCounter()
                 .Name("dedup_grpc_errors_total")
                 .Help("Calls answered with a gRPC error, by method and code")
                 .Register(*registry_);
  // Series exist from the start at 0, so rate() sees the first error of a
  // kind after a restart.
  for (int m = 0; m < kMethodCount; ++m) {
    for (absl::string_view field : ValidatedFieldsOf(m)) {
      invalid_->Add(
          {{"method", kMethodNames[m]}, {"field", std::string(field)}});
    }
    for (grpc::StatusCode code :
         {grpc::StatusCode::INVALID_ARGUMENT,
          grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::UNAVAILABLE,
          grpc::StatusCode::INTERNAL, grpc::StatusCode::DATA_LOSS}) {
      errors_->Add({{"method", kMethodNames[m]},
                    {"code", kCodeNames[static_cast<int>(code)]}});
    }
  }
  wait_duration_ =
      &prometheus::BuildHistogram()
           .Name("dedup_wait_duration_seconds")
           .Help(
               "Time Begin calls with wait_ms spent before answering (kept "
               "out of dedup_request_duration_seconds: waiting is asked for)")
           .Register(*registry_)
           .Add({}, LatencyBuckets());
  write_seconds_ =
      &prometheus::BuildHistogram()
           .Name("dedup_wal_sync_duration_seconds")
           .Help(
               "Duration of each WAL fsync (sync durability: one serves "
               "the writes of every shard since the last) or, in the other "
               "modes, of each storage write")
           .Register(*registry_)
           .Add({}, LatencyBuckets());
  writes_per_sync_ =
      &prometheus::BuildHistogram()
           .Name("dedup_writes_per_sync")
           .Help(
               "Record writes made durable by each WAL fsync (sync "
               "durability: group commit) or carried by each storage write")
           .Register(*registry_)
           .Add({}, prometheus::Histogram::BucketBoundaries{
                        1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024});
  event_log_dropped_ =
      &prometheus::BuildCounter()
           .Name("dedup_event_log_dropped_total")
           .Help("Event log lines dropped because the writer fell behind")
           .Register(*registry_)
           .Add({});
  batch_results_capped_ =
      &prometheus::BuildCounter()
           .Name("dedup_batch_results_capped_total")
           .Help(
               "BeginBatch items answered UNAVAILABLE (ask again) because "
               "the answer's stored results passed "
               "--max_batch_response_bytes")
           .Register(*registry_)
           .Add({});
  session_ = std::make_unique<SessionMetrics>(registry_.get());
}

Metrics::OutcomeCounters Metrics::AddOutcomes(
    prometheus::Family<prometheus::Counter>& family, const std::string& ns) {
  OutcomeCounters counters;
  for (int i = 0; i < kBeginOutcomeCount; ++i) {
    counters[i] =
        &family.Add({{"dedup_namespace", ns}, {"outcome", kOutcomeNames[i]}});
  }
  return counters;
}

void Metrics::RecordBegin(absl::string_view ns, const BeginResult& result) {
  const int outcome = static_cast<int>(ClassifyBegin(result.decision));
  begin_[outcome]->Increment();
  auto it = begin_by_namespace_.find(ns);
  (it == begin_by_namespace_.end() ? begin_other_namespace_
                                   : it->second)[outcome]
      ->Increment();
  if (!result.waited) return;
  switch (result.decision.status) {
    case BeginStatus::kDuplicate:
    case BeginStatus::kExpired:  // done too (long ago)
      wait_[0]->Increment();
      break;
    case BeginStatus::kStarted:
      wait_[1]->Increment();
      break;
    case BeginStatus::kInUse:
      wait_[2]->Increment();
      break;
    case BeginStatus::kConflict:
      wait_[3]->Increment();
      break;
  }
}

void Metrics::RecordFenced(Method method, FencedStatus status) {
  int family = -1;
  if (method == Method::kComplete) family = 0;
  if (method == Method::kRelease) family = 1;
  if (method == Method::kRenew) family = 2;
  if (method == Method::kCheckpoint) family = 3;
  if (family < 0) return;
  fenced_[family][FencedIndex(status)]->Increment();
}

void Metrics::RecordInvalid(Method method, absl::string_view field) {
  // Label values come from our own validation messages: a bounded set.
  invalid_->Add({{"method", MethodName(method)}, {"field", std::string(field)}})
      .Increment();
}

const char* GrpcCodeName(int code) {
  return code >= 0 && code < static_cast<int>(kCodeNames.size())
             ? kCodeNames[code]
             : nullptr;
}

void Metrics::RecordError(Method method, grpc::StatusCode code) {
  const int index = static_cast<int>(code);
  const char* known = GrpcCodeName(index);
  const std::string name =
      known != nullptr ? known : absl::StrCat("CODE_", index);
  errors_->Add({{"method", MethodName(method)}, {"code", name}}).Increment();
}

void Metrics::ObserveDuration(Method method, double seconds) {
  duration_[static_cast<int>(method)]->Observe(seconds);
}

void Metrics::ObserveWait(double seconds) { wait_duration_->Observe(seconds); }

void Metrics::RecordEventLogDropped() { event_log_dropped_->Increment(); }

void Metrics::OnWrite(int operations, double seconds) {
  write_seconds_->Observe(seconds);
  writes_per_sync_->Observe(operations);
}

double Metrics::BeginCount(BeginOutcome outcome) const {
  return begin_[static_cast<int>(outcome)]->Value();
}

}  // namespace dedup
