#include "bench/load/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dedup::bench {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

double Ms(double us) { return us / 1000.0; }

}  // namespace

std::string TableHeader() {
  return absl::StrFormat("%-9s %-22s %-11s %12s %-6s %8s %8s %8s %8s %8s %7s",
                         "system", "config", "workload", "units/s", "unit",
                         "p50ms", "p90ms", "p99ms", "p999ms", "maxms",
                         "errors");
}

std::string TableRow(const RunLabel& l, const RunResult& r) {
  const Histogram& h = r.latency;
  return absl::StrFormat(
      "%-9s %-22s %-11s %12.0f %-6s %8.3f %8.3f %8.3f %8.3f %8.3f %7d",
      l.system, l.config, l.workload, r.units / r.seconds, l.unit,
      Ms(h.QuantileUs(0.5)), Ms(h.QuantileUs(0.9)), Ms(h.QuantileUs(0.99)),
      Ms(h.QuantileUs(0.999)), Ms(static_cast<double>(h.max_us())),
      r.counters.errors);
}

std::string Json(const RunLabel& l, const RunResult& r) {
  const Histogram& h = r.latency;
  std::string begin, fenced;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&begin, i ? "," : "", JsonString(Name(BeginStatus(i))), ":",
                    r.counters.begin[i]);
    absl::StrAppend(&fenced, i ? "," : "", JsonString(Name(FencedStatus(i))),
                    ":", r.counters.fenced[i]);
  }
  return absl::StrCat(
      "{\"system\":", JsonString(l.system),
      ",\"config\":", JsonString(l.config),
      ",\"workload\":", JsonString(l.workload),
      ",\"unit\":", JsonString(l.unit), ",\"outstanding\":", l.outstanding,
      ",\"connections\":", l.connections, ",\"rate\":", l.rate,
      ",\"seconds\":", r.seconds, ",\"ops\":", r.ops, ",\"units\":", r.units,
      ",\"units_per_s\":", r.units / r.seconds,
      ",\"ops_per_s\":", r.ops / r.seconds,
      ",\"latency_ms\":{\"mean\":", Ms(h.mean_us()),
      ",\"p50\":", Ms(h.QuantileUs(0.5)), ",\"p90\":", Ms(h.QuantileUs(0.9)),
      ",\"p99\":", Ms(h.QuantileUs(0.99)),
      ",\"p999\":", Ms(h.QuantileUs(0.999)),
      ",\"max\":", Ms(static_cast<double>(h.max_us())), "}",
      ",\"begin_status\":{", begin, "},\"fenced_status\":{", fenced, "}",
      ",\"errors\":", r.counters.errors,
      ",\"first_error\":", JsonString(r.counters.first_error),
      ",\"client_cpu_s\":", r.cpu_user_s + r.cpu_sys_s,
      ",\"server_cpu_s\":", r.server_cpu_s,
      ",\"steal_fraction\":", r.steal_fraction, "}\n");
}

}  // namespace dedup::bench
