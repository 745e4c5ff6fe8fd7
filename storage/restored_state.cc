#include "storage/restored_state.h"

#include <memory>

#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/db_options.h"
#include "storage/replicated_meta.h"
#include "storage/rocks_util.h"

namespace dedup {

absl::Status ForgetRecordedMembers(const std::string& dir) {
  rocksdb::Options options = RecordDbOptions(RecordDbTuning());
  options.create_if_missing = false;
  rocksdb::DB* raw = nullptr;
  if (absl::Status s = FromRocks(rocksdb::DB::Open(options, dir, &raw),
                                 "open restored state");
      !s.ok()) {
    return s;
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  const std::string prefix = replicated_internal::MemberKeyPrefix();
  rocksdb::WriteBatch batch;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(TotalOrderScan()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    batch.Delete(it->key());
  }
  if (absl::Status s = FromRocks(it->status(), "members scan"); !s.ok()) {
    return s;
  }
  it.reset();
  // The old cluster's shard map names its nodes: the new group's leader
  // stores its own founding map instead.
  batch.Delete(replicated_internal::ShardMapEpochKey());
  batch.Delete(replicated_internal::ShardMapKey());
  rocksdb::WriteOptions write;
  write.sync = true;
  if (absl::Status s = FromRocks(db->Write(write, &batch), "forget members");
      !s.ok()) {
    return s;
  }
  return FromRocks(db->Close(), "close restored state");
}

}  // namespace dedup
