// Checks that an output can be written, made before a long run rather than after it.
//
// A program that trains for an hour and then cannot write its model has lost the hour. ag-train
// and the other programs ask these functions about every output path before they start, and
// refuse a path that cannot work with the operating system's reason. Nothing is created or
// truncated: the checks open an existing file without truncating it, and create and remove a
// probe file (".ag-probe-PID-N") in the folder that will hold the output — which also catches
// what permission bits do not show (a read-only file system, /proc, a missing folder, a path
// through a regular file), even for root.
#pragma once

#include <string>

namespace ag {

enum class OutputKind {
  file,          // written in place (opened, truncated or appended: a log): the file must be
                 // writable; a character device such as /dev/null is written through
  renamed_file,  // written whole to a temporary file beside it, then renamed over it (checkpoints,
                 // model files, PNGs): the folder must be writable, and the path a regular file,
                 // a missing one or a symbolic link to one (io/file.h, atomic_write_target)
};

// Why `path` cannot be written as `kind` — "cannot create files in out: Permission denied",
// "out is a directory", "the folder x does not exist", "f is a FIFO, not a regular file" — or ""
// if it can (docs/checkpoints.md, "Output paths").
std::string output_file_problem(const std::string& path, OutputKind kind = OutputKind::file);

// Why files cannot be written into the folder `dir`, created (with its parents) if missing — or
// "" if they can. A missing folder is not created here: its nearest existing ancestor is checked.
std::string output_directory_problem(const std::string& dir);

}  // namespace ag
