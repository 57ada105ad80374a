"""The interposition table (libhook/hook_table.def) against the toolkit's
cuda.h and cudaTypedefs.h, and the hook's exports.

Fails when the headers name an API that submits GPU work, allocates or
frees device memory, synchronises, resolves entry points, or creates or
destroys contexts and streams (or begins/ends captures), but that is neither
interposed nor listed as deliberately passed through; when an interposed
API misses one of its ABI variants (_v2, _ptsz, _ptds); and when the
library exports anything but the table, dlsym and gpushare_hook_*.  A
failure prints the HOOK_FN line to add, with the prototype from cuda.h.
"""
import os
import re
import subprocess

import pytest

SRCDIR = os.environ.get("GS_SRCDIR") or os.path.abspath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILDDIR = os.environ.get("GS_BUILDDIR") or SRCDIR
CUDA_DIR = os.environ.get("CUDA_DIR") or "/usr/local/cuda"
TABLE = os.path.join(SRCDIR, "libhook", "hook_table.def")
HOOK = os.path.join(BUILDDIR, "libhook", ".libs", "libgpushare-hook.so")

# What must be covered, by the class it must have when interposed.
MUST = [
    ("SUBMIT", r"^cu(Launch|GraphLaunch|GraphUpload|Memcpy|Memset|StreamAddCallback|"
               r"StreamBatchMemOp|StreamWaitValue|StreamWriteValue|MemPrefetch|MemDiscard|"
               r"MemBatchDecompress|SignalExternalSemaphoresAsync|WaitExternalSemaphoresAsync|"
               r"MemMapArrayAsync|EventRecord|StreamWaitEvent|GraphicsMapResources|"
               r"GraphicsUnmapResources|StreamAttachMemAsync|GreenCtxRecordEvent|"
               r"GreenCtxWaitEvent|GraphExecUpdate|GraphInstantiate)"),
    ("ALLOC", r"^cu(MemAlloc|MemCreate$|MemMap$|MemPool(Create|ImportPointer)$|MemHostAlloc|"
              r"MemHostRegister|Array3?DCreate|ArrayCreate|MipmappedArrayCreate$|"
              r"IpcOpenMemHandle|MemImportFromShareableHandle$|MemAddressReserve$)"),
    ("FREE", r"^cu(MemFree|MemRelease$|MemUnmap$|MemPool(Destroy|TrimTo)$|MemHostUnregister$|"
             r"ArrayDestroy$|MipmappedArrayDestroy$|IpcCloseMemHandle$|MemAddressFree$)"),
    ("SYNC", r"^cu(CtxSynchronize|StreamSynchronize|EventSynchronize|StreamQuery|EventQuery)"),
    ("LOAD", r"^cu(ModuleLoad|LibraryLoad)"),
    ("RESOLVE", r"^cuGetProcAddress"),
    ("OTHER", r"^cu(StreamBeginCapture|StreamEndCapture|CtxCreate|CtxDestroy|"
              r"DevicePrimaryCtx(Retain|Release|Reset)|StreamDestroy|CtxSetCurrent$|"
              r"CtxPushCurrent|CtxPopCurrent|GreenCtx(Create|Destroy)$|CtxFromGreenCtx$)"),
]
# Host memory is allocated by these ALLOC-looking names; they are passed
# through, and MUST lists them only so that the pass list has to say why.


def base(name):
    b = re.sub(r"_(ptsz|ptds)$", "", name)
    return re.sub(r"_v\d+$", "", b)


def required_class(name):
    for cls, pat in MUST:
        if re.match(pat, name):
            return cls
    return None


def read_cuda_h():
    """Every ABI name cuda.h declares, with its parameter list: the header as
    the hook's own build sees it (__CUDA_API_VERSION_INTERNAL undoes the
    #define renaming and declares every _v2/_ptsz/_ptds version), run
    through the C preprocessor."""
    cc = os.environ.get("CC") or "cc"
    src = "#define __CUDA_API_VERSION_INTERNAL 1\n#include <cuda.h>\n"
    out = subprocess.run(cc.split() + ["-E", "-P", "-I" + os.path.join(CUDA_DIR, "include"),
                                       "-x", "c", "-"],
                         input=src, capture_output=True, text=True, check=True).stdout
    flat = re.sub(r"\s+", " ", out)
    decls = {}
    for name, params in re.findall(r"CUresult (cu\w+)\s*\(([^;{]*?)\)\s*;", flat):
        decls.setdefault(name, params.strip())
    # Names the renaming macros mention (cuX -> cuX_v2, __CUDA_API_PTDS(cuX_v2)),
    # in case a header version declares them only that way.
    text = open(os.path.join(CUDA_DIR, "include", "cuda.h")).read()
    for target in re.findall(r"#define\s+cu\w+\s+(cu\w+)\s*$", text, re.M):
        decls.setdefault(target, "")
    for kind, target in re.findall(r"__CUDA_API_PT(DS|SZ)\((cu\w+)\)", text):
        decls.setdefault(target, "")
        decls.setdefault(target + ("_ptds" if kind == "DS" else "_ptsz"), "")
    # header-only helpers (cuGetProcAddress_v2_ptsz) are not ABI names
    for name in re.findall(r"static\s+inline\s+CUresult\s+(cu\w+)", text):
        decls.pop(name, None)
    return decls


def read_pfn():
    text = open(os.path.join(CUDA_DIR, "include", "cudaTypedefs.h")).read()
    return set(re.findall(r"\bPFN_(cu\w+?)_v\d+(?:_(?:ptsz|ptds))?\b", text)), \
        set(re.findall(r"\bPFN_(cu\w+?)_v\d+_(?:ptsz|ptds)\b", text))


def read_table():
    text = open(TABLE).read()
    rows = {}
    for cls, abi, b, pt in re.findall(r"^HOOK_FN\((\w+), (\w+), (\w+), (PT|LG),", text, re.M):
        rows[abi] = (cls, b, pt)
    passed = dict(re.findall(r'^HOOK_PASS\((\w+), "([^"]+)"\)', text, re.M))
    return rows, passed


DECLS = read_cuda_h()
ROWS, PASSED = read_table()


def suggestion(name):
    params = DECLS.get(name, "...")
    args = ", ".join(re.findall(r"(\w+)\s*(?:\[\s*\d*\s*\])?\s*(?:,|$)", params + ",")) \
        if params not in ("void", "") else ""
    pt = "PT" if re.search(r"_(ptsz|ptds)$", name) else "LG"
    stream = "hStream" if "hStream" in params else "NULL"
    return "HOOK_FN(%s, %s, %s, %s, %s,\n        (%s),\n        (%s))" % (
        required_class(name), name, base(name), pt, stream, params, args)


def test_headers_parsed():
    assert len(DECLS) > 500, "could not read %s/include/cuda.h" % CUDA_DIR
    assert len(ROWS) > 200


def test_every_relevant_api_is_interposed_or_passed_with_a_reason():
    missing = [n for n in sorted(DECLS)
               if required_class(n) and n not in ROWS and n not in PASSED]
    assert not missing, ("cuda.h names APIs the hook neither interposes nor passes through "
                         "deliberately; add to libhook/hook_table.def:\n\n" +
                         "\n".join(suggestion(n) for n in missing) +
                         "\n\nor HOOK_PASS(name, \"why\") at its end")


def test_classes_match():
    wrong = ["%s is %s, should be %s" % (n, ROWS[n][0], required_class(n))
             for n in ROWS if required_class(n) and ROWS[n][0] != required_class(n)]
    assert not wrong, "\n".join(wrong)


def test_every_abi_variant_of_an_interposed_api():
    bases = {b for (_, b, _) in ROWS.values()}
    missing = [n for n in sorted(DECLS)
               if base(n) in bases and n not in ROWS and n not in PASSED
               and required_class(n)]
    assert not missing, ("interposed APIs miss ABI variants:\n\n" +
                         "\n".join(suggestion(n) for n in missing))


def test_per_thread_variants_named_by_cudatypedefs():
    pfn_bases, pfn_pt = read_pfn()
    interposed = {}
    for abi, (cls, b, pt) in ROWS.items():
        interposed.setdefault(b, set()).add(pt)
    lacking = sorted(b for b in pfn_pt if b in interposed and "PT" not in interposed[b])
    assert not lacking, "cudaTypedefs.h has per-thread variants the table lacks: %s" % lacking
    unknown = sorted(b for b in interposed if b not in pfn_bases)
    assert not unknown, "table base names cudaTypedefs.h does not know: %s" % unknown


def test_table_names_exist_and_pt_flags_match():
    for abi, (cls, b, pt) in ROWS.items():
        assert abi in DECLS, "%s is not declared by cuda.h" % abi
        assert base(abi) == b, "%s: base %s, expected %s" % (abi, b, base(abi))
        assert (pt == "PT") == bool(re.search(r"_(ptsz|ptds)$", abi)), abi


def test_pass_list_is_honest():
    both = sorted(set(PASSED) & set(ROWS))
    assert not both, "both interposed and passed through: %s" % both
    unknown = sorted(n for n in PASSED if n not in DECLS)
    assert not unknown, "passed-through names cuda.h does not declare: %s" % unknown
    needless = sorted(n for n in PASSED if not required_class(n))
    assert not needless, "passed-through names no rule asks about: %s" % needless


def test_exports():
    if not os.path.exists(HOOK):
        pytest.skip("%s is not built" % HOOK)
    out = subprocess.run(["nm", "-D", "--defined-only", HOOK], capture_output=True, text=True,
                         check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    # sanitizer builds add their own
    exported = {n for n in exported if not n.startswith(("__odr_asan", "__asan", "__ubsan"))}
    expected = set(ROWS) | {"dlsym"}
    extra = sorted(n for n in exported - expected if not n.startswith("gpushare_hook_"))
    assert not extra, "exported but not in the table: %s" % extra
    absent = sorted(expected - exported)
    assert not absent, "in the table but not exported: %s" % absent
    assert "gpushare_hook_version" in exported
