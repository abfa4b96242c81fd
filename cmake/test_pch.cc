// The one source of ctrbox_test_pch (CMakeLists.txt, CTRBOX_TEST_PCH): CMake precompiles the
// tests' common headers for this target, and every test binary reuses them.
