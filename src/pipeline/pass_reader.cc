#include "pipeline/pass_reader.h"

#include <fmt/format.h>

#include <algorithm>

namespace ctrbox {

Status PassReader::Open() {
  ASSIGN_OR_RETURN(reader_, open_());
  schema_ = reader_->schema();
  block_.Reset(schema_);
  return Status::OK();
}

Status PassReader::Next(Batch* examples, bool* eof) {
  examples->Reset(schema_);
  const uint64_t want = options_.pass_examples;
  while (examples->rows() < want) {
    if (begin_ < block_.rows()) {
      const size_t take = std::min<size_t>(block_.rows() - begin_, want - examples->rows());
      examples->AppendRows(block_, begin_, begin_ + take);
      begin_ += take;
      continue;
    }
    if (!reader_) {
      if (epoch_ >= options_.epochs) break;
      ASSIGN_OR_RETURN(reader_, open_());
    }
    bool end = false;
    RETURN_IF_ERROR(reader_->Next(&block_, &end));
    begin_ = 0;
    if (end) {
      counts_.Add(reader_->counts());
      reader_.reset();
      block_.Reset(schema_);
      if (++epoch_ >= options_.epochs || examples->rows() > 0) break;
    }
  }
  *eof = examples->rows() == 0;
  return Status::OK();
}

Status PassReader::Skip(uint64_t passes, uint64_t examples) {
  Batch scratch;
  uint64_t seen = 0;
  for (uint64_t p = 0; p < passes; ++p) {
    bool eof = false;
    RETURN_IF_ERROR(Next(&scratch, &eof));
    if (eof) {
      return FailedPreconditionError(fmt::format(
          "the input ended after {} passes, but the checkpoint was cut after {}: the data "
          "changed since",
          p, passes));
    }
    seen += scratch.rows();
  }
  if (seen != examples) {
    return FailedPreconditionError(fmt::format(
        "the first {} passes of the input hold {} examples, the checkpoint says {}: the data "
        "changed since",
        passes, seen, examples));
  }
  return Status::OK();
}

}  // namespace ctrbox
