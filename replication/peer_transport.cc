#include "replication/peer_transport.h"

#include <unistd.h>

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dedup {

// Connections on their way from the plane's threads to the loop thread.
struct PeerTransport::Mailbox {
  struct Inbound {
    int fd;
    uint64_t id;
    std::string address;
  };
  struct Dialed {
    struct raft_uv_connect* req;
    int fd;  // -1: failed
  };

  absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;
  uv_async_t* async ABSL_GUARDED_BY(mu) = nullptr;
  std::vector<Inbound> inbound ABSL_GUARDED_BY(mu);
  std::vector<Dialed> dialed ABSL_GUARDED_BY(mu);

  void Accepted(int fd, uint64_t id, const std::string& address) {
    absl::MutexLock lock(&mu);
    if (closed || async == nullptr) {
      close(fd);
      return;
    }
    inbound.push_back({fd, id, address});
    uv_async_send(async);
  }
  void Connected(struct raft_uv_connect* req, int fd) {
    absl::MutexLock lock(&mu);
    if (closed || async == nullptr) {
      if (fd >= 0) close(fd);
      return;
    }
    dialed.push_back({req, fd});
    uv_async_send(async);
  }
  // After this, nothing is queued or signalled any more.
  void Close() {
    std::vector<Inbound> left_in;
    std::vector<Dialed> left_dialed;
    {
      absl::MutexLock lock(&mu);
      closed = true;
      left_in.swap(inbound);
      left_dialed.swap(dialed);
    }
    for (const Inbound& in : left_in) close(in.fd);
    for (const Dialed& d : left_dialed) {
      if (d.fd >= 0) close(d.fd);
    }
  }
};

PeerTransport::PeerTransport(uv_loop_t* loop, std::shared_ptr<PeerPlane> plane,
                             uint32_t group_id,
                             std::shared_ptr<PeerGroup> group)
    : loop_(loop),
      plane_(std::move(plane)),
      group_id_(group_id),
      group_(std::move(group)),
      mailbox_(std::make_shared<Mailbox>()) {
  transport_.impl = this;
  transport_.init = &OnInit;
  transport_.listen = &OnListen;
  transport_.connect = &OnConnect;
  transport_.close = &OnClose;
}

PeerTransport::~PeerTransport() {
  if (!closed_) {
    plane_->UnregisterGroup(group_id_);
    mailbox_->Close();
  }
}

int PeerTransport::Init() {
  async_.data = this;
  if (int rv = uv_async_init(loop_, &async_, &OnAsync); rv != 0) return rv;
  absl::MutexLock lock(&mailbox_->mu);
  mailbox_->async = &async_;
  return 0;
}

PeerTransport* PeerTransport::Of(struct raft_uv_transport* t) {
  return static_cast<PeerTransport*>(t->impl);
}

int PeerTransport::OnInit(struct raft_uv_transport* t, raft_id id,
                          const char* address) {
  PeerTransport* self = Of(t);
  self->id_ = id;
  self->address_ = address;
  return 0;
}

int PeerTransport::OnListen(struct raft_uv_transport* t, raft_uv_accept_cb cb) {
  PeerTransport* self = Of(t);
  self->accept_cb_ = cb;
  self->plane_->RegisterGroup(
      self->group_id_, self->group_,
      [mailbox = self->mailbox_](int fd, uint64_t id,
                                 const std::string& address) {
        mailbox->Accepted(fd, id, address);
      });
  return 0;
}

int PeerTransport::OnConnect(struct raft_uv_transport* t,
                             struct raft_uv_connect* req, raft_id id,
                             const char* address, raft_uv_connect_cb cb) {
  PeerTransport* self = Of(t);
  (void)id;
  if (self->closed_) return RAFT_CANCELED;
  self->dialing_[req] = cb;
  PeerPlane::Dial dial;
  dial.group_id = self->group_id_;
  dial.self_id = self->id_;
  dial.self_address = self->address_;
  dial.peer_address = address;
  self->plane_->Connect(
      std::move(dial),
      [mailbox = self->mailbox_, req](int fd) { mailbox->Connected(req, fd); });
  return 0;
}

void PeerTransport::OnClose(struct raft_uv_transport* t,
                            raft_uv_transport_close_cb cb) {
  PeerTransport* self = Of(t);
  self->closed_ = true;
  self->close_cb_ = cb;
  self->plane_->UnregisterGroup(self->group_id_);
  self->mailbox_->Close();
  // Pending dials are canceled from the close callback: libraft expects
  // them after this returns, not during it.
  uv_close(reinterpret_cast<uv_handle_t*>(&self->async_), &OnAsyncClosed);
}

void PeerTransport::CloseUnused(std::function<void()> closed) {
  closed_ = true;
  unused_closed_ = std::move(closed);
  plane_->UnregisterGroup(group_id_);
  mailbox_->Close();
  uv_close(reinterpret_cast<uv_handle_t*>(&async_), &OnAsyncClosed);
}

void PeerTransport::OnAsyncClosed(uv_handle_t* handle) {
  auto* self = static_cast<PeerTransport*>(handle->data);
  auto dialing = std::move(self->dialing_);
  self->dialing_.clear();
  for (auto& [req, cb] : dialing) cb(req, nullptr, RAFT_CANCELED);
  if (self->close_cb_ != nullptr) self->close_cb_(&self->transport_);
  if (self->unused_closed_ != nullptr) self->unused_closed_();
}

uv_stream_t* PeerTransport::OpenPipe(int fd) {
  auto* pipe = static_cast<uv_pipe_t*>(raft_malloc(sizeof(uv_pipe_t)));
  if (pipe == nullptr) {
    close(fd);
    return nullptr;
  }
  uv_pipe_init(loop_, pipe, 0);
  if (uv_pipe_open(pipe, fd) != 0) {
    close(fd);
    uv_close(reinterpret_cast<uv_handle_t*>(pipe),
             [](uv_handle_t* h) { raft_free(h); });
    return nullptr;
  }
  return reinterpret_cast<uv_stream_t*>(pipe);
}

void PeerTransport::OnAsync(uv_async_t* handle) {
  auto* self = static_cast<PeerTransport*>(handle->data);
  std::vector<Mailbox::Inbound> inbound;
  std::vector<Mailbox::Dialed> dialed;
  {
    absl::MutexLock lock(&self->mailbox_->mu);
    inbound.swap(self->mailbox_->inbound);
    dialed.swap(self->mailbox_->dialed);
  }
  for (Mailbox::Inbound& in : inbound) {
    if (self->closed_ || self->accept_cb_ == nullptr) {
      close(in.fd);
      continue;
    }
    if (uv_stream_t* stream = self->OpenPipe(in.fd)) {
      self->accept_cb_(&self->transport_, in.id, in.address.c_str(), stream);
    }
  }
  for (const Mailbox::Dialed& d : dialed) {
    auto it = self->dialing_.find(d.req);
    if (it == self->dialing_.end()) {
      if (d.fd >= 0) close(d.fd);
      continue;
    }
    const raft_uv_connect_cb cb = it->second;
    self->dialing_.erase(it);
    uv_stream_t* stream = d.fd >= 0 ? self->OpenPipe(d.fd) : nullptr;
    cb(d.req, stream, stream != nullptr ? 0 : RAFT_NOCONNECTION);
  }
}

}  // namespace dedup
