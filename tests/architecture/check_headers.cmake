# Two rules about ag's headers, checked by reading the sources (ctest runs this script; see
# tests/CMakeLists.txt):
#
#   CHECK=public_include_only_public
#     Every installed header includes, among ag's headers, only installed ones: a public header
#     that needs autograd/detail/... (never installed) or any header missing from the install list
#     would not compile for a user. PUBLIC_HEADERS_FILE lists the installed headers, one
#     "<folder>/<header>" a line (the top-level ag_install_headers records them).
#
#   CHECK=library_uses_public_api
#     The libraries built on autograd (FOLDERS, comma-separated: nn,optim; and the Python binding,
#     python/src) use its public API only:
#     no autograd/detail/ header, nothing from a detail namespace, no TensorImpl or impl_ptr().
#
#   cmake -DCHECK=... -DSOURCE_DIR=<ag's source> [-DPUBLIC_HEADERS_FILE=...] [-DFOLDERS=...]
#         -P tests/architecture/check_headers.cmake
#
# Each violation is printed as file:line with the offending text; any violation fails the test.
cmake_minimum_required(VERSION 3.25)

set(violations "")

# The lines of `path` as a CMake list. Semicolons and square brackets would split or join list
# items, so they are replaced by placeholders here and put back by restore_line.
function(read_lines path out_var)
  file(READ "${path}" content)
  string(REPLACE ";" "<semicolon>" content "${content}")
  string(REPLACE "[" "<open-bracket>" content "${content}")
  string(REPLACE "]" "<close-bracket>" content "${content}")
  string(REPLACE "\n" ";" content "${content}")
  set(${out_var} "${content}" PARENT_SCOPE)
endfunction()

function(restore_line line out_var)
  string(REPLACE "<semicolon>" ";" line "${line}")
  string(REPLACE "<open-bracket>" "[" line "${line}")
  string(REPLACE "<close-bracket>" "]" line "${line}")
  string(STRIP "${line}" line)
  set(${out_var} "${line}" PARENT_SCOPE)
endfunction()

if(CHECK STREQUAL "public_include_only_public")
  file(STRINGS "${PUBLIC_HEADERS_FILE}" public_headers)
  list(LENGTH public_headers count)
  if(count EQUAL 0)
    message(FATAL_ERROR "check_headers: ${PUBLIC_HEADERS_FILE} lists no headers")
  endif()
  foreach(header IN LISTS public_headers)
    read_lines("${SOURCE_DIR}/${header}" lines)
    set(line_number 0)
    foreach(line IN LISTS lines)
      math(EXPR line_number "${line_number} + 1")
      # #include "x.h" of any header, and #include <x.h> of one in an ag folder (folder/name.h).
      if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\"")
        set(included "${CMAKE_MATCH_1}")
      elseif(line MATCHES "^[ \t]*#[ \t]*include[ \t]*<([^>]+)>")
        set(included "${CMAKE_MATCH_1}")
        if(NOT EXISTS "${SOURCE_DIR}/${included}")
          continue()  # a system or third-party header
        endif()
      else()
        continue()
      endif()
      if(NOT included IN_LIST public_headers)
        string(APPEND violations
               "${header}:${line_number}: includes ${included}, which is not installed\n")
      endif()
    endforeach()
  endforeach()

elseif(CHECK STREQUAL "library_uses_public_api")
  string(REPLACE "," ";" folders "${FOLDERS}")
  foreach(folder IN LISTS folders)
    file(GLOB sources "${SOURCE_DIR}/${folder}/*.h" "${SOURCE_DIR}/${folder}/*.cpp")
    if(NOT sources)
      message(FATAL_ERROR "check_headers: no sources in ${SOURCE_DIR}/${folder}")
    endif()
    foreach(source IN LISTS sources)
      file(RELATIVE_PATH name "${SOURCE_DIR}" "${source}")
      read_lines("${source}" lines)
      set(line_number 0)
      foreach(line IN LISTS lines)
        math(EXPR line_number "${line_number} + 1")
        # (pybind11's own detail namespace, which python/src/ uses, is not ag's)
        string(REGEX REPLACE "(py|pybind11)::detail::" "" line_of_ag "${line}")
        if(line_of_ag MATCHES "autograd/detail/|detail::|TensorImpl|impl_ptr\\(")
          restore_line("${line}" text)
          string(APPEND violations "${name}:${line_number}: ${text}\n")
        endif()
      endforeach()
    endforeach()
  endforeach()

else()
  message(FATAL_ERROR "check_headers: unknown CHECK '${CHECK}'")
endif()

if(violations)
  message(FATAL_ERROR "check_headers (${CHECK}):\n${violations}")
endif()
message(STATUS "check_headers (${CHECK}): no violations")
