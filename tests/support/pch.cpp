// The translation unit that builds the tests' precompiled header (tests/CMakeLists.txt: sluice_test_pch); every test
// file reuses that header. Nothing to compile beyond it.
