#include "storage/rocks_util.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "rocksdb/iterator.h"
#include "storage/db_options.h"
#include "storage/storage_key.h"

namespace dedup {

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", s.ToString()));
}

absl::StatusOr<uint64_t> CountRecordsInDb(rocksdb::DB& db) {
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(TotalOrderScan()));
  uint64_t count = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (!IsRecordKey(absl::string_view(it->key().data(), it->key().size()))) {
      break;  // metadata sorts after every record
    }
    ++count;
  }
  if (absl::Status s = FromRocks(it->status(), "scan"); !s.ok()) return s;
  return count;
}

}  // namespace dedup
