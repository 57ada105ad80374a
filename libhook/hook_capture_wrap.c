/*
 * hook_capture_wrap.c - the wrappers of every BeginCapture/EndCapture
 * variant: each capture is counted from before the real BeginCapture to
 * after the real EndCapture (hook_capture.c says why).
 */
#include "hook_capture.h"
#include "hook_wrap.h"

#define CAPTURE_BEGIN(abi, pt, stream, args)                                                       \
    HOOK_WRAP_ENTER(abi, args);                                                                    \
    struct hook_capture *c = hook_capture_begin(t_, hook_cuda_norm_stream(stream, pt));            \
    CUresult r = real_ args;                                                                       \
    hook_capture_begun(t_, c, r);                                                                  \
    HOOK_WRAP_LEAVE(r)

#define CAPTURE_END(abi, pt, stream, args)                                                         \
    HOOK_WRAP_ENTER(abi, args);                                                                    \
    CUresult r = real_ args;                                                                       \
    hook_capture_end(t_, hook_cuda_norm_stream(stream, pt));                                       \
    HOOK_WRAP_LEAVE(r)

HOOK_EXPORT CUresult cuStreamBeginCapture(CUstream hStream)
{
    CAPTURE_BEGIN(cuStreamBeginCapture, 0, hStream, (hStream));
}

HOOK_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    CAPTURE_BEGIN(cuStreamBeginCapture_ptsz, 1, hStream, (hStream));
}

HOOK_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    CAPTURE_BEGIN(cuStreamBeginCapture_v2, 0, hStream, (hStream, mode));
}

HOOK_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    CAPTURE_BEGIN(cuStreamBeginCapture_v2_ptsz, 1, hStream, (hStream, mode));
}

HOOK_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                 const CUgraphNode *dependencies,
                                                 const CUgraphEdgeData *dependencyData,
                                                 size_t numDependencies, CUstreamCaptureMode mode)
{
    CAPTURE_BEGIN(cuStreamBeginCaptureToGraph, 0, hStream,
                  (hStream, hGraph, dependencies, dependencyData, numDependencies, mode));
}

HOOK_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                      const CUgraphNode *dependencies,
                                                      const CUgraphEdgeData *dependencyData,
                                                      size_t numDependencies,
                                                      CUstreamCaptureMode mode)
{
    CAPTURE_BEGIN(cuStreamBeginCaptureToGraph_ptsz, 1, hStream,
                  (hStream, hGraph, dependencies, dependencyData, numDependencies, mode));
}

HOOK_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    CAPTURE_END(cuStreamEndCapture, 0, hStream, (hStream, phGraph));
}

HOOK_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    CAPTURE_END(cuStreamEndCapture_ptsz, 1, hStream, (hStream, phGraph));
}
