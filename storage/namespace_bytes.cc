#include "storage/namespace_bytes.h"

#include "storage/storage_key.h"

namespace dedup {

void NamespaceBytes::AddRecord(absl::string_view skey, int64_t delta) {
  if (delta == 0 || !IsRecordKey(skey)) return;
  Add(NamespaceOfStorageKey(skey), delta);
}

void NamespaceBytes::Add(absl::string_view ns, int64_t delta) {
  if (delta == 0) return;
  absl::MutexLock lock(&mu_);
  auto it = bytes_.find(ns);
  if (it == bytes_.end()) {
    if (bytes_.size() >= max_namespaces_) {
      truncated_ = true;
      return;
    }
    bytes_.emplace(std::string(ns), delta);
    return;
  }
  it->second += delta;
  // A figure back at zero frees its entry (and its place under the bound).
  if (it->second == 0) bytes_.erase(it);
}

void NamespaceBytes::Clear() {
  absl::MutexLock lock(&mu_);
  bytes_.clear();
  truncated_ = false;
}

void NamespaceBytes::MergeInto(absl::flat_hash_map<std::string, int64_t>& out,
                               bool& truncated) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [ns, bytes] : bytes_) out[ns] += bytes;
  truncated = truncated || truncated_;
}

StoredBytesAccount::StoredBytesAccount(int writers, size_t max_namespaces)
    : dropped_(max_namespaces), scanned_(max_namespaces) {
  for (int i = 0; i < writers; ++i) {
    writers_.push_back(std::make_unique<NamespaceBytes>(max_namespaces));
  }
}

void StoredBytesAccount::BeginScan() {
  complete_.store(false);
  for (auto& writer : writers_) writer->Clear();
  dropped_.Clear();
  scanned_.Clear();
}

StoredBytes StoredBytesAccount::Snapshot() const {
  StoredBytes out;
  // Read before the figures: a scan finishing meanwhile is reported next
  // time, never a partial scan as complete.
  out.complete = complete_.load();
  scanned_.MergeInto(out.by_namespace, out.truncated);
  for (const auto& writer : writers_) {
    writer->MergeInto(out.by_namespace, out.truncated);
  }
  dropped_.MergeInto(out.by_namespace, out.truncated);
  // A delta for a record the scan has not reached yet can be negative for a
  // while; and only namespaces holding bytes are of interest.
  absl::erase_if(out.by_namespace,
                 [](const auto& entry) { return entry.second <= 0; });
  return out;
}

}  // namespace dedup
