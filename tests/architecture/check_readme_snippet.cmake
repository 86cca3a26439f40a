# The README's CMake snippet ("Using ag from another CMake project") is tests/install/'s, character
# for character: scripts/test.sh builds tests/install/ against an installed ag, so the snippet a
# user copies is known to work. Run by ctest as
#   cmake -DAG_SOURCE_DIR=<the ag source tree> -P check_readme_snippet.cmake
cmake_minimum_required(VERSION 3.25)
file(READ "${AG_SOURCE_DIR}/README.md" readme)
file(READ "${AG_SOURCE_DIR}/tests/install/CMakeLists.txt" project)

string(FIND "${project}" "# README snippet begin\n" begin)
string(FIND "${project}" "# README snippet end" end)
if(begin EQUAL -1 OR end EQUAL -1)
  message(FATAL_ERROR "tests/install/CMakeLists.txt has no '# README snippet begin/end' markers")
endif()
math(EXPR begin "${begin} + 23")  # past the begin marker's line
math(EXPR length "${end} - ${begin}")
string(SUBSTRING "${project}" ${begin} ${length} snippet)

string(FIND "${readme}" "## Using ag from another CMake project" section)
if(section EQUAL -1)
  message(FATAL_ERROR "README.md has no section 'Using ag from another CMake project'")
endif()
string(SUBSTRING "${readme}" ${section} -1 readme_section)
string(FIND "${readme_section}" "```cmake\n${snippet}```" found)
if(found EQUAL -1)
  message(FATAL_ERROR "README.md's cmake block under 'Using ag from another CMake project' is not "
                      "tests/install/CMakeLists.txt's snippet:\n${snippet}")
endif()
message(STATUS "README's CMake snippet is tests/install/'s")
