/*
 * sim_graph.c - stream capture and CUDA graphs.  While a stream captures,
 * what would be queued on it is appended to a graph instead (streams that
 * wait on an event recorded in the capture join it); a graph is a linear
 * list of recorded operations, which is a valid (if conservative) order for
 * any captured dependency graph.  Instantiation copies the list; a launch
 * runs it on the launch stream as one operation (each kernel keeping its
 * recorded duration and taking engine slots like any other kernel), and
 * the log gets a "graph" line besides the lines of its operations.
 */
#include "sim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next_capture_id = 1;

CUresult sim_graph_append_locked(struct sim_graph *g, struct sim_op *op)
{
    if (g->n == g->cap) {
        size_t ncap = g->cap ? g->cap * 2 : 16;
        struct sim_op **nv = realloc(g->nodes, ncap * sizeof *nv);
        if (!nv) {
            sim_op_free_locked(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        g->nodes = nv;
        g->cap = ncap;
    }
    op->next = NULL;
    g->nodes[g->n++] = op;
    return CUDA_SUCCESS;
}

static void graph_free_locked(struct sim_graph *g)
{
    for (size_t i = 0; i < g->n; i++)
        sim_op_free_locked(g->nodes[i]);
    free(g->nodes);
    free(g);
}

struct sim_capture *sim_capture_find_locked(uint64_t id)
{
    for (struct sim_capture *c = sim_g.captures; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

void sim_capture_invalidate_locked(struct sim_capture *c)
{
    c->invalidated = 1;
}

void sim_graph_exec_unref_locked(struct sim_graph_exec *e)
{
    if (--e->refs > 0)
        return;
    for (size_t i = 0; i < e->n; i++)
        sim_op_free_locked(e->nodes[i]);
    free(e->nodes);
    free(e);
}

void sim_graph_run(struct sim_stream *s, struct sim_graph_exec *e)
{
    uint64_t t0 = sim_now_ns();
    for (size_t i = 0; i < e->n; i++)
        sim_exec_op(s, e->nodes[i]);
    char name[64];
    snprintf(name, sizeof name, "graph of %zu nodes", e->n);
    sim_log_op(s->ctx->dev, "graph", name, s, t0, sim_now_ns(), -1);
}

/* ---- capture ---------------------------------------------------------- */

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, int pt)
{
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    if (rc == CUDA_SUCCESS && s->is_default)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* not on the default stream */
    else if (rc == CUDA_SUCCESS && s->capture)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    if (rc == CUDA_SUCCESS) {
        struct sim_capture *c = calloc(1, sizeof *c);
        struct sim_graph *g = calloc(1, sizeof *g);
        if (!c || !g) {
            free(c);
            free(g);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            c->id = next_capture_id++;
            c->mode = mode;
            c->origin = s;
            c->graph = g;
            c->next = sim_g.captures;
            sim_g.captures = c;
            s->capture = c;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    SIM_GATED(begin_capture(hStream, mode, 0));
}

SIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    SIM_GATED(begin_capture(hStream, mode, 1));
}

SIM_EXPORT CUresult cuStreamBeginCapture(CUstream hStream)
{
    SIM_GATED(begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, 0));
}

SIM_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    SIM_GATED(begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, 1));
}

static void detach_capture_locked(struct sim_capture *c)
{
    for (struct sim_ctx *x = sim_g.ctxs; x; x = x->next)
        for (struct sim_stream *t = x->streams; t; t = t->next)
            if (t->capture == c)
                t->capture = NULL;
    if (c->origin)
        c->origin->capture = NULL;
    for (struct sim_capture **pp = &sim_g.captures; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
}

void sim_capture_abort_locked(struct sim_capture *c)
{
    detach_capture_locked(c);
    graph_free_locked(c->graph);
    free(c);
}

static CUresult end_capture(CUstream h, CUgraph *phGraph, int pt)
{
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    struct sim_capture *c = rc == CUDA_SUCCESS ? s->capture : NULL;
    if (rc == CUDA_SUCCESS && !c)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else if (rc == CUDA_SUCCESS && c->origin != s)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    if (rc == CUDA_SUCCESS) {
        detach_capture_locked(c);
        *phGraph = NULL;
        if (c->invalidated) {
            graph_free_locked(c->graph);
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else if (sim_hmap_put(&sim_g.handles, (uintptr_t)c->graph, SIM_H_GRAPH, c->graph) != 0) {
            graph_free_locked(c->graph);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            *phGraph = (CUgraph)c->graph;
        }
        free(c);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    SIM_GATED(end_capture(hStream, phGraph, 0));
}

SIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    SIM_GATED(end_capture(hStream, phGraph, 1));
}

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
                             CUgraph *graph, const CUgraphNode **deps,
                             const CUgraphEdgeData **edges, size_t *ndeps, int pt)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_stream *s;
    CUresult rc = sim_stream_resolve(h, pt, &s);
    if (rc == CUDA_SUCCESS) {
        struct sim_capture *c = s->capture;
        *status = !c               ? CU_STREAM_CAPTURE_STATUS_NONE
                  : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                   : CU_STREAM_CAPTURE_STATUS_ACTIVE;
        if (c && id)
            *id = c->id;
        if (c && graph)
            *graph = (CUgraph)c->graph;
        if (c && deps)
            *deps = NULL;
        if (c && edges)
            *edges = NULL;
        if (c && ndeps)
            *ndeps = 0;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    SIM_GATED(capture_info(hStream, captureStatus, NULL, NULL, NULL, NULL, NULL, 0));
}

SIM_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    SIM_GATED(capture_info(hStream, captureStatus, NULL, NULL, NULL, NULL, NULL, 1));
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo(CUstream hStream,
                                           CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out)
{
    SIM_GATED(capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL, 0));
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out)
{
    SIM_GATED(capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL, 1));
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream,
                                              CUstreamCaptureStatus *captureStatus_out,
                                              cuuint64_t *id_out, CUgraph *graph_out,
                                              const CUgraphNode **dependencies_out,
                                              size_t *numDependencies_out)
{
    SIM_GATED(capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                           numDependencies_out, 0));
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                                   CUstreamCaptureStatus *captureStatus_out,
                                                   cuuint64_t *id_out, CUgraph *graph_out,
                                                   const CUgraphNode **dependencies_out,
                                                   size_t *numDependencies_out)
{
    SIM_GATED(capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                           numDependencies_out, 1));
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
                                              CUstreamCaptureStatus *captureStatus_out,
                                              cuuint64_t *id_out, CUgraph *graph_out,
                                              const CUgraphNode **dependencies_out,
                                              const CUgraphEdgeData **edgeData_out,
                                              size_t *numDependencies_out)
{
    SIM_GATED(capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                           edgeData_out, numDependencies_out, 0));
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                   CUstreamCaptureStatus *captureStatus_out,
                                                   cuuint64_t *id_out, CUgraph *graph_out,
                                                   const CUgraphNode **dependencies_out,
                                                   const CUgraphEdgeData **edgeData_out,
                                                   size_t *numDependencies_out)
{
    SIM_GATED(capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                           edgeData_out, numDependencies_out, 1));
}

/* ---- graphs ----------------------------------------------------------- */

static CUresult graph_create(CUgraph *ph, unsigned int flags)
{
    if (!ph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_graph *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_lock();
    int bad = sim_hmap_put(&sim_g.handles, (uintptr_t)g, SIM_H_GRAPH, g);
    sim_unlock();
    if (bad) {
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ph = (CUgraph)g;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    SIM_GATED(graph_create(phGraph, flags));
}

static CUresult graph_destroy(CUgraph hg)
{
    sim_lock();
    struct sim_graph *g = sim_hmap_del(&sim_g.handles, (uintptr_t)hg, SIM_H_GRAPH);
    if (g)
        graph_free_locked(g);
    sim_unlock();
    return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    SIM_GATED(graph_destroy(hGraph));
}

static CUresult graph_nodes(CUgraph hg, CUgraphNode *nodes, size_t *num)
{
    if (!num)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_graph *g = sim_hmap_get(&sim_g.handles, (uintptr_t)hg, SIM_H_GRAPH);
    if (g) {
        if (nodes)
            for (size_t i = 0; i < *num && i < g->n; i++)
                nodes[i] = (CUgraphNode)g->nodes[i];
        *num = g->n;
    }
    sim_unlock();
    return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    SIM_GATED(graph_nodes(hGraph, nodes, numNodes));
}

static CUresult instantiate(CUgraphExec *ph, CUgraph hg)
{
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    struct sim_graph *g = sim_hmap_get(&sim_g.handles, (uintptr_t)hg, SIM_H_GRAPH);
    struct sim_graph_exec *e = g ? calloc(1, sizeof *e) : NULL;
    if (!g) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (!e || !(e->nodes = calloc(g->n + 1, sizeof *e->nodes))) {
        free(e);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        e->refs = 1;
        for (size_t i = 0; i < g->n && rc == CUDA_SUCCESS; i++) {
            e->nodes[i] = sim_op_clone_locked(g->nodes[i]);
            if (e->nodes[i])
                e->n++;
            else
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (rc == CUDA_SUCCESS && sim_hmap_put(&sim_g.handles, (uintptr_t)e, SIM_H_EXEC, e) != 0)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (rc != CUDA_SUCCESS)
            sim_graph_exec_unref_locked(e);
        else
            *ph = (CUgraphExec)e;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                unsigned long long flags)
{
    SIM_GATED(instantiate(phGraphExec, hGraph));
}

static CUresult instantiate_legacy(CUgraphExec *ph, CUgraph hg, CUgraphNode *err, char *log,
                                   size_t logsize)
{
    if (err)
        *err = NULL;
    if (log && logsize)
        log[0] = 0;
    return instantiate(ph, hg);
}

SIM_EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                       CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
    SIM_GATED(instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize));
}

SIM_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                          CUgraphNode *phErrorNode, char *logBuffer,
                                          size_t bufferSize)
{
    SIM_GATED(instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize));
}

static CUresult instantiate_params(CUgraphExec *ph, CUgraph hg, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = instantiate(ph, hg);
    p->hErrNode_out = NULL;
    p->result_out =
        rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return rc;
}

SIM_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                 CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    SIM_GATED(instantiate_params(phGraphExec, hGraph, instantiateParams));
}

SIM_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    SIM_GATED(instantiate_params(phGraphExec, hGraph, instantiateParams));
}

static CUresult exec_destroy(CUgraphExec he)
{
    sim_lock();
    struct sim_graph_exec *e = sim_hmap_del(&sim_g.handles, (uintptr_t)he, SIM_H_EXEC);
    if (e)
        sim_graph_exec_unref_locked(e); /* a queued launch keeps its own reference */
    sim_unlock();
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    SIM_GATED(exec_destroy(hGraphExec));
}

static CUresult graph_launch(CUgraphExec he, CUstream h, int pt, int upload_only)
{
    sim_lock();
    struct sim_graph_exec *e = sim_hmap_get(&sim_g.handles, (uintptr_t)he, SIM_H_EXEC);
    struct sim_stream *s;
    CUresult rc = e ? sim_stream_resolve(h, pt, &s) : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && !upload_only) {
        if (s->capture) {
            /* launching into a capture records the graph's operations */
            for (size_t i = 0; i < e->n && rc == CUDA_SUCCESS; i++) {
                struct sim_op *op = sim_op_clone_locked(e->nodes[i]);
                rc = op ? sim_submit_locked(s, op) : CUDA_ERROR_OUT_OF_MEMORY;
            }
        } else {
            struct sim_op *op = sim_op_new(SIM_OP_GRAPH);
            if (!op) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                op->u.graph.exec = e;
                e->refs++;
                rc = sim_submit_locked(s, op);
            }
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_GATED(graph_launch(hGraphExec, hStream, 0, 0));
}

SIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_GATED(graph_launch(hGraphExec, hStream, 1, 0));
}

SIM_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_GATED(graph_launch(hGraphExec, hStream, 0, 1));
}

SIM_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_GATED(graph_launch(hGraphExec, hStream, 1, 1));
}
