# ag_add_library(<name> SOURCES <file>... HEADERS <file>... [PUBLIC <target>...] [PRIVATE <target>...])
#
# One of ag's libraries, as docs/architecture.md describes them: the target ag_<name>, used as
# ag::<name> in the build tree and, after installation, through find_package(ag); its headers are
# installed to include/ag/<name>/ so that "<name>/header.h" includes the same file in both places.
# SOURCES and HEADERS are relative to the calling folder.
# PUBLIC lists the ag libraries (and others) its headers expose; PRIVATE what only its sources use.
function(ag_add_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;HEADERS;PUBLIC;PRIVATE")
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_SOURCES)
    message(FATAL_ERROR "ag_add_library(${name}): expected SOURCES, HEADERS, PUBLIC and PRIVATE "
                        "lists, got '${arg_UNPARSED_ARGUMENTS}'")
  endif()
  set(target ag_${name})
  add_library(${target} ${arg_SOURCES})
  add_library(ag::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} POSITION_INDEPENDENT_CODE ON)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                              $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/ag>)
  target_link_libraries(${target} PUBLIC ${arg_PUBLIC}
                                  PRIVATE ${arg_PRIVATE} $<BUILD_INTERFACE:ag_build_flags>)
  install(TARGETS ${target} EXPORT agTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  # Only the listed (public) headers are installed; internal ones (autograd/detail/) never are.
  # The global property AG_PUBLIC_HEADERS collects them as "<name>/<header>" for the test
  # headers.public_include_only_public (tests/architecture/check_headers.cmake).
  install(FILES ${arg_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ag/${name})
  foreach(header IN LISTS arg_HEADERS)
    set_property(GLOBAL APPEND PROPERTY AG_PUBLIC_HEADERS ${name}/${header})
  endforeach()
endfunction()
