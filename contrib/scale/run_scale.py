#!/usr/bin/env python3
"""Scale harness: weft's bootstrap with N ranks on one machine.

A few real ranks (contrib/scale/weft-scale-rank: world ranks 0 .. R-1,
rank 0 serving the env store) and N - R simulated ranks
(contrib/scale/weft-scale-sim, thousands per process, speaking the store's
real protocol, job-secret handshake included). For each N it reports:

  init_s      time from the start until every rank (real and simulated)
              had finished weft_init
  store_in/out, conns, store_cpu_s
              bytes the store received / sent during init, connections it
              accepted, and the CPU time of its thread: the busiest process
              of the job (rank 0)
  rank0_mb    rank 0's peak resident memory (its rank and the store)
  rank_heap   a real rank's heap growth over weft_init (what init keeps)
  rank_mb     a real rank's (not rank 0's) peak resident memory
  node_ms     the world's node communicator, built on a real rank (local,
              from the node map of all N ranks)
  color_ms    weft_comm_split by color of that communicator (R members),
              the first (endpoints made: fetches from a store that may still
              be busy with the simulated ranks' sync round) and color2_ms,
              the second
  coll1_ms / coll2_ms
              the first allreduce on a communicator of the real ranks
              (forced to the ring: UCX endpoints made on first use) and the
              second; the difference is the connection set-up
  fetch_s, fetch_MB
              the first collective's address fetches at scale: every
              simulated rank fetches the addresses of its log2 N
              recursive-doubling peers (up to 16 in one request) from the
              store; the time from the last rank's sync B to the last
              fetch, and the bytes the store moved meanwhile (the real
              ranks wait)
Then the exponent b of a fit y = a N^b over the sizes, for the init time,
the store's CPU and bytes, a rank's heap and the node communicator.

Usage: contrib/scale/run_scale.py [--sizes 1024,4096,16384] [--real 2]
       [--ppn 8] [--window 1024] [--repeat 3] [--json FILE] [--builddir DIR]
       [--torch [--torch-python PY]] [--relay]
--torch runs torchrun's path: torch's TCPStore serves, every rank is its
client through the torchstore bootstrap (docs/SCALING.md).
--relay sends each simulated node's ranks through one connection, as node
relays do (WEFT_STORE_RELAY=on).
--pmix runs N real ranks (no simulated ones) under Open MPI's mpirun, whose
PMIx server is the store (mpirun's CPU, bytes read and written, and peak
memory stand in for the store's columns; conns: N clients), with addresses
fetched on demand (WEFT_ADDRESSES_AT_INIT=0): N is bounded by the cores.
A run needs about 2 KiB of the sims' memory and one descriptor of rank 0
per rank (ulimit -n bounds N: the store holds one connection per rank), or
per node with --relay.
docs/SCALING.md has the results, how they were made and a model of 10^5 ranks.
"""

import argparse
import json
import math
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fd_limit():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return hard if hard != resource.RLIM_INFINITY else 1 << 20


# torch's TCPStore names each client by reverse DNS (getnameinfo) in its event
# loop; this sandbox's resolver drops some queries, stalling the store 5 s
# every ~50 connections. The store's process gets numeric names instead.
NUMERIC_NAMES = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
typedef int (*gni_t)(const struct sockaddr *, socklen_t, char *, socklen_t, char *, socklen_t,
                     int);
int getnameinfo(const struct sockaddr *sa, socklen_t salen, char *host, socklen_t hostlen,
                char *serv, socklen_t servlen, int flags)
{
    gni_t real = (gni_t)dlsym(RTLD_NEXT, "getnameinfo");
    return real(sa, salen, host, hostlen, serv, servlen, flags | NI_NUMERICHOST | NI_NUMERICSERV);
}
"""


def numeric_names_lib():
    """The getnameinfo shim, built once per run of this script (None: no compiler)."""
    d = tempfile.mkdtemp(prefix="weft-scale-")
    src, lib = os.path.join(d, "numeric.c"), os.path.join(d, "numeric.so")
    with open(src, "w") as f:
        f.write(NUMERIC_NAMES)
    cc = os.environ.get("CC", "cc")
    ok = subprocess.call([cc, "-shared", "-fPIC", "-O2", "-o", lib, src, "-ldl"]) == 0
    return lib if ok else None


TORCH_STORE = """
import sys, datetime, torch.distributed as dist
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), None, True, datetime.timedelta(seconds=900),
                      wait_for_workers=False)
print("ready", flush=True)
sys.stdin.read()
"""


def proc_sample(pid):
    """(bytes read + written, CPU seconds) of a process, from /proc."""
    io = dict(line.split(": ") for line in open("/proc/%d/io" % pid).read().splitlines())
    stat = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(io["rchar"]) + int(io["wchar"]), (int(stat[11]) + int(stat[12])) / os.sysconf(
        "SC_CLK_TCK"
    )


def status_kb(pid, field):
    for line in open("/proc/%d/status" % pid):
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def real_ranks(ranks):
    """The columns the real ranks' reports give: rank 1's memory (rank 0 may
    serve the store), rank 0's heap, the slowest rank's communicator and
    collective times, the most endpoints."""
    other = next((o for o in ranks if o["rank"] != 0), ranks[0])
    return {
        "rank_kb": other["vmhwm_kb"],
        "rank_heap": other["heap_init"],
        "rank0_heap": next(o for o in ranks if o["rank"] == 0)["heap_init"],
        "node_ms": 1e3 * max(o["node_comm_s"] for o in ranks),
        "color_ms": 1e3 * max(o["split_color_s"] for o in ranks),
        "color2_ms": 1e3 * max(o["split_color2_s"] for o in ranks),
        "coll1_ms": 1e3 * max(o["coll1_s"] for o in ranks),
        "coll2_ms": 1e3 * max(o["coll2_s"] for o in ranks),
        "eps": max(o["eps_after"] for o in ranks),
    }


def run_pmix(args, n, env):
    """N real ranks under Open MPI's mpirun, whose PMIx server is the store:
    weft's PMIx bootstrap with addresses fetched on demand (direct modex)."""
    t0 = time.time()
    env = dict(
        env,
        SCALE_T0="%.6f" % t0,
        WEFT_INIT_TIMEOUT=str(args.timeout),
        WEFT_TIMEOUT=str(args.timeout),
        WEFT_PROGRESS_THREAD="off",
        WEFT_ADDRESSES_AT_INIT="0",
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    )
    fwd = []
    for v in ("SCALE_T0", "WEFT_INIT_TIMEOUT", "WEFT_TIMEOUT", "WEFT_PROGRESS_THREAD", "WEFT_ADDRESSES_AT_INIT"):
        fwd += ["-x", v]
    if args.log:
        env["WEFT_LOG_LEVEL"] = args.log
        fwd += ["-x", "WEFT_LOG_LEVEL"]
    cmd = [args.mpirun, "-np", str(n), "--oversubscribe", "--bind-to", "none"] + fwd
    cmd.append(os.path.join(args.builddir, "contrib/scale/weft-scale-rank"))
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
    samples, deadline = [], time.time() + args.timeout + 30
    hwm = 0
    while p.poll() is None and time.time() < deadline:
        try:  # the PMIx server's process: its bytes, CPU and memory over time
            b_, c_ = proc_sample(p.pid)
            samples.append((time.time() - t0, b_, c_))
            hwm = max(hwm, status_kb(p.pid, "VmHWM:"))
        except OSError:
            pass
        time.sleep(0.02)
    if p.poll() is None:
        p.kill()
        p.wait()
    out.seek(0)
    err.seek(0)
    ranks = [json.loads(line) for line in out.read().splitlines() if line.startswith("{")]
    if p.returncode != 0 or len(ranks) != n:
        sys.stderr.write("N=%d: mpirun exited %s, %d of %d ranks reported\n%s"
                         % (n, p.returncode, len(ranks), n, err.read()[-2000:]))
        return None
    init_s = max(o["t_init"] for o in ranks)
    at = next((x for x in samples if x[0] >= init_s), samples[-1] if samples else (0, 0, 0))
    return {
        "n": n,
        "init_s": init_s,
        "store_in": at[1],
        "store_out": 0,
        "conns": n,
        "peak_conns": n,
        "store_cpu_s": at[2],
        "rank0_kb": hwm,
        "fetch_s": 0.0,
        "fetch_bytes": 0,
        **real_ranks(ranks),
    }


def run_one(args, n):
    port = free_port()
    env = dict(os.environ)
    for v in (
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "WEFT_BOOTSTRAP",
        "WEFT_RANKS_PER_NODE",
        "TORCHELASTIC_USE_AGENT_STORE",
        "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_RESTART_COUNT",
    ):
        env.pop(v, None)
    if args.pmix:
        return run_pmix(args, n, env)
    torch_store = None
    if args.torch:
        # torchrun's agent store: torch's TCPStore in a process of its own
        senv = dict(os.environ, LD_PRELOAD=args.numeric_names) if args.numeric_names else None
        torch_store = subprocess.Popen(
            [args.torch_python, "-c", TORCH_STORE, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=senv,
        )
        if torch_store.stdout.readline().strip() != "ready":
            sys.stderr.write("N=%d: torch's TCPStore did not start\n" % n)
            return None
        env.update(
            TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RUN_ID="scale-" + secrets.token_hex(4)
        )
        store_pid = torch_store.pid
        base_sample, base_kb = proc_sample(store_pid), status_kb(store_pid, "VmRSS:")
    t0 = time.time()
    env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(n),
        WEFT_JOB_SECRET=secrets.token_hex(16),
        SCALE_T0="%.6f" % t0,
        WEFT_INIT_TIMEOUT=str(args.timeout),
        WEFT_TIMEOUT=str(args.timeout),
        WEFT_NODE_ID="0",
        WEFT_PROGRESS_THREAD="off",
        WEFT_STORE_RELAY="on" if args.relay else "off",
    )
    bdir = args.builddir
    procs, logs = [], []

    def start(cmd, e):
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        procs.append(subprocess.Popen(cmd, env=e, stdout=out, stderr=err, text=True))
        logs.append((out, err))

    for r in range(args.real):
        e = dict(env, RANK=str(r))
        if args.relay:  # node 0: the real ranks, through rank 0's relay (nodes of --ppn, as the others)
            e.update(LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(max(args.real, args.ppn)))
        if args.log and r == 0:
            e["WEFT_LOG_LEVEL"] = args.log
        start([os.path.join(bdir, "contrib/scale/weft-scale-rank")], e)
        if r == 0:
            time.sleep(0.05)
    nsim = n - args.real
    per = max(1, min(fd_limit() - 200, 18000))
    nproc = max(1, math.ceil(nsim / per)) if nsim > 0 else 0
    # Source addresses 127.x.y.z, fresh for each run: the last run's
    # connections may still hold ports in TIME_WAIT on the addresses it used.
    base = secrets.randbelow((1 << 24) - (1 << 16)) + (1 << 8)
    first = args.real
    for i in range(nproc):
        count = nsim // nproc + (1 if i < nsim % nproc else 0)
        start(
            [
                os.path.join(bdir, "contrib/scale/weft-scale-sim"),
                "--size",
                str(n),
                "--first",
                str(first),
                "--count",
                str(count),
                "--ppn",
                str(args.ppn),
                "--real",
                str(args.real),
                "--window",
                str(args.window),
                "--addr-len",
                str(args.addr_len),
                "--bind-base",
                str(base + 64 * i),
                "--torch",
                "1" if args.torch else "0",
                "--relay",
                "1" if args.relay else "0",
            ],
            env,
        )
        first += count
    # Wait, sampling torch's store (its bytes and CPU over time) meanwhile.
    samples, failed = [], False
    deadline = time.time() + args.timeout + 30
    while any(p.poll() is None for p in procs) and time.time() < deadline:
        if torch_store:
            try:
                b_, c_ = proc_sample(store_pid)
                samples.append((time.time() - t0, b_ - base_sample[0], c_ - base_sample[1]))
            except OSError:
                pass
        time.sleep(0.02)
    outs = []
    for p, (out, err) in zip(procs, logs):
        if p.poll() is None:
            p.kill()
            p.wait()
            failed = True
        out.seek(0)
        err.seek(0)
        e = err.read()
        if p.returncode != 0:
            failed = True
            sys.stderr.write("N=%d: %s exited %s\n%s" % (n, p.args[0], p.returncode, e[-2000:]))
        if args.log and p is procs[0]:
            sys.stderr.write(e)
        for line in out.read().splitlines():
            if line.startswith("{"):
                outs.append(json.loads(line))
    torch_kb = 0
    if torch_store:
        torch_kb = status_kb(store_pid, "VmHWM:") - base_kb
        torch_store.stdin.close()
        torch_store.wait()
    ranks = [o for o in outs if "rank" in o]
    sims = [o for o in outs if "sims" in o]
    if failed or len(ranks) != args.real:
        return None
    r0 = next(o for o in ranks if o["rank"] == 0)
    other = next((o for o in ranks if o["rank"] != 0), r0)
    sync = 2 * 40 * n  # sync A's round (a header each way per rank) is in store_a
    inits = [o["t_init"] for o in ranks] + [s["t_init"] for s in sims]
    sync_b = max([s.get("t_sync_b", 0) for s in sims] or [0])
    fetch_end = max([s.get("t_lookup", 0) for s in sims] or [0])
    row = {
        "n": n,
        "init_s": max(inits),
        **real_ranks(ranks),
        "sim_cpu_s": sum(s["cpu_s"] for s in sims),
        "sim_kb": max([s["maxrss_kb"] for s in sims] or [0]),
        "sim_bytes_in": sum(s["bytes_in"] for s in sims),
        "t_done": max([s["t_done"] for s in sims] or [0]),
        "fetches": sum(s.get("fetched", 0) for s in sims),
        "fetch_s": max(0.0, fetch_end - sync_b),
    }
    if torch_store:

        def at(t):  # the first sample at or after t
            return next((x for x in samples if x[0] >= t), samples[-1] if samples else (0, 0, 0))

        init_at, b_at, c_at = at(row["init_s"]), at(sync_b), at(fetch_end)
        row.update(
            store_in=init_at[1],
            store_out=0,
            conns=n,
            peak_conns=n,
            store_cpu_s=init_at[2],
            rank0_kb=torch_kb + other["vmhwm_kb"],
            fetch_bytes=c_at[1] - b_at[1],
            fetch_cpu_s=c_at[2] - b_at[2],
        )
        return row
    row.update(
        store_in=r0["store_a"]["bytes_in"] - sync // 2,
        store_out=r0["store_a"]["bytes_out"] - sync // 2,
        conns=r0["store_a"]["accepted"],
        peak_conns=r0["store_a"]["peak_conns"],
        store_cpu_s=r0["store_cpu_a"],
        fetch_cpu_s=r0["store_cpu_c"] - r0["store_cpu_b"],
        rank0_kb=r0["vmhwm_kb"],
        # from sync A: rank 0 may read the counters at sync B late (the store
        # thread and the simulated ranks keep the cores busy); the real
        # ranks' few fetches in between are counted too
        fetch_bytes=(
            r0["store_c"]["bytes_in"]
            + r0["store_c"]["bytes_out"]
            - r0["store_a"]["bytes_in"]
            - r0["store_a"]["bytes_out"]
            - 2 * sync
        ),
    )
    return row


def fit(rows, key):
    """Least squares of log y = log a + b log N: returns b."""
    pts = [(math.log(r["n"]), math.log(r[key])) for r in rows if r[key] > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else float("nan")


def mb(x):
    return x / 1e6


# The table's columns: name, width, format, value.
COLUMNS = [
    ("N", 7, "d", lambda r: r["n"]),
    ("init_s", 8, ".3f", lambda r: r["init_s"]),
    ("cpu_s", 8, ".3f", lambda r: r["store_cpu_s"]),
    ("store_in", 10, ".1f", lambda r: mb(r["store_in"])),
    ("store_out", 10, ".1f", lambda r: mb(r["store_out"])),
    ("conns", 7, "d", lambda r: r["conns"]),
    ("rank0_MB", 9, ".1f", lambda r: r["rank0_kb"] / 1024),
    ("rank_MB", 9, ".1f", lambda r: r["rank_kb"] / 1024),
    ("heap_MB", 9, ".2f", lambda r: mb(r["rank_heap"])),
    ("node_ms", 8, ".2f", lambda r: r["node_ms"]),
    ("color_ms", 8, ".2f", lambda r: r["color_ms"]),
    ("color2_ms", 9, ".2f", lambda r: r["color2_ms"]),
    ("coll1_ms", 8, ".2f", lambda r: r["coll1_ms"]),
    ("coll2_ms", 8, ".2f", lambda r: r["coll2_ms"]),
    ("fetch_s", 8, ".3f", lambda r: r["fetch_s"]),
    ("fetch_MB", 9, ".1f", lambda r: mb(r["fetch_bytes"])),
]


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="1024,4096,16384")
    ap.add_argument("--real", type=int, default=2)
    ap.add_argument("--ppn", type=int, default=8)
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument(
        "--addr-len", type=int, default=0, help="simulated UCX address bytes (0: a real rank's)"
    )
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs per size; each number is their median"
    )
    ap.add_argument(
        "--torch",
        action="store_true",
        help="torchrun's path: torch's TCPStore serves, every rank uses the torchstore bootstrap",
    )
    ap.add_argument(
        "--torch-python",
        default=os.environ.get("WEFT_TORCH_PYTHON", "python3"),
        help="an interpreter that imports torch (WEFT_TORCH_PYTHON)",
    )
    ap.add_argument(
        "--relay",
        action="store_true",
        help="node relays (WEFT_STORE_RELAY=on): a connection per simulated node at the store",
    )
    ap.add_argument(
        "--pmix",
        action="store_true",
        help="N real ranks under Open MPI's mpirun (its PMIx server is the store; direct modex)",
    )
    ap.add_argument("--mpirun", default="mpirun", help="with --pmix: Open MPI's mpirun")
    ap.add_argument("--json", help="append each size's result to this file")
    ap.add_argument("--log", help="rank 0's WEFT_LOG_LEVEL (its log goes to stderr)")
    ap.add_argument(
        "--builddir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    )
    args = ap.parse_args()
    if args.real < 2:
        ap.error("--real must be at least 2 (rank 0 and a rank that is not the store's)")
    if not args.addr_len:
        args.addr_len = 215
    if args.pmix and (args.torch or args.relay):
        ap.error("--pmix runs mpirun's PMIx server: not with --torch or --relay")
    args.numeric_names = numeric_names_lib() if args.torch else None
    rows = []
    print(" ".join("%*s" % (w, name) for name, w, _, _ in COLUMNS))
    for n in (int(x) for x in args.sizes.split(",")):
        # rank 0's store holds a connection per rank, or per node with
        # --relay (and refuses every rank at once where its hard limit
        # cannot reach that and its own few)
        if not args.relay and not args.pmix and n + 16 > fd_limit():
            print("%7d skipped: rank 0's store needs a descriptor per rank, the hard open-file limit is %d"
                  % (n, fd_limit()), flush=True)
            continue
        runs = [run_one(args, n) for _ in range(args.repeat)]
        if any(r is None for r in runs):
            print("%7d failed" % n)
            return 1
        # the machine is shared: each number is the median of the runs
        r = {k: sorted(x[k] for x in runs)[len(runs) // 2] for k in runs[0]}
        rows.append(r)
        print(" ".join(format(get(r), "%d%s" % (w, f)) for _, w, f, get in COLUMNS), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(r) + "\n")
    if len(rows) >= 2:
        for r in rows:
            r["store_bytes"] = r["store_in"] + r["store_out"]
        print(
            "fitted exponent b (y = a N^b): init_s %.2f, store cpu %.2f, store bytes %.2f, "
            "rank heap %.2f, node_ms %.2f"
            % (
                fit(rows, "init_s"),
                fit(rows, "store_cpu_s"),
                fit(rows, "store_bytes"),
                fit(rows, "rank_heap"),
                fit(rows, "node_ms"),
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
