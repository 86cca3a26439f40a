# The include rules of docs/architecture.md, checked over the source tree (run by ctest as
# `cmake -DAG_SOURCE_DIR=... -P check_layout.cmake`; it fails the test with every violation listed).
#
# Each library folder may include only itself and the folders listed for it: a layer sees the
# layers below it, never one above or beside it. Programs (examples/, bench/), the Python binding
# (python/) and tests may include any library, but no folder includes examples/, bench/ or tests/ code except tests/.
cmake_minimum_required(VERSION 3.25)
if(NOT AG_SOURCE_DIR)
  message(FATAL_ERROR "check_layout.cmake: pass -DAG_SOURCE_DIR=<the ag source tree>")
endif()

# folder -> the folders its files may include besides itself (keep in step with the table in
# docs/architecture.md).
set(allowed_autograd "")
set(allowed_nn "autograd")
set(allowed_optim "autograd")
set(allowed_data "autograd")
set(allowed_viz "autograd;io")
set(allowed_io "autograd;nn;optim;data")
set(allowed_models "autograd;nn;optim;data;io")
set(allowed_distributed "autograd;nn")
set(allowed_training "autograd;nn;optim;data;viz;io;models;distributed")
set(libraries autograd nn optim data io viz models distributed training)
# python/ (the binding) is, like a program, a user of the libraries that no library includes.
set(all_code_folders ${libraries} examples bench tests python)

set(problems "")
foreach(folder IN LISTS all_code_folders)
  file(GLOB_RECURSE sources RELATIVE "${AG_SOURCE_DIR}" "${AG_SOURCE_DIR}/${folder}/*.h"
       "${AG_SOURCE_DIR}/${folder}/*.cpp")
  foreach(source IN LISTS sources)
    file(STRINGS "${AG_SOURCE_DIR}/${source}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*" "\\1" included "${line}")
      string(REGEX MATCH "^[a-z_]+/" top "${included}")
      string(REGEX REPLACE "/$" "" top "${top}")
      if(top STREQUAL "")
        continue()  # a file beside it (tests' helpers), or a system header in quotes
      endif()
      if(folder IN_LIST libraries)
        if(NOT top STREQUAL folder AND NOT top IN_LIST allowed_${folder})
          list(APPEND problems "${source} includes \"${included}\": ${folder}/ may include only "
                               "${folder}/ and [${allowed_${folder}}]")
        endif()
        # Internal headers are internal to their own library.
        if(included MATCHES "^[a-z_]+/detail/" AND NOT top STREQUAL folder)
          list(APPEND problems "${source} includes \"${included}\", an internal header of ${top}/")
        endif()
      elseif(top MATCHES "^(examples|bench)$" OR (top STREQUAL "tests" AND NOT folder STREQUAL "tests"))
        list(APPEND problems "${source} includes \"${included}\": programs and tests are not libraries")
      endif()
    endforeach()
  endforeach()
endforeach()

# examples/ holds programs only, one main() per program: a program is a file examples/NAME.cpp, or
# a folder examples/NAME/ of files (ag-train's tasks in examples/train/) of which exactly one
# defines main. Headers live only inside a program's folder (its parts' declarations); no library
# is built there.
file(GLOB example_sources "${AG_SOURCE_DIR}/examples/*.cpp")
foreach(source IN LISTS example_sources)
  file(STRINGS "${source}" mains REGEX "^int main\\(")
  if(NOT mains)
    list(APPEND problems "${source} defines no main(): library code belongs in a library folder")
  endif()
endforeach()
file(GLOB example_headers "${AG_SOURCE_DIR}/examples/*.h")
if(example_headers)
  list(APPEND problems "examples/ holds headers (${example_headers}): shared code belongs in a library")
endif()
file(GLOB example_entries LIST_DIRECTORIES true "${AG_SOURCE_DIR}/examples/*")
foreach(entry IN LISTS example_entries)
  if(NOT IS_DIRECTORY "${entry}" OR entry MATCHES "/reference$")
    continue()  # a program file, or examples/reference/ (the PyTorch scripts ag is compared with)
  endif()
  file(GLOB_RECURSE program_sources "${entry}/*.cpp")
  set(files_with_main "")
  foreach(source IN LISTS program_sources)
    file(STRINGS "${source}" mains REGEX "^int main\\(")
    if(mains)
      list(APPEND files_with_main "${source}")
    endif()
  endforeach()
  list(LENGTH files_with_main count)
  if(NOT count EQUAL 1)
    list(APPEND problems "the program folder ${entry} has ${count} files that define main() "
                         "(${files_with_main}): a program folder holds one program")
  endif()
endforeach()
file(STRINGS "${AG_SOURCE_DIR}/examples/CMakeLists.txt" example_libraries REGEX "add_library")
if(example_libraries)
  list(APPEND problems "examples/CMakeLists.txt defines a library: ${example_libraries}")
endif()

if(problems)
  list(JOIN problems "\n  " listed)
  message(FATAL_ERROR "the layout rules of docs/architecture.md do not hold:\n  ${listed}")
endif()
message(STATUS "layout rules hold")
