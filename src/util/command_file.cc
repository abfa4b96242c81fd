#include "util/command_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace ctrbox {
namespace {

// The process groups of running data.commands, for KillCommands (a signal handler): a
// fixed array of atomics, which a handler may read.
constexpr int kMaxCommands = 16;
std::atomic<pid_t> g_command_groups[kMaxCommands];

void RegisterCommand(pid_t pgid) {
  for (auto& group : g_command_groups) {
    pid_t empty = 0;
    if (group.compare_exchange_strong(empty, pgid)) return;
  }
}
void UnregisterCommand(pid_t pgid) {
  for (auto& group : g_command_groups) {
    pid_t mine = pgid;
    if (group.compare_exchange_strong(mine, 0)) return;
  }
}

// Standard input, or the standard output of a shell command (data.command), read so that a
// producer that stalls never holds up a cancelled job: reads wait in poll() for at most 0.1 s
// at a time and give up with Cancelled once `cancel` is set. The command runs in its own
// process group (a terminal's Ctrl-C reaches ctrbox, which decides), and is sent SIGTERM when
// the input is cancelled or closed before its end. A command that exits with a nonzero status
// is an error at the end of its output.
class PipeInput final : public SequentialFile {
 public:
  using Flags = CancelFlags;

  static StatusOr<std::unique_ptr<SequentialFile>> Stdin(Flags cancel) {
    return std::unique_ptr<SequentialFile>(
        new PipeInput("<stdin>", STDIN_FILENO, 0, std::move(cancel)));
  }

  static StatusOr<std::unique_ptr<SequentialFile>> Command(const std::string& command,
                                                           const std::string& name, Flags cancel) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      return IOError(fmt::format("{}: pipe: {}", name, std::strerror(errno)));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
    pid_t pid = 0;
    std::fflush(nullptr);
    const int rc =
        ::posix_spawn(&pid, "/bin/sh", &actions, &attr, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      return IOError(fmt::format("{}: cannot run: {}", name, std::strerror(rc)));
    }
    RegisterCommand(pid);
    return std::unique_ptr<SequentialFile>(new PipeInput(name, fds[0], pid, std::move(cancel)));
  }

  ~PipeInput() override {
    if (pid_ > 0) {
      ::kill(-pid_, SIGTERM);  // closed before the end of the output: stop the command
      Reap();
    }
    if (fd_ != STDIN_FILENO && fd_ >= 0) ::close(fd_);
  }

  Status Read(size_t n, char* scratch, size_t* bytes_read) override {
    *bytes_read = 0;
    while (fd_ >= 0) {
      if ((cancel_.first != nullptr && cancel_.first->load(std::memory_order_relaxed)) ||
          (cancel_.second && cancel_.second->load(std::memory_order_relaxed))) {
        if (pid_ > 0) {
          ::kill(-pid_, SIGTERM);
          Reap();
        }
        return CancelledError(fmt::format("{}: reading was interrupted", name_));
      }
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, /*timeout_ms=*/100);
      if (ready < 0 && errno != EINTR) {
        return IOError(fmt::format("{}: poll: {}", name_, std::strerror(errno)));
      }
      if (ready <= 0) continue;
      const ssize_t got = ::read(fd_, scratch, n);
      if (got < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return IOError(fmt::format("{}: read error: {}", name_, std::strerror(errno)));
      }
      if (got > 0) {
        *bytes_read = static_cast<size_t>(got);
        return Status::OK();
      }
      // End of output. A command's exit status decides whether it was all of it.
      if (fd_ != STDIN_FILENO) ::close(fd_);
      fd_ = -1;
      if (pid_ > 0) {
        const int status = Reap();
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          return IOError(fmt::format("{} failed ({})", name_,
                                     WIFEXITED(status)
                                         ? fmt::format("exit status {}", WEXITSTATUS(status))
                                         : fmt::format("signal {}", WTERMSIG(status))));
        }
      }
    }
    return Status::OK();
  }
  const std::string& name() const override { return name_; }

 private:
  PipeInput(std::string name, int fd, pid_t pid, Flags cancel)
      : name_(std::move(name)), fd_(fd), pid_(pid), cancel_(std::move(cancel)) {}

  // Waits for the command; returns its wait status.
  int Reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    UnregisterCommand(pid_);
    pid_ = 0;
    return status;
  }

  std::string name_;
  int fd_;
  pid_t pid_;  // the command (and its process group), 0 when none or reaped
  const Flags cancel_;
};

// The lines of a file that start in bytes [begin, end): from the first line start at or after
// `begin` up to the end of the line holding byte end - 1 (docs/distributed.md, "Byte

}  // namespace

StatusOr<std::unique_ptr<SequentialFile>> OpenStdin(CancelFlags cancel) {
  return PipeInput::Stdin(std::move(cancel));
}

StatusOr<std::unique_ptr<SequentialFile>> OpenCommandOutput(const std::string& command,
                                                            const std::string& name,
                                                            CancelFlags cancel) {
  return PipeInput::Command(command, name, std::move(cancel));
}

void KillCommands() {
  for (auto& group : g_command_groups) {
    const pid_t pgid = group.load();
    if (pgid > 0) ::kill(-pgid, SIGTERM);
  }
}

}  // namespace ctrbox
