// Low-level scanning helpers shared by the text parsers (internal to io).
#ifndef CTRBOX_IO_TEXT_SCAN_H_
#define CTRBOX_IO_TEXT_SCAN_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "io/bad_input.h"
#include "util/parse.h"

namespace ctrbox::text_scan {

// Why a line was rejected.
struct LineError {
  BadKind kind = BadKind::kFieldCount;
  std::string detail;
  // Records the error; returns false so parsers can `return err->Set(...)`.
  bool Set(BadKind k, std::string d) {
    kind = k;
    detail = std::move(d);
    return false;
  }
};

// The length of the well-formed UTF-8 sequence at p (1 to 4 bytes; no overlongs, no
// surrogates, at most U+10FFFF), or 0 when the bytes at p are not one.
inline int Utf8Length(const unsigned char* p, const unsigned char* end) {
  unsigned c = *p;
  if (c < 0x80) return 1;
  int len;
  unsigned min;
  if ((c & 0xE0) == 0xC0) {
    len = 2, min = 0x80, c &= 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, min = 0x800, c &= 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, min = 0x10000, c &= 0x07;
  } else {
    return 0;
  }
  if (end - p < len) return 0;
  for (int k = 1; k < len; ++k) {
    if ((p[k] & 0xC0) != 0x80) return 0;
    c = (c << 6) | (p[k] & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  return len;
}

// At most 40 bytes of `s`, for messages.
// Control bytes (NUL, ESC, ...) and bytes that are not well-formed UTF-8 are written as \xNN
// and a byte-order mark as \uFEFF, so that a record quoted in a message can neither corrupt
// the terminal, log or JSON report nor hide a character.
inline std::string Printable(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    const int len = Utf8Length(p, end);
    if (len == 3 && p[1] == 0xBB && p[2] == 0xBF && c == 0xEF) {
      out += "\\uFEFF";
    } else if (len == 0 || c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      p += 1;
      continue;
    } else {
      out.append(reinterpret_cast<const char*>(p), len);
    }
    p += len;
  }
  return out;
}

// A field quoted in a message: at most 40 bytes of it, made printable.
inline std::string Clip(std::string_view s) {
  if (s.size() <= 40) return Printable(s);
  return Printable(s.substr(0, 37)) + "...";
}

// A number: integers on a fast path, otherwise any finite decimal.
inline bool ParseNumber(std::string_view s, float* out) {
  size_t i = 0, n = s.size();
  bool neg = false;
  if (n > 0 && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    i = 1;
  }
  if (i < n && n - i <= 18) {
    int64_t v = 0;
    size_t j = i;
    for (; j < n; ++j) {
      unsigned d = static_cast<unsigned char>(s[j]) - '0';
      if (d > 9) break;
      v = v * 10 + d;
    }
    if (j == n) {
      *out = static_cast<float>(neg ? -v : v);
      return true;
    }
  }
  return ParseFloat(s, out);
}

// A label: 0 or 1 (and -1 for 0 where allowed), written as an integer or a decimal.
inline bool ParseLabel(std::string_view s, bool allow_minus_one, float* out) {
  if (s.size() == 1 && (s[0] == '0' || s[0] == '1')) {
    *out = static_cast<float>(s[0] - '0');
    return true;
  }
  double v;
  if (!ParseDouble(s, &v)) return false;
  if (v == 0.0 || v == 1.0) {
    *out = static_cast<float>(v);
    return true;
  }
  if (allow_minus_one && v == -1.0) {
    *out = 0.0f;
    return true;
  }
  return false;
}

// Whether `s` is well-formed UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
inline bool ValidUtf8(std::string_view s) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char* end = p + s.size();
  while (p < end) {
    const int len = Utf8Length(p, end);
    if (len == 0) return false;
    p += len;
  }
  return true;
}

// Splits a line on runs of spaces and tabs.
class Tokenizer {
 public:
  explicit Tokenizer(std::string_view s) : s_(s) {}
  bool Next(std::string_view* token) {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
    if (pos_ >= s_.size()) return false;
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != ' ' && s_[pos_] != '\t') ++pos_;
    *token = s_.substr(start, pos_ - start);
    return true;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace ctrbox::text_scan

#endif  // CTRBOX_IO_TEXT_SCAN_H_
