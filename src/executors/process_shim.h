// The supervisor of one command-task run (the "shim"): a child that RunCommand forks, which makes
// itself a child subreaper, starts the command, and reaps every process of the command's tree, so
// that "the shim has exited" means "every process of the run is dead and reaped". It signals the
// whole tree, however its members regrouped (setsid, setpgid, double forks), and kills it when
// told to, when the command leaves processes behind, and when the stagehand process dies. See
// docs/adr/0007-command-runs-own-their-process-tree.md.
//
// The shim is a copy of a multithreaded process that never calls exec, so it only makes
// async-signal-safe system calls: no malloc, no stdio, no locks. The parent prepares every string
// and array it needs before forking.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace stagehand::executors_internal {

// What the shim needs, prepared by the parent before fork(): pointers into the parent's memory,
// which the shim reads from its copy. Plain value type.
struct ShimPlan {
  char* const* argv = nullptr;  // Null-terminated.
  char* const* envp = nullptr;  // Null-terminated.
  // Null-terminated; the paths execve is tried with in order, as execvp would (the program itself
  // when it has a slash, else one per PATH entry).
  const char* const* exec_paths = nullptr;
  const char* working_directory = nullptr;  // Null keeps the current one.
  pid_t parent_pid = 0;                     // The process that forked the shim.
  int channel_fd = -1;                      // The shim's end of a SOCK_SEQPACKET socket pair.
  int stdout_fd = -1;                       // The write ends of the output pipes.
  int stderr_fd = -1;
};

// Orders from the parent, one byte each on the channel. The parent closing its end, or dying,
// means kShimKill.
inline constexpr char kShimTerminate = 'T';  // SIGTERM to every process of the tree, once.
inline constexpr char kShimKill = 'K';       // SIGKILL to every process, until none is left.

// The step that failed when the command could not be started.
enum class ShimStep : std::int32_t { kSupervise, kSpawn, kChdir, kExec };

enum class ShimEvent : std::int32_t {
  kStarted,      // The command runs as `pid`, in its own process group.
  kStartFailed,  // `step` failed with errno `error`; nothing runs. The shim exits.
  kExited,       // The command itself exited: `code` and `status` as waitid's si_code and
                 // si_status, and `signals` the ones the shim had sent it (kSent* bits).
  kDone,         // Every process of the tree is dead and reaped; `leftovers` of them were still
                 // running when the command exited by itself, and were killed. The shim exits.
};

inline constexpr std::int32_t kSentTerm = 1;
inline constexpr std::int32_t kSentKill = 2;

// One message from the shim to the parent, sent as one datagram. Trivially copyable.
struct ShimReport {
  ShimEvent event = ShimEvent::kStarted;
  std::int32_t pid = 0;
  ShimStep step = ShimStep::kSupervise;
  std::int32_t error = 0;
  std::int32_t code = 0;
  std::int32_t status = 0;
  std::int32_t signals = 0;
  std::int32_t leftovers = 0;
};

// Runs the shim in a child just forked by the parent with every signal blocked. Never returns.
[[noreturn]] void RunShim(const ShimPlan& plan);

// Where the children of a process are read from.
enum class ChildSource {
  kChildrenFiles,  // /proc/<pid>/task/<tid>/children (Linux CONFIG_PROC_CHILDREN).
  kParentScan,     // The parent pid in every /proc/<pid>/stat: slower, always available.
};

// Returns kChildrenFiles when this kernel has them, else kParentScan.
ChildSource DetectChildSource();

// Sends `sig` (nothing when 0) to every descendant of `root`, top down, each after its children
// were listed, and stores the first `capacity` pids found in `found`. Returns how many descendants
// were found; a tree of more than 16,384 processes is covered in part (repeated SIGKILL passes
// still end it: the children of killed processes are re-parented to the shim). Async-signal-safe.
// Not thread-safe (static scratch space).
std::size_t SignalDescendants(pid_t root, int sig, ChildSource source, pid_t* found = nullptr,
                              std::size_t capacity = 0);

}  // namespace stagehand::executors_internal
