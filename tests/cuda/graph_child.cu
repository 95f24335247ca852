/*
 * Child graph nodes, event record and wait nodes, instantiation with
 * parameters and user objects through the runtime (no kernels: memset and
 * copy nodes, checked against values computed here):
 *   - a graph holding a child graph (a memset and a copy), the node's own
 *     graph read back;
 *   - two streams' graphs ordered by an event record node in one and an
 *     event wait node in the other;
 *   - cudaGraphInstantiateWithParams with an upload stream;
 *   - a user object moved to a graph whose destructor runs exactly once,
 *     after the exec made from it is destroyed and its work done.
 */
#define TEST_NAME "graph_child"
#include <string.h>
#include <time.h>

#include "vcu_test.h"

#define N 1024

static volatile int dtor_runs;

static void on_destroy(void *p)
{
    EXPECT(p == (void *)&dtor_runs, "destructor argument %p", p);
    __atomic_add_fetch(&dtor_runs, 1, __ATOMIC_SEQ_CST);
}

/* The destructor runs on a thread of the library's: up to 10 s for it to
 * reach want, then a while to see it stays there. */
static void wait_runs(int want, const char *what)
{
    struct timespec ts = { 0, 10 * 1000 * 1000 };
    int i;

    for (i = 0; i < 1000 && __atomic_load_n(&dtor_runs, __ATOMIC_SEQ_CST) < want; i++)
        nanosleep(&ts, NULL);
    for (i = 0; i < 10; i++)
        nanosleep(&ts, NULL);
    EXPECT(dtor_runs == want, "%s: destructor ran %d times, want %d", what, dtor_runs, want);
}

static void set_params(cudaMemsetParams *m, unsigned int *dst, unsigned int v)
{
    memset(m, 0, sizeof(*m));
    m->dst = dst;
    m->value = v;
    m->elementSize = 4;
    m->width = N;
    m->height = 1;
}

static void check(const char *what, const unsigned int *d, unsigned int v)
{
    static unsigned int h[N];

    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        EXPECT(h[i] == v, "%s: [%d] = %u, want %u", what, i, h[i], v);
}

int main(void)
{
    unsigned int *a, *b, *c, *p, *q;
    cudaStream_t s1, s2;
    cudaEvent_t ev, got;
    cudaGraph_t child, parent, emb, g1, g2, gu;
    cudaGraphExec_t x, x1, x2, xu;
    cudaGraphNode_t n, nc, nr, nw;
    cudaGraphNodeType t;
    cudaMemsetParams mp;
    cudaGraphInstantiateParams ip;
    cudaUserObject_t uo;
    size_t cnt;

    CK(cudaMalloc(&a, N * 4));
    CK(cudaMalloc(&b, N * 4));
    CK(cudaMalloc(&c, N * 4));
    CK(cudaMalloc(&p, N * 4));
    CK(cudaMalloc(&q, N * 4));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));

    /* child: a = 7, then b = a.  parent: child, then c = 9. */
    CK(cudaGraphCreate(&child, 0));
    set_params(&mp, a, 7);
    CK(cudaGraphAddMemsetNode(&n, child, NULL, 0, &mp));
    CK(cudaGraphAddMemcpyNode1D(&n, child, &n, 1, b, a, N * 4, cudaMemcpyDeviceToDevice));
    CK(cudaGraphCreate(&parent, 0));
    CK(cudaGraphAddChildGraphNode(&nc, parent, NULL, 0, child));
    set_params(&mp, c, 9);
    CK(cudaGraphAddMemsetNode(&n, parent, &nc, 1, &mp));
    CK(cudaGraphNodeGetType(nc, &t));
    EXPECT(t == cudaGraphNodeTypeGraph, "child node type %d", (int)t);
    CK(cudaGraphChildGraphNodeGetGraph(nc, &emb));
    cnt = 0;
    CK(cudaGraphGetNodes(emb, NULL, &cnt));
    EXPECT(cnt == 2, "the child node's graph has %zu nodes, want 2", cnt);
    CK(cudaGraphInstantiate(&x, parent, 0));
    CK(cudaGraphLaunch(x, s1));
    CK(cudaStreamSynchronize(s1));
    check("child b", b, 7);
    check("parent c", c, 9);
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(parent));
    CK(cudaGraphDestroy(child));
    printf("child graph: ok\n");

    /* g1 on s1: p = 5, then record ev.  g2 on s2: wait for ev, then q = p. */
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CK(cudaGraphCreate(&g1, 0));
    set_params(&mp, p, 5);
    CK(cudaGraphAddMemsetNode(&n, g1, NULL, 0, &mp));
    CK(cudaGraphAddEventRecordNode(&nr, g1, &n, 1, ev));
    CK(cudaGraphCreate(&g2, 0));
    CK(cudaGraphAddEventWaitNode(&nw, g2, NULL, 0, ev));
    CK(cudaGraphAddMemcpyNode1D(&n, g2, &nw, 1, q, p, N * 4, cudaMemcpyDeviceToDevice));
    CK(cudaGraphEventRecordNodeGetEvent(nr, &got));
    EXPECT(got == ev, "record node's event");
    CK(cudaGraphEventWaitNodeGetEvent(nw, &got));
    EXPECT(got == ev, "wait node's event");
    CK(cudaGraphInstantiate(&x1, g1, 0));
    CK(cudaGraphInstantiate(&x2, g2, 0));
    CK(cudaMemset(p, 0, N * 4));
    CK(cudaMemset(q, 0, N * 4));
    CK(cudaDeviceSynchronize());
    CK(cudaGraphLaunch(x1, s1));
    CK(cudaGraphLaunch(x2, s2));
    CK(cudaStreamSynchronize(s2));
    check("ordered q", q, 5);
    CK(cudaStreamSynchronize(s1));
    CK(cudaEventQuery(ev));
    CK(cudaGraphExecDestroy(x1));
    CK(cudaGraphExecDestroy(x2));
    CK(cudaGraphDestroy(g1));
    CK(cudaGraphDestroy(g2));
    printf("event nodes: ok\n");

    /* Instantiated with an upload; a user object moved to the graph. */
    CK(cudaGraphCreate(&gu, 0));
    set_params(&mp, a, 11);
    CK(cudaGraphAddMemsetNode(&n, gu, NULL, 0, &mp));
    CK(cudaUserObjectCreate(&uo, (void *)&dtor_runs, on_destroy, 1,
                            cudaUserObjectNoDestructorSync));
    CK(cudaGraphRetainUserObject(gu, uo, 1, cudaGraphUserObjectMove));
    memset(&ip, 0, sizeof(ip));
    ip.flags = cudaGraphInstantiateFlagUpload;
    ip.uploadStream = s1;
    CK(cudaGraphInstantiateWithParams(&xu, gu, &ip));
    EXPECT(ip.result_out == cudaGraphInstantiateSuccess, "instantiate result %d",
           (int)ip.result_out);
    CK(cudaGraphDestroy(gu));
    wait_runs(0, "held by the exec");
    CK(cudaGraphLaunch(xu, s1));
    CK(cudaGraphExecDestroy(xu));
    CK(cudaStreamSynchronize(s1));
    check("uploaded a", a, 11);
    wait_runs(1, "exec destroyed");
    printf("user object: ok\n");

    CK(cudaEventDestroy(ev));
    CK(cudaStreamDestroy(s1));
    CK(cudaStreamDestroy(s2));
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(c));
    CK(cudaFree(p));
    CK(cudaFree(q));
    vcu_test_pass();
    return 0;
}
