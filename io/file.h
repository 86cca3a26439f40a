// What every file format of io/ (checkpoints, safetensors, .npy) shares: whole-file reads, atomic
// writes, and a strict reader of a text header.
//
// An atomic write puts the bytes in PATH.tmp-PID-N (PID the writing process, N its count of
// writes) in the same folder, fsyncs it, renames it over PATH and fsyncs the folder: PATH is the
// old file or the new one, whole, whatever happens. A process killed in between leaves its
// PATH.tmp-PID-N behind; the next write to PATH removes those whose process is gone.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ag {

// What a stat() mode that is not a regular file's names — "a directory", "a FIFO", "a character
// device", "a block device", "a socket" — for the errors that refuse it.
const char* file_kind(unsigned mode);

// A file opened for reading, checked before anything is read from it: opened without blocking (the
// open of a FIFO would otherwise wait for a writer forever), then refused unless it is a regular
// file — a FIFO, a device, a socket or a directory is an IoError "WHAT PATH: not a regular file (a
// FIFO)". A reader reads it in parts, each checked against size() first: a format's header, then
// the body the header declares, so that a file that is not the format costs its header's bytes,
// not its size.
class InputFile {
 public:
  // `what` names the format in errors ("checkpoint", "safetensors").
  InputFile(const std::string& path, const std::string& what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  // Exactly `count` bytes from `offset` (the caller keeps offset + count within size()); an
  // IoError if they cannot be read or the file shrank since it was opened.
  std::string read(uint64_t offset, uint64_t count) const;
  // "WHAT PATH: problem", thrown as an IoError.
  [[noreturn]] void fail(const std::string& problem) const;

 private:
  std::string path_, what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The bytes of the regular file at `path`, read through InputFile. An IoError "WHAT PATH: reason"
// otherwise (missing, not a regular file, unreadable); `what` names the format ("safetensors").
std::string read_whole_file(const std::string& path, const std::string& what);

// The points of an atomic write at which a test may stop the process.
enum class WritePhase { temp_file_opened, half_written, written, synced, renamed };

struct WriteResult {
  // Temporary files of earlier writes to the same path that were killed mid-way, removed (see
  // remove_stale_temp_files). The library prints nothing; programs say so (ag-train does).
  std::vector<std::string> removed_temp_files;
};

// Where an atomic write to `path` lands: `path` itself when it is a regular file or does not exist;
// for a symbolic link, the file it points to, followed link by link (up to 40) — the link stays a
// link and its target gets the new bytes. Anything else is refused with an IoError "WHAT PATH:
// TARGET is a character device, not a regular file (...)" or "TARGET is a directory": the rename
// would replace a device, a FIFO or a socket by a regular file (as root, `--checkpoint /dev/null`
// replaced the system's /dev/null).
std::string atomic_write_target(const std::string& path, const std::string& what);

// Writes `bytes` to `path` atomically (see above; a symbolic link's target, atomic_write_target),
// after removing the stale temporary files of earlier writes to it. Throws IoError "WHAT PATH:
// reason" on any failure, leaving whatever was at `path` untouched. on_phase, if set, is called
// as the write passes each phase.
WriteResult write_file_atomically(const std::string& path, std::string_view bytes,
    const std::string& what, const std::function<void(WritePhase)>& on_phase = {});

// Removes the PATH.tmp-PID-N beside `path` whose process no longer exists (kill(PID, 0) fails
// with ESRCH) and returns their paths. Those of live processes — this one's, a write in progress
// elsewhere — are left alone, as are names of any other form. A PID reused by a new process keeps
// its file until that process ends: the cleanup never guesses.
std::vector<std::string> remove_stale_temp_files(const std::string& path);

// Throws Error("SOURCE: not a valid FORMAT file: problem"), the words every reader of io/ uses
// for a damaged file.
template <class Error>
[[noreturn]] void refuse_file(
    const std::string& source, const char* format, const std::string& problem) {
  throw Error(source + ": not a valid " + format + " file: " + problem);
}

// A position in a file's text header (safetensors' JSON, .npy's Python dict) and the few steps
// every strict reader of one takes. A failure throws Error("SOURCE: not a valid FORMAT file:
// header byte N: problem"). The format's reader derives from it and adds its own values.
template <class Error>
class HeaderText {
 public:
  // blanks: the characters skipped between tokens.
  HeaderText(
      std::string_view text, const std::string& source, const char* format, std::string_view blanks)
      : text_(text), source_(source), format_(format), blanks_(blanks) {}

  void skip_blanks() {
    while (pos_ < text_.size() && blanks_.find(text_[pos_]) != std::string_view::npos) ++pos_;
  }
  // Consumes `token` (after blanks) if it comes next.
  bool accept(std::string_view token) {
    skip_blanks();
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  void expect(std::string_view token, const std::string& what = "") {
    if (!accept(token))
      fail("expected '" + std::string(token) + "'" + (what.empty() ? "" : " " + what));
  }
  // A non-negative decimal integer as JSON and Python write it: no sign, no leading zero, no
  // fraction or exponent.
  int64_t integer() {
    skip_blanks();
    const std::size_t start = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_++] - '0';
      if (value > (INT64_MAX - digit) / 10) fail("an integer too large");
      value = value * 10 + digit;
    }
    if (pos_ == start) fail("expected a non-negative integer");
    if (text_[start] == '0' && pos_ - start > 1) fail("an integer with a leading zero");
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
      fail("a number that is not a whole number");
    return value;
  }
  bool at_end() {
    skip_blanks();
    return pos_ == text_.size();
  }
  std::size_t position() const { return pos_; }
  [[noreturn]] void fail(const std::string& problem) const {
    refuse_file<Error>(source_, format_, "header byte " + std::to_string(pos_) + ": " + problem);
  }

 protected:
  std::string_view text_;
  std::size_t pos_ = 0;

 private:
  std::string source_;
  const char* format_;
  std::string_view blanks_;
};

}  // namespace ag
