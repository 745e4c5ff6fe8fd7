#include "common/reconnect_backoff.h"

#include <cstring>

#include "grpc/grpc.h"

namespace dedup {
namespace {

bool Has(const grpc::ChannelArguments& args, const char* key) {
  const grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (std::strcmp(c.args[i].key, key) == 0) return true;
  }
  return false;
}

}  // namespace

void SetReconnectBackoff(grpc::ChannelArguments& args) {
  if (!Has(args, GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS)) {
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                kInitialReconnectBackoffMs);
  }
  if (!Has(args, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS)) {
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  }
}

}  // namespace dedup
