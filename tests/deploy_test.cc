// deploy/: the Kubernetes manifests, systemd units and Dockerfile stay true
// to the binaries. Every manifest is well-formed YAML that names what it is,
// kustomizations point at files that exist, and the daemon configs and
// command lines they carry start the real yoke-coordinator and yoke-worker
// (only the paths and the listen address are moved to this machine), which
// then see each other. A renamed flag or config field fails here, not in a
// user's cluster.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "config/config.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/config.pb.h"
#include "tests/e2e_util.h"
#include "yaml-cpp/yaml.h"

namespace yoke::e2e {
namespace {

namespace fs = std::filesystem;

std::string Deploy() { return SourceDir() + "/deploy"; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> K8sFiles() {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(Deploy() + "/k8s")) {
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  }
  return out;
}

// Every document of every manifest, by kind and name.
std::map<std::string, YAML::Node> Objects() {
  std::map<std::string, YAML::Node> out;
  for (const std::string& f : K8sFiles()) {
    for (const YAML::Node& d : YAML::LoadAllFromFile(f)) {
      if (d["kind"] && d["metadata"] && d["metadata"]["name"]) {
        out[d["kind"].as<std::string>() + "/" + d["metadata"]["name"].as<std::string>()] = d;
      }
    }
  }
  return out;
}

TEST(DeployTest, KubernetesManifestsAreWellFormedAndComplete) {
  const std::vector<std::string> files = K8sFiles();
  ASSERT_GE(files.size(), 5u) << "no manifests under " << Deploy() << "/k8s";
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    std::vector<YAML::Node> docs;
    ASSERT_NO_THROW(docs = YAML::LoadAllFromFile(f));
    ASSERT_FALSE(docs.empty());
    for (const YAML::Node& d : docs) {
      ASSERT_TRUE(d.IsMap());
      ASSERT_TRUE(d["apiVersion"] && d["kind"]) << "a document without apiVersion/kind";
      const std::string kind = d["kind"].as<std::string>();
      if (kind == "Kustomization") {
        // Every resource and patch it names exists next to it.
        const fs::path dir = fs::path(f).parent_path();
        for (const char* key : {"resources", "bases", "patches", "patchesStrategicMerge"}) {
          if (!d[key]) continue;
          for (const YAML::Node& r : d[key]) {
            const std::string rel = r.IsMap() ? r["path"].as<std::string>() : r.as<std::string>();
            EXPECT_TRUE(fs::exists(dir / rel)) << key << ": " << rel;
          }
        }
      } else {
        EXPECT_TRUE(d["metadata"] && d["metadata"]["name"]) << kind << " without a name";
      }
    }
  }
  const auto objects = Objects();
  for (const char* want :
       {"ConfigMap/yoke-coordinator", "Service/yoke-coordinator", "StatefulSet/yoke-coordinator",
        "ConfigMap/yoke-worker", "DaemonSet/yoke-worker"}) {
    EXPECT_EQ(objects.count(want), 1u) << want;
  }
  // The worker's config reaches the coordinator through its Service, on the
  // port the coordinator listens on.
  v1::CoordinatorConfig cc;
  v1::WorkerConfig wc;
  ASSERT_TRUE(common::YamlToProto(
                  YAML::Load(objects.at("ConfigMap/yoke-coordinator")["data"]["coordinator.yaml"]
                                 .as<std::string>()),
                  &cc, "")
                  .ok());
  ASSERT_TRUE(
      common::YamlToProto(
          YAML::Load(objects.at("ConfigMap/yoke-worker")["data"]["worker.yaml"].as<std::string>()),
          &wc, "")
          .ok());
  const std::string port = cc.listen().substr(cc.listen().rfind(':') + 1);
  EXPECT_EQ(wc.coordinator(), "yoke-coordinator:" + port);
  EXPECT_EQ(objects.at("Service/yoke-coordinator")["spec"]["ports"][0]["port"].as<std::string>(),
            port);
}

// The command line of the first container of `obj`, with the ConfigMap's
// file written to `dir` and its mount path replaced by that file.
std::vector<std::string> ContainerCommand(const YAML::Node& obj, const YAML::Node& config_map,
                                          const std::string& dir) {
  const YAML::Node c = obj["spec"]["template"]["spec"]["containers"][0];
  std::vector<std::string> argv;
  for (const YAML::Node& a : c["command"]) argv.push_back(a.as<std::string>());
  std::string mount;
  for (const YAML::Node& m : c["volumeMounts"]) {
    if (m["name"].as<std::string>() == "config") mount = m["mountPath"].as<std::string>();
  }
  for (const auto& kv : config_map["data"]) {
    std::ofstream(dir + "/" + kv.first.as<std::string>()) << kv.second.as<std::string>();
  }
  for (const YAML::Node& a : c["args"]) {
    std::string arg = a.as<std::string>();
    if (!mount.empty() && absl::StartsWith(arg, mount + "/")) {
      arg = dir + arg.substr(mount.size());
    }
    argv.push_back(arg);
  }
  // The image installs the binaries in /usr/local/bin; here they are built.
  argv[0] = BinDir() + "/" + fs::path(argv[0]).filename().string();
  return argv;
}

// Starts the coordinator and one worker from `coordinator_argv` and
// `worker_argv` (plus this machine's paths and port) and waits until the
// worker shows up in `yoke workers`.
void ExpectDaemonsStartAndMeet(std::vector<std::string> coordinator_argv,
                               std::vector<std::string> worker_argv, const std::string& dir) {
  const std::string addr = absl::StrCat("127.0.0.1:", FreePort());
  // The configs name their TLS directories on the target machine; here
  // credentials made by `yoke certs` stand in (the flag overrides the file).
  const std::string tls = dir + "/tls";
  ASSERT_EQ(IssueTestCerts(tls, {"127.0.0.1"}, {"w-1"}), "");
  coordinator_argv.insert(
      coordinator_argv.end(),
      {"--listen", addr, "--store", dir + "/coordinator.db", "--tls-dir", tls + "/coordinator"});
  worker_argv.insert(worker_argv.end(), {"--coordinator", addr, "--work-dir", dir + "/work",
                                         "--no-cuda", "--tls-dir", tls + "/w-1"});
  Daemon coordinator(coordinator_argv, dir + "/coordinator.log");
  ASSERT_GT(coordinator.pid(), 0);
  Daemon worker(worker_argv, dir + "/worker.log");
  ASSERT_GT(worker.pid(), 0);
  RunResult r;
  const bool met = WaitFor(
      [&] {
        r = Sh(BinDir() + "/yoke workers --output json --coordinator " + addr + " --tls-dir " +
               tls + "/admin");
        return r.exit_code == 0 && r.out.find("\"w-1\"") != std::string::npos;
      },
      std::chrono::seconds(30));
  EXPECT_TRUE(met) << r.out << "\n==== coordinator.log\n"
                   << Slurp(dir + "/coordinator.log") << "\n==== worker.log\n"
                   << Slurp(dir + "/worker.log");
}

TEST(DeployTest, KubernetesConfigsAndCommandLinesStartTheRealDaemons) {
  const auto objects = Objects();
  const std::string dir = MakeTempDir("yoke_deploy_k8s");
  ExpectDaemonsStartAndMeet(ContainerCommand(objects.at("StatefulSet/yoke-coordinator"),
                                             objects.at("ConfigMap/yoke-coordinator"), dir),
                            ContainerCommand(objects.at("DaemonSet/yoke-worker"),
                                             objects.at("ConfigMap/yoke-worker"), dir),
                            dir);
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// ExecStart of a systemd unit, with /etc/yoke/ replaced by deploy/systemd/.
std::vector<std::string> ExecStart(const std::string& unit) {
  const std::string text = Slurp(Deploy() + "/systemd/" + unit);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "ExecStart=")) continue;
    std::vector<std::string> argv = absl::StrSplit(rest, ' ', absl::SkipEmpty());
    for (std::string& a : argv) {
      if (absl::StartsWith(a, "/etc/yoke/")) a = Deploy() + "/systemd/" + a.substr(10);
    }
    argv[0] = BinDir() + "/" + fs::path(argv[0]).filename().string();
    return argv;
  }
  ADD_FAILURE() << unit << " has no ExecStart line";
  return {"/bin/false"};
}

TEST(DeployTest, SystemdUnitsAndConfigsStartTheRealDaemons) {
  const std::string dir = MakeTempDir("yoke_deploy_systemd");
  ExpectDaemonsStartAndMeet(ExecStart("yoke-coordinator.service"), ExecStart("yoke-worker.service"),
                            dir);
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// Both units run the daemons as an unprivileged user that cannot gain
// privileges, with the system directories read-only.
TEST(DeployTest, SystemdUnitsRunUnprivileged) {
  for (const char* unit : {"yoke-coordinator.service", "yoke-worker.service"}) {
    std::map<std::string, std::string> service;
    for (absl::string_view line : absl::StrSplit(Slurp(Deploy() + "/systemd/" + unit), '\n')) {
      const size_t eq = line.find('=');
      if (line.empty() || line[0] == '#' || eq == absl::string_view::npos) continue;
      service[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
    EXPECT_FALSE(service["User"].empty()) << unit << " runs as root";
    EXPECT_NE(service["User"], "root") << unit;
    EXPECT_EQ(service["NoNewPrivileges"], "yes") << unit;
    EXPECT_EQ(service["ProtectSystem"], "full") << unit;
  }
}

// The image installs the runtime libraries by Debian package name; a wrong
// name fails `docker build`. They are installed here too (as dependencies of
// the -dev packages the build uses), so dpkg knows each one.
TEST(DeployTest, DockerfileRuntimePackagesExist) {
  const std::string df = Slurp(Deploy() + "/docker/Dockerfile");
  // The runtime stage is the last; its base defaults to Debian 12 slim.
  EXPECT_NE(df.find("ARG RUNTIME_IMAGE=debian:12-slim\n"), std::string::npos);
  const size_t runtime = df.rfind("\nFROM ${RUNTIME_IMAGE}");
  ASSERT_NE(runtime, std::string::npos);
  const std::string marker = "--no-install-recommends";
  const size_t from = df.find(marker, runtime);
  ASSERT_NE(from, std::string::npos);
  const size_t to = df.find("&& rm -rf", from);
  ASSERT_NE(to, std::string::npos);
  const std::string list = df.substr(from + marker.size(), to - from - marker.size());
  int checked = 0;
  for (absl::string_view p : absl::StrSplit(list, absl::ByAnyChar(" \\\n"), absl::SkipEmpty())) {
    RunResult r = Sh(absl::StrCat("dpkg-query -W -f='${Status}' '", p, "' 2>&1"));
    EXPECT_NE(r.out.find("install ok installed"), std::string::npos)
        << "Dockerfile installs '" << p << "', which dpkg does not know here: " << r.out;
    ++checked;
  }
  EXPECT_GE(checked, 8);
  // The binaries it builds and copies are this project's targets.
  for (const char* bin : {"yoke", "yoke-coordinator", "yoke-worker", "yoke-trainer"}) {
    EXPECT_TRUE(fs::exists(BinDir() + "/" + bin)) << bin;
    EXPECT_NE(df.find(absl::StrCat("/build/bin/", bin, " ")), std::string::npos) << bin;
  }
}

}  // namespace
}  // namespace yoke::e2e
