// For tests: starts DPDK's EAL once per test binary (no hugepages, no PCI, a
// unique file prefix) and stops it after the last test. EAL gets lcore 0
// only, or the lcores in $UROCE_TEST_LCORES (e.g. "0-1" for engine lcores). Link
// //pmd:eal_test_environment into a test to get it.
#pragma once

namespace uroce::pmd {

// True once the environment has started EAL (set up before any test runs).
bool TestEalStarted();

}  // namespace uroce::pmd
