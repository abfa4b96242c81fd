// Input from outside the process: standard input, or the standard output of a shell command,
// as a SequentialFile that gives way to cancellation (a stalled producer never holds up a
// stopped job), and the means to stop every running command from a signal handler.
#ifndef CTRBOX_UTIL_COMMAND_FILE_H_
#define CTRBOX_UTIL_COMMAND_FILE_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "util/env.h"
#include "util/status.h"

namespace ctrbox {

// Reads give up with Cancelled once either flag (each optional) is set: the job's stop, and
// the reader's own closing.
using CancelFlags = std::pair<const std::atomic<bool>*, std::shared_ptr<std::atomic<bool>>>;

// Standard input (named "<stdin>").
StatusOr<std::unique_ptr<SequentialFile>> OpenStdin(CancelFlags cancel);
// The standard output of `/bin/sh -c command`, named `name` in errors. The command runs in its
// own process group (a terminal's Ctrl-C reaches this process, which decides) and is sent
// SIGTERM when the file is cancelled or closed before the end of its output; a command that
// exits with a nonzero status is an error at the end of its output.
StatusOr<std::unique_ptr<SequentialFile>> OpenCommandOutput(const std::string& command,
                                                            const std::string& name,
                                                            CancelFlags cancel);
// Sends SIGTERM to every running command's process group. Async-signal-safe.
void KillCommands();

}  // namespace ctrbox

#endif  // CTRBOX_UTIL_COMMAND_FILE_H_
