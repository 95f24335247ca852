#!/usr/bin/env python3
"""Writes a small seed corpus for fuzz_backend (input format: fuzz_backend.c).

   gen_corpus.py OUTDIR                    the seeds
   gen_corpus.py --regressions OUTDIR      the slow inputs of the past

run.sh makes both under build/fuzz at each run, from the protocol header
and the call list as they are then: they are not committed.
"""
import importlib.util, os, re, struct, sys

here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
regressions = bool(args) and args[0] == "--regressions"
if regressions:
    args = args[1:]
if not args:
    sys.exit("usage: gen_corpus.py [--regressions] OUTDIR")
out = args[0]
proto = open(os.path.join(here, "..", "..", "include", "vcu_proto.h")).read()
opmap = [(m.group(1), int(m.group(2), 16)) for m in re.finditer(r"XX\((\w+), (0x[0-9a-f]+),", proto)]
idx = {n: i for i, (n, _) in enumerate(opmap)}
num = dict(opmap)
# handle table indices (fz_setup): 0 legacy, 1 per-thread, 2 dptr, 3 dptr+1024,
# 4 dptr+4095, 5 stream, 6 event, 7 graph, 8 pool, 9 module, 10 function
H = dict(dptr=2, dptr2=3, stream=5, event=6, graph=7, pool=8, module=9, func=10)

def req(op, payload=b"", patches=(), segs=(), flags=0):
    """segs: (dir, off, len, split); dir 0x40 = TO_DEVICE, 0 = FROM_DEVICE."""
    b = bytes([idx[op], flags, len(payload), len(segs) | (len(patches) << 2)])
    for slot, h in patches:
        b += bytes([slot, H[h]])
    for d, off, ln, sp in segs:
        b += bytes([d]) + struct.pack("<HH", off, ln) + bytes([sp])
    return b + payload

# CU_CALL: the generated calls' numbers and hash, from the one list.
_spec = importlib.util.spec_from_file_location("gencuda", os.path.join(here, "..", "..", "include", "gen-cuda.py"))
_gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gen)
_inc = os.environ.get("CUDA_INC", "/usr/local/cuda/include")
_, _, _remote = _gen.read_list(os.path.join(here, "..", "..", "include", "cuda_calls.list"))
_calls = _gen.remote_calls(_remote, _gen.read_signatures(_inc, _gen.read_defines(_inc))[2], _inc)
CALL = {c["name"]: c["num"] for c in _calls}
CALLS_HASH = _gen.calls_hash(_calls)

def call(name, args=b""):
    """A CU_CALL payload: header, number, hash, then the call's slots."""
    return pad(8) + u32(CALL[name]) + u32(CALLS_HASH) + args

def pad(n): return b"\0" * n
u64 = lambda v: struct.pack("<Q", v)
u32 = lambda v: struct.pack("<I", v)
seeds = {
 "echo": req("ECHO", pad(16) + b"hello", segs=[(0x40, 0, 100, 1), (0, 200, 50, 2)]),
 "info": req("CU_DRIVER_INFO") + req("CU_DEVICE_INFO") + req("CU_MEM_GET_INFO"),
 "htod_dtoh": req("CU_MEMCPY_HTOD", pad(8) + u64(0) + u64(0) + u64(256) + u64(0) + pad(8), [(1, "dptr")], [(0x40, 0, 256, 1)])
             + req("CU_MEMCPY_DTOH", pad(8) + u64(0) + u64(0) + u64(256) + u64(0) + u32(1) + u32(0), [(2, "dptr"), (4, "stream")], [(0, 512, 256, 0)]),
 "memset": req("CU_MEMSET", pad(8) + u64(0) + u64(0) + u64(64) + u64(1) + u64(0) + u32(7) + u32(4) + pad(8), [(1, "dptr")]),
 "memcpy2d": req("CU_MEMCPY_2D", pad(8) + u64(0) + u64(64) + u64(0) + u64(32) + u64(32) + u64(4) + u64(0) + u32(1) + u32(0), [(1, "dptr")], [(0x40, 0, 128, 0)]),
 "launch": req("CU_LAUNCH", pad(8) + u64(0) + u64(0) + u32(1)*3 + u32(32) + u32(1)*2 + u32(0) + u32(0) + u32(28) + u32(0) + pad(28), [(1, "func"), (2, "stream"), (8, "dptr"), (9, "dptr"), (10, "dptr")]),
 "launch_ex": req("CU_LAUNCH_EX", pad(8) + u64(0) + u64(0) + u32(2) + u32(1)*2 + u32(32) + u32(1)*2 + u32(0) + u32(0) + u32(28) + u32(0) + u32(2) + u32(0)
                + u32(4) + u32(0) + u64(0) + u32(2) + u32(1) + u32(1) + u32(0)
                + u32(12) + u32(0) + u64(0) + pad(16) + pad(28),
                [(1, "func"), (2, "stream"), (14, "event"), (17, "dptr"), (18, "dptr"), (19, "dptr")])
              + req("CU_OCCUPANCY_CLUSTERS", pad(8) + u64(0) + u64(0) + u32(2) + u32(1)*2 + u32(32) + u32(1)*2 + pad(16) + u32(1) + u32(0)
                + u32(4) + u32(0) + u64(0) + u32(2) + u32(1) + u32(1) + u32(0), [(1, "func")])
              + req("CU_OCCUPANCY_CLUSTER_SIZE", pad(8) + u64(0) + u64(0) + u32(2) + u32(1)*2 + u32(32) + u32(1)*2 + pad(16) + pad(8), [(1, "func")]),
 "funcattrs": req("CU_FUNC_GET_ATTRS", pad(16), [(1, "func")])
              + req("CU_CALL", call("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", u64(0) + u64(128) + u64(0) + u64(0)), [(2, "func")]),
 "getfunc": req("CU_MODULE_GET_FUNCTION", pad(8) + u64(0) + u32(23) + u32(0) + b"_Z10vector_addPKfS0_Pfi", [(1, "module")]),
 "getglobal": req("CU_MODULE_GET_GLOBAL", pad(8) + u64(0) + u32(3) + u32(0) + b"abc", [(1, "module")])
              + req("CU_MODULE_GLOBAL_INFO", pad(8) + u64(0) + u32(3) + u32(0) + b"abc", [(1, "module")]),
 "events": req("CU_EVENT_RECORD", pad(32), [(1, "event"), (2, "stream")]) + req("CU_EVENT_SYNCHRONIZE", pad(16), [(1, "event")]) + req("CU_CALL", call("cuEventElapsedTime_v2", u64(0) + u64(0)), [(2, "event"), (3, "event")]),
 "stream": req("CU_STREAM_WAIT_EVENT", pad(32), [(1, "stream"), (2, "event")]) + req("CU_STREAM_SYNCHRONIZE", pad(16), [(1, "stream")]) + req("CU_STREAM_DESTROY", pad(16), [(1, "stream")]),
 "capture": req("CU_STREAM_BEGIN_CAPTURE", pad(32), [(1, "stream")]) + req("CU_MEMSET", pad(8) + u64(0) + u64(0) + u64(16) + u64(1) + u64(0) + u32(1) + u32(1) + u32(1) + u32(0), [(1, "dptr"), (5, "stream")]) + req("CU_STREAM_CAPTURE_INFO", pad(16), [(1, "stream")]) + req("CU_STREAM_END_CAPTURE", pad(16), [(1, "stream")]),
 "graph_mem": req("CU_GRAPH_ADD_MEM_NODE", pad(8) + u64(0) + u32(1) + u32(0) + u64(4096) + u64(0), [(1, "graph")]) + req("CU_GRAPH_MEM_ATTR", pad(8) + u64(0) + u32(1) + u32(0) + u64(0)) + req("CU_GRAPH_INSTANTIATE", pad(32), [(1, "graph")]) + req("CU_GRAPH_MEM_NODE_PARAMS", pad(16)) + req("CU_CALL", call("cuGraphMemFreeNodeGetParams", u64(0))) + req("CU_GRAPH_ADD_MEM_NODE", pad(8) + u64(0) + u32(2) + u32(0) + u64(0) + u64(0), [(1, "graph"), (4, "dptr")]),
 "graph_cond": req("CU_GRAPH_COND_HANDLE", pad(8) + u64(0) + u64(1) + u64(1), [(1, "graph")]) + req("CU_GRAPH_ADD_COND_NODE", pad(8) + u64(0) + u64(0) + u32(1) + u32(1) + u32(0) + u32(0), [(1, "graph")]) + req("CU_GRAPH_ADD_COND_NODE", pad(8) + u64(0) + u64(0) + u32(2) + u32(64) + u32(0) + u32(0), [(1, "graph")]),
 "capture_to_graph": req("CU_STREAM_CAPTURE_TO_GRAPH", pad(8) + u64(0) + u64(0) + u32(1) + u32(0), [(1, "stream"), (2, "graph")]) + req("CU_MEMSET", pad(8) + u64(0) + u64(0) + u64(16) + u64(1) + u64(0) + u32(1) + u32(1) + u32(1) + u32(0), [(1, "dptr"), (5, "stream")]) + req("CU_STREAM_CAPTURE_GRAPH", pad(16), [(1, "stream")]) + req("CU_STREAM_END_CAPTURE", pad(16), [(1, "stream")]) + req("CU_GRAPH_DESTROY", pad(16), [(1, "graph")]),
 "capture_graph": req("CU_STREAM_BEGIN_CAPTURE", pad(32), [(1, "stream")]) + req("CU_STREAM_CAPTURE_GRAPH", pad(16), [(1, "stream")]) + req("CU_THREAD_CAPTURE_MODE", pad(8) + u64(2)) + req("CU_MEM_ALLOC", pad(8) + u64(4096) + pad(16)) + req("CU_GRAPH_DESTROY", pad(16), [(1, "graph")]) + req("CU_STREAM_END_CAPTURE", pad(16), [(1, "stream")]) + req("CU_STREAM_CAPTURE_GRAPH", pad(16), [(1, "stream")]),
 "graph": req("CU_GRAPH_ADD_NODE", pad(8) + u64(0) + u32(5) + u32(0) + pad(136 - 24), [(1, "graph")]) + req("CU_GRAPH_ADD_NODE", pad(8) + u64(0) + u32(3) + u32(0) + pad(8+24+8) + u64(0) + pad(16) + u64(0) + u64(16) + u64(1) + u32(1) + u32(1) + u64(0), [(1, "graph"), (8, "dptr")]) + req("CU_GRAPH_INSTANTIATE", pad(32), [(1, "graph")]) + req("CU_GRAPH_NODE_COUNT", pad(16), [(1, "graph")]),
 "mempool": req("CU_MEMPOOL_GET_ATTR", pad(8) + u64(0) + u32(1) + u32(0) + u64(0), [(1, "pool")]) + req("CU_MEM_ALLOC_ASYNC", pad(8) + u64(100) + u64(0) + u64(0), [(2, "stream")]),
 "hostfunc": req("CU_STREAM_HOST_FUNC", pad(32), [(1, "stream")]) + req("CU_CALLBACK_WAIT", pad(8)) + req("CU_CALLBACK_DONE", pad(16)),
 "modload": req("CU_MODULE_LOAD", pad(8) + u64(64), segs=[(0x40, 0, 64, 0)]) + req("CU_MODULE_UNLOAD", pad(16), [(1, "module")]),
 # virtual memory management: vcu_cu_vmm_req, prop at 48 (pinned, device 0)
 "vmm": req("CU_MEM_GRANULARITY", pad(48) + u32(1) + u32(0) + u32(1) + u32(0))
        + req("CU_MEM_CREATE", pad(16) + u64(2 << 20) + pad(24) + u32(1) + u32(0) + u32(1) + u32(0))
        + req("CU_MEM_ADDRESS_RESERVE", pad(16) + u64(4 << 20))
        + req("CU_MEM_MAP", pad(16) + u64(2 << 20) + pad(8) + u64(16), [(1, "dptr")])
        + req("CU_MEM_SET_ACCESS", pad(16) + u64(2 << 20) + pad(48) + u32(1) + u32(0) + u32(1) + u32(0) + u32(3), [(1, "dptr")])
        + req("CU_MEM_RETAIN", pad(16), [(1, "dptr")]) + req("CU_MEM_RELEASE", pad(32) + u64(16)),
 "ptrs": req("CU_CALL", call("cuMemGetAddressRange_v2", u64(0)), [(2, "dptr2")]) + req("CU_HOST_DEVICE_POINTER", pad(16), segs=[(0x44, 0, 4096, 0)])
         + req("CU_HOST_DEVICE_POINTER_AT", pad(8) + u64(0x4a0000000000), segs=[(0x44, 0, 4096, 0)]) + req("CU_MEM_FREE", pad(16), [(1, "dptr")]),
 # a pool of the guest's (vcu_cu_pool_create_req), blocks from the
 # default one, the default one's destruction (refused)
 "pools": req("CU_MEMPOOL_CREATE", pad(8) + u32(1) + u32(0) + u64(1 << 20) + u32(0) + u32(0))
          + req("CU_MEM_ALLOC_ASYNC", pad(8) + u64(100) + u64(0) + u64(0), [(2, "stream")])
          + req("CU_MEMPOOL_DESTROY", pad(16), [(1, "pool")]),
 "async": req("CU_MEMCPY_DTOD", pad(48), [(1, "dptr"), (2, "dptr2")], flags=1) + req("CU_GET_DEFERRED_ERROR", pad(8)) + req("SESSION_FENCE") + req("CU_TAKE_OUTPUT", pad(16)),
 "ctx": req("CU_CALL", call("cuCtxGetLimit", u64(0))) + req("CU_CALL", call("cuCtxGetStreamPriorityRange")) + req("CU_CALL", call("cuDeviceCanAccessPeer", u64(0) + u64(1)))
        + req("CU_CTX_SYNCHRONIZE", pad(8)) + req("CU_CTX_RESET", pad(8)),
 # CU_BATCH of a memset and a launch (entries: opcode, length, payload padded to 8).
 "batch": req("CU_BATCH", pad(8) + u32(2) + u32(0)
              + u32(num["CU_MEMSET"]) + u32(64) + pad(8) + u64(0) + u64(0) + u64(64) + u64(1) + u64(0) + u32(1) + u32(1) + pad(8)
              + u32(num["CU_LAUNCH"]) + u32(92) + pad(8) + u64(0) + u64(0) + u32(1)*3 + u32(32) + u32(1)*2 + u32(0) + u32(0) + u32(28) + u32(0) + pad(28) + pad(4),
              [(4, "dptr"), (13, "func"), (14, "stream"), (20, "dptr"), (21, "dptr"), (22, "dptr")], flags=1)
          + req("CU_CTX_SYNCHRONIZE", pad(8)),
 "call": req("CU_CALL", call("cuStreamSetAttribute", u64(0) + u64(3) + u32(2) + pad(60)), [(2, "stream")])
         + req("CU_CALL", call("cuStreamGetAttribute", u64(0) + u64(1)), [(2, "stream")])
         + req("CU_CALL", call("cuStreamWriteValue32_v2", u64(0) + u64(0) + u64(7) + u64(0)), [(2, "stream"), (3, "dptr")]),
 # arrays (vcu_cu_array_req), a device -> array copy (vcu_cu_memcpy3d_req:
 # src side at slot 1, dst side at slot 8), a texture over the device
 # memory (vcu_cu_texobj_req: res.ptr at slot 5), a mipmapped array and a
 # level; handles as the session's next ones would be
 "arrays": req("CU_ARRAY_CREATE", pad(8) + u64(16) + u64(8) + u64(0) + u32(0x20) + u32(1) + u32(0) + u32(0))
           + req("CU_MEMCPY_3D", pad(8) + u64(0) + pad(24) + u64(64) + u64(8) + u32(2) + u32(0)
                 + u64(16) + pad(40) + u32(3) + u32(0) + u64(64) + u64(8) + u64(1) + u64(0) + pad(8), [(1, "dptr")])
           + req("CU_TEXOBJ_CREATE", pad(8) + pad(8) + u32(2) + u32(0x20) + u32(1) + u32(0) + u64(0) + u64(0) + u64(1024)
                 + pad(24) + pad(56) + pad(48), [(5, "dptr")])
           + req("CU_TEXOBJ_GET", pad(8) + u64(1) + u64(0) + u64(0))
           + req("CU_ARRAY_DESTROY", pad(8) + u64(16))
           + req("CU_MIPMAP_CREATE", pad(8) + u64(64) + u64(64) + u64(0) + u32(0x20) + u32(1) + u32(0) + u32(0) + u32(4) + u32(0))
           + req("CU_MIPMAP_LEVEL", pad(8) + u64(17) + u64(2) + u64(0)),
 # peer access to device 1, a peer copy (vcu_cu_memcpy_peer_req: dst slot
 # 1, src slot 2), a 3D peer copy between device memory (the sides'
 # reserved their devices), a batch of a write and a wait
 # (vcu_cu_memops_req, then 24-byte operations: addresses at slots 4, 7)
 "peer": req("CU_CTX_PEER_ACCESS", pad(8) + u64(1) + u64(0) + u64(1))
         + req("CU_MEMCPY_PEER", pad(8) + u64(0) + u64(0) + u64(1024) + u64(0) + u32(0) + u32(0) + u32(1) + u32(0),
               [(1, "dptr2"), (2, "dptr")])
         + req("CU_MEMCPY_3D_PEER", pad(8) + u64(0) + pad(24) + u64(64) + u64(8) + u32(2) + u32(0)
               + u64(0) + pad(24) + u64(64) + u64(8) + u32(2) + u32(1) + u64(64) + u64(8) + u64(1) + u64(0) + pad(8),
               [(1, "dptr"), (8, "dptr2")])
         + req("CU_STREAM_MEMOPS", pad(8) + u64(0) + u32(2) + u32(0) + u32(2) + u32(0) + u64(0) + u64(7)
               + u32(1) + u32(1) + u64(0) + u64(7), [(1, "stream"), (4, "dptr"), (7, "dptr")])
         + req("CU_CTX_PEER_ACCESS", pad(8) + u64(1) + u64(0) + u64(0)),
}
# Inputs that once made an execution take seconds (regressions/README.md).
slow = {
 "slow-huge-alloc": req("CU_MEM_ALLOC", pad(8) + u64(80 << 30) + pad(16)) + req("CU_MEM_ALLOC", pad(8) + u64(40 << 30) + pad(16))
                  + req("CU_MEM_ALLOC", pad(8) + u64(1 << 62) + pad(16)) + req("CU_MEM_GET_INFO"),
 "slow-huge-alloc-async": req("CU_MEM_ALLOC_ASYNC", pad(8) + u64(60 << 30) + u64(0) + u64(0), [(2, "stream")])
                        + req("CU_MEM_ALLOC_ASYNC", pad(8) + u64(30 << 30) + u64(0) + u64(0), [(2, "stream"), (3, "pool")])
                        + req("CU_STREAM_SYNCHRONIZE", pad(16), [(1, "stream")]),
 "slow-echo-delay": req("ECHO", u64(1) + u32(0) + u32(10000), segs=[(0x40, 0, 64, 0)]) + req("ECHO", u64(2) + u32(0) + u32(10001))
                  + req("ECHO", u64(3) + u32(0) + u32(9999), flags=1),
 "slow-hostfunc-blocked": req("CU_STREAM_HOST_FUNC", pad(32), [(1, "stream")]) + req("CU_STREAM_SYNCHRONIZE", pad(16), [(1, "stream")])
                        + req("CU_CALLBACK_WAIT", pad(8)) + req("CU_CTX_SYNCHRONIZE", pad(8)),
}
files = slow if regressions else seeds
os.makedirs(out, exist_ok=True)
for n, b in files.items():
    open(os.path.join(out, n), "wb").write(b)
print(len(files), "regressions" if regressions else "seeds", "in", out)
