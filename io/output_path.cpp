#include "io/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "autograd/error.h"
#include "io/file.h"

namespace ag {

namespace {

namespace fs = std::filesystem;

std::atomic<unsigned> probe_counter{0};

// The folder that holds `path`: "." for a bare file name.
fs::path folder_of(const fs::path& path) {
  return path.has_parent_path() ? path.parent_path() : fs::path(".");
}

// Creates and removes a probe file in `dir`: what the operating system says about it.
std::string probe_problem(const fs::path& dir) {
  const fs::path probe =
      dir / (".ag-probe-" + std::to_string(::getpid()) + "-" + std::to_string(probe_counter++));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create files in " + dir.string() + ": " + std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

// stat() of `path`: 0, ENOENT or another errno (ENOTDIR for a path through a regular file).
int stat_errno(const fs::path& path, struct stat& info) {
  return ::stat(path.c_str(), &info) == 0 ? 0 : errno;
}

}  // namespace

std::string output_file_problem(const std::string& path_given, OutputKind kind) {
  if (path_given.empty()) return "the path is empty";
  std::string path_text = path_given;
  if (kind == OutputKind::renamed_file) {
    // The file the rename will replace: a symbolic link's target; a device, FIFO, socket or
    // folder is refused (write_file_atomically's policy, io/file.h).
    try {
      path_text = atomic_write_target(path_given, "output");
    } catch (const IoError& e) {
      const std::string message = e.what(), prefix = "output " + path_given + ": ";
      return message.starts_with(prefix) ? message.substr(prefix.size()) : message;
    }
  }
  const fs::path path(path_text);
  struct stat info {};
  const int error = stat_errno(path, info);
  if (error == 0 && S_ISDIR(info.st_mode)) return path_text + " is a directory";
  if (error == ENOTDIR) {
    // A path through a regular file ("model.agm/x"): name the file.
    fs::path part = path.parent_path();
    struct stat part_info {};
    while (part.has_parent_path() && part.parent_path() != part && stat_errno(part, part_info) != 0)
      part = part.parent_path();
    return part.string() + " is not a directory";
  }
  if (error != 0 && error != ENOENT) return path_text + ": " + std::strerror(error);
  const fs::path folder = folder_of(path);
  if (error == ENOENT) {
    struct stat folder_info {};
    const int folder_error = stat_errno(folder, folder_info);
    if (folder_error == ENOENT) return "the folder " + folder.string() + " does not exist";
    if (folder_error != 0) return folder.string() + ": " + std::strerror(folder_error);
    if (!S_ISDIR(folder_info.st_mode)) return folder.string() + " is not a directory";
    return probe_problem(folder);
  }
  if (kind == OutputKind::renamed_file) return probe_problem(folder);
  // An existing file written in place: a regular file is opened for writing, without truncating
  // it; a character device (/dev/null, a terminal) is written through. A FIFO would block the run
  // until a reader comes, a socket or a block device is no output: refused.
  if (S_ISFIFO(info.st_mode) || S_ISSOCK(info.st_mode) || S_ISBLK(info.st_mode))
    return path_text + " is " + file_kind(info.st_mode) + ", not a regular file";
  if (S_ISREG(info.st_mode)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return "cannot write " + path_text + ": " + std::strerror(errno);
    ::close(fd);
  }
  return "";  // a character device such as /dev/null
}

std::string output_directory_problem(const std::string& dir_text) {
  if (dir_text.empty()) return "the path is empty";
  fs::path dir(dir_text);
  // The nearest part of the path that exists: the folder itself, or the ancestor in which the
  // missing folders would be created.
  for (;;) {
    struct stat info {};
    const int error = stat_errno(dir, info);
    if (error == 0) {
      if (!S_ISDIR(info.st_mode)) return dir.string() + " is not a directory";
      return probe_problem(dir);
    }
    // ENOTDIR: a part of the path is a regular file, which the walk up finds.
    if (error != ENOENT && error != ENOTDIR) return dir.string() + ": " + std::strerror(error);
    if (!dir.has_parent_path() || dir.parent_path() == dir) return probe_problem(".");
    dir = dir.parent_path();
  }
}

}  // namespace ag
