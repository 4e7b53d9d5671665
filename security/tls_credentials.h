// gRPC credentials from the cluster's certificates (security/certs.h).
//
// Servers present their certificate and request the client's without
// judging it: coordinator/auth.h verifies it per call, so that a missing, foreign
// or expired certificate gets an UNAUTHENTICATED status with the reason
// rather than a bare handshake failure. Clients verify the server against
// the cluster CA (and its subjectAltName against the address they dial) and
// present their own certificate if they have one, or a bearer token.
#ifndef YOKE_SECURITY_TLS_CREDENTIALS_H_
#define YOKE_SECURITY_TLS_CREDENTIALS_H_

#include <memory>
#include <string>

#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "security/certs.h"

namespace yoke::common {

std::shared_ptr<grpc::ServerCredentials> TlsServerCredentials(const Credentials& c);

// `token` (may be empty) is sent as "authorization: Bearer <token>".
std::shared_ptr<grpc::ChannelCredentials> TlsChannelCredentials(const Credentials& c,
                                                                const std::string& token = "");

}  // namespace yoke::common

#endif  // YOKE_SECURITY_TLS_CREDENTIALS_H_
