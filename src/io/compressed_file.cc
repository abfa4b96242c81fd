#include "io/compressed_file.h"

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <string>

namespace ctrbox {
namespace {

constexpr size_t kInputBytes = 1 << 18;

// Reads from `file` after first handing out `head`, the bytes read to sniff the format.
class PrefixedFile {
 public:
  PrefixedFile(std::unique_ptr<SequentialFile> file, std::string head)
      : file_(std::move(file)), head_(std::move(head)) {}
  Status Read(size_t n, char* scratch, size_t* bytes_read) {
    if (pos_ < head_.size()) {
      *bytes_read = std::min(n, head_.size() - pos_);
      std::memcpy(scratch, head_.data() + pos_, *bytes_read);
      pos_ += *bytes_read;
      if (pos_ == head_.size()) std::string().swap(head_), pos_ = 0;
      return Status::OK();
    }
    return file_->Read(n, scratch, bytes_read);
  }
  const std::string& name() const { return file_->name(); }

 private:
  std::unique_ptr<SequentialFile> file_;
  std::string head_;
  size_t pos_ = 0;
};

class PlainFile final : public SequentialFile {
 public:
  explicit PlainFile(PrefixedFile in) : in_(std::move(in)) {}
  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    return in_.Read(n, scratch, bytes_read);
  }
  const std::string& name() const override { return in_.name(); }

 private:
  PrefixedFile in_;
};

// The shared loop of a streaming decompressor: refills input, calls Step, and tells a clean
// end (the stream finished exactly where the input did) from a truncated one.
class DecompressingFile : public SequentialFile {
 public:
  explicit DecompressingFile(PrefixedFile in) : in_(std::move(in)), buf_(kInputBytes, '\0') {}
  const std::string& name() const override { return in_.name(); }

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    while (*bytes_read == 0 && n > 0) {
      if (avail_ == 0 && !input_eof_) {
        size_t got = 0;
        RETURN_IF_ERROR(in_.Read(buf_.size(), buf_.data(), &got));
        next_ = buf_.data();
        avail_ = got;
        input_eof_ = got == 0;
      }
      if (avail_ == 0 && input_eof_) {
        if (!at_frame_end_) {
          return DataLossError(fmt::format(
              "{}: the {} stream is truncated after {} decompressed bytes (the file was cut "
              "short); nothing past that point can be read",
              name(), Kind(), out_total_));
        }
        return Status::OK();  // end of input, between frames
      }
      size_t produced = 0;
      RETURN_IF_ERROR(Step(scratch, n, &produced));
      *bytes_read = produced;
      out_total_ += produced;
    }
    return Status::OK();
  }

 protected:
  virtual std::string_view Kind() const = 0;
  // Decompresses from next_/avail_ into out[0, n), advancing next_/avail_, setting *produced
  // and at_frame_end_ (true once a stream or frame has just ended).
  virtual Status Step(char* out, size_t n, size_t* produced) = 0;
  Status Corrupt(std::string_view what) const {
    return CorruptionError(fmt::format("{}: corrupt {} stream after {} decompressed bytes: {}",
                                       name(), Kind(), out_total_, what));
  }

  PrefixedFile in_;
  std::string buf_;
  const char* next_ = nullptr;
  size_t avail_ = 0;
  bool input_eof_ = false;
  bool at_frame_end_ = false;
  uint64_t out_total_ = 0;
};

class GzipFile final : public DecompressingFile {
 public:
  explicit GzipFile(PrefixedFile in) : DecompressingFile(std::move(in)) {
    std::memset(&zs_, 0, sizeof(zs_));
    ok_ = inflateInit2(&zs_, 15 + 16) == Z_OK;  // gzip wrapper only
  }
  ~GzipFile() override {
    if (ok_) inflateEnd(&zs_);
  }
  bool ok() const { return ok_; }

 private:
  std::string_view Kind() const override { return "gzip"; }
  Status Step(char* out, size_t n, size_t* produced) override {
    if (at_frame_end_) {
      // Another member follows the one that ended (concatenated gzip files).
      if (inflateReset(&zs_) != Z_OK) return Corrupt("inflateReset failed");
      at_frame_end_ = false;
    }
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(next_));
    zs_.avail_in = static_cast<uInt>(avail_);
    zs_.next_out = reinterpret_cast<Bytef*>(out);
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(n, UINT32_MAX));
    const int rc = inflate(&zs_, Z_NO_FLUSH);
    *produced = reinterpret_cast<char*>(zs_.next_out) - out;
    next_ = reinterpret_cast<const char*>(zs_.next_in);
    avail_ = zs_.avail_in;
    if (rc == Z_STREAM_END) {
      at_frame_end_ = true;
    } else if (rc == Z_BUF_ERROR) {
      // No progress possible: needs more input (handled by the caller's refill).
    } else if (rc != Z_OK) {
      return Corrupt(zs_.msg != nullptr ? zs_.msg : "inflate failed");
    }
    return Status::OK();
  }

  z_stream zs_;
  bool ok_ = false;
};

class ZstdFile final : public DecompressingFile {
 public:
  explicit ZstdFile(PrefixedFile in) : DecompressingFile(std::move(in)), ctx_(ZSTD_createDCtx()) {
    at_frame_end_ = false;
  }
  ~ZstdFile() override { ZSTD_freeDCtx(ctx_); }
  bool ok() const { return ctx_ != nullptr; }

 private:
  std::string_view Kind() const override { return "zstd"; }
  Status Step(char* out, size_t n, size_t* produced) override {
    ZSTD_inBuffer in{next_, avail_, 0};
    ZSTD_outBuffer o{out, n, 0};
    const size_t rc = ZSTD_decompressStream(ctx_, &o, &in);
    if (ZSTD_isError(rc)) return Corrupt(ZSTD_getErrorName(rc));
    *produced = o.pos;
    next_ += in.pos;
    avail_ -= in.pos;
    at_frame_end_ = rc == 0;  // a frame is complete and fully flushed
    return Status::OK();
  }

  ZSTD_DCtx* ctx_;
};

}  // namespace

std::string_view CompressionName(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kGzip:
      return "gzip";
    case Compression::kZstd:
      return "zstd";
  }
  return "?";
}

StatusOr<std::unique_ptr<SequentialFile>> OpenDecompressed(std::unique_ptr<SequentialFile> file,
                                                           Compression* detected) {
  // Read up to 6 bytes (a short read is not the end of a pipe).
  std::string head(6, '\0');
  size_t have = 0;
  while (have < head.size()) {
    size_t got = 0;
    RETURN_IF_ERROR(file->Read(head.size() - have, head.data() + have, &got));
    if (got == 0) break;
    have += got;
  }
  head.resize(have);
  const std::string name = file->name();
  auto starts = [&](std::string_view magic) { return std::string_view(head).starts_with(magic); };
  Compression c = Compression::kNone;
  if (starts("\x1f\x8b")) {
    c = Compression::kGzip;
  } else if (starts("\x28\xb5\x2f\xfd")) {
    c = Compression::kZstd;
  } else if (starts("BZh") && have >= 4 && head[3] >= '1' && head[3] <= '9') {
    return InvalidArgumentError(fmt::format(
        "{}: bzip2-compressed; ctrbox reads plain, gzip or zstd text: decompress it, or stream "
        "it with --set data.command='bzcat {}'",
        name, name));
  } else if (starts(std::string_view("\xfd"
                                     "7zXZ\0",
                                     6))) {
    return InvalidArgumentError(fmt::format(
        "{}: xz-compressed; ctrbox reads plain, gzip or zstd text: decompress it, or stream it "
        "with --set data.command='xzcat {}'",
        name, name));
  }
  if (detected != nullptr) *detected = c;
  PrefixedFile in(std::move(file), std::move(head));
  switch (c) {
    case Compression::kGzip: {
      auto f = std::make_unique<GzipFile>(std::move(in));
      if (!f->ok()) return InternalError(fmt::format("{}: cannot start zlib", name));
      return std::unique_ptr<SequentialFile>(std::move(f));
    }
    case Compression::kZstd: {
      auto f = std::make_unique<ZstdFile>(std::move(in));
      if (!f->ok()) return InternalError(fmt::format("{}: cannot start zstd", name));
      return std::unique_ptr<SequentialFile>(std::move(f));
    }
    case Compression::kNone:
      break;
  }
  return std::unique_ptr<SequentialFile>(new PlainFile(std::move(in)));
}

}  // namespace ctrbox
