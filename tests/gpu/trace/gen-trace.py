#!/usr/bin/env python3
"""Generates a tracing libcuda.so.1, a diagnostic tool for the GPU host
(not the product): each name that the library given on the command line
exports forwards to that library (loaded from $VCU_TRACE_LIBCUDA) and logs
"trace-call NAME -> RESULT" on stderr when the result is not
CUDA_SUCCESS ($VCU_TRACE_ALL=1: every call).  cuGetProcAddress answers
with this library's function of the same name, so calls through the
pointers NVIDIA's runtime fetches are traced too.

Every function forwards twelve integer-class arguments, which is how the
x86-64 ABI passes every Driver API argument but the few floats of the
texture-reference calls (not traced correctly).

  gen-trace.py NAMES-FILE > trace.c     (NAMES-FILE: one cu* name a line)
"""
import sys

names = [l.strip() for l in open(sys.argv[1]) if l.strip().startswith("cu")]
skip = {"cuGetProcAddress", "cuGetProcAddress_v2", "cuGetExportTable"}
A = ", ".join("unsigned long a%d" % i for i in range(12))
C = ", ".join("a%d" % i for i in range(12))
out = r'''#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int (*fn_t)();
static void *real;
static int all = -1;
static void *sym(const char *n)
{
    if (!real) {
        const char *p = getenv("VCU_TRACE_LIBCUDA");
        real = dlopen(p ? p : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!real) { fprintf(stderr, "trace: %s\n", dlerror()); abort(); }
    }
    return dlsym(real, n);
}
static int note(const char *n, int r)
{
    if (all < 0) all = getenv("VCU_TRACE_ALL") != NULL;
    if (r != 0 || all) fprintf(stderr, "trace-call %s -> %d\n", n, r);
    return r;
}
'''
for n in names:
    if n in skip:
        continue
    out += "int %s(%s) { static fn_t f; if (!f) f = (fn_t)sym(\"%s\"); return note(\"%s\", f ? f(%s) : 500); }\n" % (n, A, n, n, C)
out += r'''
static int gpa(const char *s, void **pfn, int v, unsigned long fl, void *st, int two)
{
    Dl_info di;
    void *mine;
    int r = two ? ((int (*)(const char *, void **, int, unsigned long, void *))sym("cuGetProcAddress_v2"))(s, pfn, v, fl, st)
                : ((int (*)(const char *, void **, int, unsigned long))sym("cuGetProcAddress"))(s, pfn, v, fl);
    if (r == 0 && pfn && *pfn && dladdr(*pfn, &di) && di.dli_sname) {
        if (!strncmp(di.dli_sname, "cuGetProcAddress", 16) || !strcmp(di.dli_sname, "cuGetExportTable"))
            mine = dlsym(RTLD_DEFAULT, di.dli_sname);
        else
            mine = dlsym(RTLD_DEFAULT, di.dli_sname);
        if (mine) *pfn = mine;
    }
    return r;
}
int cuGetProcAddress(const char *s, void **pfn, int v, unsigned long fl) { return gpa(s, pfn, v, fl, NULL, 0); }
int cuGetProcAddress_v2(const char *s, void **pfn, int v, unsigned long fl, void *st) { return gpa(s, pfn, v, fl, st, 1); }
int cuGetExportTable(const void **t, const void *id) { return note("cuGetExportTable", ((int (*)(const void **, const void *))sym("cuGetExportTable"))(t, id)); }
'''
print(out)
