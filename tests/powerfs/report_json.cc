#include "report_json.h"

#include <cstdio>
#include <vector>

namespace powerfs {
namespace {

std::string Quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char escaped[8];
      snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string List(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += Quote(items[i]);
  }
  return out + "]";
}

}  // namespace

std::string ReportJson(const PowerOffReport& report) {
  return "{\"event\": \"power_off\", \"files\": " +
         std::to_string(report.files) +
         ", \"bytes_lost\": " + std::to_string(report.bytes_lost) +
         ", \"names_restored\": " + std::to_string(report.names_restored) +
         ", \"names_removed\": " + std::to_string(report.names_removed) +
         ", \"errors\": " + std::to_string(report.errors) +
         ", \"paths\": {\"data\": " + List(report.data_paths) +
         ", \"restored\": " + List(report.restored) +
         ", \"removed\": " + List(report.removed) + "}}";
}

}  // namespace powerfs
