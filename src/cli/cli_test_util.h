// The fixture of the command-line tests: runs the built ctrbox in a temporary directory and
// collects its exit code, standard output and error, and the last JSON line.
#ifndef CTRBOX_CLI_CLI_TEST_UTIL_H_
#define CTRBOX_CLI_CLI_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "util/env.h"
#include "util/parse.h"

namespace ctrbox {
namespace testing {

struct Result {
  int exit_code = -1;
  std::string out, err;
  nlohmann::json last_json;  // the last line of stdout, parsed (null if not JSON)
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctrbox_ = std::string(CTRBOX_BINARY_DIR) + "/ctrbox";
    source_ = CTRBOX_SOURCE_DIR;
    char tmpl[] = "/tmp/ctrbox_cli_XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }

  Result Run(const std::string& args, const std::string& stdin_file = "") {
    Result r;
    const std::string err_file = dir_ + "/stderr.txt";
    std::string cmd = args + " 2>" + err_file;
    if (!stdin_file.empty()) cmd += " <" + stdin_file;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
    int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    ReadFileToString(Env::Posix(), err_file, &r.err).IgnoreError();  // empty if absent
    std::string_view out = Trim(r.out);
    size_t nl = out.rfind('\n');
    std::string last(nl == std::string_view::npos ? out : out.substr(nl + 1));
    r.last_json = nlohmann::json::parse(last, nullptr, /*allow_exceptions=*/false);
    return r;
  }
  std::string Ctrbox(const std::string& args) { return ctrbox_ + " " + args; }
  std::string Path(const std::string& name) { return dir_ + "/" + name; }

  std::string ctrbox_, source_, dir_;
};

}  // namespace testing
}  // namespace ctrbox

#endif  // CTRBOX_CLI_CLI_TEST_UTIL_H_
