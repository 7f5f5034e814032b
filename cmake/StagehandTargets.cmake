# Helpers that give every stagehand target the same warnings, include paths and naming.

include(GNUInstallDirs)

set(STAGEHAND_WARNINGS
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
    -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough)

function(stagehand_apply_warnings target)
  target_compile_options(${target} PRIVATE ${STAGEHAND_WARNINGS})
  if(STAGEHAND_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# stagehand_module(<name> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Creates the static library stagehand_<name> with the alias stagehand::<name>.
function(stagehand_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target stagehand_${name})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(stagehand::${name} ALIAS ${target})
  target_include_directories(${target}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} POSITION_INDEPENDENT_CODE ON)
  stagehand_apply_warnings(${target})
  # Every module is installed and exported as stagehand::<name> (see StagehandInstall.cmake).
  install(TARGETS ${target} EXPORT stagehandTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()

# stagehand_test(<name> SOURCES ... DEPS ... LABELS <label> [LABELS <label>...] [TEST_FILTER <f>]
#                [TEST_PREFIX <p>])
# Builds one GoogleTest binary and registers each test case with CTest under the given labels
# (only the cases the gtest filter <f> selects, when given; named <p><case> when binaries share
# cases), or the binary as one test with STAGEHAND_TESTS_PER_BINARY.
# Every test translation unit parses GoogleTest and GoogleMock (about 2 s each with our flags):
# they are compiled once per build into one precompiled header that all test binaries reuse.
# Through a precompiled header GCC 12 no longer treats libstdc++ as a system header, and its known
# false -Warray-bounds, -Wstringop-overflow and -Wrestrict on string concatenation (GCC bug
# 105651) then stop the build; test code only goes without those three warnings.
function(stagehand_test_options target)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${target} PRIVATE
    STAGEHAND_VECTORS_DIR="${PROJECT_SOURCE_DIR}/tests/vectors"
    STAGEHAND_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  stagehand_apply_warnings(${target})
  target_compile_options(${target} PRIVATE
    $<$<CXX_COMPILER_ID:GNU>:-Wno-array-bounds -Wno-stringop-overflow -Wno-restrict>)
endfunction()

function(stagehand_test name)
  cmake_parse_arguments(ARG "" "TEST_FILTER;TEST_PREFIX" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT TARGET stagehand_test_headers)
    add_library(stagehand_test_headers OBJECT ${PROJECT_SOURCE_DIR}/tests/test_headers.cc)
    target_link_libraries(stagehand_test_headers PRIVATE GTest::gtest GTest::gmock)
    stagehand_test_options(stagehand_test_headers)
    target_precompile_headers(stagehand_test_headers PRIVATE <gmock/gmock.h> <gtest/gtest.h>)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  stagehand_test_options(${name})
  target_precompile_headers(${name} REUSE_FROM stagehand_test_headers)
  set(label_args)
  foreach(label IN LISTS ARG_LABELS)
    list(APPEND label_args LABELS ${label})
  endforeach()
  if(STAGEHAND_TESTS_PER_BINARY)
    set(filter_args)
    if(ARG_TEST_FILTER)
      set(filter_args "--gtest_filter=${ARG_TEST_FILTER}")
    endif()
    add_test(NAME ${name} COMMAND ${name} ${filter_args})
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  else()
    set(filter_args)
    if(ARG_TEST_FILTER)
      set(filter_args TEST_FILTER ${ARG_TEST_FILTER})
    endif()
    if(ARG_TEST_PREFIX)
      list(APPEND filter_args TEST_PREFIX ${ARG_TEST_PREFIX})
    endif()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 ${filter_args} PROPERTIES ${label_args})
  endif()
endfunction()
