# Read by ctest itself before it runs any test (tests/CMakeLists.txt lists it in the directory's
# TEST_INCLUDE_FILES): sets OPENBLAS_CORETYPE in ctest's environment, which every test inherits, to
# the AVX-512 core that scripts/openblas-coretype.sh names for this CPU (nothing on a CPU without
# AVX-512). It replaces a value set outside: the bit-pinned tests (the version-1 checkpoint, d2l's
# heads against OpenBLAS) were made with OpenBLAS's AVX-512 kernels, and OPENBLAS_CORETYPE=Haswell,
# say, gives other bits on the same machine.
execute_process(COMMAND bash "${CMAKE_CURRENT_LIST_DIR}/../scripts/openblas-coretype.sh"
                OUTPUT_VARIABLE ag_openblas_core OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE ag_openblas_core_result)
if(ag_openblas_core_result EQUAL 0 AND NOT ag_openblas_core STREQUAL "")
  set(ENV{OPENBLAS_CORETYPE} "${ag_openblas_core}")
endif()
