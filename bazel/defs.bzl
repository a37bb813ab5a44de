"""uroce_test: a test of your own program over uroce, in your workspace.

    load("@uroce//bazel:defs.bzl", "uroce_test")

    uroce_test(
        name = "pingpong_test",
        cmd = "ibv_rc_pingpong -g 0 -n 100",
        processes = 2,
        rank_args = {1: ["127.0.0.1"]},
        impair = {"loss": "0.01", "seed": "7"},
    )

Every process runs the program (`binary`, a label, or `cmd`, a command on
the machine) under `uroce exec`, with `args` and its rank's `rank_args`:

  * processes = 1: one process with two devices, uroce0 and uroce1, joined
    by a DPDK ring pair (configs/ring.ini); a device also reaches its own
    addresses.
  * processes = 2: two processes joined by a memif pair (configs/pair-a.ini,
    pair-b.ini): rank 0 has uroce0 at 10.77.0.1 / fd00:77::1, rank 1 at
    10.77.0.2 / fd00:77::2. Rank 1 starts `stagger_ms` after rank 0 (a
    server listens first). The memif socket is in a directory of the
    test's own (UROCE_RUNTIME_DIR, mode 0700), so tests run in parallel.
  * processes = 3 or more: the processes share one host device, as programs
    on a host with one NIC do: a uroce daemon of the test's own (its uplink
    goes nowhere: net_null) and every rank attached to it, all with uroce0
    at 10.88.0.1 / fd00:88::1; ranks start `stagger_ms` apart.

Each process sees UROCE_RANK, UROCE_SIZE, UROCE_SERVER_IP (rank 0's IPv4
address) and UROCE_CONFIG. `impair` (loss, dup, reorder, delay_us, corrupt,
rnr_storm, seed) goes to `uroce exec --impair`. The test passes when every
process exits 0 within the test's timeout.
"""

def uroce_test(
        name,
        binary = None,
        cmd = None,
        processes = 1,
        args = [],
        rank_args = {},
        impair = {},
        stagger_ms = 500,
        data = [],
        **kwargs):
    if (binary == None) == (cmd == None):
        fail("uroce_test %s: give binary (a label) or cmd (a command), one of them" % name)
    if processes < 1 or processes > 16:
        fail("uroce_test %s: processes = 1 to 16" % name)
    if processes > 2 and impair:
        fail("uroce_test %s: impair needs processes = 1 or 2" % name)
    uroce = Label("//tools:uroce")
    configs = [Label("//configs:ring.ini"), Label("//configs:pair-a.ini"), Label("//configs:pair-b.ini")]
    libraries = [
        Label("//api/verbs:libibverbs.so.1"),
        Label("//api/rdmacm:librdmacm.so.1"),
        Label("//api/fabric:liburoce-fi.so"),
    ]
    impair_text = ",".join(["%s=%s" % (k, impair[k]) for k in sorted(impair.keys())])
    runner_args = [
        "$(location %s)" % uroce,
        "$(location %s)" % configs[0],
        "$(location %s)" % configs[1],
        "$(location %s)" % configs[2],
        str(processes),
        impair_text or "-",
        str(stagger_ms),
    ]
    for rank in range(processes):
        runner_args.append("|".join(rank_args.get(rank, [])) or "-")
    program_data = []
    if binary != None:
        runner_args += ["--", "$(location %s)" % binary]
        program_data = [binary]
    else:
        runner_args += ["--", cmd]
    native.sh_test(
        name = name,
        srcs = [Label("//bazel:uroce_test_runner.sh")],
        args = runner_args + args,
        data = [uroce] + configs + libraries + program_data + data,
        **kwargs
    )
