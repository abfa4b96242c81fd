// SsdStore's own pieces shared by its two files (ssd_store.cc: files, records, appends;
// ssd_store_index.cc: the INDEX, Inspect, Reopen). Not a public header.
#ifndef CTRBOX_TABLE_SSD_STORE_INTERNAL_H_
#define CTRBOX_TABLE_SSD_STORE_INTERNAL_H_

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace ctrbox::ssd_internal {

inline constexpr const char* kIndexName = "INDEX";

// The name of parameter file `id` in the store's directory.
inline std::string FileNameOf(uint32_t id) { return fmt::format("params-{:06d}.dat", id); }

}  // namespace ctrbox::ssd_internal

#endif  // CTRBOX_TABLE_SSD_STORE_INTERNAL_H_
