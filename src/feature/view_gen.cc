#include "feature/view_gen.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "util/random.h"

namespace ctrbox {

namespace {

constexpr int kCategories = 40;
constexpr int kCities = 200;
constexpr int kAdvertisers = 1000;
constexpr int kWords = 2000;
constexpr int kPositions = 8;
constexpr int kSites = 50;
constexpr int64_t kStartTs = 1700000000;  // 2023-11-14 22:13:20 UTC
constexpr const char* kDevices[] = {"android", "ios", "pc", "bot"};

// A weight of the planted model: Gaussian with standard deviation sd, fixed by (seed, tag, id).
double Weight(uint64_t seed, uint64_t tag, uint64_t id, double sd) {
  Random r(Mix64(seed ^ Mix64(tag * 0x9E37 + id)));
  return sd * r.Gaussian();
}

int AgeBucket(int age) {  // bucketize [18, 25, 35, 50]; -1: missing (fill_null -1 -> 0)
  if (age < 0) return 0;
  return (age >= 18) + (age >= 25) + (age >= 35) + (age >= 50);
}

struct User {
  int age;     // -1: missing
  int gender;  // 0 f, 1 m, 2 missing
  int city;
  std::vector<int> interests;  // categories
};
struct Ad {
  int advertiser;
  int category;
  std::vector<int> words;
};

double Auc(std::vector<std::pair<double, int>> v) {
  std::sort(v.begin(), v.end());
  double pos = 0, neg = 0, rank_sum = 0;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j < v.size() && v[j].first == v[i].first) ++j;
    const double avg_rank = (i + j + 1) / 2.0;  // 1-based ranks i+1 .. j
    for (size_t k = i; k < j; ++k) {
      if (v[k].second) {
        rank_sum += avg_rank;
        ++pos;
      } else {
        ++neg;
      }
    }
    i = j;
  }
  if (pos == 0 || neg == 0) return 0.5;
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

Status WriteFile(Env* env, const std::string& path, const std::string& text, ViewGenResult* res) {
  const std::string tmp = path + ".tmp";
  ASSIGN_OR_RETURN(auto f, env->NewWritableFile(tmp));
  RETURN_IF_ERROR(f->Append(text));
  RETURN_IF_ERROR(f->Sync());
  RETURN_IF_ERROR(f->Close());
  RETURN_IF_ERROR(env->RenameFile(tmp, path));
  res->files.push_back(path);
  res->bytes += text.size();
  return Status::OK();
}

}  // namespace

namespace {

// Users: a CSV with a header; interests is a comma-separated list, so quoted.
std::vector<User> MakeUsers(const ViewGenOptions& o, std::string* text) {
  std::vector<User> users(o.users);
  *text = "user_id,age,gender,city,interests\n";
  for (uint32_t u = 0; u < o.users; ++u) {
    Random r(Mix64(o.seed * 31 + 1) ^ Mix64(u));
    User& x = users[u];
    x.age = r.Uniform() < 0.12 ? -1 : 14 + static_cast<int>(r.Below(57));
    x.gender = r.Uniform() < 0.05 ? 2 : static_cast<int>(r.Below(2));
    x.city = static_cast<int>(r.Below(kCities));
    const int n = 1 + static_cast<int>(r.Below(4));
    for (int k = 0; k < n; ++k) x.interests.push_back(static_cast<int>(r.Below(kCategories)));
    std::string interests;
    for (int c : x.interests) interests += fmt::format("{}cat{}", interests.empty() ? "" : ",", c);
    fmt::format_to(std::back_inserter(*text), "u{:07d},{},{},city{},{}\n", u,
                   x.age < 0 ? "" : std::to_string(x.age),
                   x.gender == 2 ? "" : (x.gender ? "m" : "f"), x.city,
                   n > 1 ? "\"" + interests + "\"" : interests);
  }
  return users;
}

// Ads: JSON lines.
std::vector<Ad> MakeAds(const ViewGenOptions& o, std::string* text) {
  std::vector<Ad> ads(o.ads);
  text->clear();
  for (uint32_t a = 0; a < o.ads; ++a) {
    Random r(Mix64(o.seed * 31 + 2) ^ Mix64(a));
    Ad& x = ads[a];
    x.advertiser = static_cast<int>(r.Below(kAdvertisers));
    x.category = static_cast<int>(r.Below(kCategories));
    const int n = 2 + static_cast<int>(r.Below(4));
    std::string title;
    for (int k = 0; k < n; ++k) {
      x.words.push_back(static_cast<int>(r.Below(kWords)));
      title += fmt::format("{}w{}", title.empty() ? "" : " ", x.words.back());
    }
    fmt::format_to(
        std::back_inserter(*text),
        "{{\"ad_id\": {}, \"advertiser\": {}, \"category\": \"cat{}\", \"title\": \"{}\"}}\n",
        100000 + a, x.advertiser, x.category, title);
  }
  return ads;
}

// One impression, row i of `rows` in part `part` (0: train, 1: test): its CSV line, its
// click probability under the planted model and its label; whether it is a bot's.
struct Impression {
  std::string line;
  double p = 0;
  int label = 0;
  bool bot = false;
};

Impression MakeImpression(const ViewGenOptions& o, const std::vector<User>& users,
                          const std::vector<Ad>& ads, int part, uint64_t i, uint64_t rows,
                          Random& r) {
  const uint64_t seed = o.seed;
  const double su = r.Uniform(), sa = r.Uniform();
  // 2 % of the impressions come from users the profile table does not have yet.
  const uint32_t u = r.Uniform() < 0.02 ? o.users + static_cast<uint32_t>(r.Below(o.users))
                                        : static_cast<uint32_t>(o.users * su * su);
  const uint32_t a = static_cast<uint32_t>(o.ads * sa * sa);
  static const User kUnknown{-1, 2, 0, {}};
  const User& user = u < o.users ? users[u] : kUnknown;
  const Ad& ad = ads[a];
  const double d = r.Uniform();
  const int device = d < 0.45 ? 0 : d < 0.80 ? 1 : d < 0.95 ? 2 : 3;
  const int64_t ts = kStartTs + static_cast<int64_t>(i * (30.0 * 86400 / rows)) +
                     static_cast<int64_t>(r.Below(600));
  const int hour = static_cast<int>(((ts % 86400) + 86400) % 86400 / 3600);
  const int pos = static_cast<int>(r.Below(kPositions));
  const int site = static_cast<int>(r.Below(kSites));
  const int page = static_cast<int>(r.Below(100));
  const double price = std::exp(r.Gaussian() * 0.8);
  const int hist_n = static_cast<int>(r.Below(9));
  std::string hist;
  double hist_w = 0;
  for (int k = 0; k < hist_n; ++k) {
    const uint32_t h = static_cast<uint32_t>(r.Below(o.ads));
    hist += fmt::format("{}{}", hist.empty() ? "" : "|", 100000 + h);
    if (k >= hist_n - 5) hist_w += ads[h].category == ad.category ? 0.25 : 0;  // last 5
  }
  // The planted logit: what the job's features can express.
  const int bucket = AgeBucket(user.age);
  bool interested = false;
  for (int c : user.interests) interested |= c == ad.category;
  double z = -1.6 + Weight(seed, 1, u, 0.5) + Weight(seed, 2, a, 0.5) +
             Weight(seed, 3, ad.advertiser, 0.3) +
             Weight(seed, 4, bucket * kCategories + ad.category, 0.6) +
             Weight(seed, 5, device, 0.3) + Weight(seed, 6, hour, 0.2) + (interested ? 0.8 : 0.0) -
             0.15 * pos + Weight(seed, 7, site, 0.2) + hist_w + 0.3 * std::log1p(price) - 0.3;
  Impression imp;
  imp.p = 1.0 / (1.0 + std::exp(-z));
  imp.bot = device == 3;
  if (imp.bot) imp.p = 0.0;  // bots never click
  imp.label = r.Uniform() < imp.p ? 1 : 0;
  imp.line = fmt::format(
      "i{}-{},{},u{:07d},{},\"{{\"\"device\"\": \"\"{}\"\", \"\"page\"\": {{\"\"id\"\": {}, "
      "\"\"pos\"\": {}}}}}\",{},{:.4f},{} {},{}\n",
      part, i, ts, u, 100000 + a, kDevices[device], page, pos, hist, price, pos, 1000 + site,
      imp.label);
  return imp;
}

constexpr const char* kJobTemplate =
    R"(# A job over the views of `ctrbox gen --format views` (docs/features.md).
# ctrbox train -c {0}/job.yaml
data:
  paths: [{0}/impressions.csv]
  eval_paths: [{0}/impressions_test.csv]
features:
  main:
    format: csv
    header: true
    columns: {{instance_id: string, ts: int, user_id: string, ad_id: int, ctx: string,
              hist: string, price: float, basic: keys, label: int}}
  views:
    users:
      paths: [{0}/users.csv]
      format: csv
      header: true
      columns: {{user_id: string, age: int, gender: string, city: string, interests: string}}
      key: user_id
    ads:
      paths: [{0}/ads.jsonl]
      format: jsonl
      columns: {{ad_id: int, advertiser: int, category: string, title: string}}
      key: ad_id
  ops:
    - {{name: device, op: json_field, input: ctx, path: device, type: string}}
    - {{name: pos, op: json_field, input: ctx, path: page.pos, type: int}}
    - {{op: filter, input: device, cmp: "!=", value: bot}}
    - {{op: dedupe, inputs: [instance_id]}}
    - {{op: join, view: users, on: user_id}}
    - {{op: join, view: ads, on: ad_id}}
    - {{name: age, op: fill_null, input: users.age, value: -1}}
    - {{name: age_bucket, op: bucketize, input: age, boundaries: [0, 18, 25, 35, 50]}}
    - {{name: age_x_category, op: cross, inputs: [age_bucket, ads.category]}}
    - {{name: interests, op: split, input: users.interests, sep: ","}}
    - {{name: interest_x_category, op: cross, inputs: [interests, ads.category]}}
    - {{name: hour, op: time_part, input: ts, part: hour}}
    - {{name: recent, op: last_n, input: hist, sep: "|", n: 5}}
    - {{name: recent_x_category, op: cross, inputs: [recent, ads.category]}}
    - {{name: title, op: split, input: ads.title, sep: " "}}
    - {{name: log_price, op: log, input: price}}
  label: label
  slots: [user_id, ad_id, ads.advertiser, ads.category, users.gender, users.city, device, pos,
          hour, age_x_category, interest_x_category, recent_x_category, title, basic]
  dense: [log_price, age]
)";

}  // namespace

StatusOr<ViewGenResult> GenerateViews(Env* env, const std::string& dir_in,
                                      const ViewGenOptions& o) {
  if (o.rows == 0 || o.users == 0 || o.ads == 0) {
    return InvalidArgumentError("gen --format views: rows, users and ads must be >= 1");
  }
  std::error_code ec;
  const std::string dir = std::filesystem::absolute(dir_in, ec).lexically_normal().string();
  if (ec) return InvalidArgumentError("gen --out " + dir_in + ": " + ec.message());
  if (env->FileExists(dir) && !env->IsDirectory(dir)) {
    return InvalidArgumentError("gen --format views --out " + dir_in +
                                ": is a file; give a directory to write the views into");
  }
  RETURN_IF_ERROR(env->CreateDirs(dir));
  ViewGenResult res;
  std::string text;
  const std::vector<User> users = MakeUsers(o, &text);
  RETURN_IF_ERROR(WriteFile(env, dir + "/users.csv", text, &res));
  const std::vector<Ad> ads = MakeAds(o, &text);
  RETURN_IF_ERROR(WriteFile(env, dir + "/ads.jsonl", text, &res));

  // Impressions: train and test rows from the same users, ads and planted model.
  std::vector<std::pair<double, int>> oracle;
  uint64_t clicks = 0;
  for (int part = 0; part < 2; ++part) {
    const uint64_t rows = part == 0 ? o.rows : o.test_rows;
    const uint64_t part_seed = Mix64(o.seed * 31 + 3 + part);
    text = "instance_id,ts,user_id,ad_id,ctx,hist,price,basic,label\n";
    std::string prev;
    for (uint64_t i = 0; i < rows; ++i) {
      Random r(part_seed ^ Mix64(i));
      if (!prev.empty() && r.Uniform() < 0.005) {  // a logged twice impression
        text += prev;
        continue;
      }
      Impression imp = MakeImpression(o, users, ads, part, i, rows, r);
      text += imp.line;
      prev = std::move(imp.line);
      if (part == 1 && !imp.bot) {
        oracle.emplace_back(imp.p, imp.label);
        clicks += imp.label;
      }
    }
    RETURN_IF_ERROR(WriteFile(env, dir + (part == 0 ? "/impressions.csv" : "/impressions_test.csv"),
                              text, &res));
  }
  res.oracle_auc = Auc(oracle);
  res.kept_test_rows = oracle.size();
  res.ctr = oracle.empty() ? 0 : static_cast<double>(clicks) / oracle.size();

  RETURN_IF_ERROR(
      WriteFile(env, dir + "/job.yaml", fmt::format(fmt::runtime(kJobTemplate), dir), &res));
  RETURN_IF_ERROR(WriteFile(env, dir + "/oracle.json",
                            fmt::format("{{\"oracle_auc\": {:.6f}, \"test_rows\": {}, \"ctr\": "
                                        "{:.6f}}}\n",
                                        res.oracle_auc, res.kept_test_rows, res.ctr),
                            &res));
  return res;
}

}  // namespace ctrbox
