// Compressed text input: logs are usually stored gzip- or zstd-compressed, so text readers
// look at the first bytes of every input (file, standard input, data.command) and decompress
// gzip (including concatenated members, as `cat a.gz b.gz` makes) and zstd (any number of
// frames) as they stream. Other compressions are named and refused rather than parsed as
// text. Detection is by content, never by file name.
#ifndef CTRBOX_IO_COMPRESSED_FILE_H_
#define CTRBOX_IO_COMPRESSED_FILE_H_

#include <memory>
#include <string_view>

#include "util/env.h"

namespace ctrbox {

enum class Compression { kNone, kGzip, kZstd };
std::string_view CompressionName(Compression c);

// Returns `file` decompressed if it starts with a gzip or zstd magic, else its bytes as they
// are. A bzip2 or xz stream is an error naming the compression. A truncated or corrupt stream
// is an error naming the file and the decompressed offset, never a shorter input. *detected
// (optional) is set to what was found.
StatusOr<std::unique_ptr<SequentialFile>> OpenDecompressed(std::unique_ptr<SequentialFile> file,
                                                           Compression* detected = nullptr);

}  // namespace ctrbox

#endif  // CTRBOX_IO_COMPRESSED_FILE_H_
