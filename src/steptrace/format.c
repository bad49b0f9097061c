// SPDX-License-Identifier: MIT
// The step trace's records as the lines of docs/trace-format.md, made on
// the writer's thread from what the program's threads stored (internal.h,
// ao_trrec_t): the text never costs the program a cycle.
#include <string.h>

#include <cuda.h>

#include "steptrace/internal.h"

static char *stream_field(char *p, uint32_t s)
{
    p = AO_TR_PUTS(p, " s=");
    return ao_tr_u64(p, s);
}

static char *put_str(char *p, const char *s)
{
    return ao_tr_put(p, s, strlen(s));
}

// cuda.h's CUmemPool_attribute, without the prefix, lower case.
static const char *pool_attr_name(int attr)
{
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        return "reuse_follow_event_dependencies";
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        return "reuse_allow_opportunistic";
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        return "reuse_allow_internal_dependencies";
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        return "release_threshold";
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        return "reserved_mem_current";
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        return "reserved_mem_high";
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        return "used_mem_current";
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        return "used_mem_high";
    default:
        return NULL;
    }
}

static const char *const layer_ops[] = {
    [AO_TR_BEGIN] = "begin",
    [AO_TR_END] = "end",
    [AO_TR_BACKWARD_BEGIN] = "backward_begin",
    [AO_TR_BACKWARD_END] = "backward_end",
    [AO_TR_STEP_END] = "step_end",
    [AO_TR_MICROBATCH] = "microbatch",
    [AO_TR_SCHEDULE] = "schedule",
    [AO_TR_OFFLOAD] = "offload",
    [AO_TR_RELEASE] = "release",
    [AO_TR_RELOAD] = "reload",
};

static const char *const kinds[] = {
    [AO_TRK_ALLOC] = "alloc",    [AO_TRK_FREE] = "free",
    [AO_TRK_COPY] = "copy",      [AO_TRK_MEMSET] = "memset",
    [AO_TRK_LAUNCH] = "launch",  [AO_TRK_STREAM_DESTROY] = "stream_destroy",
    [AO_TRK_RECORD] = "record",  [AO_TRK_WAIT] = "wait",
    [AO_TRK_SYNC] = "sync",      [AO_TRK_POOL_ATTR] = "pool",
    [AO_TRK_POOL_TRIM] = "pool", [AO_TRK_LAYER] = "layer",
    [AO_TRK_KEEP] = "layer",
};

static char *launch(char *p, const ao_trrec_t *r)
{
    p = AO_TR_PUTS(p, " k=");
    p = ao_tr_u64(p, r->u.launch.k);
    p = stream_field(p, r->u.launch.s);
    p = AO_TR_PUTS(p, " grid=");
    for (int i = 0; i < 3; i++) {
        if (i) *p++ = ',';
        p = ao_tr_u64(p, r->u.launch.grid[i]);
    }
    p = AO_TR_PUTS(p, " block=");
    for (int i = 0; i < 3; i++) {
        if (i) *p++ = ',';
        p = ao_tr_u64(p, r->u.launch.block[i]);
    }
    if (r->u.launch.shm) {
        p = AO_TR_PUTS(p, " shm=");
        p = ao_tr_u64(p, r->u.launch.shm);
    }
    if (r->u.launch.sample) {
        p = AO_TR_PUTS(p, " sample=");
        p = ao_tr_u64(p, r->u.launch.sample);
    }
    // Every pointer-sized word of the parameters, raw (0 left out): a
    // reader keeps those inside a live recorded allocation.
    char sep = '=';
    for (uint32_t i = 0; i < r->n; i++) {
        if (!r->w[i]) continue;
        if (sep == '=') p = AO_TR_PUTS(p, " ptr");
        *p++ = sep;
        sep = ',';
        p = ao_tr_hex(p, r->w[i]);
    }
    return p;
}

static char *copy(char *p, const ao_trrec_t *r)
{
    static const char *const names[] = {"h2h", "h2d", "d2h", "d2d", "default"};
    uint32_t kind = r->u.copy.kind <= AO_TR_DEFAULT ? r->u.copy.kind : AO_TR_DEFAULT;
    p = stream_field(p, r->u.copy.s);
    p = AO_TR_PUTS(p, " kind=");
    p = put_str(p, names[kind]);
    // Device sides only; both for a copy whose kind the addresses decide.
    bool dev_dst = kind == AO_TR_H2D || kind == AO_TR_D2D || kind == AO_TR_DEFAULT;
    bool dev_src = kind == AO_TR_D2H || kind == AO_TR_D2D || kind == AO_TR_DEFAULT;
    if (dev_dst && r->u.copy.dst) {
        p = AO_TR_PUTS(p, " dst=");
        p = ao_tr_hex(p, r->u.copy.dst);
    }
    if (dev_src && r->u.copy.src) {
        p = AO_TR_PUTS(p, " src=");
        p = ao_tr_hex(p, r->u.copy.src);
    }
    p = AO_TR_PUTS(p, " n=");
    p = ao_tr_u64(p, r->u.copy.n);
    if (r->u.copy.src_n && r->u.copy.src_n != r->u.copy.n) {
        p = AO_TR_PUTS(p, " src_n=");
        p = ao_tr_u64(p, r->u.copy.src_n);
    }
    p = AO_TR_PUTS(p, " async=");
    *p++ = r->flags & AO_TRF_ASYNC ? '1' : '0';
    if (r->flags & AO_TRF_PITCHED) p = AO_TR_PUTS(p, " pitched=1");
    return p;
}

static char *pool_attr(char *p, const ao_trrec_t *r)
{
    p = AO_TR_PUTS(p, " op=attr pool=");
    p = ao_tr_u64(p, r->u.pool.pool);
    p = AO_TR_PUTS(p, " attr=");
    const char *name = pool_attr_name(r->u.pool.attr);
    if (name) {
        p = put_str(p, name);
    } else {
        p = AO_TR_PUTS(p, "attr_");
        p = ao_tr_i64(p, r->u.pool.attr);
    }
    if (r->flags & AO_TRF_VALUE) {
        p = AO_TR_PUTS(p, " value=");
        p = r->flags & AO_TRF_U64 ? ao_tr_u64(p, r->u.pool.value)
                                  : ao_tr_i64(p, (int32_t)(uint32_t)r->u.pool.value);
    }
    return p;
}

static char *layer(char *p, const ao_trrec_t *r)
{
    uint32_t op = r->u.layer.op;
    p = AO_TR_PUTS(p, " op=");
    p = put_str(p, op < sizeof layer_ops / sizeof *layer_ops ? layer_ops[op] : "?");
    switch (op) {
    case AO_TR_STEP_END:
        break;
    case AO_TR_MICROBATCH:
        p = AO_TR_PUTS(p, " mb=");
        p = ao_tr_i64(p, r->u.layer.arg);
        break;
    case AO_TR_SCHEDULE:
        p = AO_TR_PUTS(p, " value=");
        p = ao_tr_i64(p, r->u.layer.arg);
        break;
    default:
        p = AO_TR_PUTS(p, " layer=");
        p = ao_tr_i64(p, r->u.layer.arg);
        p = AO_TR_PUTS(p, " mb=");
        p = ao_tr_i64(p, r->u.layer.mb);
        break;
    }
    if (r->flags & AO_TRF_STREAM && op != AO_TR_MICROBATCH) p = stream_field(p, r->u.layer.s);
    return p;
}

size_t ao_tr_format(const ao_trrec_t *r, uint32_t tid, char *out)
{
    if (r->kind >= sizeof kinds / sizeof *kinds) return 0;
    char *p = put_str(out, kinds[r->kind]);
    p = AO_TR_PUTS(p, " t=");
    p = ao_tr_u64(p, r->t);
    if (tid) {
        p = AO_TR_PUTS(p, " tid=");
        p = ao_tr_u64(p, tid);
    }
    switch (r->kind) {
    case AO_TRK_ALLOC:
    case AO_TRK_FREE:
        p = AO_TR_PUTS(p, " api=");
        p = put_str(p, r->u.alloc.api);
        if (r->kind == AO_TRK_ALLOC) {
            p = AO_TR_PUTS(p, " size=");
            p = ao_tr_u64(p, r->u.alloc.size);
        }
        p = AO_TR_PUTS(p, " addr=");
        p = ao_tr_hex(p, r->u.alloc.addr);
        if (r->flags & AO_TRF_STREAM) p = stream_field(p, r->u.alloc.s);
        break;
    case AO_TRK_COPY:
        p = copy(p, r);
        break;
    case AO_TRK_MEMSET:
        p = stream_field(p, r->u.memset.s);
        p = AO_TR_PUTS(p, " dst=");
        p = ao_tr_hex(p, r->u.memset.dst);
        p = AO_TR_PUTS(p, " n=");
        p = ao_tr_u64(p, r->u.memset.n);
        p = AO_TR_PUTS(p, " value=");
        p = ao_tr_u64(p, r->u.memset.value);
        if (r->u.memset.width != 1) {
            p = AO_TR_PUTS(p, " width=");
            p = ao_tr_u64(p, r->u.memset.width);
        }
        if (r->flags & AO_TRF_PITCHED) p = AO_TR_PUTS(p, " pitched=1");
        break;
    case AO_TRK_LAUNCH:
        p = launch(p, r);
        break;
    case AO_TRK_STREAM_DESTROY:
        p = AO_TR_PUTS(p, " id=");
        p = ao_tr_u64(p, r->u.ids.a);
        break;
    case AO_TRK_RECORD:
    case AO_TRK_WAIT:
        p = AO_TR_PUTS(p, " ev=");
        p = ao_tr_u64(p, r->u.ids.a);
        p = stream_field(p, r->u.ids.b);
        break;
    case AO_TRK_SYNC:
        if (r->u.ids.a == AO_TR_SYNC_DEVICE) {
            p = AO_TR_PUTS(p, " what=device");
        } else if (r->u.ids.a == AO_TR_SYNC_STREAM) {
            p = AO_TR_PUTS(p, " what=stream");
            p = stream_field(p, r->u.ids.b);
        } else {
            p = AO_TR_PUTS(p, " what=event ev=");
            p = ao_tr_u64(p, r->u.ids.c);
        }
        break;
    case AO_TRK_POOL_ATTR:
        p = pool_attr(p, r);
        break;
    case AO_TRK_POOL_TRIM:
        p = AO_TR_PUTS(p, " op=trim pool=");
        p = ao_tr_u64(p, r->u.pool.pool);
        p = AO_TR_PUTS(p, " keep=");
        p = ao_tr_u64(p, r->u.pool.value);
        break;
    case AO_TRK_LAYER:
        p = layer(p, r);
        break;
    case AO_TRK_KEEP:
        p = AO_TR_PUTS(p, " op=keep addr=");
        p = ao_tr_hex(p, r->u.keep.addr);
        break;
    }
    *p++ = '\n';
    return (size_t)(p - out);
}
