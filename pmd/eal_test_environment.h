// For tests: starts DPDK's EAL once per test binary (no hugepages, no PCI, a
// unique file prefix) and stops it after the last test. Link
// //pmd:eal_test_environment into a test to get it.
#pragma once

namespace uroce::pmd {

// True once the environment has started EAL (set up before any test runs).
bool TestEalStarted();

}  // namespace uroce::pmd
