// A feature graph guessed for a headed CSV or TSV file (docs/features.md, "From a CSV file in
// one command"): the label column by name, and every other column's role from a sample of
// rows — numbers with many values are dense (as they are when never negative, else shifted by
// the sample's least value: the model takes log(1 + max(x, 0)) of them), strings and numbers
// with few values (codes) are slots, a column whose every
// value differs (a row id) or that is always empty is left out. The guess is a job file the
// user can read, edit and train with -c.
#ifndef CTRBOX_FEATURE_CSV_GUESS_H_
#define CTRBOX_FEATURE_CSV_GUESS_H_

#include <string>
#include <vector>

#include "feature/graph.h"
#include "util/env.h"
#include "util/status.h"

namespace ctrbox {

struct CsvGuessOptions {
  ViewFormat format = ViewFormat::kCsv;  // kCsv or kTsv
  // The label column ("": the first column named label, click, clicked, is_click, target or
  // y, in any case).
  std::string label;
  size_t sample_rows = 5000;      // rows of the first file the roles are guessed from
  size_t sample_bytes = 8 << 20;  // read at most this much of it
  // A number column with more distinct values than this in the sample is dense; with this
  // many or fewer it is a code (a slot).
  size_t max_code_values = 50;
};

struct CsvGuess {
  std::string features_yaml;  // the `features:` node
  std::string job_yaml;       // a whole job file: data.paths and features, with comments
  std::string summary;        // one paragraph: the label, the slots, the dense, the left out
};

// The guess for `paths` (the first file is sampled, decompressed as every text reader
// decompresses: io/compressed_file.h; the others must share its header when the job reads
// them). InvalidArgument naming the file for a file without a header, no label
// column, or a label that is not 0 or 1 (with its line).
StatusOr<CsvGuess> GuessCsvFeatures(Env* env, const std::vector<std::string>& paths,
                                    const CsvGuessOptions& o);

}  // namespace ctrbox

#endif  // CTRBOX_FEATURE_CSV_GUESS_H_
