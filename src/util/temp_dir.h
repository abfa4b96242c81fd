// A fresh directory under /tmp for a test, removed with everything in it at destruction.
#ifndef CTRBOX_UTIL_TEMP_DIR_H_
#define CTRBOX_UTIL_TEMP_DIR_H_

#include <cstdlib>
#include <string>

namespace ctrbox::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ctrbox_test_XXXXXX";
    const char* made = mkdtemp(tmpl);
    if (made == nullptr) std::abort();  // no temporary directory: no test can run
    path_ = made;
  }
  ~TempDir() { (void)std::system(("rm -rf '" + path_ + "'").c_str()); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ctrbox::testing

#endif  // CTRBOX_UTIL_TEMP_DIR_H_
