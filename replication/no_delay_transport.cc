#include "replication/no_delay_transport.h"

#include <cstddef>

namespace dedup {
namespace {

static_assert(offsetof(NoDelayTransport, transport) == 0,
              "libraft's transport pointer must lead back to the wrapper");

void SetNoDelay(struct uv_stream_s* stream) {
  if (stream != nullptr && stream->type == UV_TCP) {
    // Best effort: a socket that refuses still works, only slower.
    (void)uv_tcp_nodelay(reinterpret_cast<uv_tcp_t*>(stream), 1);
  }
}

void OnAccepted(struct raft_uv_transport* t, raft_id id, const char* address,
                struct uv_stream_s* stream) {
  SetNoDelay(stream);
  reinterpret_cast<NoDelayTransport*>(t)->accepted(t, id, address, stream);
}

int Listen(struct raft_uv_transport* t, raft_uv_accept_cb cb) {
  auto* self = reinterpret_cast<NoDelayTransport*>(t);
  self->accepted = cb;
  return self->listen(t, &OnAccepted);
}

// raft_uv's own request stays untouched until its callback: ours stands in
// for it inside the transport.
struct ConnectRequest {
  struct raft_uv_connect inner {};
  struct raft_uv_connect* outer = nullptr;
  raft_uv_connect_cb outer_cb = nullptr;
};

void OnConnected(struct raft_uv_connect* req, struct uv_stream_s* stream,
                 int status) {
  auto* request = static_cast<ConnectRequest*>(req->data);
  if (status == 0) SetNoDelay(stream);
  struct raft_uv_connect* outer = request->outer;
  raft_uv_connect_cb cb = request->outer_cb;
  delete request;
  cb(outer, stream, status);
}

int Connect(struct raft_uv_transport* t, struct raft_uv_connect* req,
            raft_id id, const char* address, raft_uv_connect_cb cb) {
  auto* self = reinterpret_cast<NoDelayTransport*>(t);
  auto* request = new ConnectRequest;
  request->inner.data = request;
  request->outer = req;
  request->outer_cb = cb;
  const int rv = self->connect(t, &request->inner, id, address, &OnConnected);
  // Refused at once: the callback will not fire.
  if (rv != 0) delete request;
  return rv;
}

}  // namespace

int NoDelayTcpTransportInit(NoDelayTransport* t, uv_loop_t* loop) {
  if (int rv = raft_uv_tcp_init(&t->transport, loop); rv != 0) return rv;
  t->listen = t->transport.listen;
  t->connect = t->transport.connect;
  t->transport.listen = &Listen;
  t->transport.connect = &Connect;
  return 0;
}

}  // namespace dedup
