// Fixed-width little-endian encoding of integers and floats into byte strings, for the
// on-disk formats (the machines ctrbox targets are little-endian; the formats say so).
#ifndef CTRBOX_UTIL_CODING_H_
#define CTRBOX_UTIL_CODING_H_

#include <cstring>
#include <string>
#include <type_traits>

namespace ctrbox {

// Appends the bytes of v.
template <typename T>
void PutFixed(std::string* out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Appends n values.
template <typename T>
void PutArray(std::string* out, const T* v, size_t n) {
  out->append(reinterpret_cast<const char*>(v), n * sizeof(T));
}

// Reads a T from p (unaligned).
template <typename T>
T GetFixed(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// memcpy / memset that are defined for zero bytes, where the pointers may be null (the
// state arrays of an optimizer without state are empty vectors).
inline void CopyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}
inline void ZeroBytes(void* dst, size_t bytes) {
  if (bytes != 0) std::memset(dst, 0, bytes);
}

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_CODING_H_
