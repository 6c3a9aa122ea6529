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

# sluice_add_test(name SOURCES a.cpp b.cpp [LABELS unit])
function(sluice_add_test name)
    cmake_parse_arguments(T "" "" "SOURCES;LABELS" ${ARGN})
    add_executable(${name} ${T_SOURCES})
    sluice_target_defaults(${name})
    target_link_libraries(${name} PRIVATE sluice_lib GTest::gtest GTest::gtest_main)
    target_compile_definitions(${name} PRIVATE
        SLUICE_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
        SLUICE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
        SLUICE_BINARY="$<TARGET_FILE:sluice>")
    gtest_discover_tests(${name} PROPERTIES LABELS "${T_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()
