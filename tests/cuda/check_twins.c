/*
 * Checks tests/fakecuda/twins.c against the compiled test programs: for
 * every kernel in the programs' sm_90 cubins, a twin of the same mangled
 * name with the same parameter layout (EIATTR_KPARAM_INFO: ordinal,
 * offset, size), static shared size and stack frame (EIATTR_FRAME_SIZE,
 * the twin's local_size); for every __device__/__constant__
 * object, a vcu_twin_globals entry of the same name, size and initial
 * bytes; and no table entry that no program has.
 *
 *   check_twins [-v] PROGRAM...
 *
 * Reads the host executables' .nv_fatbin section itself (no cuobjdump);
 * a PROGRAM may also be a cubin (an ELF for EM_CUDA), read as it is.
 * -v prints what it found, in a form close to the twins table.
 * Exit 0 when all agree, 1 on a mismatch, 2 on a file it cannot read.
 */
#define _POSIX_C_SOURCE 200809L
#include <elf.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fakecuda/vcu_twin.h"

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_KIND_ELF 2

/* .nv.info record formats and the attributes read here. */
#define EIFMT_SVAL 0x04
#define EIATTR_KPARAM_INFO 0x17     /* size in bits 18..31 of the word */
#define EIATTR_KPARAM_INFO_V2 0x45  /* a plain size; large param blocks */
#define EIATTR_FRAME_SIZE 0x11      /* the function's own stack frame */
#define EIATTR_REGCOUNT 0x2f

#define MAX_SEEN 256

static int verbose;
static int errors;
static unsigned char twin_seen[MAX_SEEN];
static unsigned char global_seen[MAX_SEEN];

static void mismatch(const char *prog, const char *fmt, const char *name,
                     long a, long b)
{
    printf("MISMATCH %s: %s: ", prog, name);
    printf(fmt, a, b);
    printf("\n");
    errors++;
}

static const Elf64_Shdr *shdr(const unsigned char *elf, size_t len, unsigned i)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;
    size_t off = eh->e_shoff + (size_t)i * sizeof(Elf64_Shdr);

    if (i >= eh->e_shnum || off + sizeof(Elf64_Shdr) > len)
        return NULL;
    return (const Elf64_Shdr *)(elf + off);
}

static const char *sec_name(const unsigned char *elf, size_t len,
                            const Elf64_Shdr *sh)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;
    const Elf64_Shdr *strs = shdr(elf, len, eh->e_shstrndx);

    if (!strs || strs->sh_offset + sh->sh_name >= len)
        return "";
    return (const char *)elf + strs->sh_offset + sh->sh_name;
}

static int find_twin(const char *name)
{
    for (int i = 0; vcu_twins[i].name; i++)
        if (strcmp(vcu_twins[i].name, name) == 0)
            return i;
    return -1;
}

static int find_global(const char *name)
{
    for (int i = 0; vcu_twin_globals[i].name; i++)
        if (strcmp(vcu_twin_globals[i].name, name) == 0)
            return i;
    return -1;
}

/* Symbol i's name, from the cubin's .symtab. */
static const char *sym_name(const unsigned char *elf, size_t len, unsigned i)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;

    for (unsigned s = 0; s < eh->e_shnum; s++) {
        const Elf64_Shdr *sh = shdr(elf, len, s), *str;
        const Elf64_Sym *sym;

        if (!sh || sh->sh_type != SHT_SYMTAB)
            continue;
        if ((i + 1) * sizeof(Elf64_Sym) > sh->sh_size)
            return NULL;
        sym = (const Elf64_Sym *)(elf + sh->sh_offset) + i;
        str = shdr(elf, len, sh->sh_link);
        if (!str)
            return NULL;
        return (const char *)elf + str->sh_offset + sym->st_name;
    }
    return NULL;
}

/* Attribute attr (one of a symbol and a value) of kernel `name`, from
 * the cubin-wide .nv.info; -1 if it has none. */
static long kernel_attr(const unsigned char *elf, size_t len, const char *name, unsigned want)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;

    for (unsigned s = 0; s < eh->e_shnum; s++) {
        const Elf64_Shdr *sh = shdr(elf, len, s);
        const unsigned char *p, *end;

        if (!sh || strcmp(sec_name(elf, len, sh), ".nv.info") != 0)
            continue;
        p = elf + sh->sh_offset;
        end = p + sh->sh_size;
        while (p + 4 <= end) {
            unsigned fmt = p[0], attr = p[1], sz = 0;

            if (fmt == EIFMT_SVAL)
                sz = p[2] | p[3] << 8;
            if (fmt == EIFMT_SVAL && attr == want && sz == 8) {
                uint32_t sym, val;
                const char *n;

                memcpy(&sym, p + 4, 4);
                memcpy(&val, p + 8, 4);
                n = sym_name(elf, len, sym);
                if (n && strcmp(n, name) == 0)
                    return (long)val;
            }
            p += 4 + sz;
        }
    }
    return -1;
}

/*
 * Static __shared__ bytes as cudaFuncGetAttributes reports them.  nvcc 13's
 * sm_90 .nv.shared.<kernel> section starts with the 1 KiB the system
 * reserves per block (cudaDevAttrReservedSharedMemoryPerBlock), which the
 * GPU does not count: an H200 (driver 580) reports 2048 for matmul_tiled,
 * whose section is 3072 bytes, and 0 for 1024-byte sections.
 */
#define RESERVED_SHARED 1024
static size_t static_shared(const unsigned char *elf, size_t len,
                            const char *name)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;

    for (unsigned s = 0; s < eh->e_shnum; s++) {
        const Elf64_Shdr *sh = shdr(elf, len, s);
        const char *n = sh ? sec_name(elf, len, sh) : "";

        if (strncmp(n, ".nv.shared.", 11) == 0 && strcmp(n + 11, name) == 0)
            return sh->sh_size >= RESERVED_SHARED
                       ? sh->sh_size - RESERVED_SHARED : sh->sh_size;
    }
    return 0;
}

static void check_kernel(const char *prog, const unsigned char *elf,
                         size_t len, const Elf64_Shdr *info, const char *name)
{
    struct { uint32_t offset, size; int set; } par[VCU_TWIN_MAX_PARAMS];
    const unsigned char *p = elf + info->sh_offset, *end = p + info->sh_size;
    unsigned n = 0;
    int t = find_twin(name), regs = (int)kernel_attr(elf, len, name, EIATTR_REGCOUNT);
    long frame = kernel_attr(elf, len, name, EIATTR_FRAME_SIZE);
    size_t shared = static_shared(elf, len, name);

    memset(par, 0, sizeof(par));
    while (p + 4 <= end) {
        unsigned fmt = p[0], attr = p[1], sz = 0;

        if (fmt == EIFMT_SVAL)
            sz = p[2] | p[3] << 8;
        if (fmt == EIFMT_SVAL && sz >= 12 &&
            (attr == EIATTR_KPARAM_INFO || attr == EIATTR_KPARAM_INFO_V2)) {
            uint16_t ord, off;
            uint32_t word;

            memcpy(&ord, p + 8, 2);
            memcpy(&off, p + 10, 2);
            memcpy(&word, p + 12, 4);
            if (ord >= VCU_TWIN_MAX_PARAMS) {
                mismatch(prog, "parameter ordinal %ld >= %ld", name, ord,
                         VCU_TWIN_MAX_PARAMS);
                return;
            }
            par[ord].offset = off;
            par[ord].size = attr == EIATTR_KPARAM_INFO ? word >> 18
                                                       : word & 0xffffff;
            par[ord].set = 1;
            if (ord + 1u > n)
                n = ord + 1;
        }
        p += 4 + sz;
    }
    if (p != end)
        printf("warning: %s: %s: .nv.info ends mid-record\n", prog, name);

    if (verbose) {
        printf("kernel %s nparams=%u regs=%d shared=%zu frame=%ld\n", name, n, regs,
               shared, frame);
        for (unsigned i = 0; i < n; i++)
            printf("  { %u, %u },\n", par[i].offset, par[i].size);
    }
    if (t < 0) {
        printf("MISSING %s: no twin for %s\n", prog, name);
        errors++;
        return;
    }
    if (t < MAX_SEEN)
        twin_seen[t] = 1;
    if (vcu_twins[t].nparams != n) {
        mismatch(prog, "twin has %ld params, kernel %ld", name,
                 vcu_twins[t].nparams, n);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        if (!par[i].set) {
            mismatch(prog, "no KPARAM_INFO for ordinal %ld of %ld", name, i, n);
            continue;
        }
        if (vcu_twins[t].params[i].offset != par[i].offset)
            mismatch(prog, "param offset: twin %ld, kernel %ld", name,
                     vcu_twins[t].params[i].offset, par[i].offset);
        if (vcu_twins[t].params[i].size != par[i].size)
            mismatch(prog, "param size: twin %ld, kernel %ld", name,
                     vcu_twins[t].params[i].size, par[i].size);
    }
    if (vcu_twins[t].static_shared != shared)
        mismatch(prog, "static shared: twin %ld, kernel %ld", name,
                 (long)vcu_twins[t].static_shared, (long)shared);
    if ((long)vcu_twins[t].local_size != (frame < 0 ? 0 : frame))
        mismatch(prog, "local size: twin %ld, kernel's frame %ld", name,
                 (long)vcu_twins[t].local_size, frame);
    /* Depends on the compiler version: a note, not a failure. */
    if (regs >= 0 && vcu_twins[t].num_regs != regs)
        printf("note: %s: %s: num_regs twin %d, this nvcc %d\n", prog, name,
               vcu_twins[t].num_regs, regs);
}

/* __device__ and __constant__ objects: .nv.global*, .nv.constant3. */
static void check_objects(const char *prog, const unsigned char *elf,
                          size_t len)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;

    for (unsigned s = 0; s < eh->e_shnum; s++) {
        const Elf64_Shdr *sh = shdr(elf, len, s), *str;
        const Elf64_Sym *sym;
        size_t nsym;

        if (!sh || sh->sh_type != SHT_SYMTAB)
            continue;
        str = shdr(elf, len, sh->sh_link);
        sym = (const Elf64_Sym *)(elf + sh->sh_offset);
        nsym = sh->sh_size / sizeof(*sym);
        for (size_t i = 0; i < nsym; i++) {
            const Elf64_Shdr *in;
            const char *name, *secn;
            const unsigned char *data = NULL;
            int g;

            if (ELF64_ST_TYPE(sym[i].st_info) != STT_OBJECT ||
                sym[i].st_shndx == SHN_UNDEF || sym[i].st_shndx >= eh->e_shnum)
                continue;
            in = shdr(elf, len, sym[i].st_shndx);
            secn = sec_name(elf, len, in);
            if (strcmp(secn, ".nv.global") != 0 &&
                strcmp(secn, ".nv.global.init") != 0 &&
                strcmp(secn, ".nv.constant3") != 0)
                continue;
            name = (const char *)elf + str->sh_offset + sym[i].st_name;
            /* String literals ("$str", printf's formats): the program's
             * own, never looked up by name. */
            if (name[0] == '$')
                continue;
            if (in->sh_type == SHT_PROGBITS)
                data = elf + in->sh_offset + sym[i].st_value;
            if (verbose)
                printf("object %s size=%lu in %s%s\n", name,
                       (unsigned long)sym[i].st_size, secn,
                       data ? " (with initial bytes)" : "");
            g = find_global(name);
            if (g < 0) {
                printf("MISSING %s: no vcu_twin_globals entry for %s\n", prog,
                       name);
                errors++;
                continue;
            }
            if (g < MAX_SEEN)
                global_seen[g] = 1;
            if (vcu_twin_globals[g].size != sym[i].st_size) {
                mismatch(prog, "object size: table %ld, fatbin %ld", name,
                         (long)vcu_twin_globals[g].size, (long)sym[i].st_size);
                continue;
            }
            if (data) {
                const unsigned char *init = vcu_twin_globals[g].init;
                size_t k;

                for (k = 0; k < sym[i].st_size; k++)
                    if (data[k] != (init ? init[k] : 0))
                        break;
                if (k < sym[i].st_size)
                    mismatch(prog, "initial byte %ld differs (fatbin %#lx)",
                             name, (long)k, data[k]);
            }
        }
    }
}

static void check_cubin(const char *prog, const unsigned char *elf, size_t len)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)elf;

    if (len < sizeof(*eh) || memcmp(elf, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != ELFCLASS64)
        return;
    for (unsigned s = 0; s < eh->e_shnum; s++) {
        const Elf64_Shdr *sh = shdr(elf, len, s);
        const char *n = sh ? sec_name(elf, len, sh) : "";

        if (strncmp(n, ".nv.info.", 9) == 0 &&
            sh->sh_offset + sh->sh_size <= len)
            check_kernel(prog, elf, len, sh, n + 9);
    }
    check_objects(prog, elf, len);
}

/* Walks the fatbins in a host executable's .nv_fatbin section, or checks
 * a cubin. */
static int check_program(const char *prog)
{
    FILE *f;
    struct stat st;
    unsigned char *buf;
    long len;
    const Elf64_Ehdr *eh;
    int found = 0;

    if (stat(prog, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        fprintf(stderr, "%s: not a regular file\n", prog);
        return -1;
    }
    f = fopen(prog, "rb");
    if (!f) {
        perror(prog);
        return -1;
    }
    len = st.st_size;
    buf = malloc(len);
    if (!buf || fread(buf, 1, len, f) != (size_t)len) {
        fclose(f);
        free(buf);
        fprintf(stderr, "%s: cannot read\n", prog);
        return -1;
    }
    fclose(f);
    eh = (const Elf64_Ehdr *)buf;
    if (len < (long)sizeof(*eh) || memcmp(buf, ELFMAG, SELFMAG) != 0) {
        free(buf);
        fprintf(stderr, "%s: not an ELF file\n", prog);
        return -1;
    }
    /* A cubin of its own (the Driver API tests load theirs at run time). */
    if (eh->e_machine == EM_CUDA) {
        check_cubin(prog, buf, len);
        free(buf);
        return 0;
    }
    for (unsigned s = 0; s < eh->e_shnum; s++) {
        const Elf64_Shdr *sh = shdr(buf, len, s);
        size_t off, end;

        if (!sh || strcmp(sec_name(buf, len, sh), ".nv_fatbin") != 0)
            continue;
        off = sh->sh_offset;
        end = off + sh->sh_size;
        while (off + 16 <= end) {
            uint32_t magic;
            uint16_t hsz;
            uint64_t fsz;
            size_t p, fend;

            memcpy(&magic, buf + off, 4);
            if (magic != FATBIN_MAGIC) {
                off += 8;           /* fatbins are 8-byte aligned */
                continue;
            }
            memcpy(&hsz, buf + off + 6, 2);
            memcpy(&fsz, buf + off + 8, 8);
            p = off + hsz;
            fend = p + fsz;
            if (fend > end)
                break;
            while (p + 16 <= fend) {
                uint16_t kind;
                uint32_t ehs;
                uint64_t psz;

                memcpy(&kind, buf + p, 2);
                memcpy(&ehs, buf + p + 4, 4);
                memcpy(&psz, buf + p + 8, 8);
                if (p + ehs + psz > fend)
                    break;
                if (kind == FATBIN_KIND_ELF) {
                    if (memcmp(buf + p + ehs, ELFMAG, SELFMAG) == 0) {
                        check_cubin(prog, buf + p + ehs, psz);
                        found++;
                    } else {
                        printf("warning: %s: compressed cubin skipped\n", prog);
                    }
                }
                p += ehs + psz;
            }
            off = fend;
        }
    }
    free(buf);
    if (!found) {
        printf("MISSING %s: no uncompressed cubin in .nv_fatbin\n", prog);
        errors++;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int i = 1, nprogs = 0;

    if (i < argc && strcmp(argv[i], "-v") == 0) {
        verbose = 1;
        i++;
    }
    for (; i < argc; i++, nprogs++)
        if (check_program(argv[i]) < 0)
            return 2;
    if (nprogs == 0) {
        fprintf(stderr, "usage: check_twins [-v] PROGRAM...\n");
        return 2;
    }
    for (i = 0; vcu_twins[i].name; i++) {
        if (i < MAX_SEEN && !twin_seen[i]) {
            printf("UNUSED: twin %s is in no program\n", vcu_twins[i].name);
            errors++;
        }
    }
    for (i = 0; vcu_twin_globals[i].name; i++) {
        if (i < MAX_SEEN && !global_seen[i]) {
            printf("UNUSED: global %s is in no program\n",
                   vcu_twin_globals[i].name);
            errors++;
        }
    }
    if (errors) {
        printf("check_twins: %d problems\n", errors);
        return 1;
    }
    printf("check_twins: %d programs, all kernels and objects match\n", nprogs);
    return 0;
}
