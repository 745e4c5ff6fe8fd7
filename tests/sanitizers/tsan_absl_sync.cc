// Tells ThreadSanitizer what Debian's abseil synchronisation does.
//
// Debian builds libabsl_synchronization without TSan, so absl::Mutex,
// CondVar, Notification and BlockingCounter synchronise through atomics that
// TSan never sees: every access guarded by an absl::Mutex would be reported
// as a race. An abseil built with -fsanitize=thread annotates itself with
// the __tsan_mutex_* calls; this library makes the same calls around the
// real functions instead. scripts/sanitize tsan builds it (not instrumented:
// it only forwards) and loads it with LD_PRELOAD, so these definitions take
// the place of the library's for the test binaries and for abseil's own
// calls between its functions (they go through the PLT).
//
// The annotations are weak: in a process without the TSan runtime (ctest,
// setarch) they are null and the wrappers only forward. An access the
// mutex does not order is still reported, and so is a lock order inversion
// (a potential deadlock); as with an instrumented abseil, the accesses a
// Condition makes while abseil evaluates it are not checked.
// tsan_absl_sync_check.cc checks all this before each run.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" {
// From <sanitizer/tsan_interface.h>; weak, see above.
__attribute__((weak)) void __tsan_mutex_destroy(void* addr, unsigned flags);
__attribute__((weak)) void __tsan_mutex_pre_lock(void* addr, unsigned flags);
__attribute__((weak)) void __tsan_mutex_post_lock(void* addr, unsigned flags,
                                                  int recursion);
__attribute__((weak)) int __tsan_mutex_pre_unlock(void* addr, unsigned flags);
__attribute__((weak)) void __tsan_mutex_post_unlock(void* addr, unsigned flags);
__attribute__((weak)) void __tsan_acquire(void* addr);
__attribute__((weak)) void __tsan_release(void* addr);
}

namespace {

constexpr unsigned kReadLock = 1 << 3;       // __tsan_mutex_read_lock
constexpr unsigned kTryLock = 1 << 4;        // __tsan_mutex_try_lock
constexpr unsigned kTryLockFailed = 1 << 5;  // __tsan_mutex_try_lock_failed

#define DEDUP_STR2(x) #x
#define DEDUP_STR(x) DEDUP_STR2(x)
constexpr char kNamespace[] = DEDUP_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);

// The real function: `symbol` is the mangled name without the
// "_ZN[K]4absl<len><inline namespace>" prefix (the inline namespace is
// Debian's, e.g. debian3); `const_member` adds the K.
template <typename Fn>
Fn Real(const char* symbol, bool const_member = false) {
  const std::string ns = kNamespace;
  const std::string name = std::string(const_member ? "_ZNK" : "_ZN") +
                           "4absl" + std::to_string(ns.size()) + ns + symbol;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// How the calling thread holds each mutex, so Await and CondVar::Wait
// release and take it back in the same mode.
struct Held {
  const void* mu;
  bool reader;
};
thread_local Held held[64];
thread_local int held_count = 0;

void PushHeld(const void* mu, bool reader) {
  if (held_count < 64) held[held_count++] = Held{mu, reader};
}
void PopHeld(const void* mu) {
  for (int i = held_count - 1; i >= 0; --i) {
    if (held[i].mu == mu) {
      held[i] = held[--held_count];
      return;
    }
  }
}
unsigned ModeOf(const void* mu) {
  for (int i = held_count - 1; i >= 0; --i) {
    if (held[i].mu == mu) return held[i].reader ? kReadLock : 0;
  }
  return 0;
}

// abseil's Mutex and CondVar functions call one another through the PLT
// (LockWhenWithTimeout calls LockWhenWithDeadline), so they reach these
// wrappers again: only the outermost call on a thread annotates. Not so for
// Notification, BlockingCounter and Barrier: the Lock, Unlock and Await they
// make are annotated like any other (so the Condition they evaluate there is
// not checked), and their lock-free paths get a release and an acquire.
thread_local int depth = 0;
class Outermost {
 public:
  Outermost() : outermost_(depth++ == 0) {}
  ~Outermost() { --depth; }
  Outermost(const Outermost&) = delete;
  Outermost& operator=(const Outermost&) = delete;
  explicit operator bool() const { return outermost_; }

 private:
  const bool outermost_;
};

void PreLock(void* mu, unsigned flags) {
  if (__tsan_mutex_pre_lock) __tsan_mutex_pre_lock(mu, flags);
}
void PostLock(void* mu, unsigned flags) {
  if (__tsan_mutex_post_lock) __tsan_mutex_post_lock(mu, flags, 0);
  if (!(flags & kTryLockFailed)) PushHeld(mu, flags & kReadLock);
}
void PreUnlock(void* mu, unsigned flags) {
  PopHeld(mu);
  if (__tsan_mutex_pre_unlock) __tsan_mutex_pre_unlock(mu, flags);
}
void PostUnlock(void* mu, unsigned flags) {
  if (__tsan_mutex_post_unlock) __tsan_mutex_post_unlock(mu, flags);
}
void Acquire(void* addr) {
  if (__tsan_acquire) __tsan_acquire(addr);
}
void Release(void* addr) {
  if (__tsan_release) __tsan_release(addr);
}

// Runs `wait` (which gives the mutex up and takes it back) as an unlock and
// a lock of `mu` in the mode the thread holds it. As in an instrumented
// abseil, TSan ignores accesses between a pre_ and a post_ annotation: the
// wait evaluates the Condition while the mutex is held (on this thread or on
// the one unlocking), which TSan could not otherwise tell.
template <typename Wait>
auto Reacquiring(absl::Mutex* mu, Wait wait) {
  const unsigned mode = ModeOf(mu);
  PreUnlock(mu, mode);
  auto result = wait();
  PostUnlock(mu, mode);
  PreLock(mu, mode);
  PostLock(mu, mode);
  return result;
}

// Notification::notified_yet_ follows its mutex; HasBeenNotified() reads it
// with an (instrumented, inline) acquire load, so Notify releases there.
void* NotifiedFlag(const absl::Notification* n) {
  static_assert(sizeof(absl::Notification) == 2 * sizeof(absl::Mutex),
                "absl::Notification is no longer {Mutex, atomic<bool>}");
  return const_cast<char*>(reinterpret_cast<const char*>(n)) +
         sizeof(absl::Mutex);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  static auto real = Real<void (*)(Mutex*)>("5MutexD1Ev");
  Outermost outer;
  if (outer && __tsan_mutex_destroy) __tsan_mutex_destroy(this, 0);
  real(this);
}

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex4LockEv");
  Outermost outer;
  if (!outer) return real(this);
  PreLock(this, 0);
  real(this);
  PostLock(this, 0);
}

void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  Outermost outer;
  if (!outer) return real(this);
  PreLock(this, kReadLock);
  real(this);
  PostLock(this, kReadLock);
}

bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  Outermost outer;
  if (!outer) return real(this);
  PreLock(this, kTryLock);
  const bool locked = real(this);
  PostLock(this, kTryLock | (locked ? 0 : kTryLockFailed));
  return locked;
}

bool Mutex::ReaderTryLock() {
  static auto real = Real<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  Outermost outer;
  if (!outer) return real(this);
  PreLock(this, kReadLock | kTryLock);
  const bool locked = real(this);
  PostLock(this, kReadLock | kTryLock | (locked ? 0 : kTryLockFailed));
  return locked;
}

void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex6UnlockEv");
  Outermost outer;
  if (!outer) return real(this);
  PreUnlock(this, 0);
  real(this);
  PostUnlock(this, 0);
}

void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  Outermost outer;
  if (!outer) return real(this);
  PreUnlock(this, kReadLock);
  real(this);
  PostUnlock(this, kReadLock);
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>(
      "5Mutex8LockWhenERKNS0_9ConditionE");
  Outermost outer;
  if (!outer) return real(this, cond);
  PreLock(this, 0);
  real(this, cond);
  PostLock(this, 0);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>(
      "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Outermost outer;
  if (!outer) return real(this, cond);
  PreLock(this, kReadLock);
  real(this, cond);
  PostLock(this, kReadLock);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outermost outer;
  if (!outer) return real(this, cond, timeout);
  PreLock(this, 0);
  const bool met = real(this, cond, timeout);
  PostLock(this, 0);
  return met;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outermost outer;
  if (!outer) return real(this, cond, timeout);
  PreLock(this, kReadLock);
  const bool met = real(this, cond, timeout);
  PostLock(this, kReadLock);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outermost outer;
  if (!outer) return real(this, cond, deadline);
  PreLock(this, 0);
  const bool met = real(this, cond, deadline);
  PostLock(this, 0);
  return met;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outermost outer;
  if (!outer) return real(this, cond, deadline);
  PreLock(this, kReadLock);
  const bool met = real(this, cond, deadline);
  PostLock(this, kReadLock);
  return met;
}

void Mutex::Await(const Condition& cond) {
  static auto real = Real<void (*)(Mutex*, const Condition&)>(
      "5Mutex5AwaitERKNS0_9ConditionE");
  Outermost outer;
  if (!outer) return real(this, cond);
  Reacquiring(this, [&] {
    real(this, cond);
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Outermost outer;
  if (!outer) return real(this, cond, timeout);
  return Reacquiring(this, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Outermost outer;
  if (!outer) return real(this, cond, deadline);
  return Reacquiring(this, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  static auto real =
      Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  Outermost outer;
  if (!outer) return real(this, mu);
  Reacquiring(mu, [&] {
    real(this, mu);
    return 0;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Outermost outer;
  if (!outer) return real(this, mu, timeout);
  return Reacquiring(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Outermost outer;
  if (!outer) return real(this, mu, deadline);
  return Reacquiring(mu, [&] { return real(this, mu, deadline); });
}

void Notification::Notify() {
  static auto real = Real<void (*)(Notification*)>("12Notification6NotifyEv");
  Release(NotifiedFlag(this));
  real(this);
}

void Notification::WaitForNotification() const {
  static auto real = Real<void (*)(const Notification*)>(
      "12Notification19WaitForNotificationEv", true);
  real(this);
  Acquire(NotifiedFlag(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static auto real = Real<bool (*)(const Notification*, Duration)>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", true);
  const bool notified = real(this, timeout);
  if (notified) Acquire(NotifiedFlag(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  static auto real = Real<bool (*)(const Notification*, Time)>(
      "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", true);
  const bool notified = real(this, deadline);
  if (notified) Acquire(NotifiedFlag(this));
  return notified;
}

bool BlockingCounter::DecrementCount() {
  static auto real =
      Real<bool (*)(BlockingCounter*)>("15BlockingCounter14DecrementCountEv");
  Release(this);
  return real(this);
}

void BlockingCounter::Wait() {
  static auto real =
      Real<void (*)(BlockingCounter*)>("15BlockingCounter4WaitEv");
  real(this);
  Acquire(this);
}

bool Barrier::Block() {
  static auto real = Real<bool (*)(Barrier*)>("7Barrier5BlockEv");
  Release(this);
  const bool last = real(this);
  Acquire(this);
  return last;
}

ABSL_NAMESPACE_END
}  // namespace absl
