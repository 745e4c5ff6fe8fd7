// Loads N completed records into a running dedupd with BeginBatch and
// CompleteBatch, then reads a sample back (Begin → DUPLICATE) so the block
// cache is warm, for resident-memory measurements.
//
//   load_records --address=127.0.0.1:50051 --records=1000000
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "dedup/v1/dedup.grpc.pb.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051", "dedupd address");
ABSL_FLAG(int64_t, records, 1'000'000, "completed records to load");
ABSL_FLAG(int64_t, reads, 200'000, "random duplicate Begins after loading");
ABSL_FLAG(int, threads, 4, "concurrent loaders");
ABSL_FLAG(int, batch, 1000, "items per batch call");

namespace {

std::string Key(int64_t i) { return absl::StrCat("record-", i); }

dedup::v1::BeginRequest BeginItem(int64_t i) {
  dedup::v1::BeginRequest r;
  r.set_namespace_("memory");
  r.set_key(Key(i));
  r.set_args_hash(std::string(32, static_cast<char>(i & 0xff)));
  return r;
}

// Loads keys [from, to) in batches; returns the number of errors.
int64_t Load(dedup::v1::Dedup::Stub& stub, int64_t from, int64_t to,
             int batch) {
  int64_t errors = 0;
  for (int64_t start = from; start < to; start += batch) {
    const int64_t end = std::min(to, start + batch);
    dedup::v1::BeginBatchRequest begins;
    for (int64_t i = start; i < end; ++i) *begins.add_items() = BeginItem(i);
    dedup::v1::BeginBatchResponse begun;
    grpc::ClientContext c1;
    if (!stub.BeginBatch(&c1, begins, &begun).ok()) {
      errors += end - start;
      continue;
    }
    dedup::v1::CompleteBatchRequest completes;
    for (int64_t i = start; i < end; ++i) {
      const auto& item = begun.items(static_cast<int>(i - start));
      if (!item.has_response() ||
          item.response().status() != dedup::v1::BeginResponse::STARTED) {
        ++errors;
        continue;
      }
      dedup::v1::CompleteRequest* c = completes.add_items();
      c->set_namespace_("memory");
      c->set_key(Key(i));
      c->set_fence(item.response().fence());
      c->set_outcome(dedup::v1::SUCCESS);
      c->set_result(std::string(100, 'r'));  // a small JSON tool result
    }
    if (completes.items_size() == 0) continue;
    dedup::v1::CompleteBatchResponse completed;
    grpc::ClientContext c2;
    if (!stub.CompleteBatch(&c2, completes, &completed).ok()) {
      errors += completes.items_size();
    }
  }
  return errors;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t records = absl::GetFlag(FLAGS_records);
  const int threads = absl::GetFlag(FLAGS_threads);
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_address),
                                     grpc::InsecureChannelCredentials());
  auto stub = dedup::v1::Dedup::NewStub(channel);
  std::vector<std::thread> loaders;
  std::vector<int64_t> errors(threads, 0);
  for (int t = 0; t < threads; ++t) {
    loaders.emplace_back([&, t] {
      errors[t] = Load(*stub, records * t / threads,
                       records * (t + 1) / threads, absl::GetFlag(FLAGS_batch));
    });
  }
  for (auto& l : loaders) l.join();
  int64_t total_errors = 0;
  for (int64_t e : errors) total_errors += e;

  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> pick(0, records - 1);
  int64_t duplicates = 0;
  const int64_t reads = absl::GetFlag(FLAGS_reads);
  for (int64_t done = 0; done < reads; done += 1000) {
    dedup::v1::BeginBatchRequest req;
    for (int i = 0; i < 1000; ++i) *req.add_items() = BeginItem(pick(rng));
    dedup::v1::BeginBatchResponse resp;
    grpc::ClientContext ctx;
    if (!stub->BeginBatch(&ctx, req, &resp).ok()) continue;
    for (const auto& item : resp.items()) {
      if (item.has_response() &&
          item.response().status() == dedup::v1::BeginResponse::DUPLICATE) {
        ++duplicates;
      }
    }
  }
  std::printf(
      "loaded=%lld errors=%lld reads=%lld duplicates=%lld\n",
      static_cast<long long>(records), static_cast<long long>(total_errors),
      static_cast<long long>(reads), static_cast<long long>(duplicates));
  return total_errors == 0 ? 0 : 1;
}
