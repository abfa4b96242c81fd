// The view parsers: CSV quoting, TSV, header mapping, JSON lines, and bad rows by kind.
#include "feature/view_parse.h"

#include <gtest/gtest.h>

namespace ctrbox {
namespace {

ViewLayout Layout(ViewFormat f, bool header, std::vector<ViewColumn> cols) {
  ViewLayout l;
  l.format = f;
  l.header = header;
  l.columns = std::move(cols);
  return l;
}

struct Parsed {
  TextChunk chunk;  // the strings point into it
  ColumnTable t;
  ParseOutcome o;
  Status status;
  Arena arena;
};

std::unique_ptr<Parsed> Parse(const ViewLayout& l, std::vector<std::string> header,
                              std::string text) {
  auto p = std::make_unique<Parsed>();
  auto parser = ViewParser::Make(l, std::move(header));
  EXPECT_TRUE(parser.ok()) << parser.status().ToString();
  p->chunk.file = "f.csv";
  p->chunk.data = std::move(text);
  p->status = parser->Parse(p->chunk, 0, &p->arena, 0, &p->t, &p->o);
  return p;
}

TEST(SplitFieldsTest, Rfc4180Quoting) {
  Arena a;
  std::vector<Str> f;
  ASSERT_TRUE(SplitFields(R"(a,"b,c","say ""hi""",,"")", ',', true, &a, 0, &f));
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0].view(), "a");
  EXPECT_EQ(f[1].view(), "b,c");
  EXPECT_EQ(f[2].view(), "say \"hi\"");
  EXPECT_EQ(f[3].view(), "");
  EXPECT_EQ(f[4].view(), "");
  EXPECT_FALSE(SplitFields(R"(a,"b)", ',', true, &a, 0, &f));       // unbalanced
  EXPECT_FALSE(SplitFields(R"(a,"b"x,c)", ',', true, &a, 0, &f));   // text after a quote
  EXPECT_FALSE(SplitFields(R"(a,b"c)", ',', true, &a, 0, &f));      // a stray quote
  ASSERT_TRUE(SplitFields("a\t\"b\"\tc", '\t', false, &a, 0, &f));  // TSV: quotes are text
  EXPECT_EQ(f[1].view(), "\"b\"");
}

TEST(ViewParserTest, CsvWithHeaderReadsOnlyDeclaredColumnsInAnyOrder) {
  auto l = Layout(ViewFormat::kCsv, true,
                  {{"y", ColType::kInt}, {"name", ColType::kString}, {"k", ColType::kKeys}});
  auto p = Parse(l, {"name", "skip", "y", "k"},
                 "name,skip,y,k\n\"a,b\",zz,1,3 4 5\n,q,0,\nc,w,x,1\nd,e,1\nx,y,1,7 z\n");
  ASSERT_TRUE(p->status.ok()) << p->status.ToString();
  ASSERT_EQ(p->t.rows, 2u);
  EXPECT_EQ(p->t.lines, (std::vector<uint64_t>{2, 3}));
  const Column& y = p->t.cols[0];
  const Column& name = p->t.cols[1];
  const Column& k = p->t.cols[2];
  EXPECT_EQ(y.ints()[0], 1);
  EXPECT_EQ(name.strs()[0].view(), "a,b");
  EXPECT_EQ(k.keys()[0].n, 3u);
  EXPECT_EQ(k.keys()[0].p[2], 5u);
  EXPECT_EQ(name.valid[1], 0);  // empty: null
  EXPECT_EQ(k.valid[1], 0);
  EXPECT_EQ(p->o.counts.good, 2u);
  EXPECT_EQ(p->o.counts.bad[static_cast<int>(BadKind::kBadNumber)], 2u);  // y=x, key z
  EXPECT_EQ(p->o.counts.bad[static_cast<int>(BadKind::kFieldCount)], 1u);
  ASSERT_FALSE(p->o.samples.empty());
  EXPECT_EQ(p->o.samples[0].line, 4u);
  EXPECT_NE(p->o.samples[0].detail.find("column y (int): 'x'"), std::string::npos)
      << p->o.samples[0].detail;
}

TEST(ViewParserTest, AHeaderThatDiffersStopsTheChunk) {
  auto l = Layout(ViewFormat::kTsv, true, {{"a", ColType::kInt}});
  auto p = Parse(l, {"a", "b"}, "b\ta\n1\t2\n");
  EXPECT_FALSE(p->status.ok());
  EXPECT_NE(p->status.message().find("f.csv:1: the header differs"), std::string::npos);
  // A header naming some declared columns but not all: a declared column is missing.
  auto two = Layout(ViewFormat::kTsv, true, {{"a", ColType::kInt}, {"c", ColType::kInt}});
  auto missing = ViewParser::Make(two, {"b", "a"});
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("column 'c' is declared but not in the header"),
            std::string::npos);
  // A first line naming none of them is data: no header, the columns in declared order.
  auto none = ViewParser::Make(two, {"7", "8"});
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->header(), (std::vector<std::string>{"a", "c"}));
}

TEST(ViewParserTest, JsonLines) {
  auto l = Layout(ViewFormat::kJsonl, false,
                  {{"id", ColType::kInt},
                   {"ctx", ColType::kString},
                   {"p", ColType::kFloat},
                   {"k", ColType::kKeys}});
  auto p = Parse(l, {},
                 "{\"id\": 7, \"ctx\": {\"a\": [1, 2]}, \"other\": [1], \"p\": 2, \"k\": [4, 5]}\n"
                 "{\"id\": null, \"ctx\": \"s\\u00e9\", \"k\": \"9 10\"}\n"
                 "{\"id\": \"x\"}\n"
                 "{\"id\": 1,}\n"
                 "[1]\n"
                 "{\"id\": 2} trailing\n"
                 "\n"
                 "{\"ctx\": 12.50}\n");
  ASSERT_TRUE(p->status.ok());
  ASSERT_EQ(p->t.rows, 3u);
  const Column& id = p->t.cols[0];
  const Column& ctx = p->t.cols[1];
  EXPECT_EQ(id.ints()[0], 7);
  EXPECT_EQ(ctx.strs()[0].view(), "{\"a\": [1, 2]}");
  EXPECT_EQ(p->t.cols[2].floats()[0], 2.0);
  EXPECT_EQ(p->t.cols[3].keys()[0].n, 2u);
  EXPECT_EQ(id.valid[1], 0);
  EXPECT_EQ(ctx.strs()[1].view(), "s\xc3\xa9");
  EXPECT_EQ(p->t.cols[3].keys()[1].p[1], 10u);
  EXPECT_EQ(p->t.cols[2].valid[1], 0);       // missing member: null
  EXPECT_EQ(ctx.strs()[2].view(), "12.50");  // a number in a string column: its text
  EXPECT_EQ(p->t.lines, (std::vector<uint64_t>{1, 2, 8}));
  EXPECT_EQ(p->o.counts.bad[static_cast<int>(BadKind::kBadNumber)], 1u);  // "x" for an int
  EXPECT_EQ(p->o.counts.bad[static_cast<int>(BadKind::kBadJson)], 3u);    // ,} [1] trailing
}

}  // namespace
}  // namespace ctrbox
