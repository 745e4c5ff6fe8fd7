#include "client/dedupctl_cluster.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/batch_answers.h"
#include "client/dedupctl_format.h"
#include "client/dedupctl_output.h"
#include "client/dedupctl_recover.h"
#include "client/outcome_unknown.h"
#include "client/retrying_call.h"
#include "dedup/v1/cluster.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace dedup::ctl {
namespace {

// Membership changes wait for the group (add: until the new node caught up
// and became a voter), so they get more than a data call's deadline.
constexpr absl::Duration kMembershipDeadline = absl::Seconds(60);
// A move copies a group's state to a node: as long as that takes.
constexpr absl::Duration kMoveDeadline = absl::Minutes(30);

absl::StatusOr<v1::ClusterStatusResponse> QueryStatus(
    LeaderRouter& router, const std::string& address, uint32_t group_id,
    absl::Duration deadline) {
  auto stub = v1::Cluster::NewStub(router.EndpointFor(address)->channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  v1::ClusterStatusRequest request;
  request.set_group_id(group_id);
  v1::ClusterStatusResponse response;
  const grpc::Status status = stub->Status(&context, request, &response);
  if (!status.ok()) return ToAbslStatus(status);
  return response;
}

std::string IdOrDash(uint64_t value) {
  return value == 0 ? "-" : absl::StrCat(value);
}

// A membership call or transfer, sent to the leader.
template <typename Request, typename Response, typename Method>
absl::StatusOr<Response> LeaderCall(
    LeaderRouter& router, const ClientOptions& options, absl::string_view name,
    Method method, const Request& request,
    absl::Duration at_least = kMembershipDeadline) {
  ClientOptions leader_options = options;
  leader_options.deadline = std::max(options.deadline, at_least);
  Response response;
  const CallOutcome outcome = RetryingCall(
      router, leader_options, absl::ZeroDuration(), /*retry_unknown=*/false,
      [&](const Endpoint& endpoint, grpc::ClientContext* context) {
        response.Clear();
        auto stub = v1::Cluster::NewStub(endpoint.channel);
        return ((*stub).*method)(context, request, &response);
      });
  if (outcome.status.ok()) return response;
  const absl::Status last = ToAbslStatus(outcome.status);
  if (outcome.outcome_unknown) return OutcomeUnknownError(name, last);
  return last;
}

// Asks every --address, then every member the first node to answer lists,
// about group `group_id`. A node hosting no replica of the group (NOT_FOUND)
// is left out once another node answered: it is not a member.
std::vector<NodeReport> GatherReports(LeaderRouter& router,
                                      const ClientOptions& options,
                                      uint32_t group_id) {
  std::vector<NodeReport> reports;
  absl::flat_hash_set<std::string> asked;
  auto ask = [&](const std::string& address) {
    if (address.empty() || !asked.insert(address).second) return;
    reports.push_back(
        {address, QueryStatus(router, address, group_id, options.deadline)});
  };
  for (const std::string& address : router.addresses()) ask(address);
  const v1::ClusterStatusResponse* first = nullptr;
  for (const NodeReport& report : reports) {
    if (report.status.ok()) {
      first = &*report.status;
      break;
    }
  }
  if (first == nullptr) return reports;
  // Copied: ask() grows `reports`, which holds *first.
  const v1::ClusterStatusResponse members = *first;
  for (const v1::ClusterMember& member : members.members()) {
    ask(member.client_address());
  }
  reports.erase(std::remove_if(reports.begin(), reports.end(),
                               [](const NodeReport& r) {
                                 return absl::IsNotFound(r.status.status());
                               }),
                reports.end());
  return reports;
}

// The nodes that did not answer, on `err`: a line each in text, one error
// object (the first one's code, every address in the message) in JSON.
// Returns kExitOk when every node answered, else kExitRpcError.
int ReportUnreachable(const std::vector<NodeReport>& reports,
                      OutputFormat format, std::ostream& err) {
  absl::Status first;
  std::string message;
  for (const NodeReport& report : reports) {
    if (report.status.ok()) continue;
    if (first.ok()) first = report.status.status();
    if (format == OutputFormat::kText) {
      err << "dedupctl: " << report.address << ": "
          << report.status.status().ToString() << "\n";
    }
    absl::StrAppend(&message, message.empty() ? "" : "; ", report.address, ": ",
                    report.status.status().message());
  }
  if (first.ok()) return kExitOk;
  if (format == OutputFormat::kJson) {
    return PrintError(format, err, absl::Status(first.code(), message),
                      kExitRpcError);
  }
  return kExitRpcError;
}

int ClusterStatus(LeaderRouter& router, const ClientOptions& options,
                  uint32_t group_id, bool recover, OutputFormat format,
                  std::ostream& out, std::ostream& err) {
  const std::vector<NodeReport> reports =
      GatherReports(router, options, group_id);
  const bool any_answered =
      std::any_of(reports.begin(), reports.end(),
                  [](const NodeReport& r) { return r.status.ok(); });
  if (!any_answered) {
    (void)ReportUnreachable(reports, format, err);
    return kExitRpcError;
  }
  if (format == OutputFormat::kJson) {
    nlohmann::json document = ClusterStatusJson(reports);
    if (recover) {
      const RecoveryAdvice advice = AdviseRecovery(reports);
      document["recovery"] = RecoveryAdviceJson(advice);
      PrintJson(out, document);
      return advice.exit_code;
    }
    PrintJson(out, document);
    return ReportUnreachable(reports, format, err);
  }
  PrintClusterStatus(out, reports);
  if (recover) return PrintRecoveryAdvice(out, reports);
  return ReportUnreachable(reports, format, err);
}

// The id each report is about: the node's own answer, else the member whose
// client address was asked (0 when unknown).
absl::flat_hash_map<std::string, uint64_t> IdsOfAddresses(
    const std::vector<NodeReport>& reports) {
  absl::flat_hash_map<std::string, uint64_t> id_of_address;
  for (const NodeReport& report : reports) {
    if (!report.status.ok()) continue;
    for (const v1::ClusterMember& member : report.status->members()) {
      if (!member.client_address().empty()) {
        id_of_address.emplace(member.client_address(), member.id());
      }
    }
  }
  return id_of_address;
}

}  // namespace

void PrintClusterStatus(std::ostream& out,
                        const std::vector<NodeReport>& reports) {
  // The leader with the highest term has the freshest view of the members.
  const v1::ClusterStatusResponse* leader = nullptr;
  const absl::flat_hash_map<std::string, uint64_t> id_of_address =
      IdsOfAddresses(reports);
  for (const NodeReport& report : reports) {
    if (!report.status.ok()) continue;
    if (report.status->role() == "leader" &&
        (leader == nullptr || report.status->term() > leader->term())) {
      leader = &*report.status;
    }
  }
  absl::flat_hash_map<uint64_t, const v1::ClusterMember*> seen_by_leader;
  if (leader != nullptr) {
    for (const v1::ClusterMember& member : leader->members()) {
      seen_by_leader[member.id()] = &member;
    }
  }

  struct Row {
    uint64_t id;  // 0: unknown
    std::vector<std::string> cells;
  };
  std::vector<Row> rows;
  absl::flat_hash_set<uint64_t> listed;
  for (const NodeReport& report : reports) {
    if (report.status.ok()) {
      const v1::ClusterStatusResponse& s = *report.status;
      // The same node reached under two spellings of its address: once.
      if (!listed.insert(s.node_id()).second) continue;
      std::string match = "-";
      std::string lag = "-";
      if (auto it = seen_by_leader.find(s.node_id());
          it != seen_by_leader.end()) {
        match = absl::StrCat(it->second->match_index());
        lag = absl::StrCat(it->second->lag());
      }
      rows.push_back({s.node_id(),
                      {absl::StrCat(s.node_id()), report.address, s.role(),
                       absl::StrCat(s.term()), absl::StrCat(s.commit_index()),
                       absl::StrCat(s.applied_index()), match, lag,
                       IdOrDash(s.leader_id()), absl::StrCat(s.last_log_term()),
                       absl::StrCat(s.last_index())}});
    } else {
      const auto it = id_of_address.find(report.address);
      const uint64_t id = it == id_of_address.end() ? 0 : it->second;
      rows.push_back({id,
                      {id == 0 ? "?" : absl::StrCat(id), report.address,
                       "unreachable", "-", "-", "-", "-", "-", "-", "-", "-"}});
    }
  }
  // By id; nodes whose id is not known (did not answer, and no member has
  // their address) last.
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if ((a.id == 0) != (b.id == 0)) return b.id == 0;
    return a.id < b.id;
  });
  std::vector<std::vector<std::string>> table = {
      {"ID", "ADDRESS", "ROLE", "TERM", "COMMIT", "APPLIED", "MATCH", "LAG",
       "LEADER", "LOG_TERM", "LOG_INDEX"}};
  for (Row& row : rows) table.push_back(std::move(row.cells));
  PrintTable(out, table);
}

nlohmann::json ClusterStatusJson(const std::vector<NodeReport>& reports) {
  const absl::flat_hash_map<std::string, uint64_t> id_of_address =
      IdsOfAddresses(reports);
  struct Node {
    uint64_t id;  // 0: unknown
    nlohmann::json json;
  };
  std::vector<Node> nodes;
  absl::flat_hash_set<uint64_t> listed;
  for (const NodeReport& report : reports) {
    nlohmann::json node = {{"address", report.address}};
    uint64_t id = 0;
    if (report.status.ok()) {
      id = report.status->node_id();
      // The same node reached under two spellings of its address: once.
      if (!listed.insert(id).second) continue;
      node["status"] = ProtoToJson(*report.status);
    } else {
      const auto it = id_of_address.find(report.address);
      if (it != id_of_address.end()) id = it->second;
      node["error"] = StatusToJson(report.status.status());
    }
    if (id != 0) node["nodeId"] = std::to_string(id);
    nodes.push_back({id, std::move(node)});
  }
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const Node& a, const Node& b) {
                     if ((a.id == 0) != (b.id == 0)) return b.id == 0;
                     return a.id < b.id;
                   });
  nlohmann::json list = nlohmann::json::array();
  for (Node& node : nodes) list.push_back(std::move(node.json));
  return {{"nodes", std::move(list)}};
}

int RunClusterCommand(LeaderRouter& router, const ClientOptions& options,
                      const Invocation& inv, std::ostream& out,
                      std::ostream& err) {
  switch (inv.command) {
    case Command::kClusterStatus:
    case Command::kClusterRecover:
      return ClusterStatus(router, options, inv.group_id,
                           inv.command == Command::kClusterRecover, inv.output,
                           out, err);
    case Command::kClusterAdd: {
      v1::AddNodeRequest request;
      request.set_node_id(inv.node_id);
      request.set_raft_address(inv.raft_address);
      request.set_client_address(inv.client_address);
      request.set_group_id(inv.group_id);
      auto added = LeaderCall<v1::AddNodeRequest, v1::AddNodeResponse>(
          router, options, "AddNode", &v1::Cluster::Stub::AddNode, request);
      if (!added.ok()) {
        return PrintError(inv.output, err, added.status(), kExitRpcError);
      }
      if (inv.output == OutputFormat::kJson) {
        PrintJson(out, nlohmann::json{{"added", ProtoToJson(request)}});
      } else {
        out << "added: " << inv.node_id << "\n";
      }
      return kExitOk;
    }
    case Command::kClusterRemove: {
      v1::RemoveNodeRequest request;
      request.set_node_id(inv.node_id);
      request.set_group_id(inv.group_id);
      auto removed = LeaderCall<v1::RemoveNodeRequest, v1::RemoveNodeResponse>(
          router, options, "RemoveNode", &v1::Cluster::Stub::RemoveNode,
          request);
      if (!removed.ok()) {
        return PrintError(inv.output, err, removed.status(), kExitRpcError);
      }
      if (inv.output == OutputFormat::kJson) {
        PrintJson(out, nlohmann::json{{"removed", ProtoToJson(request)}});
      } else {
        out << "removed: " << inv.node_id << "\n";
      }
      return kExitOk;
    }
    case Command::kClusterTransfer: {
      v1::TransferLeadershipRequest request;
      request.set_node_id(inv.node_id);
      request.set_group_id(inv.group_id);
      auto moved = LeaderCall<v1::TransferLeadershipRequest,
                              v1::TransferLeadershipResponse>(
          router, options, "TransferLeadership",
          &v1::Cluster::Stub::TransferLeadership, request);
      if (!moved.ok()) {
        return PrintError(inv.output, err, moved.status(), kExitRpcError);
      }
      if (inv.output == OutputFormat::kJson) {
        PrintJson(out, *moved);
      } else {
        out << "leader_id: " << moved->leader_id() << "\n";
      }
      return kExitOk;
    }
    case Command::kClusterMove: {
      v1::MoveReplicaRequest request;
      request.set_group_id(inv.group_id);
      request.set_from_node_id(inv.from_node_id);
      request.set_to_node_id(inv.to_node_id);
      // Any node drives a move; running it again resumes it, so retries
      // are safe.
      auto moved = LeaderCall<v1::MoveReplicaRequest, v1::MoveReplicaResponse>(
          router, options, "MoveReplica", &v1::Cluster::Stub::MoveReplica,
          request, kMoveDeadline);
      if (!moved.ok()) {
        return PrintError(inv.output, err, moved.status(), kExitRpcError);
      }
      if (inv.output == OutputFormat::kJson) {
        PrintJson(out, *moved);
      } else {
        for (const std::string& step : moved->steps()) {
          out << "step: " << step << "\n";
        }
        out << "replicas: " << absl::StrJoin(moved->replicas(), ",") << "\n";
      }
      return kExitOk;
    }
    default:
      return PrintError(inv.output, err,
                        absl::InvalidArgumentError("not a cluster command"),
                        kExitUsage);
  }
}

}  // namespace dedup::ctl
