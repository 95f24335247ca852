"""PyTorch on a GPU, step by step: run natively on the GPU host and in a
virtio-cuda guest (VM suite torch, tests/gpu/torch-run.sh), each step
printing "PASS torch/<step> <seconds>" or "FAIL torch/<step> <why>", so
that a step that fails says where and the others still run.

Steps: import, is_available, properties, elementwise, matmul (checked
against the CPU), cnn (a small CNN trained for a few hundred steps; its
loss must fall), graphs (capture and replay), compile (torch.compile of
a small function, Triton); with two GPUs or more, nccl (NCCL all-reduce
in one process over every GPU) and distributed (torch.distributed over
NCCL, two processes, one GPU each), with their bus bandwidths.  VCU_TORCH_STEPS=graphs,compile runs only
the steps named (import always runs).
"""
import os
import sys
import time
import traceback

results = []


def watchdog(period):
    """Every period seconds: the Python stack of every thread and each
    thread's state (R running, S sleeping), to tell slow from stuck."""
    import faulthandler
    import threading
    faulthandler.dump_traceback_later(period, repeat=True, file=sys.stderr)

    def states():
        while True:
            time.sleep(period)
            out = []
            for tid in sorted(os.listdir("/proc/self/task")):
                try:
                    st = open("/proc/self/task/%s/stat" % tid).read().rsplit(")", 1)[1].split()
                    wchan = open("/proc/self/task/%s/wchan" % tid).read()
                    out.append("%s:%s:%s" % (tid, st[0], wchan or "-"))
                except OSError:
                    pass
            print("watchdog: threads " + " ".join(out), file=sys.stderr, flush=True)

    threading.Thread(target=states, daemon=True).start()


if os.environ.get("VCU_TORCH_WATCHDOG"):
    watchdog(float(os.environ["VCU_TORCH_WATCHDOG"]))


def step(name, fn):
    t0 = time.time()
    try:
        detail = fn()
        dt = time.time() - t0
        print("PASS torch/%s %.2f%s" % (name, dt, (" " + detail) if detail else ""), flush=True)
        results.append((name, True))
    except Exception as e:  # the next steps still run
        dt = time.time() - t0
        msg = ("%s: %s" % (type(e).__name__, e)).replace("\n", " ")[:400]
        print("FAIL torch/%s %.2f %s" % (name, dt, msg), flush=True)
        if os.environ.get("VCU_TORCH_TRACEBACK"):
            traceback.print_exc()
        results.append((name, False))


torch = None


def s_import():
    global torch
    import torch as t
    torch = t
    return "torch %s cuda %s" % (t.__version__, t.version.cuda)


def s_available():
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    return "devices %d" % torch.cuda.device_count()


def s_properties():
    p = torch.cuda.get_device_properties(0)
    if p.total_memory <= 0 or p.multi_processor_count <= 0:
        raise RuntimeError("bad properties %r" % (p,))
    return "%s, %d MiB, %d SMs, sm_%d%d" % (p.name.replace(" ", "_"), p.total_memory >> 20,
                                            p.multi_processor_count, p.major, p.minor)


def s_elementwise():
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    y = (x * 2 + 1).sum().item()
    n = 1 << 20
    want = float(n * (n - 1) + n)
    if abs(y - want) > want * 1e-5:
        raise RuntimeError("sum %r, want %r" % (y, want))


def s_matmul():
    # 4096 x 4096 on the GPU, checked on the CPU without redoing the
    # product there (an emulated CPU would take minutes): Freivalds' check
    # of the whole product, A (B x) against C x for a random x, and 64 x 64
    # entries exactly, in double precision.
    n = int(os.environ.get("VCU_TORCH_MATMUL_N", "4096"))
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", generator=g)
    b = torch.randn(n, n, device="cuda", generator=g)
    c = (a @ b).cpu().double()
    a, b = a.cpu().double(), b.cpu().double()
    x = torch.randn(n, 1, dtype=torch.float64)
    want = a @ (b @ x)
    err = ((c @ x - want).abs().max() / want.abs().max()).item()
    if err > 1e-3:
        raise RuntimeError("Freivalds relative error %g" % err)
    block = a[:64] @ b[:, :64]
    err2 = ((c[:64, :64] - block).abs().max() / block.abs().max()).item()
    if err2 > 1e-3:
        raise RuntimeError("relative error %g in the top-left block" % err2)
    return "%dx%d, max rel err %.2g (product), %.2g (block)" % (n, n, err, err2)


def s_cnn():
    import torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 2)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lossf = nn.CrossEntropyLoss()
    # Two classes: bright top half or bright bottom half.
    g = torch.Generator().manual_seed(1)
    xs = torch.rand(512, 1, 16, 16, generator=g) * 0.5
    ys = torch.randint(0, 2, (512,), generator=g)
    xs[ys == 0, :, :8, :] += 0.5
    xs[ys == 1, :, 8:, :] += 0.5
    xs, ys = xs.cuda(), ys.cuda()
    first = last = None
    for i in range(300):
        idx = torch.randint(0, 512, (64,), device="cuda")
        loss = lossf(model(xs[idx]), ys[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i == 0:
            first = loss.item()
    last = loss.item()
    if not last < first * 0.5:
        raise RuntimeError("loss %g -> %g did not fall" % (first, last))
    return "loss %.3f -> %.3f" % (first, last)


def s_graphs():
    s = torch.cuda.Stream()
    x = torch.zeros(1 << 16, device="cuda")
    with torch.cuda.stream(s):
        for _ in range(3):        # warm up on a side stream, as the docs say
            y = x * 2 + 1
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2 + 1
    for v in (1.0, 5.0):
        x.fill_(v)
        g.replay()
        torch.cuda.synchronize()
        if not torch.all(y == v * 2 + 1).item():
            raise RuntimeError("replay with x=%g gave %r" % (v, y[:4].tolist()))


def s_compile():
    def f(a, b):
        return torch.sin(a) * torch.cos(b) + a * b

    cf = torch.compile(f)
    a = torch.randn(4096, device="cuda")
    b = torch.randn(4096, device="cuda")
    got = cf(a, b)
    want = f(a, b)
    err = (got - want).abs().max().item()
    if err > 1e-4:
        raise RuntimeError("max error %g" % err)


def timed_allreduce(fn, tensors, rounds):
    """Seconds per round of fn() over tensors, after a warm-up round."""
    fn()
    for t in tensors:
        torch.cuda.synchronize(t.device)
    t0 = time.time()
    for _ in range(rounds):
        fn()
    for t in tensors:
        torch.cuda.synchronize(t.device)
    return (time.time() - t0) / rounds


def s_nccl():
    # NCCL all-reduce in this process over every GPU (ncclCommInitAll,
    # through torch.cuda.nccl), checked exactly; then the bus bandwidth of
    # a 256 MiB and a 1 GiB all-reduce as nccl-tests computes it:
    # size / time * 2(n-1)/n.
    import torch.cuda.nccl as nccl
    n = torch.cuda.device_count()
    if n < 2:
        raise RuntimeError("needs two GPUs, has %d" % n)
    ts = [torch.full((1 << 20,), float(i + 1), device="cuda:%d" % i) for i in range(n)]
    nccl.all_reduce(ts)
    want = n * (n + 1) / 2
    for i, t in enumerate(ts):
        if not torch.all(t == want).item():
            raise RuntimeError("GPU %d: %r, want %g" % (i, t[:4].tolist(), want))
    out = []
    # 256 MiB, then 1 GiB: in a TCG guest each round's launch costs the
    # guest's CPU about as much as 256 MiB costs the GPUs.
    for mib in (256, 1024):
        big = [torch.ones(mib << 18, device="cuda:%d" % i) for i in range(n)]
        dt = timed_allreduce(lambda: nccl.all_reduce(big), big, 10)
        size = big[0].numel() * 4
        out.append("%d MiB: %.2f ms, bus bandwidth %.1f GB/s" % (
            mib, dt * 1e3, size / dt * 2 * (n - 1) / n / 1e9))
        del big
    return "%d GPUs, %s" % (n, "; ".join(out))


def dist_rank(rank, world, path, q):
    """One process of s_distributed: GPU rank, NCCL over the others."""
    try:
        import torch as t
        import torch.distributed as dist
        t.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method="file://" + path, rank=rank,
                                world_size=world, device_id=t.device("cuda", rank))
        x = t.full((1 << 20,), float(rank + 1), device="cuda")
        dist.all_reduce(x)
        want = world * (world + 1) / 2
        if not t.all(x == want).item():
            raise RuntimeError("rank %d: %r, want %g" % (rank, x[:4].tolist(), want))
        dts = []
        for mib in (256, 1024):
            big = t.ones(mib << 18, device="cuda")
            dist.all_reduce(big)
            t.cuda.synchronize()
            dist.barrier()
            t0 = time.time()
            for _ in range(10):
                dist.all_reduce(big)
            t.cuda.synchronize()
            dts.append((time.time() - t0) / 10)
            del big
        dist.destroy_process_group()
        q.put((rank, True, dts))
    except Exception as e:
        q.put((rank, False, ("%s: %s" % (type(e).__name__, e)).replace("\n", " ")[:300]))


def s_distributed():
    # torch.distributed over NCCL: two processes, one GPU each, checked
    # exactly; the bus bandwidth of a 256 MiB and a 1 GiB all-reduce.
    import multiprocessing as mp
    import tempfile
    world = 2
    if torch.cuda.device_count() < world:
        raise RuntimeError("needs two GPUs, has %d" % torch.cuda.device_count())
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    path = tempfile.mktemp(prefix="vcu-dist.")
    ps = [ctx.Process(target=dist_rank, args=(r, world, path, q)) for r in range(world)]
    for p in ps:
        p.start()
    got = []
    for _ in range(world):
        got.append(q.get(timeout=float(os.environ.get("VCU_TORCH_DIST_TIMEOUT", "600"))))
    for p in ps:
        p.join(60)
    bad = [g for g in got if not g[1]]
    if bad:
        raise RuntimeError("; ".join("rank %d: %s" % (g[0], g[2]) for g in bad))
    out = []
    for k, mib in enumerate((256, 1024)):
        dt = max(g[2][k] for g in got)
        out.append("%d MiB: %.2f ms, bus bandwidth %.1f GB/s" % (
            mib, dt * 1e3, (mib << 20) / dt * 2 * (world - 1) / world / 1e9))
    return "2 processes, %s" % "; ".join(out)


def main():
    step("import", s_import)
    if torch is not None:
        for name, fn in (("is_available", s_available), ("properties", s_properties),
                         ("elementwise", s_elementwise), ("matmul", s_matmul), ("cnn", s_cnn),
                         ("graphs", s_graphs), ("compile", s_compile), ("nccl", s_nccl),
                         ("distributed", s_distributed)):
            only = os.environ.get("VCU_TORCH_STEPS")
            if only and name not in only.split(","):
                continue
            # The steps of several GPUs: where there are, or where asked for.
            if name in ("nccl", "distributed") and not only and torch.cuda.device_count() < 2:
                continue
            if name != "is_available" and not results[-1][1] and results[-1][0] == "is_available":
                print("FAIL torch/%s skipped: no CUDA" % name, flush=True)
                results.append((name, False))
                continue
            step(name, fn)
    print("torch: %d passed, %d failed" % (sum(1 for _, ok in results if ok),
                                           sum(1 for _, ok in results if not ok)), flush=True)
    sys.stdout.flush()
    # Straight out: the interpreter's teardown (torch.compile's worker pool,
    # atexit handlers) takes a minute on the guest's emulated CPU, past the
    # suite's time on the GPU machine; closing the device file at exit ends
    # the session as any exit does.
    os._exit(0 if all(ok for _, ok in results) else 1)


# Spawned processes (s_distributed) import this file: only a run of it runs the steps.
if __name__ == "__main__":
    main()
