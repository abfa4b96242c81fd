// A request's tensors (tensors.h) and their rows (infer.h): sizes checked with no overflow,
// INT64 keys as their bit patterns, binary tensor data equal to JSON data, bad input named.
#include "serve/tensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "serve/infer.h"

namespace ctrbox {
namespace {

ServedVersion Version(uint32_t slots, uint32_t dense) {
  ServedVersion v;
  v.version = 3;
  v.spec.schema = Schema{slots, dense};
  return v;
}

std::string ErrorOf(std::string_view json, std::string_view binary = {}) {
  auto r = ReadRequestTensors(json, binary);
  return r.ok() ? "OK" : r.status().message();
}

template <typename T>
void Append(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

// The 250-byte request that crashed the server: a shape whose product overflows int64.
TEST(RequestTensorsTest, AShapeWhoseProductOverflowsIsRefusedNotTrusted) {
  const std::string body =
      R"({"inputs":[{"name":"keys","datatype":"INT64","shape":[1418980313362273202,26],)"
      R"("data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}]})";
  EXPECT_NE(
      ErrorOf(body).find("inputs[0] (keys).shape: [1418980313362273202, 26] holds more elements"),
      std::string::npos)
      << ErrorOf(body);
  const ServedVersion v = Version(26, 0);
  auto r = ParseInferRequest(body, v);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // Every product that wraps: two large dimensions, and one that fits int64 alone.
  for (const char* shape :
       {"[4294967296,4294967296]", "[9223372036854775807,2]", "[3037000500,3037000500,2]"}) {
    const std::string b = std::string(R"({"inputs":[{"name":"keys","datatype":"INT64","shape":)") +
                          shape + R"(,"data":[1]}]})";
    EXPECT_NE(ErrorOf(b).find("holds more elements than a request can"), std::string::npos)
        << shape << ": " << ErrorOf(b);
  }
  // A binary tensor whose byte count would wrap.
  const std::string bin =
      R"({"inputs":[{"name":"keys","datatype":"INT64","shape":[2305843009213693952],)"
      R"("parameters":{"binary_data_size":8}}]})";
  EXPECT_NE(ErrorOf(bin, std::string(8, '\0')), "OK");
}

// A key with the top bit set is a key (its INT64 bit pattern), never an empty slot; an empty
// slot is a JSON null, or false in `present`.
TEST(RequestTensorsTest, TopBitKeysAreTheirBitPatternsAndNullIsEmpty) {
  const ServedVersion v = Version(4, 0);
  const std::string body = R"({"inputs":[{"name":"keys","datatype":"INT64","shape":[2,4],)"
                           R"("data":[[-1,-9223372036854775808,9223372036854775807,null],)"
                           R"([18446744073709551615,0,-2,7]]}]})";
  auto r = ParseInferRequest(body, v);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Batch& b = r->rows;
  ASSERT_EQ(b.rows(), 2u);
  EXPECT_EQ(b.keys, (std::vector<uint64_t>{~uint64_t{0}, uint64_t{1} << 63, (uint64_t{1} << 63) - 1,
                                           ~uint64_t{0}, 0, ~uint64_t{0} - 1, 7}));
  EXPECT_EQ(b.offsets, (std::vector<uint32_t>{0, 1, 2, 3, 3, 4, 5, 6, 7}));
  // UINT64 takes the same keys; a negative UINT64 is refused.
  std::string u = body;
  u.replace(u.find("INT64"), 5, "UINT64");
  EXPECT_NE(ParseInferRequest(u, v).status().message().find("element 0 is not an unsigned"),
            std::string::npos);
  const std::string present =
      R"({"inputs":[{"name":"keys","datatype":"UINT64","shape":[1,4],"data":[1,2,3,4]},)"
      R"({"name":"present","datatype":"BOOL","shape":[1,4],"data":[true,false,true,false]}]})";
  auto p = ParseInferRequest(present, v);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rows.keys, (std::vector<uint64_t>{1, 3}));
}

// Binary tensor data: the same rows as the same tensors in JSON, for INT64, FP32 and BYTES.
TEST(RequestTensorsTest, BinaryDataReadsAsItsJson) {
  const ServedVersion v = Version(3, 2);
  const std::vector<int64_t> keys = {-5, 1, std::numeric_limits<int64_t>::min(), 4, 5, 6};
  const std::vector<float> dense = {0.5f, -1.25f, 3e-39f, 1e30f};
  nlohmann::json j = {
      {"inputs",
       {{{"name", "keys"}, {"datatype", "INT64"}, {"shape", {2, 3}}, {"data", keys}},
        {{"name", "dense"}, {"datatype", "FP32"}, {"shape", {2, 2}}, {"data", dense}}}}};
  auto from_json = ParseInferRequest(j.dump(), v);
  ASSERT_TRUE(from_json.ok()) << from_json.status().ToString();
  std::string binary;
  for (int64_t k : keys) Append(&binary, k);
  for (float x : dense) Append(&binary, x);
  j["inputs"][0].erase("data");
  j["inputs"][1].erase("data");
  j["inputs"][0]["parameters"] = {{"binary_data_size", 48}};
  j["inputs"][1]["parameters"] = {{"binary_data_size", 16}};
  auto from_binary = ParseInferRequest(j.dump(), binary, v);
  ASSERT_TRUE(from_binary.ok()) << from_binary.status().ToString();
  EXPECT_EQ(from_binary->rows.keys, from_json->rows.keys);
  EXPECT_EQ(from_binary->rows.offsets, from_json->rows.offsets);
  EXPECT_EQ(from_binary->rows.dense, from_json->rows.dense);

  // BYTES: a 4-byte length before each element.
  std::string strings;
  for (std::string s : {"ab", "", "c\td"}) {
    Append(&strings, static_cast<uint32_t>(s.size()));
    strings += s;
  }
  const std::string head = R"({"inputs":[{"name":"records","datatype":"BYTES","shape":[3],)"
                           R"("parameters":{"binary_data_size":)" +
                           std::to_string(strings.size()) + "}}]}";
  auto t = ReadRequestTensors(head, strings);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->inputs[0].bytes, (std::vector<std::string_view>{"ab", "", "c\td"}));
}

TEST(RequestTensorsTest, BadBinaryDataIsNamed) {
  const std::string keys = R"({"inputs":[{"name":"keys","datatype":"INT64","shape":[2],)"
                           R"("parameters":{"binary_data_size":16}}]})";
  EXPECT_NE(ErrorOf(keys, std::string(8, 'x')).find("binary_data_size: 16 bytes, the body has 8"),
            std::string::npos);
  EXPECT_NE(ErrorOf(keys, std::string(20, 'x')).find("the body has 20 bytes of binary data"),
            std::string::npos);
  const std::string wrong = R"({"inputs":[{"name":"keys","datatype":"INT64","shape":[3],)"
                            R"("parameters":{"binary_data_size":16}}]})";
  EXPECT_NE(ErrorOf(wrong, std::string(16, 'x')).find("16 bytes, the shape [3] of INT64"),
            std::string::npos);
  const std::string bytes = R"({"inputs":[{"name":"r","datatype":"BYTES","shape":[1],)"
                            R"("parameters":{"binary_data_size":6}}]})";
  std::string cut;
  Append(&cut, uint32_t{100});
  cut += "ab";
  EXPECT_NE(ErrorOf(bytes, cut).find("says 100 bytes, 2 are left"), std::string::npos);
  std::string two;
  Append(&two, uint32_t{0});
  Append(&two, uint32_t{0});
  const std::string bytes8 = R"({"inputs":[{"name":"r","datatype":"BYTES","shape":[1],)"
                             R"("parameters":{"binary_data_size":8}}]})";
  EXPECT_NE(ErrorOf(bytes8, two).find("holds more than the 1 elements"), std::string::npos);
  const std::string flags = R"({"inputs":[{"name":"b","datatype":"BOOL","shape":[1],)"
                            R"("parameters":{"binary_data_size":1}}]})";
  EXPECT_NE(ErrorOf(flags, "\x07").find("not a BOOL"), std::string::npos);
  const std::string inf = R"({"inputs":[{"name":"d","datatype":"FP32","shape":[1],)"
                          R"("parameters":{"binary_data_size":4}}]})";
  std::string infinity;
  Append(&infinity, std::numeric_limits<float>::infinity());
  EXPECT_NE(ErrorOf(inf, infinity).find("is not a finite float32"), std::string::npos);
}

TEST(RequestTensorsTest, BadJsonTensorsAreNamed) {
  // 1e39 is no float32: refused, as a text record's dense value would be (it was nan before).
  EXPECT_NE(ErrorOf(R"({"inputs":[{"name":"dense","datatype":"FP32","shape":[1],"data":[1e39]}]})")
                .find("inputs[0] (dense).data: element 0 (1e+39) is not a finite float32"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"inputs":[{"name":"k","datatype":"INT64","shape":[1],"data":[1]},)"
                    R"({"name":"k","datatype":"INT64","shape":[1],"data":[2]}]})")
                .find("inputs[1] (k).name: 'k' given twice (also inputs[0])"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"inputs":[{"name":"k","datatype":"FP16","shape":[1],"data":[1]}]})")
                .find("FP16 is not one this server reads"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"inputs":[{"name":"k","datatype":"INT64","shape":[1],"data":[1.5]}]})")
                .find("element 0 is not an integer"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"inputs":[{"name":"k","datatype":"INT64","shape":[1],"data":[1],)"
                    R"("parameters":{"binary_data_size":8}}]})",
                    std::string(8, '\0'))
                .find("both data and parameters.binary_data_size"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"id":5,"inputs":[]})").find("id: not a string"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"inputs":[],"outputs":[{"name":"p"},{"name":"p"}]})").find("asked twice"),
            std::string::npos);
}

// The outputs asked for are checked; a binary output is its JSON header then float32 bytes.
TEST(RequestTensorsTest, RequestedOutputsAndBinaryResponses) {
  const ServedVersion v = Version(1, 0);
  const std::string keys = R"({"inputs":[{"name":"keys","datatype":"INT64","shape":[2,1],)"
                           R"("data":[1,2]}])";
  auto unknown = ParseInferRequest(keys + R"(,"outputs":[{"name":"logit"}]})", v);
  EXPECT_NE(unknown.status().message().find("outputs[0].name: 'logit' is no output"),
            std::string::npos);
  auto r = ParseInferRequest(keys + R"(,"parameters":{"binary_data_output":true}})", v);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<float> p = {0.25f, 0.7f};
  std::string out;
  auto json_bytes = InferResponse("m", v, *r, p, &out);
  ASSERT_TRUE(json_bytes.ok());
  ASSERT_EQ(out.size(), *json_bytes + 8);
  auto head = nlohmann::json::parse(out.substr(0, *json_bytes));
  EXPECT_EQ(head["outputs"][0]["parameters"]["binary_data_size"], 8);
  EXPECT_FALSE(head["outputs"][0].contains("data"));
  float got[2];
  std::memcpy(got, out.data() + *json_bytes, 8);
  EXPECT_EQ(got[0], p[0]);
  EXPECT_EQ(got[1], p[1]);
  // As JSON by default; a non-finite probability is an error, never `nan` in the body.
  auto plain = ParseInferRequest(keys + "}", v);
  ASSERT_TRUE(plain.ok());
  json_bytes = InferResponse("m", v, *plain, p, &out);
  ASSERT_TRUE(json_bytes.ok());
  EXPECT_EQ(*json_bytes, out.size());
  EXPECT_EQ(nlohmann::json::parse(out)["outputs"][0]["data"][1].get<float>(), 0.7f);
  EXPECT_FALSE(InferResponse("m", v, *plain, {0.5f, std::nanf("")}, &out).ok());
}

}  // namespace
}  // namespace ctrbox
