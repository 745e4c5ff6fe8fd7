#include "storage/resource_error_fs.h"

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "rocksdb/file_system.h"

namespace dedup {
namespace {

// RocksDB's POSIX file system passes errno only as strerror() text.
rocksdb::IOStatus MarkDescriptorShortage(rocksdb::IOStatus s) {
  if (s.IsIOError() && absl::StrContains(s.ToString(), std::strerror(EMFILE))) {
    // (ENFILE's text, "Too many open files in system", contains EMFILE's.)
    s.SetRetryable(true);
  }
  return s;
}

class ResourceErrorFileSystem : public rocksdb::FileSystemWrapper {
 public:
  using FileSystemWrapper::FileSystemWrapper;

  static const char* kClassName() { return "DedupResourceErrorFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewSequentialFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSSequentialFile>* r,
      rocksdb::IODebugContext* d) override {
    return MarkDescriptorShortage(target()->NewSequentialFile(f, o, r, d));
  }
  rocksdb::IOStatus NewRandomAccessFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSRandomAccessFile>* r,
      rocksdb::IODebugContext* d) override {
    return MarkDescriptorShortage(target()->NewRandomAccessFile(f, o, r, d));
  }
  rocksdb::IOStatus NewWritableFile(const std::string& f,
                                    const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    return MarkDescriptorShortage(target()->NewWritableFile(f, o, r, d));
  }
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& f, const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* d) override {
    return MarkDescriptorShortage(target()->ReopenWritableFile(f, o, r, d));
  }
  rocksdb::IOStatus ReuseWritableFile(
      const std::string& f, const std::string& old,
      const rocksdb::FileOptions& o,
      std::unique_ptr<rocksdb::FSWritableFile>* r,
      rocksdb::IODebugContext* d) override {
    return MarkDescriptorShortage(target()->ReuseWritableFile(f, old, o, r, d));
  }
  rocksdb::IOStatus NewDirectory(const std::string& name,
                                 const rocksdb::IOOptions& o,
                                 std::unique_ptr<rocksdb::FSDirectory>* r,
                                 rocksdb::IODebugContext* d) override {
    return MarkDescriptorShortage(target()->NewDirectory(name, o, r, d));
  }
  rocksdb::IOStatus GetChildren(const std::string& dir,
                                const rocksdb::IOOptions& o,
                                std::vector<std::string>* r,
                                rocksdb::IODebugContext* d) override {
    return MarkDescriptorShortage(target()->GetChildren(dir, o, r, d));
  }
};

}  // namespace

rocksdb::Env* ResourceErrorRetryableEnv() {
  static rocksdb::Env* const env =
      rocksdb::NewCompositeEnv(std::make_shared<ResourceErrorFileSystem>(
                                   rocksdb::FileSystem::Default()))
          .release();
  return env;
}

}  // namespace dedup
