// A multi-host Yoke cluster on one machine, for the end-to-end tests: every
// "host" is a Linux network namespace with its own loopback, its own address
// and its own veth into a bridge, so that what crosses the network really
// crosses it (a trainer that advertised 127.0.0.1 cannot be reached from
// another host, a link can be cut with `ip link set eth0 down`).
//
//   namespace        address      runs
//   <tag>-sw         -            the bridge br0 (the switch) and the peers p<i>
//   <tag>-coord      10.77.0.2    yoke-coordinator (listening on 10.77.0.2)
//   <tag>-cli        10.77.0.3    the `yoke` CLI
//   <tag>-h<i>       10.77.0.1<i> yoke-worker w-<i+1> (i = 0, 1, ...)
//
// <tag> is "yk<pid>", unique per test process. Everything is created by the
// constructor and removed by the destructor, also when the test fails; a
// namespace left behind by a test process that was killed is removed by the
// next NetnsCluster (its pid no longer runs). Nothing is added to the root
// namespace and no traffic leaves the machine: the bridge has no uplink.
//
// Creating namespaces needs CAP_NET_ADMIN (root). Where it is missing,
// ok() is false and skip_reason() says why; tests GTEST_SKIP with it.
#ifndef YOKE_TESTS_NETNS_CLUSTER_H_
#define YOKE_TESTS_NETNS_CLUSTER_H_

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e_util.h"

namespace yoke::e2e {

// posix_spawn does not search PATH.
inline std::string IpBinary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "/usr/sbin/ip";
}

class NetnsCluster {
 public:
  static constexpr int kCoordinatorPort = 7070;

  // Creates the namespaces and the network for `hosts` worker hosts. Start
  // the daemons with StartCoordinator() and StartWorkers().
  explicit NetnsCluster(int hosts) : tag_("yk" + std::to_string(getpid())) {
    dir_ = MakeTempDir("yoke_netns");
    RemoveStaleNamespaces();
    if (getuid() != 0) {
      skip_reason_ = "network namespaces need root (CAP_NET_ADMIN); running as uid " +
                     std::to_string(getuid());
      return;
    }
    RunResult probe = Sh("ip netns add " + Ns("sw"), true);
    if (probe.exit_code != 0) {
      skip_reason_ = "cannot create a network namespace: `ip netns add` said: " + probe.out;
      return;
    }
    created_.push_back(Ns("sw"));
    if (!Ip("-n " + Ns("sw") + " link add br0 type bridge") ||
        !Ip("-n " + Ns("sw") + " link set br0 up") || !Ip("-n " + Ns("sw") + " link set lo up")) {
      return;
    }
    if (!AddHost("coord", "10.77.0.2", 0) || !AddHost("cli", "10.77.0.3", 1)) return;
    for (int i = 0; i < hosts; ++i) {
      if (!AddHost("h" + std::to_string(i), HostAddress(i), 2 + i)) return;
    }
    ok_ = true;
  }

  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  ~NetnsCluster() {
    // Daemons first (with their trainers), then the namespaces: deleting a
    // namespace removes its veth ends, and the bridge goes with "sw".
    workers_.clear();
    coordinator_.Kill();
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
      Sh("ip netns del " + *it + " 2>/dev/null");
    }
    if (!::testing::Test::HasFailure()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    } else {
      std::fprintf(stderr, "netns cluster directory kept for inspection: %s\n", dir_.c_str());
    }
  }

  bool ok() const { return ok_; }
  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& dir() const { return dir_; }
  std::string Ns(const std::string& host) const { return tag_ + "-" + host; }
  static std::string HostAddress(int i) { return "10.77.0." + std::to_string(11 + i); }
  std::string coordinator_address() const {
    return "10.77.0.2:" + std::to_string(kCoordinatorPort);
  }

  // yoke-coordinator in its namespace, its store in dir()/coordinator.db.
  // `extra` is added to its command line. False if it does not come up.
  bool StartCoordinator(const std::vector<std::string>& extra = {}) {
    // Mutual TLS as in production: the coordinator's certificate names its
    // address, each worker's names its id (w-1 on h0, ...).
    if (!std::filesystem::exists(dir_ + "/tls/ca/ca.key")) {
      std::vector<std::string> ids;
      for (size_t i = 0; i < HostCount(); ++i) ids.push_back("w-" + std::to_string(i + 1));
      const std::string failed = IssueTestCerts(dir_ + "/tls", {"10.77.0.2"}, ids);
      if (!failed.empty()) {
        std::fprintf(stderr, "NetnsCluster: %s\n", failed.c_str());
        return false;
      }
    }
    std::vector<std::string> argv = {IpBinary(),
                                     "netns",
                                     "exec",
                                     Ns("coord"),
                                     BinDir() + "/yoke-coordinator",
                                     "--listen",
                                     coordinator_address(),
                                     "--store",
                                     dir_ + "/coordinator.db",
                                     "--heartbeat-deadline",
                                     "5s",
                                     "--tls-dir",
                                     dir_ + "/tls/coordinator"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    coordinator_ = Daemon(argv, dir_ + "/coordinator.log");
    return WaitFor([&] { return LogHas("coordinator.log", "listening on"); },
                   std::chrono::seconds(20));
  }

  // One yoke-worker per host (w-1 on h0, ...), each with `replicas` CPU
  // replicas and its own work dir; `extra` is added to each command line.
  // False unless every worker registered.
  bool StartWorkers(int replicas = 1, const std::vector<std::string>& extra = {}) {
    for (size_t i = 0; i < HostCount(); ++i) {
      if (!StartWorker(static_cast<int>(i), replicas, extra)) return false;
    }
    return true;
  }

  bool StartWorker(int host, int replicas = 1, const std::vector<std::string>& extra = {}) {
    const std::string h = "h" + std::to_string(host);
    std::string work = dir_ + "/work-" + h;
    std::filesystem::create_directories(work);
    std::vector<std::string> argv = {IpBinary(),
                                     "netns",
                                     "exec",
                                     Ns(h),
                                     BinDir() + "/yoke-worker",
                                     "--coordinator",
                                     coordinator_address(),
                                     "--cpu-replicas",
                                     std::to_string(replicas),
                                     "--work-dir",
                                     work,
                                     "--heartbeat-interval",
                                     "500ms",
                                     "--stop-grace",
                                     "3s",
                                     "--tls-dir",
                                     dir_ + "/tls/w-" + std::to_string(host + 1)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const std::string log = "worker-" + h + ".log";
    if (static_cast<size_t>(host) >= workers_.size()) workers_.resize(host + 1);
    workers_[host] = std::make_unique<Daemon>(argv, dir_ + "/" + log);
    return WaitFor([&] { return LogHas(log, "registered with"); }, std::chrono::seconds(20));
  }

  Daemon& worker(int host) { return *workers_[host]; }
  Daemon& coordinator() { return coordinator_; }
  size_t HostCount() const { return hosts_.size() - 2; }

  // `yoke ARGS --coordinator ADDR`, run in the CLI's namespace.
  RunResult Yoke(const std::string& args, bool merge_stderr = false) const {
    return Sh("ip netns exec " + Ns("cli") + " " + BinDir() + "/yoke " + args + " --coordinator " +
                  coordinator_address() + " --tls-dir " + dir_ + "/tls/admin",
              merge_stderr);
  }

  bool GetJob(const std::string& id, v1::Job* job) const {
    RunResult r = Yoke("get " + id + " --output json");
    return r.exit_code == 0 && ParseJson(r.out, job);
  }

  // Submits, then waits up to `timeout` for a terminal state.
  bool SubmitAndWait(const std::string& args, std::chrono::seconds timeout, std::string* id,
                     v1::Job* job) const {
    RunResult s = Yoke("submit " + args, true);
    if (s.exit_code != 0) {
      *id = "";
      job->set_reason("submit failed: " + s.out);
      return false;
    }
    *id = s.out.substr(0, s.out.find('\n'));
    return WaitForState(*id, timeout, job);
  }

  bool WaitForState(const std::string& id, std::chrono::seconds timeout, v1::Job* job) const {
    return WaitFor(
        [&] {
          return GetJob(id, job) &&
                 (job->state() == v1::JOB_SUCCEEDED || job->state() == v1::JOB_FAILED ||
                  job->state() == v1::JOB_CANCELLED);
        },
        timeout);
  }

  // Takes host i's link down or up (its veth inside the host namespace).
  bool SetLink(int host, bool up) {
    return Ip("-n " + Ns("h" + std::to_string(host)) + " link set eth0 " + (up ? "up" : "down"));
  }

  // A firewall on host `host`: new TCP connections from the network reach
  // only `ports` ("41000:41005", iptables' multiport syntax); the rest are
  // dropped, as a firewalled machine would. Removed with the namespace.
  bool Firewall(int host, const std::string& ports) {
    RunResult r = Sh("ip netns exec " + Ns("h" + std::to_string(host)) +
                         " iptables -A INPUT -i eth0 -p tcp --syn -m multiport ! --dports " +
                         ports + " -j DROP",
                     true);
    if (r.exit_code != 0) std::fprintf(stderr, "NetnsCluster: iptables: %s\n", r.out.c_str());
    return r.exit_code == 0;
  }

  // Every daemon's log, the tail of each, for failure messages.
  std::string Logs() const { return LogTails(dir_); }

 private:
  bool Ip(const std::string& args) {
    RunResult r = Sh("ip " + args, true);
    if (r.exit_code != 0) {
      skip_reason_ = "ip " + args + ": " + r.out;
      ADD_FAILURE() << "network setup failed: " << skip_reason_;
      return false;
    }
    return true;
  }

  // A namespace <tag>-<name> with lo up and eth0 at `address`/24, whose veth
  // peer p<index> is a port of the bridge.
  bool AddHost(const std::string& name, const std::string& address, int index) {
    const std::string ns = Ns(name);
    const std::string peer = "p" + std::to_string(index);
    if (!Ip("netns add " + ns)) return false;
    created_.push_back(ns);
    hosts_.push_back(name);
    return Ip("link add eth0 netns " + ns + " type veth peer name " + peer + " netns " +
              Ns("sw")) &&
           Ip("-n " + Ns("sw") + " link set " + peer + " master br0") &&
           Ip("-n " + Ns("sw") + " link set " + peer + " up") &&
           Ip("-n " + ns + " addr add " + address + "/24 dev eth0") &&
           Ip("-n " + ns + " link set eth0 up") && Ip("-n " + ns + " link set lo up");
  }

  bool LogHas(const std::string& log, const std::string& text) const {
    std::ifstream in(dir_ + "/" + log);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return all.find(text) != std::string::npos;
  }

  // Namespaces of earlier test processes that died before their destructor
  // ran ("yk<pid>-..." whose pid is gone).
  static void RemoveStaleNamespaces() {
    RunResult list = Sh("ip netns list 2>/dev/null");
    std::istringstream in(list.out);
    static const std::regex kName(R"(^(yk(\d+)-\S+))");
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, kName)) continue;
      pid_t pid = static_cast<pid_t>(std::stol(m[2].str()));
      if (pid != getpid() && kill(pid, 0) != 0) Sh("ip netns del " + m[1].str() + " 2>/dev/null");
    }
  }

  std::string tag_;
  std::string dir_;
  bool ok_ = false;
  std::string skip_reason_;
  std::vector<std::string> created_;  // namespaces, in creation order
  std::vector<std::string> hosts_;    // "coord", "cli", "h0", ...
  Daemon coordinator_;
  std::vector<std::unique_ptr<Daemon>> workers_;
};

}  // namespace yoke::e2e

#endif  // YOKE_TESTS_NETNS_CLUSTER_H_
