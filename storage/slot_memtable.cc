#include "storage/slot_memtable.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/slice.h"
#include "storage/coding.h"

// RocksDB passes a point lookup to a memtable as a LookupKey, whose class is
// not in the installed headers. Only its exported constructor and destructor
// are declared here, to build one in SelfCheck() below; Get() reads the one
// field it needs (the first: a pointer to the length-prefixed internal key,
// what memtable_key() returns) and SelfCheck() proves at start that this
// build lays it out so, else the factory falls back to RocksDB's own memtable.
namespace rocksdb {
class LookupKey {
 public:
  LookupKey(const Slice& user_key, uint64_t sequence, const Slice* ts);
  ~LookupKey();
};
}  // namespace rocksdb

namespace dedup {
namespace {

constexpr uint32_t kBuckets = 1 << 16;  // one per 2-byte prefix
constexpr uint32_t kBitmapWords = kBuckets / 64;
// Branching 4: a bucket of n entries is searched in ~log4(n) levels. Slots
// hold a few dozen records per memtable, but the metadata bucket (0xFFFF)
// gets new versions of a few keys with every log entry: up to millions.
constexpr int kMaxHeight = 12;

// Decodes the varint32 length in front of a memtable entry's internal key.
const char* DecodeLength(const char* p, uint32_t* length) {
  uint32_t result = 0;
  for (int shift = 0; shift <= 28; shift += 7) {
    const uint32_t byte = static_cast<unsigned char>(*p++);
    result |= (byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) break;
  }
  *length = result;
  return p;
}

// The bucket of a user key: its first two bytes, big-endian, so buckets in
// index order hold keys in bytewise order. A 1-byte key "x" sorts before
// every "x?..." key, so it goes first in bucket "x\0"; the empty key first in
// bucket 0.
uint32_t BucketOfUserKey(const char* data, size_t size) {
  if (size >= 2) return DecodeBigEndian16(data);
  if (size == 1) return uint32_t{static_cast<unsigned char>(data[0])} << 8;
  return 0;
}

// An internal key is the user key and an 8-byte sequence/type tag.
uint32_t BucketOfInternalKey(const rocksdb::Slice& internal_key) {
  const size_t user = internal_key.size() >= 8 ? internal_key.size() - 8 : 0;
  return BucketOfUserKey(internal_key.data(), user);
}

uint32_t BucketOfEntry(const char* entry) {
  uint32_t length = 0;
  const char* key = DecodeLength(entry, &length);
  return BucketOfInternalKey(rocksdb::Slice(key, length));
}

// Skiplist node; `next_` has `height` slots. The entry (length-prefixed
// internal key, then the value) follows the node in the same allocation.
struct Node {
  const char* entry;
  int height;
  std::atomic<Node*> next_[1];

  // Acquire: a reader that sees a node sees it initialised.
  Node* Next(int level) const {
    return next_[level].load(std::memory_order_acquire);
  }
  void SetNext(int level, Node* node) {
    next_[level].store(node, std::memory_order_release);
  }
  Node* NextRelaxed(int level) const {
    return next_[level].load(std::memory_order_relaxed);
  }
  void SetNextRelaxed(int level, Node* node) {
    next_[level].store(node, std::memory_order_relaxed);
  }
};

// Nodes and buckets hold pointers and atomics: pointer alignment is enough
// (the arena hands out unaligned memory, see AllocateAligned).
constexpr size_t kAlign = alignof(Node);

constexpr size_t NodeBytes(int height) {
  return offsetof(Node, next_) + sizeof(std::atomic<Node*>) * height;
}

// One slot's skiplist. `head` must stay last: its next_ has kMaxHeight slots.
struct Bucket {
  // Levels in use, 1..kMaxHeight. Relaxed: a reader that sees a new height
  // before the head's new links finds nullptr there and drops a level.
  std::atomic<int> height;
  Node head;
};

static_assert(alignof(Bucket) <= kAlign);

constexpr size_t BucketBytes() {
  return offsetof(Bucket, head) + NodeBytes(kMaxHeight);
}

// Where to search: an entry (length-prefixed) or a decoded internal key.
struct EntryTarget {
  const char* entry;
  int Compare(const rocksdb::MemTableRep::KeyComparator& cmp,
              const char* node_entry) const {
    return cmp(node_entry, entry);
  }
};
struct InternalKeyTarget {
  rocksdb::Slice key;
  int Compare(const rocksdb::MemTableRep::KeyComparator& cmp,
              const char* node_entry) const {
    return cmp(node_entry, key);
  }
};

class SlotMemTableRep : public rocksdb::MemTableRep {
 public:
  SlotMemTableRep(const KeyComparator& compare, rocksdb::Allocator* allocator)
      : MemTableRep(allocator), compare_(compare) {
    buckets_ = reinterpret_cast<std::atomic<Bucket*>*>(
        AllocateAligned(sizeof(std::atomic<Bucket*>) * kBuckets));
    for (uint32_t i = 0; i < kBuckets; ++i) {
      new (&buckets_[i]) std::atomic<Bucket*>(nullptr);
    }
    occupied_ = reinterpret_cast<std::atomic<uint64_t>*>(
        AllocateAligned(sizeof(std::atomic<uint64_t>) * kBitmapWords));
    for (uint32_t i = 0; i < kBitmapWords; ++i) {
      new (&occupied_[i]) std::atomic<uint64_t>(0);
    }
  }

  // Node and entry in one allocation; the height is drawn here, by the
  // single writer (the header's contract), so Insert only links.
  rocksdb::KeyHandle Allocate(const size_t len, char** buf) override {
    const int height = RandomHeight();
    char* mem = AllocateAligned(NodeBytes(height) + len);
    Node* node = new (mem) Node;
    node->height = height;
    for (int i = 0; i < height; ++i) {
      new (&node->next_[i]) std::atomic<Node*>(nullptr);
    }
    *buf = mem + NodeBytes(height);
    node->entry = *buf;
    return node;
  }

  void Insert(rocksdb::KeyHandle handle) override {
    Node* node = static_cast<Node*>(handle);
    const uint32_t index = BucketOfEntry(node->entry);
    Bucket* bucket = buckets_[index].load(std::memory_order_acquire);
    if (bucket == nullptr) {
      // Link the first node before publishing the bucket, so a published
      // bucket is never empty.
      bucket = NewBucket();
      Link(bucket, node);
      buckets_[index].store(bucket, std::memory_order_release);
      occupied_[index / 64].fetch_or(uint64_t{1} << (index % 64),
                                     std::memory_order_release);
      return;
    }
    Link(bucket, node);
  }

  bool Contains(const char* entry) const override {
    const Bucket* bucket = BucketAt(BucketOfEntry(entry));
    if (bucket == nullptr) return false;
    const Node* node = FindGreaterOrEqual(bucket, EntryTarget{entry}, nullptr);
    return node != nullptr && compare_(node->entry, entry) == 0;
  }

  // All memory comes from the memtable's arena, which it accounts itself.
  size_t ApproximateMemoryUsage() override { return 0; }

  void Get(const rocksdb::LookupKey& lookup, void* arg,
           bool (*callback)(void* arg, const char* entry)) override {
    const char* entry = MemtableKeyOf(lookup);
    const Bucket* bucket = BucketAt(BucketOfEntry(entry));
    if (bucket == nullptr) return;
    // Versions of one user key share its bucket: the walk ends there.
    for (const Node* node =
             FindGreaterOrEqual(bucket, EntryTarget{entry}, nullptr);
         node != nullptr && callback(arg, node->entry); node = node->Next(0)) {
    }
  }

  Iterator* GetIterator(rocksdb::Arena* arena) override;

  // The memtable key a LookupKey holds (SelfCheck() proved the layout).
  static const char* MemtableKeyOf(const rocksdb::LookupKey& lookup) {
    const char* start = nullptr;
    std::memcpy(&start, &lookup, sizeof(start));
    return start;
  }

 private:
  class SlotIterator;
  friend class SlotIterator;

  char* AllocateAligned(size_t bytes) {
    char* raw = nullptr;
    MemTableRep::Allocate(bytes + kAlign - 1, &raw);
    const uintptr_t p = reinterpret_cast<uintptr_t>(raw);
    return reinterpret_cast<char*>((p + kAlign - 1) & ~(kAlign - 1));
  }

  Bucket* NewBucket() {
    char* mem = AllocateAligned(BucketBytes());
    Bucket* bucket = new (mem) Bucket;
    bucket->height.store(1, std::memory_order_relaxed);
    bucket->head.entry = nullptr;
    bucket->head.height = kMaxHeight;
    for (int i = 0; i < kMaxHeight; ++i) {
      new (&bucket->head.next_[i]) std::atomic<Node*>(nullptr);
    }
    return bucket;
  }

  int RandomHeight() {
    int height = 1;
    while (height < kMaxHeight && (NextRandom() & 3) == 0) ++height;
    return height;
  }

  uint32_t NextRandom() {  // xorshift32; writer only
    uint32_t x = random_.load(std::memory_order_relaxed);
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    random_.store(x, std::memory_order_relaxed);
    return x;
  }

  // Writer only. LevelDB's order: the node's own links first, then the
  // predecessors' (release), so readers see it whole or not at all.
  void Link(Bucket* bucket, Node* node) {
    Node* prev[kMaxHeight];
    FindGreaterOrEqual(bucket, EntryTarget{node->entry}, prev);
    const int height = node->height;
    const int current = bucket->height.load(std::memory_order_relaxed);
    if (height > current) {
      for (int i = current; i < height; ++i) prev[i] = &bucket->head;
      bucket->height.store(height, std::memory_order_relaxed);
    }
    for (int i = 0; i < height; ++i) {
      node->SetNextRelaxed(i, prev[i]->NextRelaxed(i));
      prev[i]->SetNext(i, node);
    }
  }

  const Bucket* BucketAt(uint32_t index) const {
    return buckets_[index].load(std::memory_order_acquire);
  }

  // The first node of `bucket` not less than `target`, or null; `prev`
  // (if given) gets the last node before it on every level.
  template <typename Target>
  Node* FindGreaterOrEqual(const Bucket* bucket, const Target& target,
                           Node** prev) const {
    Node* node = const_cast<Node*>(&bucket->head);
    int level = bucket->height.load(std::memory_order_relaxed) - 1;
    while (true) {
      Node* next = node->Next(level);
      if (next != nullptr && target.Compare(compare_, next->entry) < 0) {
        node = next;
        continue;
      }
      if (prev != nullptr) prev[level] = node;
      if (level == 0) return next;
      --level;
    }
  }

  // The last node of `bucket` less than `entry`: the head if none.
  const Node* FindLessThan(const Bucket* bucket, const char* entry) const {
    const Node* node = &bucket->head;
    int level = bucket->height.load(std::memory_order_relaxed) - 1;
    while (true) {
      const Node* next = node->Next(level);
      if (next != nullptr && compare_(next->entry, entry) < 0) {
        node = next;
        continue;
      }
      if (level == 0) return node;
      --level;
    }
  }

  const Node* FindLast(const Bucket* bucket) const {
    const Node* node = &bucket->head;
    int level = bucket->height.load(std::memory_order_relaxed) - 1;
    while (true) {
      const Node* next = node->Next(level);
      if (next != nullptr) {
        node = next;
        continue;
      }
      if (level == 0) return node;
      --level;
    }
  }

  // The first occupied bucket at or after `index`; kBuckets if none.
  uint32_t NextOccupied(uint32_t index) const {
    if (index >= kBuckets) return kBuckets;
    uint32_t word = index / 64;
    uint64_t bits = occupied_[word].load(std::memory_order_acquire) &
                    (~uint64_t{0} << (index % 64));
    while (bits == 0) {
      if (++word == kBitmapWords) return kBuckets;
      bits = occupied_[word].load(std::memory_order_acquire);
    }
    return word * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
  }

  // The last occupied bucket at or before `index`; -1 if none.
  int64_t PrevOccupied(int64_t index) const {
    if (index < 0) return -1;
    int64_t word = index / 64;
    const int shift = static_cast<int>(index % 64);
    uint64_t bits =
        occupied_[word].load(std::memory_order_acquire) &
        (shift == 63 ? ~uint64_t{0} : ((uint64_t{1} << (shift + 1)) - 1));
    while (bits == 0) {
      if (--word < 0) return -1;
      bits = occupied_[word].load(std::memory_order_acquire);
    }
    return word * 64 + 63 - __builtin_clzll(bits);
  }

  const KeyComparator& compare_;
  std::atomic<Bucket*>* buckets_;    // kBuckets, in the arena
  std::atomic<uint64_t>* occupied_;  // bit i: buckets_[i] is published
  // Writer only. Successive writers are different threads, ordered by
  // RocksDB's write queue, which ThreadSanitizer does not see (our TSan
  // builds link an uninstrumented RocksDB): hence the relaxed atomic, which
  // costs what a plain integer does.
  std::atomic<uint32_t> random_{0x9E3779B9u};

  // Iterators handed out for a caller's arena: the caller then only runs
  // their destructor, and the arena class is not in RocksDB's installed
  // headers, so they are heap objects owned here until the memtable goes.
  // Memtables make them for flushes and scans, a handful per memtable.
  absl::Mutex iterators_mu_;
  std::vector<std::unique_ptr<char[]>> iterators_
      ABSL_GUARDED_BY(iterators_mu_);
};

// Total-order iterator: within a bucket by its skiplist, across buckets in
// index order (the occupancy bitmap skips empty ones).
class SlotMemTableRep::SlotIterator : public rocksdb::MemTableRep::Iterator {
 public:
  explicit SlotIterator(const SlotMemTableRep* rep) : rep_(rep) {}

  bool Valid() const override { return node_ != nullptr; }
  const char* key() const override { return node_->entry; }

  void Next() override {
    node_ = node_->Next(0);
    if (node_ == nullptr) FirstFrom(bucket_ + 1);
  }

  void Prev() override {
    const Node* before =
        rep_->FindLessThan(rep_->BucketAt(bucket_), node_->entry);
    if (before->entry != nullptr) {  // not the head
      node_ = before;
      return;
    }
    LastFrom(static_cast<int64_t>(bucket_) - 1);
  }

  void Seek(const rocksdb::Slice& internal_key,
            const char* memtable_key) override {
    const uint32_t index = BucketOfInternalKey(internal_key);
    const Bucket* bucket = rep_->BucketAt(index);
    if (bucket != nullptr) {
      node_ = memtable_key != nullptr
                  ? rep_->FindGreaterOrEqual(bucket, EntryTarget{memtable_key},
                                             nullptr)
                  : rep_->FindGreaterOrEqual(
                        bucket, InternalKeyTarget{internal_key}, nullptr);
      if (node_ != nullptr) {
        bucket_ = index;
        return;
      }
    }
    FirstFrom(index + 1);
  }

  void SeekForPrev(const rocksdb::Slice& internal_key,
                   const char* memtable_key) override {
    Seek(internal_key, memtable_key);
    if (!Valid()) SeekToLast();
    while (Valid() && (memtable_key != nullptr
                           ? rep_->compare_(node_->entry, memtable_key)
                           : rep_->compare_(node_->entry, internal_key)) > 0) {
      Prev();
    }
  }

  void SeekToFirst() override { FirstFrom(0); }
  void SeekToLast() override { LastFrom(kBuckets - 1); }

 private:
  // First node of the first non-empty bucket at or after `index`.
  void FirstFrom(uint32_t index) {
    node_ = nullptr;
    for (uint32_t i = rep_->NextOccupied(index); i < kBuckets;
         i = rep_->NextOccupied(i + 1)) {
      node_ = rep_->BucketAt(i)->head.Next(0);
      if (node_ != nullptr) {
        bucket_ = i;
        return;
      }
    }
  }

  // Last node of the last non-empty bucket at or before `index`.
  void LastFrom(int64_t index) {
    node_ = nullptr;
    for (int64_t i = rep_->PrevOccupied(index); i >= 0;
         i = rep_->PrevOccupied(i - 1)) {
      const Node* last = rep_->FindLast(rep_->BucketAt(i));
      if (last->entry != nullptr) {
        node_ = last;
        bucket_ = static_cast<uint32_t>(i);
        return;
      }
    }
  }

  const SlotMemTableRep* rep_;
  uint32_t bucket_ = 0;
  const Node* node_ = nullptr;
};

rocksdb::MemTableRep::Iterator* SlotMemTableRep::GetIterator(
    rocksdb::Arena* arena) {
  if (arena == nullptr) return new SlotIterator(this);  // the caller deletes
  auto storage = std::make_unique<char[]>(sizeof(SlotIterator));
  auto* iterator = new (storage.get()) SlotIterator(this);
  absl::MutexLock lock(&iterators_mu_);
  iterators_.push_back(std::move(storage));
  return iterator;
}

class SlotMemTableRepFactory : public rocksdb::MemTableRepFactory {
 public:
  const char* Name() const override { return "DedupSlotMemTableRepFactory"; }

  rocksdb::MemTableRep* CreateMemTableRep(
      const rocksdb::MemTableRep::KeyComparator& compare,
      rocksdb::Allocator* allocator, const rocksdb::SliceTransform*,
      rocksdb::Logger*) override {
    return new SlotMemTableRep(compare, allocator);
  }
};

// Builds a LookupKey with RocksDB's own constructor (in a buffer larger than
// any layout it could have) and checks that its first field points at the
// length-prefixed internal key: user key, then the sequence in the tag's
// upper 56 bits. Null if so, else why not.
const char* SelfCheck() {
  alignas(std::max_align_t) char storage[1024];
  const std::string user_key = "\x12\x34selfcheck";
  constexpr uint64_t kSequence = 0x123456;
  auto* lookup =
      new (storage) rocksdb::LookupKey(rocksdb::Slice(user_key), kSequence,
                                       /*ts=*/nullptr);
  const char* entry = SlotMemTableRep::MemtableKeyOf(*lookup);
  const char* why = "RocksDB's LookupKey layout is not the one expected";
  const uintptr_t p = reinterpret_cast<uintptr_t>(entry);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(storage);
  if (p >= lo && p < lo + sizeof(storage)) {
    uint32_t length = 0;
    const char* key = DecodeLength(entry, &length);
    uint64_t tag = 0;
    if (length == user_key.size() + 8 &&
        std::memcmp(key, user_key.data(), user_key.size()) == 0) {
      // RocksDB writes the tag little-endian (its EncodeFixed64).
      tag = DecodeFixed64(key + user_key.size());
      if ((tag >> 8) == kSequence) why = nullptr;
    }
  }
  lookup->~LookupKey();
  return why;
}

}  // namespace

rocksdb::MemTableRepFactory* NewSlotMemTableRepFactory(
    const char** fallback_reason) {
  static const char* const kWhyNot = SelfCheck();
  if (fallback_reason != nullptr) *fallback_reason = kWhyNot;
  if (kWhyNot != nullptr) {
    return rocksdb::NewHashSkipListRepFactory(kBuckets, kMaxHeight);
  }
  return new SlotMemTableRepFactory();
}

}  // namespace dedup
