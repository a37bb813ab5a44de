"""The layout's floors, checked from the BUILD files (docs/architecture.md,
"Who may call whom"): each package depends only on packages of lower floors,
so the directories show the architecture. Reads every tracked BUILD file of
the checkout given (git ls-files); standard library only; no Bazel.

A dependency is an edge from the package of the target that names it to the
package of the label. An edge to a package of the same or a higher floor is
an error unless:
  - the target is a test (a *_test, fuzz or benchmark rule, or testonly) and
    the label is a test utility (TEST_UTILITIES) or the test harness
    (//testing); tests may also use the DPDK basics (TEST_DPDK) to run;
  - it is one of the ALLOWED edges, each with the reason it is still there.
An ALLOWED edge that no BUILD file has any more is an error too, so the list
only shrinks. Each package of a floor must also open its BUILD file with a
comment saying what it owns and what it may use. Prints each finding; exit
status 1 if there is any.

  layout_check.py CHECKOUT
"""
import re
import subprocess
import sys

# Floors, lowest first. Packages not listed (tests, configs, docs, examples,
# bazel, third_party, testdata) may depend on anything and are not checked.
FLOORS = {
    "common": 0,
    "cq": 1,
    "congestion": 1,
    "transport": 2,
    "cm": 3,
    "xdp": 0,  # a leaf: the BPF program depends on nothing
    "pmd": 4,
    "host": 5,
    "testing": 5,  # the test harness: engines and ports, for tests and `uroce soak`
    "runtime": 6,
    "api": 7,
    "api/verbs": 7,
    "api/fabric": 7,
    "api/rdmacm": 7,
    "tools": 8,
    "tools/rxe_vm": 8,
}

# Test utilities any test may use, whatever their floor.
TEST_UTILITIES = {
    "//cm:cm_test_frames",
    "//pmd:eal_test_environment",
    "//pmd:frame_test_util",
    "//transport:scripted_port",
}
TEST_DPDK = {"//pmd:eal", "//pmd:mempool"}

# (target, label): edges that break the floors today, and why.
ALLOWED = {
    # libibverbs.so.1 is the one shared object all three APIs live in (one
    # runtime per process), so its link names the siblings.
    ("//api/verbs:libibverbs.so.1", "//api/fabric:provider"): "the shared object of all three APIs",
    ("//api/verbs:libibverbs.so.1", "//api/rdmacm"): "the shared object of all three APIs",
    # rdma_cm(7) works on the application's verbs objects (its ids carry the
    # ibv_context and ibv_qp), as rdma-core's librdmacm uses libibverbs.
    ("//api/rdmacm:rdmacm", "//api/verbs:objects"): "rdma_cm works on the verbs objects",
}

TEST_RULES = ("uroce_cc_test", "uroce_cc_fuzz", "uroce_cc_benchmark", "sh_test", "cc_test", "py_test")


def targets(package, text):
    """(rule kind, name, is_test, [labels]) for each rule call in a BUILD file."""
    for call in re.finditer(r"^(\w+)\(\n(.*?)^\)", text, re.M | re.S):
        kind, body = call.group(1), call.group(2)
        name = re.search(r'^\s*name = "([^"]+)"', body, re.M)
        if name is None:
            continue
        is_test = kind in TEST_RULES or re.search(r"^\s*testonly = True", body, re.M) is not None
        labels = []
        for attr in re.finditer(r"^    (deps|data) = \[(.*?)\]", body, re.M | re.S):
            labels += re.findall(r'"([^"]+)"', attr.group(2))
        yield kind, "//%s:%s" % (package, name.group(1)), is_test, labels


def normalize(package, label):
    """The label in //pkg:name form, or None for an external one or a file."""
    if label.startswith("@"):
        return None
    if label.startswith(":"):
        return "//%s%s" % (package, label)
    if label.startswith("//"):
        return label if ":" in label else "%s:%s" % (label, label.rsplit("/", 1)[-1])
    return None  # a file of the package itself


def check(builds):
    """Findings for {package: BUILD text}."""
    findings, seen = [], set()
    for package, text in sorted(builds.items()):
        if package not in FLOORS:
            continue
        if not text.startswith("#"):
            findings.append("%s/BUILD does not start with a comment saying what the package owns and what it "
                            "may use" % package)
        for _, target, is_test, labels in targets(package, text):
            for raw in labels:
                label = normalize(package, raw)
                if label is None:
                    continue
                to = label[2:].split(":")[0]
                if to == package or to not in FLOORS or FLOORS[to] < FLOORS[package]:
                    continue
                key = (target, raw if raw.startswith("//") else label)
                if key in ALLOWED:
                    seen.add(key)
                    continue
                if is_test and (label in TEST_UTILITIES or label in TEST_DPDK or to == "testing"):
                    continue
                findings.append("%s (floor %d) depends on %s (floor %d)" % (target, FLOORS[package], label,
                                                                           FLOORS[to]))
    return findings, seen


def self_test():
    """The checker itself: an edge up a floor, one between siblings and a
    package without its header comment are found; the same edges from a test
    to a utility are not."""
    builds = {
        "transport": '# Floor 2.\nuroce_cc_library(\n    name = "engine",\n    deps = [\n        "//pmd:port",\n'
                     '        ":headers",\n    ],\n)\n'
                     'uroce_cc_test(\n    name = "engine_test",\n    deps = ["//cm:cm_test_frames", "//testing:x"],\n)\n',
        "api/fabric": '# Floor 7.\nuroce_cc_library(\n    name = "ep",\n    deps = ["//api/rdmacm:cm_id", "//cq:cq"],\n)\n',
        "cq": 'uroce_cc_library(\n    name = "cq",\n)\n',
    }
    findings, _ = check(builds)
    expected = ["//api/fabric:ep (floor 7) depends on //api/rdmacm:cm_id (floor 7)",
                "cq/BUILD does not start with a comment saying what the package owns and what it may use",
                "//transport:engine (floor 2) depends on //pmd:port (floor 4)"]
    if findings != expected:
        print("layout_check: the checker's self-test failed: %r" % findings)
        return False
    return True


def main():
    if not self_test():
        return 1
    checkout = sys.argv[1]
    files = subprocess.run(["git", "-C", checkout, "ls-files", "*BUILD"], check=True, capture_output=True,
                           text=True).stdout.split()
    builds = {}
    for path in files:
        package = path[: -len("/BUILD")] if "/" in path else ""
        with open("%s/%s" % (checkout, path), encoding="utf-8") as f:
            builds[package] = f.read()
    findings, seen = check(builds)
    for key in sorted(set(ALLOWED) - seen):
        findings.append("allowed edge %s -> %s is gone: take it off ALLOWED in tests/layout_check.py" % key)
    for finding in findings:
        print("layout_check: " + finding)
    print("layout_check: %d BUILD files, %d findings" % (len(files), len(findings)))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
