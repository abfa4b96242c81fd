#include "io/partitions.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>

namespace ctrbox {
namespace {

constexpr std::string_view kDay = "{day}", kHour = "{hour}", kIndex = "{index}";

// Matches `text` against a pattern of literals and placeholders; fills the fields found.
struct Fields {
  std::optional<int64_t> day;  // days since 1970-01-01
  std::optional<int64_t> hour, index;
};

bool Digits(std::string_view s, size_t n) {
  if (s.size() < n) return false;
  return std::all_of(s.begin(), s.begin() + static_cast<ptrdiff_t>(n),
                     [](char c) { return c >= '0' && c <= '9'; });
}

int64_t Number(std::string_view s) {
  int64_t v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

std::optional<int64_t> DayOrdinal(std::string_view yyyymmdd) {
  using namespace std::chrono;
  const year_month_day ymd{year{static_cast<int>(Number(yyyymmdd.substr(0, 4)))},
                           month{static_cast<unsigned>(Number(yyyymmdd.substr(4, 2)))},
                           day{static_cast<unsigned>(Number(yyyymmdd.substr(6, 2)))}};
  if (!ymd.ok()) return std::nullopt;
  return sys_days(ymd).time_since_epoch().count();
}

std::string DayText(int64_t days) {
  using namespace std::chrono;
  const year_month_day ymd{sys_days{std::chrono::days{days}}};
  return fmt::format("{:04d}{:02d}{:02d}", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
}

bool Match(std::string_view pattern, std::string_view text, Fields* f) {
  while (!pattern.empty()) {
    if (pattern.starts_with(kDay)) {
      if (!Digits(text, 8)) return false;
      f->day = DayOrdinal(text.substr(0, 8));
      if (!f->day) return false;
      pattern.remove_prefix(kDay.size());
      text.remove_prefix(8);
    } else if (pattern.starts_with(kHour)) {
      if (!Digits(text, 2) || Number(text.substr(0, 2)) > 23) return false;
      f->hour = Number(text.substr(0, 2));
      pattern.remove_prefix(kHour.size());
      text.remove_prefix(2);
    } else if (pattern.starts_with(kIndex)) {
      size_t n = 0;
      while (n < text.size() && n < 18 && text[n] >= '0' && text[n] <= '9') ++n;
      if (n == 0) return false;
      f->index = Number(text.substr(0, n));
      pattern.remove_prefix(kIndex.size());
      text.remove_prefix(n);
    } else {
      if (text.empty() || text[0] != pattern[0]) return false;
      pattern.remove_prefix(1);
      text.remove_prefix(1);
    }
  }
  return text.empty();
}

size_t Count(std::string_view s, std::string_view what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string_view::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

StatusOr<PartitionLayout> PartitionLayout::Parse(const std::string& layout) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError(fmt::format(
        "stream.layout '{}': {} (expected {{day}}/{{hour}}, {{day}} or {{index}} with literal "
        "text around them, e.g. dt={{day}}/hr={{hour}})",
        layout, why));
  };
  const size_t days = Count(layout, kDay), hours = Count(layout, kHour),
               indexes = Count(layout, kIndex);
  if (days > 1 || hours > 1 || indexes > 1) return bad("a placeholder appears twice");
  if (indexes == 1 && days + hours > 0) return bad("{index} goes alone");
  if (hours == 1 && days == 0) return bad("{hour} needs {day}");
  if (days + indexes == 0) return bad("no placeholder");
  if (layout.empty() || layout.front() == '/' || layout.back() == '/' ||
      layout.find("//") != std::string::npos || layout.find("..") != std::string::npos) {
    return bad("an empty or parent directory level");
  }
  // Another '{' or '}' is a typo of a placeholder ("{hours}").
  std::string rest = layout;
  for (std::string_view p : {kDay, kHour, kIndex}) {
    for (size_t at = rest.find(p); at != std::string::npos; at = rest.find(p)) {
      rest.replace(at, p.size(), "");
    }
  }
  if (rest.find_first_of("{}") != std::string::npos) return bad("an unknown placeholder");
  if (const size_t at = layout.find(kIndex);
      at != std::string::npos && at + kIndex.size() < layout.size() &&
      std::isdigit(static_cast<unsigned char>(layout[at + kIndex.size()]))) {
    return bad("a digit right after {index} would be read as part of it");
  }
  PartitionLayout l;
  l.text_ = layout;
  l.unit_ = indexes ? Unit::kIndex : hours ? Unit::kHour : Unit::kDay;
  size_t start = 0;
  for (size_t slash = layout.find('/');; slash = layout.find('/', start)) {
    l.levels_.push_back(layout.substr(start, slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return l;
}

std::string PartitionLayout::Name(int64_t ordinal) const {
  std::string out = text_;
  auto put = [&](std::string_view p, const std::string& v) {
    const size_t at = out.find(p);
    if (at != std::string::npos) out.replace(at, p.size(), v);
  };
  switch (unit_) {
    case Unit::kIndex:
      put(kIndex, std::to_string(ordinal));
      break;
    case Unit::kDay:
      put(kDay, DayText(ordinal));
      break;
    case Unit::kHour: {
      const int64_t day = ordinal >= 0 ? ordinal / 24 : (ordinal - 23) / 24;
      put(kDay, DayText(day));
      put(kHour, fmt::format("{:02d}", ordinal - day * 24));
      break;
    }
  }
  return out;
}

std::optional<int64_t> PartitionLayout::Ordinal(const std::string& name) const {
  Fields f;
  if (!Match(text_, name, &f)) return std::nullopt;
  switch (unit_) {
    case Unit::kIndex:
      return f.index;
    case Unit::kDay:
      return f.day;
    case Unit::kHour:
      return *f.day * 24 + *f.hour;
  }
  return std::nullopt;
}

bool PartitionLayout::LevelMatches(size_t level, const std::string& entry) const {
  Fields f;
  return level < levels_.size() && Match(levels_[level], entry, &f);
}

std::optional<int64_t> PartitionLayout::StartSeconds(int64_t ordinal) const {
  switch (unit_) {
    case Unit::kIndex:
      return std::nullopt;
    case Unit::kDay:
      return ordinal * 86400;
    case Unit::kHour:
      return ordinal * 3600;
  }
  return std::nullopt;
}

StatusOr<std::vector<std::string>> PartitionFiles(Env* env, const std::string& dir,
                                                  const std::string& done_file,
                                                  std::vector<std::string>* ignored) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(dir));
  std::vector<std::string> files;
  for (const std::string& n : names) {
    if (n == done_file || n.empty() || n[0] == '.' || n[0] == '_') continue;
    const std::string path = JoinPath(dir, n);
    if (env->IsRegularFile(path)) {
      files.push_back(path);
    } else if (ignored != nullptr) {
      ignored->push_back(path);
    }
  }
  return files;
}

StatusOr<PartitionScan> ScanPartitions(Env* env, const std::string& root,
                                       const PartitionLayout& layout,
                                       const std::string& done_file) {
  PartitionScan scan;
  // Walk the levels, keeping only entries that can belong to a partition.
  std::vector<std::string> paths = {""};
  for (size_t level = 0; level < layout.levels(); ++level) {
    std::vector<std::string> next;
    for (const std::string& p : paths) {
      const std::string dir = p.empty() ? root : JoinPath(root, p);
      if (!env->IsDirectory(dir)) continue;
      ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(dir));
      for (const std::string& n : names) {
        const std::string path = p.empty() ? n : p + "/" + n;
        if (layout.LevelMatches(level, n)) {
          next.push_back(path);
        } else if (n[0] != '.' && n[0] != '_' && env->IsDirectory(JoinPath(dir, n))) {
          scan.unreadable.push_back(path);
        }
      }
    }
    paths = std::move(next);
  }
  for (const std::string& p : paths) {
    const std::optional<int64_t> o = layout.Ordinal(p);
    if (!o) {
      scan.unreadable.push_back(p);
    } else if (env->FileExists(JoinPath(JoinPath(root, p), done_file))) {
      scan.ready.push_back(*o);
    }
  }
  std::sort(scan.ready.begin(), scan.ready.end());
  return scan;
}

StatusOr<std::vector<int64_t>> ReadyPartitions(Env* env, const std::string& root,
                                               const PartitionLayout& layout,
                                               const std::string& done_file, int64_t after) {
  ASSIGN_OR_RETURN(PartitionScan scan, ScanPartitions(env, root, layout, done_file));
  std::vector<int64_t> ready;
  for (int64_t o : scan.ready) {
    if (o > after) ready.push_back(o);
  }
  return ready;
}

}  // namespace ctrbox
