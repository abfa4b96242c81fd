#include "exec/cublas_lazy.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace ctrbox {
namespace {

std::string Maps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The libraries are not mapped until the first call (every CUDA-built process paid ~147 MB
// for them); the first call opens them and every wrapper's symbol resolves. (No GPU needed:
// this opens the libraries, it creates no handle.)
TEST(CublasLazyTest, TheLibrariesOpenAtTheFirstUseAndEverySymbolResolves) {
  EXPECT_FALSE(cublas_lazy::Loaded());
  EXPECT_EQ(Maps().find("libcublasLt"), std::string::npos);
  const std::string& error = cublas_lazy::LoadError();
  if (!error.empty()) {  // a CUDA build run where the toolkit's libraries are not installed
    EXPECT_NE(error.find("libcublasLt"), std::string::npos) << error;
    EXPECT_EQ(cublas_lazy::cublasLtCreate(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
    GTEST_SKIP() << error;
  }
  EXPECT_TRUE(cublas_lazy::Loaded());
  EXPECT_NE(Maps().find("libcublasLt"), std::string::npos);
  EXPECT_STREQ(cublas_lazy::cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE),
               "CUBLAS_STATUS_INVALID_VALUE");
}

}  // namespace
}  // namespace ctrbox
