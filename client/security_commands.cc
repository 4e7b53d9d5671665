#include "client/security_commands.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/commands.h"
#include "common/flags.h"
#include "common/quote.h"
#include "security/certs.h"

namespace yoke::client {

const char kSecurityCommandsUsage[] =
    "  certs init DIR      create a cluster CA in DIR (ca.crt, ca.key)\n"
    "  certs issue --ca DIR --role ROLE --name NAME [--host H ...] --out DIR\n"
    "                      sign credentials (ca.crt, tls.crt, tls.key) for a coordinator,\n"
    "                      worker, admin, submitter or viewer\n"
    "  token create --role ROLE --name NAME [--ttl 24h]\n"
    "                      a bearer token (admin only); token revoke ID revokes one\n";

namespace {

int Error(FILE* err, const std::string& what, const absl::Status& s) {
  std::fprintf(err, "yoke %s: %s\n", what.c_str(),
               common::EscapeControl(s.message(), "\n").c_str());
  return ExitCodeFor(s);
}

int CertsInit(const std::vector<std::string>& args, FILE* out, FILE* err) {
  std::string cluster = "yoke";
  int days = 3650;
  common::FlagParser p("yoke certs init",
                       "usage: yoke certs init DIR [--cluster NAME] [--days N]\n");
  p.String("--cluster", &cluster).Int("--days", &days, 1, 36500);
  std::vector<std::string> pos;
  if (auto code = p.ParseOrExitCode(args, &pos, out, err)) return *code;
  if (pos.size() != 1) return p.UsageError(err, pos.empty() ? "missing DIR" : "one DIR only");
  auto ca = common::CreateCa(cluster, absl::Hours(24) * days);
  if (!ca.ok()) return Error(err, "certs init", ca.status());
  if (auto s = common::WriteCaDir(pos[0], *ca); !s.ok()) return Error(err, "certs init", s);
  std::fprintf(out, "cluster CA written to %s (ca.crt; ca.key is secret, mode 0600)\n",
               pos[0].c_str());
  return 0;
}

int CertsIssue(const std::vector<std::string>& args, FILE* out, FILE* err) {
  std::string ca_dir, role, name, out_dir;
  std::vector<std::string> hosts;
  int days = 365;
  common::FlagParser p("yoke certs issue",
                       "usage: yoke certs issue --ca DIR --role ROLE --name NAME [--host H ...]\n"
                       "                        [--days N] --out DIR\n");
  p.String("--ca", &ca_dir)
      .String("--role", &role)
      .String("--name", &name)
      .Strings("--host", &hosts)
      .Int("--days", &days, 1, 36500)
      .String("--out", &out_dir);
  std::vector<std::string> pos;
  if (auto code = p.ParseOrExitCode(args, &pos, out, err)) return *code;
  if (!pos.empty()) return p.UsageError(err, absl::StrCat("unexpected argument '", pos[0], "'"));
  for (auto [flag, value] : {std::pair{"--ca", &ca_dir}, std::pair{"--role", &role},
                             std::pair{"--name", &name}, std::pair{"--out", &out_dir}}) {
    if (value->empty()) return p.UsageError(err, absl::StrCat(flag, " is required"));
  }
  auto r = common::ParseRole(role);
  if (!r.ok()) return Error(err, "certs issue", r.status());
  auto ca = common::ReadCaDir(ca_dir);
  if (!ca.ok()) return Error(err, "certs issue", ca.status());
  common::IssueOptions o;
  o.role = *r;
  o.name = name;
  o.hosts = hosts;
  o.validity = absl::Hours(24) * days;
  if (auto s = common::IssueCredentialsDir(*ca, o, out_dir); !s.ok()) {
    return Error(err, "certs issue", s);
  }
  std::fprintf(out, "%s '%s' credentials written to %s (valid %d days)\n", role.c_str(),
               name.c_str(), out_dir.c_str(), days);
  return 0;
}

int TokenCommand(const std::string& sub, const std::vector<std::string>& args, FILE* out,
                 FILE* err) {
  std::string coordinator, role, name;
  CredentialFlags cred;
  absl::Duration ttl = absl::Hours(24);
  const std::string usage = sub == "create"
                                ? "usage: yoke token create --role ROLE --name NAME [--ttl 24h]\n"
                                : "usage: yoke token revoke ID\n";
  common::FlagParser p("yoke token " + sub,
                       usage +
                           "       [--coordinator host:port] [--tls-dir DIR] [--token T] "
                           "[--insecure]\n");
  p.String("--coordinator", &coordinator)
      .String("--tls-dir", &cred.tls_dir)
      .String("--token", &cred.token)
      .Bool("--insecure", &cred.insecure);
  if (sub == "create") {
    p.String("--role", &role)
        .String("--name", &name)
        .Duration("--ttl", &ttl, absl::Seconds(1), "a duration such as 24h");
  }
  std::vector<std::string> pos;
  if (auto code = p.ParseOrExitCode(args, &pos, out, err)) return *code;
  if (sub == "create" && !pos.empty()) {
    return p.UsageError(err, absl::StrCat("unexpected argument '", pos[0], "'"));
  }
  if (sub == "create" && (role.empty() || name.empty())) {
    return p.UsageError(err, "--role and --name are required");
  }
  if (sub == "revoke" && pos.size() != 1) return p.UsageError(err, "one token ID");
  auto credentials = ResolveCredentials(cred);
  if (!credentials.ok()) return Error(err, "token " + sub, credentials.status());
  ClientOptions options;
  options.credentials = *credentials;
  CoordinatorClient client(ResolveCoordinatorAddress(coordinator), options);
  if (sub == "revoke") {
    if (auto s = client.RevokeToken(pos[0]); !s.ok()) return Error(err, "token revoke", s);
    std::fprintf(out, "token %s revoked\n", pos[0].c_str());
    return 0;
  }
  auto t = client.CreateToken(role, name, ttl);
  if (!t.ok()) return Error(err, "token create", t.status());
  std::fprintf(out, "%s\n", t->token().c_str());
  std::fprintf(err, "token %s for %s '%s', expires %s; shown once, keep it secret\n",
               t->id().c_str(), role.c_str(), name.c_str(),
               absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMillis(t->expire_time_ms()),
                                absl::UTCTimeZone())
                   .c_str());
  return 0;
}

}  // namespace

int RunCerts(const std::vector<std::string>& args, FILE* out, FILE* err) {
  const std::vector<std::string> rest(args.begin() + (args.empty() ? 0 : 1), args.end());
  if (!args.empty() && args[0] == "init") return CertsInit(rest, out, err);
  if (!args.empty() && args[0] == "issue") return CertsIssue(rest, out, err);
  std::fprintf(err,
               "usage: yoke certs init DIR | yoke certs issue --ca DIR --role ROLE "
               "--name NAME --out DIR\n");
  return 2;
}

int RunToken(const std::vector<std::string>& args, FILE* out, FILE* err) {
  const std::vector<std::string> rest(args.begin() + (args.empty() ? 0 : 1), args.end());
  if (!args.empty() && (args[0] == "create" || args[0] == "revoke")) {
    return TokenCommand(args[0], rest, out, err);
  }
  std::fprintf(err,
               "usage: yoke token create --role ROLE --name NAME [--ttl 24h] | "
               "yoke token revoke ID\n");
  return 2;
}

}  // namespace yoke::client
