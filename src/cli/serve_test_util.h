// The fixture of the `ctrbox serve` end-to-end tests (serve_cli_test.cc,
// serve_graph_cli_test.cc): servers started as processes, curl, a Python client script.
#ifndef CTRBOX_CLI_SERVE_TEST_UTIL_H_
#define CTRBOX_CLI_SERVE_TEST_UTIL_H_

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/cli_test_util.h"

namespace ctrbox::testing {

class ServeFixture : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    if (std::system("command -v curl >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "no curl (scripts/setup)";
  }
  void TearDown() override {
    for (pid_t p : servers_) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    CliTest::TearDown();
  }

  // Starts `ctrbox serve ARGS --port 0`; returns its port once it listens (0: it failed).
  int Serve(const std::string& args, const std::string& name = "serve") {
    const std::string out = Path(name + ".out"), err = Path(name + ".err");
    Env::Posix()->DeleteFile(out).IgnoreError();  // (a server before under the same name)
    const std::string cmd =
        "exec " + ctrbox_ + " serve " + args + " --port 0 >" + out + " 2>" + err;
    pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    servers_.push_back(pid);
    for (int i = 0; i < 3000; ++i) {
      std::string text;
      if (ReadFileToString(Env::Posix(), out, &text).ok() && !text.empty()) {
        auto j = nlohmann::json::parse(text.substr(0, text.find('\n')), nullptr, false);
        if (j.is_object() && j.contains("port")) return j["port"].get<int>();
      }
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        servers_.pop_back();
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }
  // SIGTERM to the newest server; its exit status (-1: killed by a signal).
  int StopServer() {
    const pid_t pid = servers_.back();
    servers_.pop_back();
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  Result Client(const std::string& args) {
    return Run("python3 " + Path("client.py") + " " + args);
  }
  // curl's HTTP status and body.
  std::pair<int, std::string> Curl(int port, const std::string& path,
                                   const std::string& body = "") {
    const std::string data = body.empty() ? "" : " --data-binary @" + Path("body.json");
    if (!body.empty()) {
      EXPECT_TRUE(WriteFileAtomic(Env::Posix(), Path("body.json"), body).ok());
    }
    Result r = Run(fmt::format("curl -s -o {} -w '%{{http_code}}'{} http://127.0.0.1:{}{}",
                               Path("curl.out"), data, port, path));
    std::string out;
    ReadFileToString(Env::Posix(), Path("curl.out"), &out).IgnoreError();
    return {std::atoi(r.out.c_str()), out};
  }
  std::string Log(const std::string& name = "serve") {
    std::string text;
    ReadFileToString(Env::Posix(), Path(name + ".err"), &text).IgnoreError();
    return text;
  }

  std::vector<pid_t> servers_;
};

}  // namespace ctrbox::testing

#endif  // CTRBOX_CLI_SERVE_TEST_UTIL_H_
