// Fuzz targets for every input parser (docs/fuzzing.md). Each takes arbitrary bytes and must
// return without crashing, hanging, leaking or a sanitizer report; rejecting the input with an
// error is the expected outcome for most inputs. The same functions run under libFuzzer
// (fuzz/libfuzzer_main.cc, -DCTRBOX_FUZZ=ON with clang) and in the unit test that replays the
// checked-in corpora with deterministic mutations (fuzz_replay_test.cc, in CI).
#ifndef CTRBOX_FUZZ_FUZZ_TARGETS_H_
#define CTRBOX_FUZZ_FUZZ_TARGETS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ctrbox {

// Text inputs: byte 0 picks the format (criteo, libsvm, libfm, slots) and whether labels are
// optional, bytes 1 and 2 the slot and dense counts (libfm, slots); the rest is the file
// (plain, gzip or zstd, as the reader sniffs it), read through the line chunker in small
// chunks and parsed.
int FuzzTextInput(const uint8_t* data, size_t size);
// A binary shard file: opened, every block read and decoded.
int FuzzShard(const uint8_t* data, size_t size);
// A shard directory's SHARDS manifest: decoded, and re-encoded to the same bytes.
int FuzzShardManifest(const uint8_t* data, size_t size);
// A model directory's MANIFEST (JSON plus checksum line).
int FuzzManifest(const uint8_t* data, size_t size);
// A checkpoint's MANIFEST (JSON plus checksum line), read and its checkpoint inspected.
int FuzzCheckpointManifest(const uint8_t* data, size_t size);
// The sparse file of a model directory whose MANIFEST and dense file are valid: verified.
int FuzzModelSparse(const uint8_t* data, size_t size);
// An SSD-PS group record. The header's sizes and CRC are fixed up so that the row parser
// behind the CRC is what gets fuzzed (a flipped bit is the CRC's job, tested elsewhere).
int FuzzGroupRecord(const uint8_t* data, size_t size);
// An SSD-PS INDEX file, parsed as `ctrbox inspect --store` does.
int FuzzStoreIndex(const uint8_t* data, size_t size);

// A stream job's serving donefile (versions.jsonl, docs/routine.md): parsed; the newest
// version's chain loaded (its files are absent: loading must fail cleanly); and its first
// line as a stream.layout, with a partition name formed and parsed back.
int FuzzServingDonefile(const uint8_t* data, size_t size);

// A main view's file: byte 0 picks csv / tsv / jsonl and whether it has a header; the rest is
// the file, read in small chunks through a fixed feature graph of every variable-length
// operator (docs/features.md).
int FuzzFeatureView(const uint8_t* data, size_t size);
// A job's `features:` section (YAML text): parsed and validated; a graph without side views
// is then run over rows of its declared columns.
int FuzzFeatureGraph(const uint8_t* data, size_t size);

// A KServe v2 inference request to `ctrbox serve` (docs/serve.md): its JSON object, then, after
// a NUL byte, the binary tensor data (the part past Inference-Header-Content-Length), read
// for a criteo model (26 slots, 13 dense) and answered with probabilities of 0.5.
int FuzzInferRequest(const uint8_t* data, size_t size);

// Whether the last input a target ran on this thread parsed without any error (for the replay
// test: a seed must reach the end of its parser, or it fuzzes nothing behind the first check).
bool LastInputAccepted();

struct FuzzTarget {
  const char* name;  // also the corpus directory: fuzz/corpus/<name>/
  int (*fn)(const uint8_t*, size_t);
};
const std::vector<FuzzTarget>& FuzzTargets();

// Valid inputs for the targets whose inputs only ctrbox's writers make (a model's sparse
// file, a group record, an INDEX): the seeds checked in under fuzz/corpus/ were written from
// these (fuzz_replay_test with CTRBOX_WRITE_SEEDS=1).
std::vector<std::string> BuiltInSeeds(const std::string& target);

}  // namespace ctrbox

#endif  // CTRBOX_FUZZ_FUZZ_TARGETS_H_
