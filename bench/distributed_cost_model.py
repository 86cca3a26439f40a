#!/usr/bin/env python3
"""distributed_cost_model.py: the predicted step time and scaling efficiency of data-parallel
training of ag-bench-train's configs over N machines, from a ring all-reduce cost model
(docs/distributed.md, "Cost model: ring all-reduce"). Plain python3, no torch.

    python3 bench/distributed_cost_model.py [--compute-ms tiny=7.0,small=86,medium=1200]
        [--alpha-us 25] [--bucket-mb 25] [--nodes 2,8,64] [--gbps 10,25,100]
        [--from compare_distributed-....jsonl]   # t_1: the median of its ag 1 x 1 runs

Gradient bytes: the parameters of d2l's Transformer (num_parameters of ag's model; counted here
from the config and checked against the "parameters" of ag-bench-train's JSON with --from) × 4
bytes (float32). With vocabulary V, width D, FFN width F and L layers, d2l's attention having no
biases:
    embeddings (encoder and decoder)   2·V·D
    encoder block   4·D² (W_q, W_k, W_v, W_o) + 2·D·F + F + D (FFN) + 2 · 2·D (two LayerNorms)
    decoder block   8·D² (two attentions) + 2·D·F + F + D + 3 · 2·D
    output layer    D·V + V
Ring all-reduce of n bytes over N nodes (reduce-scatter, then all-gather: 2(N−1) steps, each
sending n/N bytes to the next node), per bucket of n_b bytes:
    t_allreduce = Σ_buckets [ 2(N−1)·α + 2(N−1)/N · n_b / β ]
α = the latency of one message on one hop (MPI over TCP on Ethernet: 5–50 µs; --alpha-us), β the
link's bandwidth in bytes/s (all of it, both directions at once, no other traffic). The buckets are
DistributedDataParallel's: about --bucket-mb each (25: ag's and PyTorch's default), so the number
of latency terms is ⌈n / bucket⌉.
Compute: the 1-process 1-thread step of the config (ms, measured by ag-bench-train; --compute-ms
or the "ag" 1-thread runs of --from). Two ways to use N machines:
    weak scaling   every machine keeps the config's batch (the global batch grows N×): compute
                   per step = t_1; speed-up = N · t_1 / t_step; efficiency = t_1 / t_step
    strong scaling the global batch stays the config's B, each machine takes B/N rows: compute
                   per step = t_1 / N (optimistic: small per-machine batches run products less
                   efficiently); efficiency = (t_1 / N) / t_step; impossible when N > B
Overlap: without it, t_step = compute + t_allreduce (the upper bound; "eff"). With it, a bucket's
all-reduce starts when its last gradient is ready, while backward (≈ 2/3 of the step's FLOPs: two
products per forward one) goes on; the model lets the gradient bytes become ready at an even rate
over backward, buckets in order (the last layers' first), one all-reduce on the ring at a time,
and t_step = compute + what is left after backward ends ("eff ovl"). With one bucket (every config
at 25 MB buckets except medium's two) nothing can overlap: the bucket is ready when backward ends;
--bucket-mb 1 shows what smaller buckets would hide.
"""

import argparse
import json
import math
import statistics

# name: (D, FFN, heads, layers, batch, T_src, T_tgt, vocab), as ag-bench-train
CONFIGS = {
    "tiny": (32, 64, 4, 2, 64, 10, 10, 20),
    "small": (128, 512, 4, 2, 32, 32, 32, 32),
    "medium": (256, 1024, 8, 4, 32, 64, 64, 64),
}
# ag-bench-train's 1-thread medians on this machine, in ms: docs/benchmarks.md, "Results" of
# ag-bench-train (compare_train.sh, 2026-11-29, a quiet machine); --compute-ms or --from replace
# them.
DEFAULT_COMPUTE_MS = {"tiny": 7.09, "small": 86.24, "medium": 1199.15}
BACKWARD_FRACTION = 2.0 / 3.0  # of a step's FLOPs: backward computes two products per forward one


def parameters(config):
    D, F, _, L, _, _, _, V = CONFIGS[config]
    encoder_block = 4 * D * D + 2 * D * F + F + D + 2 * 2 * D
    decoder_block = 8 * D * D + 2 * D * F + F + D + 3 * 2 * D
    return 2 * V * D + L * (encoder_block + decoder_block) + D * V + V


def allreduce_seconds(nbytes, nodes, alpha, bandwidth, bucket_bytes):
    """Ring all-reduce of nbytes in buckets of at most bucket_bytes over `nodes` machines."""
    if nodes == 1:
        return 0.0
    buckets = max(1, math.ceil(nbytes / bucket_bytes))
    return buckets * 2 * (nodes - 1) * alpha + 2 * (nodes - 1) / nodes * nbytes / bandwidth


def exposed_seconds(nbytes, nodes, alpha, bandwidth, bucket_bytes, backward):
    """The all-reduce time left after backward ends, when the buckets overlap backward: the
    gradient bytes are assumed to become ready at an even rate over `backward` seconds; a bucket
    starts when its last gradient is ready and the previous bucket is done (one all-reduce on
    the ring at a time)."""
    if nodes == 1:
        return 0.0
    done, ready_bytes, finish = 0.0, 0.0, 0.0
    while done < nbytes:
        size = min(bucket_bytes, nbytes - done)
        done += size
        ready = backward * done / nbytes
        finish = max(finish, ready) + allreduce_seconds(size, nodes, alpha, bandwidth, bucket_bytes)
    return max(0.0, finish - backward)


def parse_list(text, kind):
    return [kind(x) for x in text.split(",") if x]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compute-ms", default="",
                        help="config=ms,... the 1-thread step (default: this machine's)")
    parser.add_argument("--alpha-us", type=float, default=25.0,
                        help="latency of one message on one hop, µs")
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket size, MiB")
    parser.add_argument("--nodes", default="2,8,64")
    parser.add_argument("--gbps", default="10,25,100", help="link bandwidths, Gb/s")
    parser.add_argument("--from", dest="source", default="",
                        help="a compare_distributed.sh JSON-lines file: its ag 1-process 1-thread "
                             "medians and parameter counts")
    args = parser.parse_args()

    compute_ms = dict(DEFAULT_COMPUTE_MS)
    if args.source:
        measured = {}
        for line in open(args.source):
            if not line.strip().startswith("{"):
                continue
            r = json.loads(line)
            if r.get("impl") == "ag" and r.get("threads") == 1 and r.get("config") in CONFIGS:
                measured.setdefault(r["config"], []).append(r["ms_per_step"])
                if r["parameters"] != parameters(r["config"]):
                    raise SystemExit(f"distributed_cost_model.py: {r['config']} has "
                                     f"{r['parameters']} parameters in {args.source}, "
                                     f"{parameters(r['config'])} counted here")
        for name, values in measured.items():  # the median of the file's runs
            compute_ms[name] = statistics.median(values)
    for item in parse_list(args.compute_ms, str):
        name, _, value = item.partition("=")
        if name not in CONFIGS:
            raise SystemExit(f"distributed_cost_model.py: --compute-ms: unknown config '{name}'")
        compute_ms[name] = float(value)
    alpha = args.alpha_us * 1e-6
    bucket_bytes = args.bucket_mb * 2**20
    nodes_list = parse_list(args.nodes, int)
    gbps_list = parse_list(args.gbps, float)

    print(f"alpha = {args.alpha_us:g} us per message per hop; buckets of {args.bucket_mb:g} MiB; "
          f"bandwidth = the link rate; backward = {BACKWARD_FRACTION:.2f} of compute")
    print()
    print(f"{'config':<8} {'parameters':>11} {'gradient MB':>11} {'buckets':>7} {'t_1 ms':>8} "
          f"{'B':>3}")
    for name in CONFIGS:
        n = parameters(name) * 4
        print(f"{name:<8} {parameters(name):>11} {n / 1e6:>11.3f} "
              f"{max(1, math.ceil(n / bucket_bytes)):>7} {compute_ms[name]:>8.1f} "
              f"{CONFIGS[name][4]:>3}")

    for scaling in ("weak", "strong"):
        print()
        if scaling == "weak":
            print("weak scaling: every node keeps the config's batch B; compute/step = t_1")
        else:
            print("strong scaling: the global batch stays B, B/N rows per node; compute/step = t_1/N")
        print("per bandwidth: all-reduce ms / step ms without overlap / efficiency without overlap / "
              "efficiency with the buckets overlapped")
        print(f"{'config':<7} {'N':>3} " + " ".join(f"{f'{g:g} Gb/s':^29}" for g in gbps_list))
        for name in CONFIGS:
            nbytes = parameters(name) * 4
            for nodes in nodes_list:
                if scaling == "strong" and nodes > CONFIGS[name][4]:
                    print(f"{name:<7} {nodes:>3}   (N > B = {CONFIGS[name][4]}: a node would get "
                          "no rows)")
                    continue
                cells = []
                for gbps in gbps_list:
                    compute = compute_ms[name] * 1e-3 / (nodes if scaling == "strong" else 1)
                    t_ar = allreduce_seconds(nbytes, nodes, alpha, gbps * 1e9 / 8, bucket_bytes)
                    exposed = exposed_seconds(nbytes, nodes, alpha, gbps * 1e9 / 8, bucket_bytes,
                                              BACKWARD_FRACTION * compute)
                    cells.append(f"{t_ar * 1e3:7.2f} {(compute + t_ar) * 1e3:8.1f} "
                                 f"{100 * compute / (compute + t_ar):4.0f}% "
                                 f"{100 * compute / (compute + exposed):4.0f}%")
                print(f"{name:<7} {nodes:>3} " + " ".join(f"{c:^29}" for c in cells))
        print()
        for gbps in gbps_list:
            verdicts = []
            for name in CONFIGS:
                nbytes = parameters(name) * 4
                below, skipped = [], False
                for nodes in nodes_list:
                    if scaling == "strong" and nodes > CONFIGS[name][4]:
                        skipped = True
                        continue
                    compute = compute_ms[name] * 1e-3 / (nodes if scaling == "strong" else 1)
                    t_ar = allreduce_seconds(nbytes, nodes, alpha, gbps * 1e9 / 8, bucket_bytes)
                    if compute / (compute + t_ar) < 0.5:
                        below.append(nodes)
                verdicts.append(f"{name} at N={below[0]}" if below else
                                f"{name} never" + (f" (up to N={CONFIGS[name][4]})" if skipped else ""))
            print(f"{scaling}, {gbps:g} Gb/s: efficiency < 50 % (no overlap) first: "
                  + ", ".join(verdicts))


if __name__ == "__main__":
    main()
