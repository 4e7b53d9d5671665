#include "security/certs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/quote.h"
#include "common/read_file.h"
#include "openssl/bio.h"
#include "openssl/err.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/rand.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace yoke::common {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;

constexpr size_t kMaxPemBytes = 64 * 1024;
constexpr absl::string_view kOrganization = "yoke";

// OpenSSL's queued errors as one line, and the queue cleared.
std::string SslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

absl::Status SslError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", SslErrors()));
}

absl::StatusOr<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return SslError("generating a P-256 key");
  return key;
}

absl::StatusOr<std::string> ToPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return SslError("writing a certificate");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, n);
}

absl::StatusOr<std::string> ToPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return SslError("writing a private key");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, n);
}

absl::StatusOr<X509Ptr> ParseCert(absl::string_view pem) {
  if (pem.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat("certificate: ", pem.size(), " bytes, over the ",
                                                   kMaxPemBytes, "-byte limit"));
  }
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) {
    ERR_clear_error();
    return absl::InvalidArgumentError("not a PEM certificate");
  }
  return cert;
}

absl::StatusOr<KeyPtr> ParseKey(absl::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  KeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) {
    ERR_clear_error();
    return absl::InvalidArgumentError("not a PEM private key");
  }
  return key;
}

absl::Status AddEntry(X509_NAME* name, int nid, absl::string_view value) {
  if (X509_NAME_add_entry_by_NID(name, nid, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(value.data()),
                                 static_cast<int>(value.size()), -1, 0) != 1) {
    return SslError("building a certificate name");
  }
  return absl::OkStatus();
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return SslError(absl::StrCat("adding extension ", OBJ_nid2sn(nid), "=", value));
  }
  return absl::OkStatus();
}

// A certificate for `key`'s public half with the given subject and validity,
// not yet signed and without extensions.
absl::StatusOr<X509Ptr> NewCert(EVP_PKEY* key, absl::string_view cn, absl::string_view ou,
                                absl::Time not_before, absl::Duration validity) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return SslError("creating a certificate");
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return SslError("drawing a serial number");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  const bool serial_ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  if (!serial_ok) return SslError("setting the serial number");
  if (not_before == absl::InfinitePast()) not_before = absl::Now() - absl::Minutes(1);
  const absl::Time not_after = not_before + validity;
  if (!ASN1_TIME_set(X509_getm_notBefore(cert.get()), absl::ToTimeT(not_before)) ||
      !ASN1_TIME_set(X509_getm_notAfter(cert.get()), absl::ToTimeT(not_after))) {
    return SslError("setting the validity");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (auto s = AddEntry(name, NID_organizationName, kOrganization); !s.ok()) return s;
  if (auto s = AddEntry(name, NID_organizationalUnitName, ou); !s.ok()) return s;
  if (auto s = AddEntry(name, NID_commonName, cn); !s.ok()) return s;
  if (X509_set_pubkey(cert.get(), key) != 1) return SslError("setting the public key");
  return cert;
}

// The first value of `nid` in `name`, "" if none.
std::string NameEntry(X509_NAME* name, int nid) {
  const int i = X509_NAME_get_index_by_NID(name, nid, -1);
  if (i < 0) return "";
  ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
  unsigned char* utf8 = nullptr;
  const int n = ASN1_STRING_to_UTF8(&utf8, s);
  if (n < 0) return "";
  std::string out(reinterpret_cast<char*>(utf8), n);
  OPENSSL_free(utf8);
  return out;
}

bool IsIpAddress(const std::string& host) {
  ASN1_OCTET_STRING* ip = a2i_IPADDRESS(host.c_str());
  if (ip == nullptr) return false;
  ASN1_OCTET_STRING_free(ip);
  return true;
}

// Certificates and keys: regular files of at most kMaxPemBytes.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  return ReadRegularFile(path, kMaxPemBytes, "PEM file");
}

absl::Status WriteFile(const std::string& path, absl::string_view data, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(errno)));
  bool ok = ::fchmod(fd, mode) == 0;
  size_t done = 0;
  while (ok && done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += n;
  }
  const int err = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok) return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(err)));
  return absl::OkStatus();
}

absl::Status MakeDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat(dir, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kSubmitter:
      return "submitter";
    case Role::kAdmin:
      return "admin";
    case Role::kWorker:
      return "worker";
    case Role::kCoordinator:
      return "coordinator";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  for (Role r :
       {Role::kViewer, Role::kSubmitter, Role::kAdmin, Role::kWorker, Role::kCoordinator}) {
    if (name == RoleName(r)) return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("role: '", name.substr(0, 64),
                   "' is not one of viewer, submitter, admin, worker, coordinator"));
}

absl::Status ValidateCertName(absl::string_view name, bool allow_pool) {
  if (allow_pool && name.size() > 2 && absl::EndsWith(name, "-*")) {
    name.remove_suffix(2);
  }
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: must be 1 to 64 characters, got ", name.size()));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          "name: ", common::Quote(name), " may hold only letters, digits, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> WorkerIdFor(absl::string_view cert_name, absl::string_view hostname) {
  if (!absl::EndsWith(cert_name, "-*")) return std::string(cert_name);
  const std::string id =
      absl::StrCat(cert_name.substr(0, cert_name.size() - 1), hostname.substr(0, 64));
  if (auto s = ValidateCertName(id); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hostname: a worker of pool ", common::Quote(cert_name),
                     " registers as PREFIX-<hostname>, and ", common::Quote(hostname, 64),
                     " cannot be part of an id (", s.message(), ")"));
  }
  return id;
}

absl::StatusOr<KeyCert> CreateCa(absl::string_view cluster_name, absl::Duration validity) {
  auto key = NewKey();
  if (!key.ok()) return key.status();
  auto cert = NewCert(key->get(), absl::StrCat("yoke cluster CA ", cluster_name), "ca",
                      absl::InfinitePast(), validity);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(c)) != 1) return SslError("setting the issuer");
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                            std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                            std::pair{NID_subject_key_identifier, "hash"}}) {
    if (auto s = AddExtension(c, c, nid, value); !s.ok()) return s;
  }
  if (X509_sign(c, key->get(), EVP_sha256()) == 0) return SslError("signing the CA");
  KeyCert out;
  auto cert_pem = ToPem(c);
  auto key_pem = ToPem(key->get());
  if (!cert_pem.ok()) return cert_pem.status();
  if (!key_pem.ok()) return key_pem.status();
  out.cert_pem = std::move(*cert_pem);
  out.key_pem = std::move(*key_pem);
  return out;
}

absl::StatusOr<KeyCert> IssueCert(const KeyCert& ca, const IssueOptions& o) {
  if (auto s = ValidateCertName(o.name, /*allow_pool=*/o.role == Role::kWorker); !s.ok()) return s;
  if (o.validity <= absl::ZeroDuration())
    return absl::InvalidArgumentError("validity: must be > 0");
  auto ca_cert = ParseCert(ca.cert_pem);
  if (!ca_cert.ok()) return absl::InvalidArgumentError("CA certificate: not a PEM certificate");
  auto ca_key = ParseKey(ca.key_pem);
  if (!ca_key.ok()) return absl::InvalidArgumentError("CA key: not a PEM private key");
  if (X509_check_private_key(ca_cert->get(), ca_key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("CA key does not match the CA certificate");
  }
  auto key = NewKey();
  if (!key.ok()) return key.status();
  auto cert = NewCert(key->get(), o.name, RoleName(o.role), o.not_before, o.validity);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(ca_cert->get())) != 1) {
    return SslError("setting the issuer");
  }
  std::vector<std::string> sans;
  for (const std::string& h : o.hosts) {
    if (IsIpAddress(h)) {
      sans.push_back(absl::StrCat("IP:", h));
      continue;
    }
    const bool dns = !h.empty() && h.size() <= 253 && std::all_of(h.begin(), h.end(), [](char c) {
      return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '*';
    });
    if (!dns) {
      return absl::InvalidArgumentError(
          absl::StrCat("host: '", h.substr(0, 64), "' is neither a DNS name nor an IP address"));
    }
    sans.push_back(absl::StrCat("DNS:", h));
  }
  std::vector<std::pair<int, std::string>> exts = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
      {NID_ext_key_usage, "serverAuth,clientAuth"},
      {NID_authority_key_identifier, "keyid:always"},
  };
  if (!sans.empty()) exts.push_back({NID_subject_alt_name, absl::StrJoin(sans, ",")});
  for (const auto& [nid, value] : exts) {
    if (auto s = AddExtension(c, ca_cert->get(), nid, value); !s.ok()) return s;
  }
  if (X509_sign(c, ca_key->get(), EVP_sha256()) == 0) return SslError("signing the certificate");
  KeyCert out;
  auto cert_pem = ToPem(c);
  auto key_pem = ToPem(key->get());
  if (!cert_pem.ok()) return cert_pem.status();
  if (!key_pem.ok()) return key_pem.status();
  out.cert_pem = std::move(*cert_pem);
  out.key_pem = std::move(*key_pem);
  return out;
}

struct CertVerifier::Impl {
  StorePtr store;
};

CertVerifier::CertVerifier(CertVerifier&& o) noexcept : impl_(o.impl_) { o.impl_ = nullptr; }
CertVerifier& CertVerifier::operator=(CertVerifier&& o) noexcept {
  std::swap(impl_, o.impl_);
  return *this;
}
CertVerifier::~CertVerifier() { delete impl_; }

absl::StatusOr<CertVerifier> CertVerifier::Create(absl::string_view ca_pem) {
  auto ca = ParseCert(ca_pem);
  if (!ca.ok()) return absl::InvalidArgumentError("CA certificate: not a PEM certificate");
  StorePtr store(X509_STORE_new());
  if (!store || X509_STORE_add_cert(store.get(), ca->get()) != 1) return SslError("loading the CA");
  CertVerifier v;
  v.impl_ = new Impl{std::move(store)};
  return v;
}

absl::StatusOr<CertIdentity> CertVerifier::Verify(absl::string_view cert_pem,
                                                  absl::Time now) const {
  auto cert = ParseCert(cert_pem);
  if (!cert.ok()) return absl::UnauthenticatedError("peer certificate: not a PEM certificate");
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), impl_->store.get(), cert->get(), nullptr) != 1) {
    return SslError("verifying a certificate");
  }
  X509_STORE_CTX_set_time(ctx.get(), 0, absl::ToTimeT(now));
  X509_NAME* subject = X509_get_subject_name(cert->get());
  const std::string cn = NameEntry(subject, NID_commonName);
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::UnauthenticatedError(absl::StrCat(
        "certificate '", cn.substr(0, 64), "' refused: ", X509_verify_cert_error_string(err)));
  }
  CertIdentity id;
  if (NameEntry(subject, NID_organizationName) != kOrganization) {
    return absl::UnauthenticatedError(absl::StrCat("certificate '", cn.substr(0, 64),
                                                   "' is not a yoke identity (O is not 'yoke')"));
  }
  auto role = ParseRole(NameEntry(subject, NID_organizationalUnitName));
  if (!role.ok()) {
    return absl::UnauthenticatedError(absl::StrCat("certificate '", cn.substr(0, 64),
                                                   "' names no role: ", role.status().message()));
  }
  if (auto s = ValidateCertName(cn, /*allow_pool=*/*role == Role::kWorker); !s.ok()) {
    return absl::UnauthenticatedError(absl::StrCat("certificate CN: ", s.message()));
  }
  id.role = *role;
  id.name = cn;
  int days = 0, secs = 0;
  if (ASN1_TIME_diff(&days, &secs, nullptr, X509_get0_notAfter(cert->get())) == 1) {
    id.not_after = absl::Now() + absl::Hours(24) * days + absl::Seconds(secs);
  }
  return id;
}

absl::StatusOr<Credentials> ReadCredentialsDir(const std::string& dir, bool need_leaf) {
  Credentials c;
  auto ca = ReadSmallFile(dir + "/ca.crt");
  if (!ca.ok()) return ca.status();
  c.ca_pem = std::move(*ca);
  std::error_code ec;
  const std::string crt = dir + "/tls.crt", key = dir + "/tls.key";
  if (!need_leaf && !std::filesystem::exists(crt, ec) && !std::filesystem::exists(key, ec)) {
    return c;
  }
  struct stat st;
  // Others may not read it; a group may (Kubernetes secret volumes with an
  // fsGroup are 0440).
  if (::stat(key.c_str(), &st) == 0 && (st.st_mode & 0007) != 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: readable by others (mode %o); chmod 600 it", key, st.st_mode & 0777));
  }
  auto leaf_crt = ReadSmallFile(crt);
  if (!leaf_crt.ok()) return leaf_crt.status();
  auto leaf_key = ReadSmallFile(key);
  if (!leaf_key.ok()) return leaf_key.status();
  c.leaf.cert_pem = std::move(*leaf_crt);
  c.leaf.key_pem = std::move(*leaf_key);
  return c;
}

absl::StatusOr<KeyCert> ReadCaDir(const std::string& dir) {
  KeyCert ca;
  auto cert = ReadSmallFile(dir + "/ca.crt");
  if (!cert.ok()) return cert.status();
  auto key = ReadSmallFile(dir + "/ca.key");
  if (!key.ok()) return key.status();
  ca.cert_pem = std::move(*cert);
  ca.key_pem = std::move(*key);
  return ca;
}

absl::Status WriteCaDir(const std::string& dir, const KeyCert& ca) {
  if (auto s = MakeDir(dir); !s.ok()) return s;
  std::error_code ec;
  if (std::filesystem::exists(dir + "/ca.key", ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(dir, "/ca.key exists: a CA is never overwritten (remove it to start over)"));
  }
  ::chmod(dir.c_str(), 0700);
  if (auto s = WriteFile(dir + "/ca.key", ca.key_pem, 0600); !s.ok()) return s;
  return WriteFile(dir + "/ca.crt", ca.cert_pem, 0644);
}

absl::Status WriteCredentialsDir(const std::string& dir, absl::string_view ca_cert_pem,
                                 const KeyCert& leaf) {
  if (auto s = MakeDir(dir); !s.ok()) return s;
  ::chmod(dir.c_str(), 0700);
  if (auto s = WriteFile(dir + "/tls.key", leaf.key_pem, 0600); !s.ok()) return s;
  if (auto s = WriteFile(dir + "/tls.crt", leaf.cert_pem, 0644); !s.ok()) return s;
  return WriteFile(dir + "/ca.crt", ca_cert_pem, 0644);
}

absl::Status IssueCredentialsDir(const KeyCert& ca, const IssueOptions& options,
                                 const std::string& dir) {
  auto leaf = IssueCert(ca, options);
  if (!leaf.ok()) return leaf.status();
  return WriteCredentialsDir(dir, ca.cert_pem, *leaf);
}

}  // namespace yoke::common
