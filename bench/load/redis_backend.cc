#include "bench/load/redis_backend.h"

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <poll.h>

#include <deque>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "bench/load/conn_loop.h"

namespace dedup::bench {

// One hiredis connection in non-blocking mode, driven by its ConnLoop thread.
// Replies come back in command order, so a FIFO of handlers matches them.
class RedisConn : public ConnLoop {
 public:
  using Handler =
      std::function<void(redisReply* reply, const std::string& error)>;

  RedisConn(std::string host, int port) : host_(std::move(host)), port_(port) {}
  ~RedisConn() override {
    if (ctx_ != nullptr) redisFree(ctx_);
  }

  // Loop thread only. Buffers the command; the loop writes it.
  void Send(const std::vector<std::string>& argv, Handler handler) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const std::string& a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), ptrs.data(),
                               lens.data()) != REDIS_OK) {
      handler(nullptr, "redisAppendCommandArgv failed");
      return;
    }
    pending_.push_back(std::move(handler));
  }

 protected:
  std::string Connect() override {
    ctx_ = redisConnectNonBlock(host_.c_str(), port_);
    if (ctx_ == nullptr || ctx_->err) {
      return "redis connect: " + std::string(ctx_ ? ctx_->errstr : "oom");
    }
    pollfd p{ctx_->fd, POLLOUT, 0};
    if (poll(&p, 1, 5000) != 1 || (p.revents & (POLLERR | POLLHUP))) {
      return "redis connect to port " + std::to_string(port_) + " failed";
    }
    return "";
  }
  int fd() override { return ctx_->fd; }
  bool WantWrite() override { return ::sdslen(ctx_->obuf) > 0; }
  std::string Flush() override {
    int done = 0;
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) return ctx_->errstr;
    return "";
  }
  std::string OnReadable() override {
    if (redisBufferRead(ctx_) != REDIS_OK) return ctx_->errstr;
    while (true) {
      void* reply = nullptr;
      if (redisGetReplyFromReader(ctx_, &reply) != REDIS_OK)
        return ctx_->errstr;
      if (reply == nullptr) return "";
      if (pending_.empty()) {
        freeReplyObject(reply);
        return "reply without a request";
      }
      Handler h = std::move(pending_.front());
      pending_.pop_front();
      h(static_cast<redisReply*>(reply), "");
      freeReplyObject(reply);
    }
  }
  bool Idle() override { return pending_.empty(); }
  void FailAll(const std::string& error) override {
    while (!pending_.empty()) {
      Handler h = std::move(pending_.front());
      pending_.pop_front();
      h(nullptr, error);
    }
  }

 private:
  const std::string host_;
  const int port_;
  redisContext* ctx_ = nullptr;
  std::deque<Handler> pending_;
};

namespace {

std::string ReplyError(redisReply* r, const std::string& error) {
  if (!error.empty()) return error;
  if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
  return "";
}

// {status, fence, ...} from the script.
bool ParseStatusFence(redisReply* r, int* status, uint64_t* fence) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    return false;
  }
  *status = static_cast<int>(r->element[0]->integer);
  *fence = static_cast<uint64_t>(r->element[1]->integer);
  return true;
}

BeginAnswer ToBegin(redisReply* r, const std::string& error) {
  BeginAnswer a;
  a.error = ReplyError(r, error);
  if (!a.error.empty()) return a;
  int status = 0;
  if (!ParseStatusFence(r, &status, &a.fence) || status < 1 || status > 4) {
    a.error = "bad begin reply";
    return a;
  }
  a.status = static_cast<BeginStatus>(status - 1);
  return a;
}

FencedAnswer ToFenced(redisReply* r, const std::string& error) {
  FencedAnswer a;
  a.error = ReplyError(r, error);
  if (!a.error.empty()) return a;
  int status = 0;
  if (!ParseStatusFence(r, &status, &a.fence) || status < 1 || status > 4) {
    a.error = "bad fenced reply";
    return a;
  }
  a.status = static_cast<FencedStatus>(status - 1);
  return a;
}

// Collects the answers of a pipelined batch; the last one calls done.
template <typename T>
struct Gather {
  std::vector<T> answers;
  size_t left;
  Done<std::vector<T>> done;
};

}  // namespace

RedisBackend::RedisBackend(std::string host, int port, std::string ns,
                           std::string script_path, int connections)
    : host_(std::move(host)),
      port_(port),
      ns_(std::move(ns)),
      script_path_(std::move(script_path)),
      connections_(connections) {}

RedisBackend::~RedisBackend() = default;

std::string RedisBackend::Start() {
  std::ifstream in(script_path_);
  if (!in) return "cannot read " + script_path_;
  std::stringstream script;
  script << in.rdbuf();
  // SCRIPT LOAD on a plain blocking connection, once.
  redisContext* c = redisConnect(host_.c_str(), port_);
  if (c == nullptr || c->err) {
    std::string e = c ? c->errstr : "oom";
    if (c) redisFree(c);
    return "redis: " + e;
  }
  const std::string body = script.str();
  auto* r = static_cast<redisReply*>(
      redisCommand(c, "SCRIPT LOAD %b", body.data(), body.size()));
  if (r == nullptr || r->type != REDIS_REPLY_STRING) {
    std::string e = r ? std::string(r->str ? r->str : "", r->len) : c->errstr;
    if (r) freeReplyObject(r);
    redisFree(c);
    return "SCRIPT LOAD: " + e;
  }
  sha_.assign(r->str, r->len);
  freeReplyObject(r);
  redisFree(c);
  for (int i = 0; i < connections_; ++i) {
    conns_.push_back(std::make_unique<RedisConn>(host_, port_));
    std::string e = conns_.back()->Start();
    if (!e.empty()) return e;
  }
  return "";
}

void RedisBackend::Stop() {
  for (auto& c : conns_) c->Stop();
  conns_.clear();
}

void RedisBackend::RunAt(int conn, Clock::time_point when,
                         std::function<void()> fn) {
  conns_[conn]->Post(when, std::move(fn));
}

std::string RedisBackend::RecordKey(const std::string& key) const {
  return "d:" + ns_ + ":" + key;
}

void RedisBackend::Begin(int conn, const BeginCall& call,
                         Done<BeginAnswer> done) {
  conns_[conn]->Send(
      {"EVALSHA", sha_, "2", RecordKey(call.key), "d:fence", "begin",
       call.args_hash, call.owner, std::to_string(call.lease_ms),
       std::to_string(uint64_t{call.ttl_s} * 1000)},
      [done = std::move(done)](redisReply* r, const std::string& e) {
        done(ToBegin(r, e));
      });
}

void RedisBackend::Complete(int conn, const CompleteCall& call,
                            Done<FencedAnswer> done) {
  conns_[conn]->Send(
      {"EVALSHA", sha_, "2", RecordKey(call.key), "d:fence", "complete",
       std::to_string(call.fence), "1", call.result,
       std::to_string(uint64_t{call.ttl_s} * 1000)},
      [done = std::move(done)](redisReply* r, const std::string& e) {
        done(ToFenced(r, e));
      });
}

void RedisBackend::Release(int conn, const std::string& key, uint64_t fence,
                           Done<FencedAnswer> done) {
  conns_[conn]->Send(
      {"EVALSHA", sha_, "2", RecordKey(key), "d:fence", "release",
       std::to_string(fence)},
      [done = std::move(done)](redisReply* r, const std::string& e) {
        done(ToFenced(r, e));
      });
}

void RedisBackend::BeginBatch(int conn, const std::vector<BeginCall>& calls,
                              Done<std::vector<BeginAnswer>> done) {
  auto g = std::make_shared<Gather<BeginAnswer>>();
  g->answers.resize(calls.size());
  g->left = calls.size();
  g->done = std::move(done);
  for (size_t i = 0; i < calls.size(); ++i) {
    Begin(conn, calls[i], [g, i](BeginAnswer a) {
      g->answers[i] = std::move(a);
      if (--g->left == 0) g->done(std::move(g->answers));
    });
  }
}

void RedisBackend::CompleteBatch(int conn,
                                 const std::vector<CompleteCall>& calls,
                                 Done<std::vector<FencedAnswer>> done) {
  auto g = std::make_shared<Gather<FencedAnswer>>();
  g->answers.resize(calls.size());
  g->left = calls.size();
  g->done = std::move(done);
  for (size_t i = 0; i < calls.size(); ++i) {
    Complete(conn, calls[i], [g, i](FencedAnswer a) {
      g->answers[i] = std::move(a);
      if (--g->left == 0) g->done(std::move(g->answers));
    });
  }
}

void RedisBackend::Echo(int conn, const std::string& payload,
                        Done<std::string> done) {
  conns_[conn]->Send(
      {"ECHO", payload},
      [done = std::move(done)](redisReply* r, const std::string& e) {
        done(ReplyError(r, e));
      });
}

void RedisBackend::SetNx(int conn, const std::vector<std::string>& keys,
                         uint32_t ttl_s, Done<std::string> done) {
  struct State {
    size_t left;
    std::string error;
    Done<std::string> done;
  };
  auto s = std::make_shared<State>();
  s->left = keys.size();
  s->done = std::move(done);
  for (const std::string& key : keys) {
    conns_[conn]->Send(
        {"SET", RecordKey(key), "1", "NX", "EX", std::to_string(ttl_s)},
        [s](redisReply* r, const std::string& e) {
          std::string err = ReplyError(r, e);
          // A nil reply means the key existed: with fresh keys, an error.
          if (err.empty() && r->type != REDIS_REPLY_STATUS)
            err = "SET NX: key existed";
          if (s->error.empty()) s->error = err;
          if (--s->left == 0) s->done(s->error);
        });
  }
}

}  // namespace dedup::bench
