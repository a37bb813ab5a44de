#!/usr/bin/python3
"""rdma-core's own Python test suite (python3-pyverbs) over uroce.

Run by rdma_core_suite_test.sh under `uroce exec`: loads every test module of
a copy of /usr/share/doc/rdma-core/tests, runs them against --dev, prints a
pass/skip/fail/error count per module and every skip with its reason, and
fails when a test fails or errors, or when a test skips for a reason that is
not in KNOWN_SKIPS (each of those is a line of the "not offered" list in
docs/interoperability.md, so a skip is always something the documents own
up to).

    rdma_core_suite.py TESTS_DIR DEV [GID [MODULE]]

MODULE (for example test_rdmacm) runs that module alone.
"""
import collections
import os
import re
import sys
import unittest

# Every test of the vendor modules (test_mlx5_*, test_efa*) skips: they test
# another device's own interface.
VENDOR = 'vendor modules (mlx5, efa): another device\'s own interface'

# Reason pattern -> why uroce skips it (docs/interoperability.md says the same).
KNOWN_SKIPS = [
    (r'cuda-python|/dev/dri/renderD|dmabuf',
     'GPU memory (CUDA, dma-buf): no GPU driver here'),
    (r'no huge pages of size 2M',
     'the host has no 2 MiB hugepages reserved (environment, not uroce)'),
    (r'Create QP type 8|Raw Packet QP|RSS',
     'raw packet QPs and flow steering: uroce owns its port, no raw Ethernet QPs'),
    (r'Extended CQ is not supported',
     'tag matching (the test asks a CQ for IBV_WC_EX_WITH_TM_INFO)'),
    (r'Importing a device is not supported|object imports are not supported',
     'importing a device or its objects (ibv_import_*): sharing them between processes needs a kernel'),
    (r'Multicast is not supported on this device',
     'multicast (ibv_attach_mcast, rdma_join_multicast): not offered'),
    (r'uroce does not offer: ',
     'features uroce does not offer (NOT_OFFERED below)'),
    (r"doesn't have net interface",
     'rdma_cm tests over a device with no kernel interface (net_ring): they need the '
     'interface\'s address; tests:rdma_core_rdmacm_test runs them through a daemon on a veth'),
]


# Tests that use a feature uroce does not offer, by test id suffix: they are
# skipped before they run (they would error), with the reason.
NOT_OFFERED = {
    'CMTestCase.test_rdmacm_async_udp_traffic':
        'RDMA_PS_UDP (rdma_cm over UD QPs): uroce\'s rdma_cm connects RC QPs only',
    'CMTestCase.test_rdmacm_async_traffic_external_qp':
        'rdma_connect(3) with a QP the caller made itself (not rdma_create_qp): uroce\'s rdma_cm '
        'moves only the QPs it made',
}


def skip_not_offered(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            skip_not_offered(test)
            continue
        for suffix, reason in NOT_OFFERED.items():
            if test.id().endswith(suffix):
                name = test.id().split('.')[-1]
                setattr(test, name, unittest.skip('uroce does not offer: ' + reason)(getattr(test, name)))


def main():
    tests_dir = sys.argv[1]
    dev = sys.argv[2]
    gid = sys.argv[3] if len(sys.argv) > 3 else None
    only = sys.argv[4] if len(sys.argv) > 4 else None
    sys.path.insert(0, os.path.dirname(tests_dir))
    sys.path.insert(0, tests_dir)
    sys.argv = [sys.argv[0], '--dev', dev] + (['--gid', gid] if gid is not None else [])
    from args_parser import parser  # rdma-core's: reads --dev for every test
    parser.parse_args()
    from importlib.machinery import SourceFileLoader
    tests = SourceFileLoader('tests', os.path.join(tests_dir, '__init__.py')).load_module()
    if only is not None:
        suite = unittest.defaultTestLoader.loadTestsFromName(only, tests)
    else:
        suite = unittest.defaultTestLoader.loadTestsFromModule(tests)
    skip_not_offered(suite)

    class Result(unittest.TextTestResult):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.passed = []

        def addSuccess(self, test):
            super().addSuccess(test)
            self.passed.append(test)

    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=Result).run(suite)

    def module(test):
        parts = test.id().split('.')
        return parts[1] if len(parts) > 1 else parts[0]

    counts = collections.defaultdict(collections.Counter)
    for t in result.passed:
        counts[module(t)]['pass'] += 1
    for t, _ in result.skipped:
        counts[module(t)]['skip'] += 1
    for t, _ in result.failures:
        counts[module(t)]['fail'] += 1
    for t, _ in result.errors:
        counts[module(t)]['error'] += 1
    print(f'\n== rdma-core suite over uroce, {dev}, GID index {gid if gid is not None else "(first)"}, '
          'per module (pass skip fail error)')
    for m in sorted(counts):
        c = counts[m]
        print(f"{m:28} {c['pass']:4} {c['skip']:4} {c['fail']:4} {c['error']:4}")
    print(f'TOTAL pass {len(result.passed)} skip {len(result.skipped)} '
          f'fail {len(result.failures)} error {len(result.errors)}')

    # A module run on its own runs where its tests can run: the skip that
    # says they cannot is not accepted there (a test that skips whatever
    # happens would pass with nothing run).
    known_skips = [(p, r) for p, r in KNOWN_SKIPS if only is None or 'net interface' not in p]
    unexplained = []
    by_reason = collections.Counter()
    for t, why in result.skipped:
        if re.match(r'test_(mlx5|efa)', module(t)):
            by_reason[VENDOR] += 1
            continue
        for pattern, reason in known_skips:
            if re.search(pattern, why):
                by_reason[reason] += 1
                break
        else:
            unexplained.append((t.id(), why))
    print('\n== skips by reason')
    for reason, n in by_reason.most_common():
        print(f'{n:4}  {reason}')
    for name, why in unexplained:
        print(f'UNEXPLAINED SKIP {name}: {why}')
    ok = not result.failures and not result.errors and not unexplained
    if only is not None and not result.passed:
        print(f'{only}: no test passed')
        ok = False
    print('rdma-core suite:', 'OK' if ok else 'FAILED')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
