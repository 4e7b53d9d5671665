// `yoke certs` and `yoke token`: the cluster's credentials.
//
//   yoke certs init DIR [--cluster NAME] [--days N]
//       creates a cluster CA in DIR (ca.crt, ca.key at mode 0600); never
//       overwrites one.
//   yoke certs issue --ca DIR --role ROLE --name NAME [--host H ...]
//                    [--days N] --out DIR
//       signs a certificate with the CA and writes a credentials directory
//       (ca.crt, tls.crt, tls.key at 0600): what --tls-dir of the daemons
//       and the CLI takes. Roles: coordinator (give it --host for every
//       address clients dial), worker (NAME is its worker id), admin,
//       submitter, viewer.
//   yoke token create --role ROLE --name NAME [--ttl 24h]
//       asks the coordinator (admin only) for a bearer token and prints it;
//       the coordinator keeps only its hash.
//   yoke token revoke ID
// The token commands take the cluster commands' --coordinator, --tls-dir,
// --token and --insecure.
//
// Exit codes as the cluster commands: 0 success, 1 the coordinator failed or
// is unreachable, 2 a usage error or a refused request.
#ifndef YOKE_CLIENT_SECURITY_COMMANDS_H_
#define YOKE_CLIENT_SECURITY_COMMANDS_H_

#include <cstdio>
#include <string>
#include <vector>

namespace yoke::client {

int RunCerts(const std::vector<std::string>& args, FILE* out, FILE* err);
int RunToken(const std::vector<std::string>& args, FILE* out, FILE* err);

extern const char kSecurityCommandsUsage[];

}  // namespace yoke::client

#endif  // YOKE_CLIENT_SECURITY_COMMANDS_H_
