// Parsing a view's lines into columns (docs/features.md, "The YAML"): CSV (RFC 4180 quoting
// on one line), TSV, and JSON lines (simdjson). Malformed rows are counted by kind, sampled
// with file:line and left out; every other row becomes one row of the table.
//
// Thread safety: a ViewParser is immutable after construction; Parse may run on several
// threads at once, each with its own arena lane and scratch.
#ifndef CTRBOX_FEATURE_VIEW_PARSE_H_
#define CTRBOX_FEATURE_VIEW_PARSE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "feature/column.h"
#include "feature/graph.h"
#include "io/bad_input.h"
#include "io/line_chunker.h"

namespace ctrbox {

// What one call of Parse found besides the rows.
struct ParseOutcome {
  RecordCounts counts;  // good: the rows made
  std::vector<BadRecord> samples;
};

class ViewParser {
 public:
  // `header_fields`: csv/tsv with a header, the header's field names (every file's first line
  // must be this header); empty otherwise. Fails when a declared column is not in the header.
  static StatusOr<ViewParser> Make(const ViewLayout& layout,
                                   std::vector<std::string> header_fields);

  // Splits a header line (csv/tsv) into its field names.
  static std::vector<std::string> SplitHeader(const ViewLayout& layout, std::string_view line);
  // The header every file of the view starts with (empty without one).
  const std::vector<std::string>& header() const { return header_; }
  // How many of the declared columns a first line's fields name: all (a header), some (a
  // header with other columns: an error), none (data).
  enum class Names { kAll, kSome, kNone };
  static Names NamesTheColumns(const ViewLayout& layout, const std::vector<std::string>& fields);

  // Parses the lines of `chunk` into columns out->cols[first_col + c] for each declared column
  // c (cells from `arena`'s lane; strings point into chunk.data where they need no
  // unescaping, so chunk.data must outlive the table), appending to the table's rows. Line 1
  // of a file is a header when it names the declared columns: checked against the first
  // file's and skipped, whatever `header` says (said once per file where it is not expected);
  // otherwise, where a header is expected, the file has none and line 1 is data (said once
  // per file). A non-OK status: the chunk cannot be parsed at all (a header that names the
  // columns in another order than the first file's).
  Status Parse(const TextChunk& chunk, int first_col, Arena* arena, int lane, ColumnTable* out,
               ParseOutcome* outcome) const;

  const ViewLayout& layout() const { return layout_; }

 private:
  // Where a line's row goes: row r of out's columns from first_col, cells from the lane.
  struct RowPlace {
    const TextChunk* chunk;
    uint64_t line_no;
    uint32_t r;
    int first_col;
    Arena* arena;
    int lane;
    ColumnTable* out;
  };
  // One line into row at.r: false (counted as bad) when it does not parse. A JSON line is
  // parsed in place, with `padded` bytes readable from its start.
  bool TextRow(const RowPlace& at, std::string_view line, std::vector<Str>* fields,
               ParseOutcome* outcome) const;
  bool JsonRow(const RowPlace& at, std::string_view line, size_t padded, std::vector<uint8_t>* seen,
               ParseOutcome* outcome) const;

  // Says once per file (for the job) how its first line was taken.
  void Note(const std::string& file, const char* what) const;

  ViewLayout layout_;
  std::vector<std::string> header_;
  struct Notes;
  std::shared_ptr<Notes> notes_;      // shared by the copies of a parser
  std::vector<int> field_of_column_;  // csv/tsv: the field index of each declared column
  size_t fields_ = 0;                 // csv/tsv: fields per line
};

// Splits one CSV/TSV line (no trailing newline) into fields; quoted CSV fields are unquoted
// (doubled quotes copied into `arena`). False if a quote is unbalanced.
bool SplitFields(std::string_view line, char sep, bool quoted, Arena* arena, int lane,
                 std::vector<Str>* fields);

// Cells of one type from text: an empty text is null (returns true, *valid = 0); false when
// the text does not parse as the type (int, float, keys; a string always parses).
bool ParseCell(ColType type, Str text, Arena* arena, int lane, void* cell, uint8_t* valid);

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_VIEW_PARSE_H_
