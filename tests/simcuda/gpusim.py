#!/usr/bin/env python3
"""gpusim - a tiny client of the simulated CUDA driver for test scripts and
notebooks (python3 standard library only).

It loads "libcuda.so.1" with ctypes.CDLL, the way a CUDA application's
runtime does, so an LD_PRELOAD hook sees the calls through dlopen/dlsym.
Point LD_LIBRARY_PATH at tests/simcuda/.libs to get the simulator.

    import gpusim
    gpusim.init()
    p = gpusim.alloc(1 << 20)
    gpusim.write(p, b"hello")
    gpusim.launch(us=2000)          # a 2 ms simulated kernel
    gpusim.synchronize()
    gpusim.read(p, 5), gpusim.mem_info(), gpusim.busy_ns()
    h = gpusim.ipc_get_handle(p)    # legacy IPC: 64 bytes another process opens

Command line (exit status 0 on success, 1 with the CUDA error on stderr):
    python3 gpusim.py work --kernels N --us U   run N kernels of U us, sync
    python3 gpusim.py alloc BYTES [--hold]      allocate (K/M/G suffixes);
                                                --hold keeps it until stdin
                                                is closed
    python3 gpusim.py info                      devices, memory, busy time,
                                                the host's memory (host_stats)
    python3 gpusim.py host                      the host's memory only (no
                                                cuInit: for a test watching)
    python3 gpusim.py inject CALL [COUNT] [--error NAME] [--pid PID]
                                                the next COUNT (1) calls of
                                                CALL fail (gpusim_inject_failure)
"""
import ctypes
import json
import sys
import threading

__all__ = [
    "CudaError", "Stream", "init", "alloc", "free", "write", "read", "launch",
    "synchronize", "mem_info", "busy_ns", "process_busy_ns", "stream",
    "is_simulated", "inject_failure", "host_stats", "ipc_get_handle", "ipc_open_handle",
    "ipc_close_handle",
]

_lib = None
_ctx = None
_device = 0
_module = None
_functions = {}
_threads = set()
_lock = threading.Lock()


class CudaError(RuntimeError):
    """A CUDA call failed; .name is the CUresult's name (CUDA_ERROR_...)."""

    def __init__(self, call, code, name, text):
        self.call, self.code, self.name, self.text = call, code, name, text
        super().__init__("%s failed: %s (%s)" % (call, name, text))


def _load():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _lib = lib
    return _lib


def _check(call, rc):
    if rc != 0:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        lib = _load()
        lib.cuGetErrorName(rc, ctypes.byref(name))
        lib.cuGetErrorString(rc, ctypes.byref(text))
        raise CudaError(call, rc,
                        name.value.decode() if name.value else "CUresult %d" % rc,
                        text.value.decode() if text.value else "unknown error")


def _call(name, *args):
    fn = getattr(_load(), name)
    fn.restype = ctypes.c_int
    _check(name, fn(*args))


def _current():
    """Makes the context current in the calling thread (init() did it in
    its own thread only)."""
    if _ctx is None:
        raise RuntimeError("gpusim.init() has not been called")
    me = threading.get_ident()
    if me not in _threads:
        _call("cuCtxSetCurrent", _ctx)
        _threads.add(me)


def is_simulated():
    """True when libcuda.so.1 is the gpushare simulator."""
    lib = _load()
    try:
        fn = lib.gpusim_is_simulated
    except AttributeError:
        return False
    fn.restype = ctypes.c_int
    return fn() == 1


def init(device=0):
    """cuInit, retain the device's primary context and make it current."""
    global _ctx, _device
    with _lock:
        _call("cuInit", ctypes.c_uint(0))
        ctx = ctypes.c_void_p()
        _call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), ctypes.c_int(device))
        _call("cuCtxSetCurrent", ctx)
        _ctx, _device = ctx, device
        _threads.clear()
        _threads.add(threading.get_ident())


def alloc(nbytes):
    """Device memory of nbytes; returns the device pointer (an int)."""
    _current()
    p = ctypes.c_uint64()
    _call("cuMemAlloc_v2", ctypes.byref(p), ctypes.c_size_t(nbytes))
    return p.value


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class Segment:
    """Device memory the way PyTorch's expandable segments hold it: an
    address range reserved once, one cuMemCreate'd page mapped after
    another, access given over the whole range; .base is its address."""

    def __init__(self, nbytes, page=2 << 20):
        _current()
        self.page, self.pages = page, -(-nbytes // page)
        self.size = self.pages * page
        base = ctypes.c_uint64()
        _call("cuMemAddressReserve", ctypes.byref(base), ctypes.c_size_t(self.size),
              ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_ulonglong(0))
        self.base, self.handles = base.value, []
        prop = _Prop(type=1, location=_Location(1, _device))  # PINNED, on the device
        for i in range(self.pages):
            h = ctypes.c_ulonglong()
            _call("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(page), ctypes.byref(prop),
                  ctypes.c_ulonglong(0))
            self.handles.append(h.value)
            _call("cuMemMap", ctypes.c_uint64(self.base + i * page), ctypes.c_size_t(page),
                  ctypes.c_size_t(0), ctypes.c_ulonglong(h.value), ctypes.c_ulonglong(0))
        access = _Access(_Location(1, _device), 3)  # read-write
        _call("cuMemSetAccess", ctypes.c_uint64(self.base), ctypes.c_size_t(self.size),
              ctypes.byref(access), ctypes.c_size_t(1))

    def free(self):
        """Unmap, release every page's handle, free the range."""
        _current()
        _call("cuMemUnmap", ctypes.c_uint64(self.base), ctypes.c_size_t(self.size))
        for h in self.handles:
            _call("cuMemRelease", ctypes.c_ulonglong(h))
        _call("cuMemAddressFree", ctypes.c_uint64(self.base), ctypes.c_size_t(self.size))
        self.handles = []


def free(ptr):
    _current()
    _call("cuMemFree_v2", ctypes.c_uint64(ptr))


class _IpcHandle(ctypes.Structure):  # CUipcMemHandle
    _fields_ = [("reserved", ctypes.c_char * 64)]


def ipc_get_handle(ptr):
    """cuIpcGetMemHandle of the allocation holding ptr: the handle's 64 bytes."""
    _current()
    h = _IpcHandle()
    _call("cuIpcGetMemHandle", ctypes.byref(h), ctypes.c_uint64(ptr))
    return ctypes.string_at(ctypes.addressof(h), 64)


def ipc_open_handle(handle):
    """cuIpcOpenMemHandle_v2 of a handle's 64 bytes: the device pointer."""
    _current()
    h = _IpcHandle.from_buffer_copy(bytes(handle))
    p = ctypes.c_uint64()
    _call("cuIpcOpenMemHandle_v2", ctypes.byref(p), h, ctypes.c_uint(1))  # lazy peer access
    return p.value


def ipc_close_handle(ptr):
    _current()
    _call("cuIpcCloseMemHandle", ctypes.c_uint64(ptr))


def write(ptr, data):
    """Copies bytes-like data to device memory at ptr (synchronously)."""
    _current()
    buf = bytes(data)
    _call("cuMemcpyHtoD_v2", ctypes.c_uint64(ptr), ctypes.c_char_p(buf),
          ctypes.c_size_t(len(buf)))


def read(ptr, n):
    """n bytes of device memory at ptr."""
    _current()
    buf = ctypes.create_string_buffer(n)
    _call("cuMemcpyDtoH_v2", buf, ctypes.c_uint64(ptr), ctypes.c_size_t(n))
    return buf.raw


class Stream:
    """A CUDA stream (cuStreamCreate); .handle is the CUstream value."""

    def __init__(self, non_blocking=False):
        _current()
        h = ctypes.c_void_p()
        _call("cuStreamCreate", ctypes.byref(h), ctypes.c_uint(1 if non_blocking else 0))
        self.handle = h.value

    def synchronize(self):
        _current()
        _call("cuStreamSynchronize", ctypes.c_void_p(self.handle))

    def destroy(self):
        if self.handle is not None:
            _current()
            _call("cuStreamDestroy_v2", ctypes.c_void_p(self.handle))
            self.handle = None


def stream(non_blocking=False):
    return Stream(non_blocking)


def _function(name):
    global _module
    if name not in _functions:
        if _module is None:
            m = ctypes.c_void_p()
            _call("cuModuleLoadData", ctypes.byref(m), ctypes.c_char_p(b"gpusim dummy image"))
            _module = m
        f = ctypes.c_void_p()
        _call("cuModuleGetFunction", ctypes.byref(f), _module, ctypes.c_char_p(name.encode()))
        _functions[name] = f
    return _functions[name]


def launch(us=None, stream=None, name="kernel"):
    """Launches one simulated kernel called `name` on `stream` (a Stream, a
    CUstream value, or None for the default stream); it runs `us`
    microseconds (default: GPUSHARE_SIM_KERNEL_US).  Simulator only."""
    if not is_simulated():
        raise RuntimeError("gpusim.launch() needs the simulated driver: this libcuda.so.1 "
                           "is a real NVIDIA driver (set LD_LIBRARY_PATH to tests/simcuda/.libs)")
    _current()
    f = _function(name)
    if isinstance(stream, Stream):
        stream = stream.handle
    if us is not None:
        setter = _load().gpusim_set_next_kernel_us
        setter.restype = None
        setter(ctypes.c_ulonglong(int(us)))
    one = ctypes.c_uint(1)
    _call("cuLaunchKernel", f, one, one, one, one, one, one, ctypes.c_uint(0),
          ctypes.c_void_p(stream), None, None)


def synchronize():
    """Waits for all work of the context (cuCtxSynchronize)."""
    _current()
    _call("cuCtxSynchronize")


def mem_info():
    """(free, total) bytes of the device, as cuMemGetInfo reports them."""
    _current()
    fr, total = ctypes.c_size_t(), ctypes.c_size_t()
    _call("cuMemGetInfo_v2", ctypes.byref(fr), ctypes.byref(total))
    return fr.value, total.value


def busy_ns(device=None):
    """Nanoseconds the device ran kernels, all processes together."""
    fn = _load().gpusim_busy_ns
    fn.restype = ctypes.c_ulonglong
    return fn(ctypes.c_int(_device if device is None else device))


def process_busy_ns(device=None):
    """Nanoseconds this process' kernels ran on the device."""
    fn = _load().gpusim_process_busy_ns
    fn.restype = ctypes.c_ulonglong
    return fn(ctypes.c_int(_device if device is None else device))


class _HostStats(ctypes.Structure):
    _fields_ = [("limit", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong),
                ("peak", ctypes.c_ulonglong), ("pinned", ctypes.c_ulonglong),
                ("images", ctypes.c_ulonglong), ("kills", ctypes.c_uint),
                ("last_killed_pid", ctypes.c_int)]


def host_stats():
    """The simulated host's memory (GPUSHARE_SIM_HOST_MEMORY), all processes
    together, as a dict: limit (0: unlimited), used, peak, pinned, images
    (checkpoint images), kills (by the simulated OOM killer),
    last_killed_pid.  Needs no init(); the machine must exist.  ValueError
    without one."""
    fn = _load().gpusim_host_stats
    fn.argtypes = [ctypes.POINTER(_HostStats)]
    fn.restype = ctypes.c_int
    st = _HostStats()
    if fn(ctypes.byref(st)) != 0:
        raise ValueError("no simulated machine (no process of GPUSHARE_SIM_NAME called cuInit)")
    return {name: getattr(st, name) for name, _ in _HostStats._fields_}


def _error_code(name):
    """The CUresult number of a CUDA_ERROR_... name."""
    lib = _load()
    text = ctypes.c_char_p()
    for code in range(1, 1000):
        if lib.cuGetErrorName(code, ctypes.byref(text)) == 0 and text.value == name.encode():
            return code
    raise ValueError("no CUDA error named %r" % name)


def inject_failure(call, count=1, error=0, pid=0):
    """Makes the next `count` calls of `call` ("cuMemCreate", "cuMemcpy", ...,
    see gpusim.h) by process `pid` (0: any) fail with `error` (a CUresult
    number or a CUDA_ERROR_... name; 0: out of memory for the calls that
    allocate, else CUDA_ERROR_UNKNOWN) without doing anything; count 0
    disarms.  Needs no init(), but the simulated machine must exist (some
    process of GPUSHARE_SIM_NAME called cuInit).  ValueError if refused."""
    if isinstance(error, str):
        error = _error_code(error)
    fn = _load().gpusim_inject_failure
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    if fn(call.encode(), count, error, pid) != 0:
        raise ValueError("cannot inject failures of %r (unknown call, or no simulated machine)"
                         % call)


# ---- command line -----------------------------------------------------------

def _parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().replace("IB", "").rstrip("B")
    suffix = t[-1:] if t[-1:] in "KMGT" else ""
    number = t[:-1] if suffix else t
    if not number.isdigit():
        raise ValueError("not a byte count: %r" % text)
    return int(number) * units[suffix]


def _main(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="gpusim.py", description="drive the simulated CUDA driver")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("work", help="run kernels and synchronize")
    w.add_argument("--kernels", type=int, default=1)
    w.add_argument("--us", type=int, default=None, help="microseconds per kernel")
    w.add_argument("--name", default="kernel")
    w.add_argument("--device", type=int, default=0)
    a = sub.add_parser("alloc", help="allocate device memory")
    a.add_argument("bytes", type=_parse_size)
    a.add_argument("--hold", action="store_true", help="keep it until stdin is closed")
    a.add_argument("--device", type=int, default=0)
    i = sub.add_parser("info", help="print the simulated machine")
    i.add_argument("--device", type=int, default=0)
    j = sub.add_parser("inject", help="make the next calls of a CUDA call fail")
    j.add_argument("call", help="cuMemCreate, cuMemcpy, ... (see gpusim.h)")
    j.add_argument("count", type=int, nargs="?", default=1)
    j.add_argument("--error", default="0", help="CUDA_ERROR_... name or number")
    j.add_argument("--pid", type=int, default=0, help="only this process' calls")
    sub.add_parser("host", help="print the simulated host's memory (GPUSHARE_SIM_HOST_MEMORY)")
    args = ap.parse_args(argv)
    if args.cmd == "host":
        try:
            print(json.dumps(host_stats()))
        except (ValueError, OSError) as e:
            print("gpusim.py: %s" % e, file=sys.stderr)
            return 1
        return 0
    if args.cmd == "inject":
        try:
            inject_failure(args.call, args.count,
                           int(args.error) if args.error.isdigit() else args.error, args.pid)
        except (ValueError, OSError) as e:
            print("gpusim.py: %s" % e, file=sys.stderr)
            return 1
        return 0
    try:
        init(args.device)
        if args.cmd == "work":
            before = process_busy_ns()
            for _ in range(args.kernels):
                launch(us=args.us, name=args.name)
            synchronize()
            print(json.dumps({"kernels": args.kernels,
                              "process_busy_ns": process_busy_ns() - before,
                              "device_busy_ns": busy_ns()}))
        elif args.cmd == "alloc":
            p = alloc(args.bytes)
            print(json.dumps({"ptr": p, "bytes": args.bytes}), flush=True)
            if args.hold:
                sys.stdin.read()
            free(p)
        else:
            fr, total = mem_info()
            sim = is_simulated()
            print(json.dumps({"simulated": sim, "free": fr, "total": total,
                              "busy_ns": busy_ns() if sim else None,
                              "host": host_stats() if sim else None}))
    except (CudaError, RuntimeError, OSError) as e:
        print("gpusim.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
