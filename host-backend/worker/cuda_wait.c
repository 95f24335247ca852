/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Waits for GPU work, orphaned streams, a context's end, the session's
 * end and fences, and the gate of host callbacks.
 */
#include "cuda_int.h"

/* ---- waits -------------------------------------------------------------- */


/* A pool event of device d, whose context is current. */
CUresult vcu__ev_get(vcu__cuda_sess_t *cs, uint32_t d, CUevent *out)
{
    vcu__evpool_t *p = &cs->pool[d];

    if (p->n > 0) {
        *out = p->ev[--p->n];
        return CUDA_SUCCESS;
    }
    return VCU__CU(cs->cu, cuEventCreate, out, CU_EVENT_DISABLE_TIMING);
}

/* Back to the pool; its context is alive (a record may still be pending:
 * recording it again is allowed). */
void vcu__ev_put(vcu__cuda_sess_t *cs, uint32_t d, CUevent ev)
{
    vcu__evpool_t *p = &cs->pool[d];

    if (p->n == p->cap) {
        unsigned int ncap = p->cap ? p->cap * 2 : 8;
        CUevent *n = realloc(p->ev, ncap * sizeof(*n));

        if (n == NULL) {
            if (vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS)
                VCU__CU(cs->cu, cuEventDestroy, ev);
            return;
        }
        p->ev = n;
        p->cap = ncap;
    }
    p->ev[p->n++] = ev;
}

vcu__cuda_wait_t *vcu__wait_new(vcu__cuda_sess_t *cs)
{
    vcu__cuda_wait_t *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return NULL;
    w->ev = w->ev1;
    w->capev = sizeof(w->ev1) / sizeof(w->ev1[0]);
    w->next = cs->waits;
    if (w->next != NULL)
        w->next->pprev = &w->next;
    w->pprev = &cs->waits;
    cs->waits = w;
    return w;
}

/* Records a pool event of device d (current) on st for w to wait on. */
CUresult vcu__wait_record(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w, uint32_t d, CUstream st)
{
    vcu__cuda_t *cu = cs->cu;
    CUevent ev;
    CUresult r;

    if (cu->fn.cuEventQuery == NULL || cu->fn.cuEventRecordWithFlags == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (w->nev == w->capev) {
        unsigned int ncap = w->capev * 2;
        vcu__wev_t *n;

        /* One per stream of a context: counted, a guest may have many. */
        if (vcu__mem_take(cs, ncap * sizeof(*n)) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        n = malloc(ncap * sizeof(*n));
        if (n == NULL) {
            vcu__mem_give(cs, ncap * sizeof(*n));
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(n, w->ev, w->nev * sizeof(*n));
        if (w->ev != w->ev1) {
            free(w->ev);
            vcu__mem_give(cs, w->capev * sizeof(*n));
        }
        w->ev = n;
        w->capev = ncap;
    }
    r = vcu__ev_get(cs, d, &ev);
    if (r != CUDA_SUCCESS)
        return r;
    r = cu->fn.cuEventRecordWithFlags(ev, st, 0);
    if (r != CUDA_SUCCESS) {
        vcu__ev_put(cs, d, ev);
        return r;
    }
    w->ev[w->nev].ev = ev;
    w->ev[w->nev].dev = d;
    w->nev++;
    return CUDA_SUCCESS;
}

/* w is done with the guest's event: hands it to another wait on it, or
 * destroys it if it was w's own. */
static void vcu__wait_drop_gev(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w)
{
    vcu__cuda_wait_t *o;

    if (w->gev == NULL)
        return;
    if (w->own_gev) {
        for (o = cs->waits; o != NULL; o = o->next)
            if (o != w && o->gev == w->gev)
                break;
        if (o != NULL)
            o->own_gev = 1;
        else if (vcu__cur(cs, cs->ctx[w->gdev]) == CUDA_SUCCESS)
            VCU__CU(cs->cu, cuEventDestroy, w->gev);
    }
    w->gev = NULL;
    w->own_gev = 0;
    cs->ngev--;
}

/* Unlinks and frees w; its pool events go back to the pool. */
void vcu__wait_free(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w)
{
    unsigned int i;

    for (i = 0; i < w->nev; i++)
        vcu__ev_put(cs, w->ev[i].dev, w->ev[i].ev);
    vcu__wait_drop_gev(cs, w);
    *w->pprev = w->next;
    if (w->next != NULL)
        w->next->pprev = w->pprev;
    if (w->ev != w->ev1) {
        free(w->ev);
        vcu__mem_give(cs, w->capev * sizeof(*w->ev));
    }
    free(w->bounce);
    vcu__mem_give(cs, w->bounce_len);
    free(w);
}

/* A pending wait on the guest's event ev, or NULL. */
vcu__cuda_wait_t *vcu__gev_waiter(vcu__cuda_sess_t *cs, CUevent ev)
{
    vcu__cuda_wait_t *w;

    if (cs->ngev == 0)
        return NULL;
    for (w = cs->waits; w != NULL; w = w->next)
        if (w->gev == ev)
            return w;
    return NULL;
}

int vcu__cuda_wait_poll(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w)
{
    vcu__cuda_t *cu = cs->cu;
    uint32_t cur = UINT32_MAX;
    unsigned int i = 0;
    int pending = 0;
    CUresult r;

    while (i < w->nev) {
        vcu__wev_t *e = &w->ev[i];

        if (e->dev != cur) {
            vcu__cur(cs, cs->ctx[e->dev]);
            cur = e->dev;
        }
        r = cu->fn.cuEventQuery(e->ev);
        if (r == CUDA_ERROR_NOT_READY) {
            pending = 1;
            i++;
            continue;
        }
        /* A failure (a sticky fault) is what the blocking call gave. */
        if (r != CUDA_SUCCESS && w->res == CUDA_SUCCESS)
            w->res = r;
        vcu__ev_put(cs, e->dev, e->ev);
        w->ev[i] = w->ev[--w->nev];
    }
    if (w->gev != NULL) {
        if (w->gdev != cur)
            vcu__cur(cs, cs->ctx[w->gdev]);
        r = cu->fn.cuEventQuery(w->gev);
        if (r == CUDA_ERROR_NOT_READY) {
            pending = 1;
        } else {
            if (r != CUDA_SUCCESS && w->res == CUDA_SUCCESS)
                w->res = r;
            vcu__wait_drop_gev(cs, w);
        }
    }
    return !pending;
}

/* Blocks until everything w waits for is done: vcu__cuda_wait_poll()
 * then finds it done.  For printf sessions (see vcu__cuda_exec). */
void vcu__wait_block(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w)
{
    unsigned int i;

    for (i = 0; i < w->nev; i++)
        if (vcu__cur(cs, cs->ctx[w->ev[i].dev]) == CUDA_SUCCESS)
            (void)VCU__CU(cs->cu, cuEventSynchronize, w->ev[i].ev);
    if (w->gev != NULL && vcu__cur(cs, cs->ctx[w->gdev]) == CUDA_SUCCESS)
        (void)VCU__CU(cs->cu, cuEventSynchronize, w->gev);
}

uint32_t vcu__cuda_wait_finish(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w, vcu_request_t *req,
                               size_t *out_len)
{
    size_t len = w->out_len;
    uint32_t status = w->status;
    CUresult res = w->res;

    /* The copy has landed in the staging buffer: now into guest pages. */
    if (w->seg != NULL && w->bounce != NULL && res == CUDA_SUCCESS)
        vcu__scatter(w->seg, w->bounce, w->span);
    if (w->fence || w->async) {
        if (res != CUDA_SUCCESS && cs->deferred == 0)
            cs->deferred = (uint32_t)res;
    } else if (res != CUDA_SUCCESS && req != NULL && len >= sizeof(struct vcu_cu_resp) &&
               req->resp_cap >= sizeof(struct vcu_resp_hdr) + len) {
        struct vcu_cu_resp r;

        memcpy(&r, vcu__resp_payload(req), sizeof(r));
        if (r.result == CUDA_SUCCESS) {
            r.result = (uint32_t)res;
            memcpy(vcu__resp_payload(req), &r, sizeof(r));
        }
    }
    vcu__wait_free(cs, w);
    *out_len = len;
    return status;
}

/* Is st in a stream capture?  An event recorded there would become a
 * graph node: such a stream gets the blocking call (an error at once). */
int vcu__capturing(vcu__cuda_t *cu, CUstream st)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;

    if (cu->fn.cuStreamGetCaptureInfo == NULL ||
        cu->fn.cuStreamGetCaptureInfo(st, &status, NULL, NULL, NULL, NULL, NULL) != CUDA_SUCCESS)
        return 0;
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Destroys the orphaned streams whose work has finished. */
void vcu__orphans_prune(vcu__cuda_sess_t *cs)
{
    vcu__cuda_t *cu = cs->cu;
    vcu__orphan_t **pp = &cs->orphans, *o;

    while ((o = *pp) != NULL) {
        if (vcu__cur(cs, cs->ctx[o->dev]) == CUDA_SUCCESS &&
            cu->fn.cuEventQuery(o->ev) == CUDA_ERROR_NOT_READY) {
            pp = &o->next;
            continue;
        }
        VCU__CU(cu, cuStreamDestroy, o->st);
        vcu__ev_put(cs, o->dev, o->ev);
        *pp = o->next;
        free(o);
        vcu__mem_give(cs, sizeof(*o));
    }
}

/*
 * Records, on device d's context (current), an event behind the work of
 * every stream: the legacy and per-thread ones, the guest's, and the
 * orphans.  -1 where that cannot be done (a capture in progress, no
 * events): the caller synchronizes instead.
 */
int vcu__park_ctx(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w, uint32_t d)
{
    vcu__cuda_t *cu = cs->cu;
    vcu__orphan_t *o;
    uint32_t i;

    if (cu->fn.cuEventQuery == NULL || cu->fn.cuEventRecordWithFlags == NULL)
        return -1;
    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_STREAM && e->dev == d && vcu__capturing(cu, e->u.st))
            return -1;
    }
    if (cs->orphans != NULL) {
        vcu__orphans_prune(cs);
        if (vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS)
            return -1;
    }
    if (vcu__wait_record(cs, w, d, CU_STREAM_LEGACY) != CUDA_SUCCESS ||
        vcu__wait_record(cs, w, d, CU_STREAM_PER_THREAD) != CUDA_SUCCESS)
        return -1;
    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_STREAM && e->dev == d &&
            vcu__wait_record(cs, w, d, e->u.st) != CUDA_SUCCESS)
            return -1;
    }
    for (o = cs->orphans; o != NULL; o = o->next)
        if (o->dev == d && vcu__wait_record(cs, w, d, o->st) != CUDA_SUCCESS)
            return -1;
    return 0;
}

/*
 * Device d's context is idle (synchronized) and about to go: finishes
 * what every wait had on it, destroys its orphans and forgets its pool
 * (the context takes its events along).
 */
static void vcu__waits_ctx_gone(vcu__cuda_sess_t *cs, uint32_t d)
{
    vcu__cuda_t *cu = cs->cu;
    vcu__cuda_wait_t *w;
    vcu__orphan_t **pp = &cs->orphans, *o;
    unsigned int i;
    CUresult r;

    for (w = cs->waits; w != NULL; w = w->next) {
        for (i = 0; i < w->nev;) {
            if (w->ev[i].dev != d) {
                i++;
                continue;
            }
            r = VCU__CU(cu, cuEventQuery, w->ev[i].ev);
            if (r != CUDA_SUCCESS && w->res == CUDA_SUCCESS)
                w->res = r;
            w->ev[i] = w->ev[--w->nev];
        }
        if (w->gev != NULL && w->gdev == d) {
            r = VCU__CU(cu, cuEventQuery, w->gev);
            if (r != CUDA_SUCCESS && w->res == CUDA_SUCCESS)
                w->res = r;
            w->gev = NULL;
            w->own_gev = 0;
            cs->ngev--;
        }
    }
    while ((o = *pp) != NULL) {
        if (o->dev != d) {
            pp = &o->next;
            continue;
        }
        VCU__CU(cu, cuStreamDestroy, o->st);
        *pp = o->next;
        free(o);
        vcu__mem_give(cs, sizeof(*o));
    }
    cs->pool[d].n = 0;
}

/*
 * Brings the charge of the session's pool in slot down to what the pool
 * holds now: its live blocks' charges, or what the driver says it
 * reserves where that is more (freed blocks it keeps until a
 * synchronization, or past the guest's release threshold).  A pool the
 * guest destroyed keeps its charge until its last block is freed, then
 * gives all of it back and frees the slot.
 */
void vcu__pool_settle_slot(vcu__cuda_sess_t *cs, uint32_t slot)
{
    vcu__pool_t *pl = &cs->pools[slot];
    cuuint64_t res = 0;
    uint64_t want = pl->live;

    if (pl->gone) {
        if (pl->live != 0 || pl->exported)
            return;
        want = 0;
    } else if (pl->pool != NULL &&
               VCU__CU(cs->cu, cuMemPoolGetAttribute, pl->pool,
                       CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res) == CUDA_SUCCESS &&
               vcu__grain(res) > want) {
        want = vcu__grain(res);
    }
    if (want < pl->charge) {
        vcu__uncharge(cs, pl->dev, pl->charge - want);
        pl->charge = want;
    }
    if (pl->gone && pl->charge == 0)
        memset(pl, 0, sizeof(*pl));
}

/* Every pool of the session's on device d. */
void vcu__pool_settle(vcu__cuda_sess_t *cs, uint32_t d)
{
    vcu__pool_settle_slot(cs, d);
    for (uint32_t i = VCU_CU_MAX_DEVICES; i < VCU__POOL_SLOTS; i++)
        if ((cs->pools[i].pool != NULL || cs->pools[i].gone) && cs->pools[i].dev == d)
            vcu__pool_settle_slot(cs, i);
}

/* A stream-ordered block of the session's (tracked as v) is freed: its
 * pool's live charge goes down, and the pool is settled. */
void vcu__pool_block_freed(vcu__cuda_sess_t *cs, uint64_t v)
{
    uint32_t slot = VCU__ALLOC_POOL(v);

    if (slot >= VCU__POOL_SLOTS)
        return;
    cs->pools[slot].live -= VCU__ALLOC_CHARGE(v);
    vcu__pool_settle_slot(cs, slot);
}

/* Does entry e go with device d's context: made there, or (a function, a
 * graph, an exec) using a module loaded there? */
static int vcu__on_dev(const vcu__hent_t *e, uint32_t d)
{
    switch (e->type) {
    case VCU__H_FUNCTION:
        return e->dev == d || e->u.fn.mod->dev == d;
    case VCU__H_GRAPH:
        return e->dev == d || vcu__mods_on(e->u.graph.mods, d);
    case VCU__H_GRAPH_EXEC:
        return e->dev == d || vcu__mods_on(e->u.exec.mods, d);
    case VCU__H_POOL:
    case VCU__H_VMM:
        return 0;                   /* the session's, across resets */
    default:
        return e->dev == d;
    }
}

/* Frees the handles that go with device d's context (vcu__on_dev):
 * what uses modules first, since a module's record goes with its last
 * count and a live function's module always has its guest handle. */
static void vcu__ctx_handles_free(vcu__cuda_sess_t *cs, uint32_t d)
{
    vcu__cuda_t *cu = cs->cu;
    uint32_t i;
    int pass;

    for (pass = 0; pass < 2; pass++) {
        for (i = 0; i < cs->tab.cap; i++) {
            vcu__hent_t *e = &cs->tab.ent[i];
            uint64_t h = vcu__htab_handle_at(&cs->tab, i);
            /* Texture and surface objects before the arrays they name. */
            int users = e->type == VCU__H_FUNCTION || e->type == VCU__H_GRAPH ||
                        e->type == VCU__H_GRAPH_EXEC || e->type == VCU__H_TEXOBJ ||
                        e->type == VCU__H_SURFOBJ;

            if (h == 0 || users != (pass == 0) || !vcu__on_dev(e, d))
                continue;
            if (cs->ctx[e->dev] != NULL) {
                if (e->type == VCU__H_GRAPH_EXEC)
                    VCU__CU(cu, cuGraphExecDestroy, e->u.exec.ge);
                else if (e->type == VCU__H_GRAPH && e->u.graph.cap_id == 0 &&
                         e->u.graph.parent == 0)
                    VCU__CU(cu, cuGraphDestroy, e->u.graph.g);
                else
                    vcu__array_obj_destroy(cs, e);
            }
            vcu__del(cs, h);
        }
    }
}

/* Frees the session's allocations on device d (its context current, if
 * any) and gives back their charges. */
static void vcu__ctx_allocs_free(vcu__cuda_sess_t *cs, uint32_t d)
{
    vcu__cuda_t *cu = cs->cu;
    uint32_t i;

    for (i = 0; i < cs->allocs.cap; i++) {
        uint64_t k = cs->allocs.keys[i];

        if (k == 0 || k == VCU__PSET_TOMB || VCU__ALLOC_DEV(cs->allocs.vals[i]) != d)
            continue;
        /* A worker's context may outlive the session's hold on it (the
         * registrations of guest memory hold it too): what is given back
         * here must be gone, not left to the context's end. */
        if (cs->ctx[d] != NULL && (cu->worker || (cs->allocs.vals[i] & VCU__ALLOC_ASYNC)))
            cu->fn.cuMemFree((CUdeviceptr)k);
        if (cs->allocs.vals[i] & VCU__ALLOC_ASYNC)
            cs->pools[VCU__ALLOC_POOL(cs->allocs.vals[i])].live -=
                VCU__ALLOC_CHARGE(cs->allocs.vals[i]);
        else
            vcu__uncharge(cs, d, VCU__ALLOC_CHARGE(cs->allocs.vals[i]));
        vcu__alloc_forget(cs, k);
    }
}

/*
 * Releases everything of device d's context: graphs and execs explicitly
 * (graphs are not owned by the context), and those of other devices too
 * whose kernel nodes use a module of d, as well as functions named
 * through another device (the module goes with the context); the modules
 * once nothing uses them, stream-ordered allocations (pool memory
 * outlives contexts), then the context with all else it holds.
 */
void vcu__ctx_destroy(vcu__cuda_sess_t *cs, uint32_t d)
{
    vcu__cuda_t *cu = cs->cu;
    uint32_t i;

    if (cs->ctx[d] != NULL && vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS)
        cu->fn.cuCtxSynchronize();
    vcu__grun_drop(cs, d);
    if (cs->ctx[d] != NULL)
        vcu__waits_ctx_gone(cs, d);
    vcu__ctx_handles_free(cs, d);
    /* Captures of d's context end with it. */
    for (i = 0; cs->cap_mods != NULL && i < cs->cap_mods->n;) {
        vcu__mod_t *m = cs->cap_mods->m[i];

        if (m->dev != d) {
            i++;
            continue;
        }
        cs->cap_mods->m[i] = cs->cap_mods->m[--cs->cap_mods->n];
        vcu__mod_put(cs, m);
    }
    if (cs->ctx[d] != NULL)
        vcu__cur(cs, cs->ctx[d]);   /* unloads may have switched */
    vcu__ctx_allocs_free(cs, d);
    /* Limits go back to their defaults with the context (a worker's, which
     * may live on, by being set back), the stack's cover of its
     * functions' local memory included. */
    for (i = 0; i < VCU__LIMS; i++) {
        if (cu->worker && cs->ctx[d] != NULL && cs->lim_known[d][i])
            VCU__CU(cu, cuCtxSetLimit, vcu__lim_id[i], cs->lim_base[d][i]);
        vcu__uncharge(cs, d, cs->lim_charge[d][i]);
        cs->lim_charge[d][i] = 0;
        cs->lim_known[d][i] = false;
    }
    cs->lmem[d] = 0;
    if (cs->ctx[d] != NULL) {
        vcu__pool_settle(cs, d);
        if (cs->mstream[d] != NULL)
            (void)VCU__CU(cu, cuStreamDestroy, cs->mstream[d]);
        cs->mstream[d] = NULL;
        vcu__cur(cs, NULL);
        if (cu->worker) {
            vcu__wctx_put(cu, d);
        } else {
            cu->fn.cuCtxDestroy(cs->ctx[d]);
            vcu__ctx_uncharge(cu, cs->aslot, d);
        }
        cs->ctx[d] = NULL;
    }
}

void vcu__cuda_sess_cancel(vcu__cuda_sess_t *cs)
{
    vcu__gate_t *g;
    vcu_request_t *parked;

    if (cs == NULL)
        return;
    g = &cs->gate;
    pthread_mutex_lock(&g->mu);
    g->ending = 1;
    g->nq = 0;                      /* cookies nobody will run now */
    parked = g->parked;
    g->parked = NULL;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (parked != NULL)
        vcu__complete(parked, VCU_S_ECANCELED, 0);
}

void vcu__cuda_sess_free(vcu__cuda_sess_t *cs)
{
    vcu__gate_t *g;
    vcu__cb_t *cb, *n;
    uint32_t d;

    if (cs == NULL)
        return;
    g = &cs->gate;
    /* Release every trampoline and the parked wait before anything waits
     * for the GPU: a blocked trampoline would stall the synchronize below. */
    vcu__cuda_sess_cancel(cs);
    vcu__uobj_sess_end(cs);
    vcu__mig_free(cs);

    /* A pool destroyed with blocks still out is released once they are
     * freed, which the contexts' end does. */
    for (uint32_t i = 0; i < VCU__POOL_SLOTS; i++) {
        vcu__pool_t *pl = &cs->pools[i];

        if (pl->pool == NULL)
            continue;
        if (pl->dev < cs->cu->ndev && cs->ctx[pl->dev] != NULL)
            vcu__cur(cs, cs->ctx[pl->dev]);
        VCU__CU(cs->cu, cuMemPoolDestroy, pl->pool);
        pl->pool = NULL;
    }
    vcu__vmm_free(cs);
    vcu__ipc_sess_end(cs);
    for (d = 0; d < cs->cu->ndev; d++) {
        vcu__ctx_destroy(cs, d);
        for (uint32_t i = 0; i < VCU__POOL_SLOTS; i++) {   /* pools gone with the contexts */
            if (cs->pools[i].dev == d && cs->pools[i].charge != 0) {
                vcu__uncharge(cs, d, cs->pools[i].charge);
                cs->pools[i].charge = 0;
            }
        }
        vcu__uncharge(cs, d, cs->gmem_charge[d]);  /* graph memory too */
        cs->gmem_charge[d] = 0;
    }
    vcu__mods_free(cs, cs->cap_mods);   /* emptied by the contexts' end */
    cs->cap_mods = NULL;
    /* Contexts gone, and the waits' events with them: what is left of a
     * wait is memory; its request the core cancels. */
    while (cs->waits != NULL)
        vcu__wait_free(cs, cs->waits);
    for (d = 0; d < VCU_CU_MAX_DEVICES; d++)
        free(cs->pool[d].ev);

    /* Contexts are gone: CUDA starts no more trampolines; wait for the
     * ones still on their way out of the gate. */
    pthread_mutex_lock(&g->mu);
    while (g->ntramp > 0)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);

    for (cb = g->persistent; cb != NULL; cb = n) {
        n = cb->next;
        free(cb);
    }
    free(g->queue);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    vcu__htab_fini(&cs->tab);
    vcu__pset_fini(&cs->allocs);
    vcu__pset_fini(&cs->ctx_allocs);
    vcu__pset_fini(&cs->gallocs);
    vcu__pset_fini(&cs->conds);
    vcu__pset_fini(&cs->texs);
    vcu__pset_fini(&cs->surfs);
    vcu__out_free(cs->out);
    free(cs->op);
    /* Nothing of the session is left to give back: its host charge goes;
     * a slot it claimed (in-process) is free again, a worker's is the
     * daemon's to free, once the process is gone. */
    vcu__host_uncharge(cs, cs->hostres);
    if (cs->aowned)
        vcu__acct_release(cs->cu->acct, cs->aslot);
    pthread_mutex_destroy(&cs->hostmu);
    free(cs);
}

int vcu__cuda_sess_fence(vcu__cuda_sess_t *cs, vcu__cuda_wait_t **wait)
{
    vcu__cuda_t *cu;
    vcu__cuda_wait_t *w;
    CUresult first = CUDA_SUCCESS;
    uint32_t d;

    *wait = NULL;
    if (cs == NULL)
        return 0;
    cu = cs->cu;
    w = vcu__wait_new(cs);
    if (w != NULL)
        w->fence = 1;
    for (d = 0; d < cu->ndev; d++) {
        CUresult r;

        if (cs->ctx[d] == NULL)
            continue;
        r = vcu__cur(cs, cs->ctx[d]);
        if (r == CUDA_SUCCESS && (w == NULL || vcu__park_ctx(cs, w, d) != 0))
            r = cu->fn.cuCtxSynchronize();
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS)
            first = r;
    }
    if (first != CUDA_SUCCESS && cs->deferred == 0)
        cs->deferred = (uint32_t)first;
    if (w != NULL && w->nev == 0) {
        vcu__wait_free(cs, w);
        w = NULL;
    }
    *wait = w;
    return vcu__cu_err(first);
}

/* ---- host callback gate ------------------------------------------------- */

static void vcu__write_u64_resp(void *out, uint32_t result, uint64_t value)
{
    struct vcu_cu_u64_resp r;

    memset(&r, 0, sizeof(r));
    r.r.result = result;
    r.value = value;
    memcpy(out, &r, sizeof(r));
}

/* g->mu held.  Hands cookie to the parked CU_CALLBACK_WAIT (*req: to be
 * completed, after the lock) or queues it; false when the queue could not
 * grow and the cookie is lost. */
static bool vcu__cb_hand_locked(vcu__gate_t *g, uint64_t cookie, vcu_request_t **req)
{
    if (g->parked != NULL) {
        *req = g->parked;
        g->parked = NULL;
        return true;
    }
        if (g->nq == g->capq) {
            size_t ncap = g->capq ? g->capq * 2 : 16;
            uint64_t *nq = realloc(g->queue, ncap * sizeof(*nq));

            if (nq != NULL) {
                g->queue = nq;
                g->capq = ncap;
            }
        }
    if (g->nq >= g->capq)
        return false;
    g->queue[g->nq++] = cookie;
    return true;
}

/* Runs on a CUDA thread (or wherever the driver runs host functions). */
void CUDA_CB vcu__cb_trampoline(void *arg)
{
    vcu__cb_t *cb = arg;
    vcu__gate_t *g = cb->gate;
    uint64_t cookie = cb->cookie;
    vcu__waiter_t w = { cookie, 0, NULL }, **pp;
    vcu_request_t *req = NULL;

    if (cb->oneshot)
        vcu__cb_free(cb);
    pthread_mutex_lock(&g->mu);
    if (g->ending) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    g->ntramp++;
    w.next = g->waiters;
    g->waiters = &w;
    /* Without room the cookie is lost: the guest can only learn of it
     * by a WAIT that never returns, so give up on this callback. */
    if (!vcu__cb_hand_locked(g, cookie, &req))
        w.done = 1;
    if (req != NULL) {
        pthread_mutex_unlock(&g->mu);
        vcu__write_u64_resp(vcu__resp_payload(req), CUDA_SUCCESS, cookie);
        vcu__complete(req, VCU_S_OK, sizeof(struct vcu_cu_u64_resp));
        pthread_mutex_lock(&g->mu);
    }
    while (!w.done && !g->ending)
        pthread_cond_wait(&g->cv, &g->mu);
    for (pp = &g->waiters; *pp != NULL; pp = &(*pp)->next)
        if (*pp == &w) {
            *pp = w.next;
            break;
        }
    if (--g->ntramp == 0 && g->ending)
        pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/*
 * Hands cookie to the guest's CU_CALLBACK_WAIT and returns at once: a
 * function the guest runs after the fact, whose CU_CALLBACK_DONE nobody
 * waits for (a user object's destructor, on whatever thread the driver
 * calls it).  Lost, as the trampoline's, when the queue cannot grow.
 */
void vcu__cb_post(vcu__gate_t *g, uint64_t cookie)
{
    vcu_request_t *req = NULL;

    pthread_mutex_lock(&g->mu);
    if (g->ending) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    (void)vcu__cb_hand_locked(g, cookie, &req);
    pthread_mutex_unlock(&g->mu);
    if (req != NULL) {
        vcu__write_u64_resp(vcu__resp_payload(req), CUDA_SUCCESS, cookie);
        vcu__complete(req, VCU_S_OK, sizeof(struct vcu_cu_u64_resp));
    }
}

int vcu__cuda_is_inline(uint32_t opcode)
{
    return opcode == VCU_OP_CU_CALLBACK_WAIT || opcode == VCU_OP_CU_CALLBACK_DONE;
}

/*
 * CU_CALLBACK_WAIT: the oldest reached cookie, or park until one is
 * reached.  One parked WAIT per session (the guest library has one
 * callback thread per session); a second gets CUDA_ERROR_INVALID_VALUE.
 * Inline replies carry no deferred error (that belongs to the worker).
 */
uint32_t vcu__cb_wait(vcu__cuda_sess_t *cs, void *out, size_t out_cap, size_t *out_len,
                      vcu_request_t *req)
{
    vcu__gate_t *g = &cs->gate;
    uint64_t cookie;

    if (out_cap < sizeof(struct vcu_cu_u64_resp))
        return VCU_S_ERANGE;
    pthread_mutex_lock(&g->mu);
    if (g->nq > 0) {
        cookie = g->queue[0];
        memmove(g->queue, g->queue + 1, (g->nq - 1) * sizeof(*g->queue));
        g->nq--;
        pthread_mutex_unlock(&g->mu);
        vcu__write_u64_resp(out, CUDA_SUCCESS, cookie);
        *out_len = sizeof(struct vcu_cu_u64_resp);
        return VCU_S_OK;
    }
    if (g->ending) {
        pthread_mutex_unlock(&g->mu);
        *out_len = 0;
        return VCU_S_ECANCELED;
    }
    if (g->parked != NULL || req == NULL || req->resp_cap < sizeof(struct vcu_resp_hdr) ||
        vcu__resp_cap(req) < sizeof(struct vcu_cu_u64_resp)) {
        pthread_mutex_unlock(&g->mu);
        vcu__write_u64_resp(out, CUDA_ERROR_INVALID_VALUE, 0);
        *out_len = sizeof(struct vcu_cu_u64_resp);
        return VCU_S_OK;
    }
    g->parked = req;
    pthread_mutex_unlock(&g->mu);
    return VCU__PARKED;
}

/* CU_CALLBACK_DONE: releases the oldest trampoline blocked on the cookie. */
uint32_t vcu__cb_done(vcu__cuda_sess_t *cs, const void *payload, void *out, size_t *out_len)
{
    vcu__gate_t *g = &cs->gate;
    struct vcu_cu_u64_req rq;
    struct vcu_cu_resp rp;
    vcu__waiter_t *w, *found = NULL;
    size_t i;

    memcpy(&rq, payload, sizeof(rq));
    pthread_mutex_lock(&g->mu);
    for (w = g->waiters; w != NULL; w = w->next)
        if (w->cookie == rq.value && !w->done)
            found = w;              /* list is newest first: keep the oldest */
    if (found != NULL) {
        found->done = 1;
        /* DONE without a WAIT: do not hand the cookie out later. */
        for (i = 0; i < g->nq; i++)
            if (g->queue[i] == rq.value) {
                memmove(g->queue + i, g->queue + i + 1, (g->nq - i - 1) * sizeof(*g->queue));
                g->nq--;
                break;
            }
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    memset(&rp, 0, sizeof(rp));
    rp.result = found != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    memcpy(out, &rp, sizeof(rp));
    *out_len = sizeof(rp);
    return VCU_S_OK;
}
