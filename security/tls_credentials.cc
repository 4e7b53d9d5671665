#include "security/tls_credentials.h"

#include "grpcpp/security/credentials.h"

namespace yoke::common {

std::shared_ptr<grpc::ServerCredentials> TlsServerCredentials(const Credentials& c) {
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_BUT_DONT_VERIFY);
  o.pem_root_certs = c.ca_pem;
  o.pem_key_cert_pairs.push_back({c.leaf.key_pem, c.leaf.cert_pem});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::ChannelCredentials> TlsChannelCredentials(const Credentials& c,
                                                                const std::string& token) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = c.ca_pem;
  o.pem_private_key = c.leaf.key_pem;
  o.pem_cert_chain = c.leaf.cert_pem;
  auto channel = grpc::SslCredentials(o);
  if (token.empty()) return channel;
  return grpc::CompositeChannelCredentials(channel, grpc::AccessTokenCredentials(token));
}

}  // namespace yoke::common
