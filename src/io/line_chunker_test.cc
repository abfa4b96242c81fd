#include "io/line_chunker.h"

#include <gtest/gtest.h>

#include <cstring>

#include "util/random.h"

namespace ctrbox {
namespace {

// A SequentialFile over a string, returning short reads of random sizes.
class StringFile : public SequentialFile {
 public:
  StringFile(std::string data, uint64_t seed) : data_(std::move(data)), rng_(seed) {}
  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    size_t want = std::min<size_t>(n, 1 + rng_.Below(64));
    size_t k = std::min(want, data_.size() - pos_);
    std::memcpy(scratch, data_.data() + pos_, k);
    pos_ += k;
    *bytes_read = k;
    return Status::OK();
  }
  const std::string& name() const override { return name_; }

 private:
  std::string data_, name_ = "mem";
  size_t pos_ = 0;
  Random rng_;
};

struct Line {
  uint64_t number;
  std::string text;
  bool overlong;
};

std::vector<Line> ChunkAll(const std::string& data, size_t chunk, size_t max_line, uint64_t seed) {
  LineChunker c(std::make_unique<StringFile>(data, seed), chunk, max_line);
  std::vector<Line> out;
  uint64_t expect_first = 1;
  while (true) {
    TextChunk t;
    bool eof = false;
    EXPECT_TRUE(c.Next(&t, &eof).ok());
    if (eof) break;
    EXPECT_EQ(t.first_line, expect_first);
    uint64_t n = t.first_line;
    size_t start = 0;
    while (start < t.data.size()) {
      size_t nl = t.data.find('\n', start);
      EXPECT_NE(nl, std::string::npos);
      out.push_back({n++, t.data.substr(start, nl - start), false});
      start = nl + 1;
    }
    for (uint64_t l : t.overlong_lines) {
      EXPECT_EQ(l, n);
      out.push_back({n++, "", true});
    }
    expect_first = n;
  }
  return out;
}

TEST(LineChunkerTest, ReassemblesLinesWithNumbers) {
  Random rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::string> lines;
    std::string data;
    int n = static_cast<int>(rng.Below(200));
    for (int i = 0; i < n; ++i) {
      std::string l(rng.Below(30), 'a' + static_cast<char>(i % 26));
      lines.push_back(l);
      data += l + "\n";
    }
    if (n > 0 && !lines.back().empty() && rng.Below(2)) {
      data.pop_back();  // last line without newline
    }
    auto got = ChunkAll(data, 1 + rng.Below(100), 1000, trial);
    ASSERT_EQ(got.size(), lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(got[i].number, i + 1);
      EXPECT_EQ(got[i].text, lines[i]);
    }
  }
}

TEST(LineChunkerTest, SkipsOverlongLinesAndKeepsNumbering) {
  std::string longline(5000, 'x');
  std::string data = "a\n" + longline + "\nb\n" + longline;  // the last one has no newline
  auto got = ChunkAll(data, 64, 100, 1);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].text, "a");
  EXPECT_TRUE(got[1].overlong);
  EXPECT_EQ(got[1].number, 2u);
  EXPECT_EQ(got[2].text, "b");
  EXPECT_EQ(got[2].number, 3u);
  EXPECT_TRUE(got[3].overlong);
}

// A chunk larger than the limit held an overlong line between short ones, and only the
// criteo parser looked at line lengths (views did not). The chunker skips every line longer
// than max_line_bytes, wherever it falls in a chunk, whatever the chunk size.
TEST(LineChunkerTest, EveryLineLongerThanTheLimitIsSkippedWhateverTheChunkSize) {
  Random rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t max_line = 1 + rng.Below(40);
    std::vector<std::string> lines;
    std::string data;
    const int n = 1 + static_cast<int>(rng.Below(60));
    for (int i = 0; i < n; ++i) {
      std::string l(rng.Below(2 * max_line + 2), 'a' + static_cast<char>(i % 26));
      if (!l.empty() && rng.Below(4) == 0) l.back() = '\r';  // CRLF: the '\r' is not counted
      lines.push_back(l);
      data += l + "\n";
    }
    auto got = ChunkAll(data, 1 + rng.Below(400), max_line, trial);
    ASSERT_EQ(got.size(), lines.size()) << trial;
    for (size_t i = 0; i < lines.size(); ++i) {
      size_t len = lines[i].size();
      if (len > 0 && lines[i].back() == '\r') --len;
      EXPECT_EQ(got[i].number, i + 1);
      EXPECT_EQ(got[i].overlong, len > max_line) << trial << " line " << i + 1 << " of " << len;
      if (!got[i].overlong) {
        EXPECT_EQ(got[i].text, lines[i]);
      }
    }
  }
}

}  // namespace
}  // namespace ctrbox
