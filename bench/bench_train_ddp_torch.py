#!/usr/bin/env python3
"""bench_train_ddp_torch.py: PyTorch's DistributedDataParallel (gloo, processes on this machine)
on ag-bench-train's step, the counterpart of `mpirun -np N ag-bench-train` (bench/bench_train.cpp,
"Data parallel").

    /usr/bin/python3 bench/bench_train_ddp_torch.py --config tiny|small|medium [--world 2] \
        [--threads 1] [--steps S] [--warmup W] [--compare-no-sync] [--json]

The model, the batches and the step are bench_train_torch.py's (imported from it: d2l's
Transformer, xavier-initialised after torch.manual_seed(0); the pool of 8 global batches; zero_grad,
forward, MaskedSoftmaxCELoss, backward, clip_grad_norm_ at 1.0, Adam lr 0.005). This program starts
--world processes (torch.multiprocessing, gloo over TCP on 127.0.0.1), each with --threads threads
(OMP/OpenBLAS/MKL_NUM_THREADS and torch.set_num_threads, set before torch is imported). Each
wraps the model in torch.nn.parallel.DistributedDataParallel (default 25 MB buckets, gradients
all-reduced by gloo while backward goes on) and trains on its rows of every global batch: the same
split as ag's rows_of_rank (contiguous slices, the first B % N ranks one row more).

Timing is ag-bench-train's under mpirun: --warmup untimed steps, then --steps timed steps, each
after a barrier, the step's time being the slowest rank's (a MAX all-reduce after the step, outside
the timing); the median is reported. --compare-no-sync times as many steps again with forward and
backward under DDP's no_sync() (each process's compute without the all-reduce):
exposed_comm_ms = ms_per_step - ms_per_step_no_sync is what communication adds to a step.
PyTorch's DDP on the CPU does not report the time it waits for gloo, so that difference is the
measure of its communication cost here; DDP's logger also samples some steps' all-reduce times
(logged_comm_ms: first bucket's start to last one's end; logged_comm_wait_ms: the part after
backward's end, comparable with ag's comm_wait_ms).
Rank 0 prints the result (impl "torch-ddp"); with --json as one JSON object on one line.
"""

import argparse
import os
import socket
import statistics
import sys
import time

DEFAULT_STEPS = {"tiny": 100, "small": 40, "medium": 20}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, choices=sorted(DEFAULT_STEPS))
    parser.add_argument("--world", type=int, default=2, help="processes (ranks)")
    parser.add_argument("--threads", type=int, default=1, help="threads per process")
    parser.add_argument("--steps", type=int, default=0, help="timed steps (0: the config's default)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compare-no-sync", action="store_true",
                        help="also time the steps under no_sync (without the all-reduce)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    return parser.parse_args()


if __name__ == "__main__":
    ARGS = parse_args()
    if ARGS.world < 1 or ARGS.threads < 1:
        sys.exit(f"bench_train_ddp_torch.py: --world {ARGS.world} and --threads {ARGS.threads} "
                 "must be at least 1")
    if ARGS.world * ARGS.threads > os.cpu_count():
        sys.exit(f"bench_train_ddp_torch.py: --world {ARGS.world} x --threads {ARGS.threads} "
                 f"exceeds this machine's {os.cpu_count()} hardware threads")
    # Before torch is imported, here and in the spawned processes (which inherit them).
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_train_torch  # noqa: E402  the model, batches, loss and FLOP count


def rows_of_rank(global_rows, rank, world):
    """ag::dist::rows_of_rank: rank's contiguous rows [begin, end) of a global batch."""
    base, extra = divmod(global_rows, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def worker(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    config = args.config
    steps = args.steps or DEFAULT_STEPS[config]
    B = bench_train_torch.CONFIGS[config][4]

    net = bench_train_torch.make_model(config)
    ddp = nn.parallel.DistributedDataParallel(net)  # broadcasts rank 0's parameters
    optimizer = torch.optim.Adam(net.parameters(), lr=0.005)
    loss_fn = bench_train_torch.MaskedSoftmaxCELoss()
    begin, end = rows_of_rank(B, rank, args.world)
    batches = [tuple(t[begin:end].contiguous() for t in batch)
               for batch in bench_train_torch.make_batches(config)]
    torch.manual_seed(rank)  # dropout masks differ between the ranks

    def step(i):
        X, X_valid_len, dec_input, Y, Y_valid_len = batches[i % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        Y_hat, _ = ddp(X, dec_input, X_valid_len)
        l = loss_fn(Y_hat, Y, Y_valid_len)
        l.backward()  # the buckets' all-reduces run while backward goes on
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        return l.item()

    def timed(i, sync):
        """Barrier, one step timed; returns (the slowest rank's seconds, this rank's loss)."""
        dist.barrier()
        start = time.perf_counter()
        if sync:
            loss = step(i)
        else:
            with ddp.no_sync():
                loss = step(i)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        return elapsed.item(), loss

    rss_start = bench_train_torch.proc_status_mb("VmRSS")
    seconds, losses = [], []
    for i in range(args.warmup + steps):
        elapsed, loss = timed(i, True)
        mean_loss = torch.tensor([loss], dtype=torch.float64)
        dist.all_reduce(mean_loss)
        losses.append(mean_loss.item() / args.world)
        if i >= args.warmup:
            seconds.append(elapsed)
    # DDP's own logger (sampled: it records the first iterations, warm-up included, and then
    # every 100th): from the first bucket's all-reduce to the last one's end, and the part of
    # that before backward's end; the rest is the wait at the end of backward (nanoseconds).
    logged = ddp._get_ddp_logging_data()
    logged_comm_ms = logged.get("avg_backward_comm_time", 0) * 1e-6
    logged_wait_ms = logged_comm_ms - logged.get("avg_backward_compute_comm_overlap_time", 0) * 1e-6
    no_sync = [timed(i, False)[0] for i in range(steps)] if args.compare_no_sync else []
    peak_rss = bench_train_torch.proc_status_mb("VmHWM")
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        return

    _, _, _, _, _, S, T, _, _ = bench_train_torch.CONFIGS[config]
    median = statistics.median(seconds)
    no_sync_ms = statistics.median(no_sync) * 1e3 if no_sync else 0.0
    parameters = sum(p.numel() for p in net.parameters())
    result = {
        "impl": "torch-ddp", "config": config, "backend": "gloo", "world_size": args.world,
        "threads": args.threads, "global_batch": B, "rank_batch": end - begin,
        "ms_per_step": round(median * 1e3, 3), "ms_min": round(min(seconds) * 1e3, 3),
        "ms_per_step_no_sync": round(no_sync_ms, 3),
        "exposed_comm_ms": round(median * 1e3 - no_sync_ms, 3) if no_sync else None,
        "logged_comm_ms": round(logged_comm_ms, 3), "logged_comm_wait_ms": round(logged_wait_ms, 3),
        "gradient_bytes": sum(p.numel() * p.element_size() for p in net.parameters()),
        "tokens_per_s": round(B * (S + T) / median, 1),
        "gflops": round(bench_train_torch.step_flops(config) / median * 1e-9, 2),
        "peak_rss_mb": round(peak_rss, 1), "rss_start_mb": round(rss_start, 1),
        "steps": steps, "warmup": args.warmup, "parameters": parameters,
        "first_loss": round(losses[0], 4), "last_loss": round(losses[-1], 4),
        "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
    }
    if args.json:
        import json
        print(json.dumps(result), flush=True)
    else:
        print(f"bench_train_ddp_torch.py: config {config}, DDP (gloo) over {args.world} processes "
              f"x {args.threads} thread(s), global batch {B} (rank 0: {end - begin} rows), "
              f"{steps} timed steps after {args.warmup} warm-up")
        print(f"  {result['ms_per_step']:.3f} ms/step (median of the slowest rank's; "
              f"min {result['ms_min']:.3f}), {result['tokens_per_s']:.0f} tokens/s")
        if no_sync:
            print(f"  {no_sync_ms:.3f} ms/step under no_sync: communication adds "
                  f"{result['exposed_comm_ms']:.3f} ms/step")
        print(f"  DDP's logger (sampled steps): all-reduce {logged_comm_ms:.3f} ms from the first "
              f"bucket to the last, {logged_wait_ms:.3f} ms of it after backward's end")
        print(f"  rank 0: peak RSS {peak_rss:.1f} MB, {parameters} parameters "
              f"({result['gradient_bytes']} gradient bytes)")
        print(f"  loss (mean over ranks) {losses[0]:.4f} (first step) -> {losses[-1]:.4f} (last)",
              flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    mp.spawn(worker, args=(ARGS, free_port()), nprocs=ARGS.world, join=True)
