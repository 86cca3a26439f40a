// Whole-file reads and atomic writes, shared by every file format of io/ (checkpoints,
// safetensors, .npy).
//
// An atomic write puts the bytes in PATH.tmp-PID-N (PID the writing process, N its count of
// writes) in the same folder, fsyncs it, renames it over PATH and fsyncs the folder: PATH is the
// old file or the new one, whole, whatever happens. A process killed in between leaves its
// PATH.tmp-PID-N behind; the next write to PATH removes those whose process is gone.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ag {

// The bytes of the regular file at `path`. An IoError "WHAT PATH: reason" otherwise (missing, a
// folder, unreadable); `what` names the format ("safetensors").
std::string read_whole_file(const std::string& path, const std::string& what);

// The points of an atomic write at which a test may stop the process.
enum class WritePhase { temp_file_opened, half_written, written, synced, renamed };

struct WriteResult {
  // Temporary files of earlier writes to the same path that were killed mid-way, removed (see
  // remove_stale_temp_files). The library prints nothing; programs say so (ag-train does).
  std::vector<std::string> removed_temp_files;
};

// Writes `bytes` to `path` atomically (see above), after removing the stale temporary files of
// earlier writes to `path`. Throws IoError "WHAT PATH: reason" on any failure, leaving whatever
// was at `path` untouched. on_phase, if set, is called as the write passes each phase.
WriteResult write_file_atomically(const std::string& path, std::string_view bytes,
    const std::string& what, const std::function<void(WritePhase)>& on_phase = {});

// Removes the PATH.tmp-PID-N beside `path` whose process no longer exists (kill(PID, 0) fails
// with ESRCH) and returns their paths. Those of live processes — this one's, a write in progress
// elsewhere — are left alone, as are names of any other form. A PID reused by a new process keeps
// its file until that process ends: the cleanup never guesses.
std::vector<std::string> remove_stale_temp_files(const std::string& path);

}  // namespace ag
