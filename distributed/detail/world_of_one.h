// What distributed.cpp calls of MPI, for a build without MPI: a world of one process.
//
// ag::distributed always builds. Where CMake found MPI it talks to mpirun's other ranks; where it
// did not, these few functions stand in for MPI's with its semantics for a communicator of one
// rank — a reduction or a broadcast leaves the data as it is, a gather copies this rank's part into
// place, a request is complete at once — so that the rest of distributed.cpp is one code for both
// builds. Internal to ag::distributed (not installed); only distributed.cpp includes it.
// Environment refuses to start under a launcher in such a build (distributed.cpp): N processes that
// each believed they were alone would each train the whole batch.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace ag::dist::world_of_one {

using MPI_Comm = int;
using MPI_Datatype = int;
using MPI_Op = int;
using MPI_Info = int;
using MPI_Request = int;
struct MPI_Status {};

constexpr int MPI_SUCCESS = 0, MPI_COMM_NULL = 0, MPI_COMM_WORLD = 1, MPI_COMM_TYPE_SHARED = 0,
              MPI_INFO_NULL = 0, MPI_REQUEST_NULL = 0, MPI_THREAD_FUNNELED = 1, MPI_SUM = 0,
              MPI_MAX = 1, MPI_MAX_PROCESSOR_NAME = 256;
// A datatype is its size in bytes: all that a world of one needs to know of it.
constexpr MPI_Datatype MPI_CHAR = 1, MPI_FLOAT = 4, MPI_DOUBLE = 8, MPI_INT64_T = 8;
inline void* const MPI_IN_PLACE = reinterpret_cast<void*>(1);
inline MPI_Status* const MPI_STATUS_IGNORE = nullptr;

inline std::size_t bytes_of(int count, MPI_Datatype type) {
  return static_cast<std::size_t>(count) * static_cast<std::size_t>(type);
}
inline void copy_unless_in_place(const void* send, void* receive, int count, MPI_Datatype type) {
  if (send != MPI_IN_PLACE && send != receive && count > 0)
    std::memcpy(receive, send, bytes_of(count, type));
}

inline int MPI_Initialized(int* flag) { return *flag = 0, MPI_SUCCESS; }
inline int MPI_Finalized(int* flag) { return *flag = 1, MPI_SUCCESS; }
inline int MPI_Init_thread(int*, char***, int, int*) { return 1; }  // (never called: see top)
inline int MPI_Finalize() { return MPI_SUCCESS; }
inline int MPI_Comm_split_type(MPI_Comm, int, int, MPI_Info, MPI_Comm* out) {
  return *out = MPI_COMM_WORLD, MPI_SUCCESS;
}
inline int MPI_Comm_free(MPI_Comm* comm) { return *comm = MPI_COMM_NULL, MPI_SUCCESS; }
inline int MPI_Comm_rank(MPI_Comm, int* rank) { return *rank = 0, MPI_SUCCESS; }
inline int MPI_Comm_size(MPI_Comm, int* size) { return *size = 1, MPI_SUCCESS; }
inline int MPI_Get_processor_name(char* name, int* length) {
  return name[0] = '\0', *length = 0, MPI_SUCCESS;
}
inline int MPI_Barrier(MPI_Comm) { return MPI_SUCCESS; }
inline int MPI_Bcast(void*, int, MPI_Datatype, int, MPI_Comm) { return MPI_SUCCESS; }
inline int MPI_Allreduce(
    const void* send, void* receive, int count, MPI_Datatype type, MPI_Op, MPI_Comm) {
  copy_unless_in_place(send, receive, count, type);  // the sum (or max) over one rank
  return MPI_SUCCESS;
}
inline int MPI_Iallreduce(const void* send, void* receive, int count, MPI_Datatype type, MPI_Op op,
    MPI_Comm comm, MPI_Request* request) {
  *request = MPI_REQUEST_NULL;  // complete at once
  return MPI_Allreduce(send, receive, count, type, op, comm);
}
inline int MPI_Wait(MPI_Request* request, MPI_Status*) {
  return *request = MPI_REQUEST_NULL, MPI_SUCCESS;
}
inline int MPI_Test(MPI_Request* request, int* done, MPI_Status*) {
  return *request = MPI_REQUEST_NULL, *done = 1, MPI_SUCCESS;
}
inline int MPI_Gather(const void* send, int count, MPI_Datatype type, void* receive, int,
    MPI_Datatype, int, MPI_Comm) {
  copy_unless_in_place(send, receive, count, type);  // rank 0's part, at offset 0
  return MPI_SUCCESS;
}
inline int MPI_Gatherv(const void* send, int count, MPI_Datatype type, void* receive, const int*,
    const int* offsets, MPI_Datatype, int, MPI_Comm) {
  if (receive != nullptr)
    copy_unless_in_place(
        send, static_cast<char*>(receive) + bytes_of(offsets[0], type), count, type);
  return MPI_SUCCESS;
}
inline int MPI_Abort(MPI_Comm, int exit_code) { std::exit(exit_code); }
inline double MPI_Wtime() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace ag::dist::world_of_one
