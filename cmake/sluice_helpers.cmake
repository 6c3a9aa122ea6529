# Warnings and sanitizers apply to our own targets only.
set(SLUICE_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
if (CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    # GCC 12 warns -Wrestrict on std::string concatenations it inlines at -O2 (GCC bug 105329, a false positive).
    list(APPEND SLUICE_WARNINGS -Wno-restrict)
endif()
if (SLUICE_WERROR)
    list(APPEND SLUICE_WARNINGS -Werror)
endif()
if (SLUICE_SANITIZE)
    # Everything we build (library, apps, tests) carries the sanitizers, so the whole process is checked.
    add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    add_link_options(-fsanitize=address,undefined)
endif()

function(sluice_target_defaults target)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${SLUICE_WARNINGS}>)
endfunction()

# What every test file is compiled with: the library's headers and definitions, gtest, the data paths. The test
# files' own code is scaffolding around calls into the library (which the preset optimises): at -O1 they compile in
# about two thirds of -O3's time, most of a clean build being the tests.
function(sluice_test_settings target)
    sluice_target_defaults(${target})
    target_link_libraries(${target} PRIVATE sluice_lib GTest::gtest GTest::gtest_main nlohmann_json::nlohmann_json)
    target_compile_definitions(${target} PRIVATE
        SLUICE_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
        SLUICE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
        SLUICE_BINARY="$<TARGET_FILE:sluice>")
    target_compile_options(${target} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
    sluice_glue_under_sanitizers(${target})
endfunction()

# Under the sanitizers (the asan preset: CI builds everything a second time with clang's instrumentation), code whose
# run time does not matter (tests' own files, the apps) compiles at -O0, whole targets so that their precompiled
# headers match (clang refuses a PCH built at another -O):
# instrumented nlohmann/json and gtest code at -O1 take two to three times as long (usage_stats.cpp 27 s vs 11).
# The kernels and the engine stay at the preset's -O1, so the tests' run time barely moves.
function(sluice_glue_under_sanitizers target)
    if (SLUICE_SANITIZE)
        target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O0>)
    endif()
endfunction()

# sluice_add_test(name SOURCES a.cpp b.cpp [LABELS unit])
function(sluice_add_test name)
    cmake_parse_arguments(T "" "" "SOURCES;LABELS" ${ARGN})
    add_executable(${name} ${T_SOURCES})
    sluice_test_settings(${name})
    # the precompiled gtest, nlohmann/json and standard headers (tests/CMakeLists.txt), parsed once for all tests
    if (TARGET sluice_test_pch)
        target_precompile_headers(${name} REUSE_FROM sluice_test_pch)
    endif()
    gtest_discover_tests(${name} PROPERTIES LABELS "${T_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()
