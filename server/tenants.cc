#include "server/tenants.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/lined_json.h"

namespace dedup {
namespace {

using Type = LinedJson::Type;

// An array of strings at `path`; absent is empty.
absl::StatusOr<std::vector<std::pair<std::string, const LinedJson*>>> StringsOf(
    const LinedJson* array, const std::string& path) {
  std::vector<std::pair<std::string, const LinedJson*>> strings;
  if (array == nullptr) return strings;
  if (absl::Status s = ExpectJsonType(*array, path, Type::kArray); !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < array->items.size(); ++i) {
    const LinedJson& item = array->items[i];
    const std::string item_path = absl::StrCat(path, "[", i, "]");
    if (absl::Status s = ExpectJsonType(item, item_path, Type::kString);
        !s.ok()) {
      return s;
    }
    strings.emplace_back(item.string, &item);
  }
  return strings;
}

absl::StatusOr<TokenDigest> DigestFromHex(const LinedJson& value,
                                          const std::string& path) {
  TokenDigest digest{};
  const std::string& hex = value.string;
  if (hex.size() != 64) {
    return JsonErrorAt(value, path,
                       absl::StrCat("must be 64 hex digits (the SHA-256 of the "
                                    "token), got ",
                                    hex.size(), " characters"));
  }
  for (size_t i = 0; i < 32; ++i) {
    int byte = 0;
    for (size_t j = 0; j < 2; ++j) {
      const char c = absl::ascii_tolower(hex[2 * i + j]);
      int nibble;
      if (c >= '0' && c <= '9') {
        nibble = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        nibble = c - 'a' + 10;
      } else {
        return JsonErrorAt(value, path,
                           absl::StrCat("must be hex digits, found '",
                                        std::string(1, hex[2 * i + j]), "'"));
      }
      byte = byte * 16 + nibble;
    }
    digest[i] = static_cast<unsigned char>(byte);
  }
  return digest;
}

absl::Status ParseLimits(const LinedJson& value, const std::string& path,
                         TenantLimits* limits) {
  if (absl::Status s = ExpectJsonType(value, path, Type::kObject); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckJsonKeys(value, path, {"rps", "inflight", "stored_bytes"});
      !s.ok()) {
    return s;
  }
  for (const auto& [key, number] : value.members) {
    const std::string field = absl::StrCat(path, ".", key);
    if (number.type != Type::kNumber || !number.is_integer ||
        number.is_negative) {
      return JsonErrorAt(number, field,
                         "must be a whole number >= 0 (0: unlimited)");
    }
    uint64_t* slot = key == "rps"        ? &limits->rps
                     : key == "inflight" ? &limits->inflight
                                         : &limits->stored_bytes;
    *slot = number.integer;
  }
  return absl::OkStatus();
}

absl::StatusOr<Tenant> ParseTenant(const LinedJson& value,
                                   const std::string& path) {
  if (absl::Status s = ExpectJsonType(value, path, Type::kObject); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckJsonKeys(value, path,
                                     {"name", "token_sha256", "cert_sans",
                                      "namespace_prefixes", "roles", "limits"});
      !s.ok()) {
    return s;
  }
  Tenant tenant;
  const LinedJson* name = value.Find("name");
  if (name == nullptr) return JsonErrorAt(value, path, "\"name\" is required");
  const std::string name_path = absl::StrCat(path, ".name");
  if (absl::Status s = ExpectJsonType(*name, name_path, Type::kString);
      !s.ok()) {
    return s;
  }
  if (name->string.empty()) return JsonErrorAt(*name, name_path, "is empty");
  tenant.name = name->string;

  auto tokens = StringsOf(value.Find("token_sha256"),
                          absl::StrCat(path, ".token_sha256"));
  if (!tokens.ok()) return tokens.status();
  for (size_t i = 0; i < tokens->size(); ++i) {
    absl::StatusOr<TokenDigest> digest = DigestFromHex(
        *(*tokens)[i].second, absl::StrCat(path, ".token_sha256[", i, "]"));
    if (!digest.ok()) return digest.status();
    tenant.token_digests.push_back(*digest);
  }
  auto sans =
      StringsOf(value.Find("cert_sans"), absl::StrCat(path, ".cert_sans"));
  if (!sans.ok()) return sans.status();
  for (size_t i = 0; i < sans->size(); ++i) {
    if ((*sans)[i].first.empty()) {
      return JsonErrorAt(*(*sans)[i].second,
                         absl::StrCat(path, ".cert_sans[", i, "]"), "is empty");
    }
    tenant.cert_sans.push_back((*sans)[i].first);
  }
  if (tenant.token_digests.empty() && tenant.cert_sans.empty()) {
    return JsonErrorAt(value, path,
                       "has no credential: give token_sha256 or cert_sans");
  }
  auto prefixes = StringsOf(value.Find("namespace_prefixes"),
                            absl::StrCat(path, ".namespace_prefixes"));
  if (!prefixes.ok()) return prefixes.status();
  for (const auto& prefix : *prefixes) {
    tenant.namespace_prefixes.push_back(prefix.first);
  }

  auto roles = StringsOf(value.Find("roles"), absl::StrCat(path, ".roles"));
  if (!roles.ok()) return roles.status();
  for (size_t i = 0; i < roles->size(); ++i) {
    const std::string& role = (*roles)[i].first;
    if (role == "client") {
      tenant.client = true;
    } else if (role == "operator") {
      tenant.operator_role = true;
    } else {
      return JsonErrorAt(*(*roles)[i].second,
                         absl::StrCat(path, ".roles[", i, "]"),
                         absl::StrCat("unknown role \"", role,
                                      "\" (allowed: client, operator)"));
    }
  }
  if (!tenant.client && !tenant.operator_role) {
    return JsonErrorAt(value, path,
                       "has no role: give \"roles\": [\"client\"] or "
                       "[\"operator\"]");
  }
  if (const LinedJson* limits = value.Find("limits")) {
    if (absl::Status s =
            ParseLimits(*limits, absl::StrCat(path, ".limits"), &tenant.limits);
        !s.ok()) {
      return s;
    }
  }
  return tenant;
}

}  // namespace

bool Tenant::AllowsNamespace(absl::string_view ns) const {
  for (const std::string& prefix : namespace_prefixes) {
    if (absl::StartsWith(ns, prefix)) return true;
  }
  return false;
}

TokenDigest DigestOfToken(absl::string_view token) {
  TokenDigest digest{};
  unsigned int length = 0;
  EVP_Digest(token.data(), token.size(), digest.data(), &length, EVP_sha256(),
             nullptr);
  return digest;
}

absl::StatusOr<TenantTable> TenantTable::Parse(absl::string_view json_text) {
  absl::StatusOr<LinedJson> root = ParseLinedJson(json_text);
  if (!root.ok()) return root.status();
  if (absl::Status s = ExpectJsonType(*root, "(top level)", Type::kObject);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckJsonKeys(*root, "(top level)", {"tenants"});
      !s.ok()) {
    return s;
  }
  const LinedJson* list = root->Find("tenants");
  if (list == nullptr) {
    return JsonErrorAt(*root, "(top level)", "\"tenants\" is required");
  }
  if (absl::Status s = ExpectJsonType(*list, "tenants", Type::kArray);
      !s.ok()) {
    return s;
  }
  TenantTable table;
  std::map<std::string, std::string> owner_of_credential;
  for (size_t i = 0; i < list->items.size(); ++i) {
    const std::string path = absl::StrCat("tenants[", i, "]");
    absl::StatusOr<Tenant> tenant = ParseTenant(list->items[i], path);
    if (!tenant.ok()) return tenant.status();
    // One credential, one tenant: otherwise which namespaces a token opens
    // would depend on the order of the file.
    std::vector<std::string> credentials;
    credentials.push_back("name " + tenant->name);
    for (const TokenDigest& d : tenant->token_digests) {
      credentials.push_back(
          "token_sha256 " +
          std::string(reinterpret_cast<const char*>(d.data()), d.size()));
    }
    for (const std::string& san : tenant->cert_sans) {
      credentials.push_back("cert_san " + san);
    }
    for (const std::string& credential : credentials) {
      auto [it, inserted] =
          owner_of_credential.emplace(credential, tenant->name);
      if (!inserted) {
        const std::string kind = credential.substr(0, credential.find(' '));
        return JsonErrorAt(list->items[i], path,
                           absl::StrCat("its ", kind, " is also in tenant \"",
                                        it->second, "\": each must be in one"));
      }
    }
    table.tenants_.push_back(*std::move(tenant));
  }
  return table;
}

const Tenant* TenantTable::FindByToken(absl::string_view token) const {
  const TokenDigest digest = DigestOfToken(token);
  const Tenant* found = nullptr;
  for (const Tenant& tenant : tenants_) {
    for (const TokenDigest& known : tenant.token_digests) {
      if (CRYPTO_memcmp(known.data(), digest.data(), digest.size()) == 0) {
        found = &tenant;
      }
    }
  }
  return found;
}

const Tenant* TenantTable::FindBySan(
    const std::vector<std::string>& sans) const {
  for (const Tenant& tenant : tenants_) {
    for (const std::string& known : tenant.cert_sans) {
      for (const std::string& san : sans) {
        if (san == known) return &tenant;
      }
    }
  }
  return nullptr;
}

}  // namespace dedup
