/*
 * verbs-count: an LD_PRELOAD library that counts the verbs work a process
 * asks of its RDMA devices, the same way for perftest and for mdbus.
 *
 * It interposes ibv_open_device (so it sees every context, including the
 * ones librdmacm opens for rdma_cm ids) and replaces the context's
 * ops.post_send, ops.post_recv, ops.post_srq_recv and ops.poll_cq with
 * wrappers that count and then call the provider's own function:
 *
 *   send_doorbells  ibv_post_send calls       send_wrs  requests in their lists
 *   recv_doorbells  ibv_post_recv and          recv_wrs  requests in their lists
 *                   ibv_post_srq_recv calls
 *   completions     the sum of what ibv_poll_cq returned (polls: its calls)
 *
 * The inline ibv_post_send & co. of verbs.h call through these pointers,
 * so every caller is counted. Not counted: the extended post API
 * (ibv_wr_start ... ibv_wr_complete of an ibv_qp_ex), which perftest uses
 * unless run with --use_old_post_send.
 *
 * At exit it writes one line to "$VERBS_COUNT_OUT.PID":
 *   pid=.. spawned=0|1 send_wrs=.. send_doorbells=.. recv_wrs=..
 *   recv_doorbells=.. completions=.. polls=..
 * (spawned=1: the command line holds --spawned, mdbus-perf's second
 * process). Nothing is written when VERBS_COUNT_OUT is unset.
 *
 * Build: cc -O2 -shared -fPIC -o verbs-count.so verbs-count.c -ldl -libverbs
 * Use:   VERBS_COUNT_OUT=/tmp/count LD_PRELOAD=./verbs-count.so ib_send_lat ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_ulong send_wrs, send_doorbells, recv_wrs, recv_doorbells, completions, polls;

/* The provider's functions, per context (a process opens a handful). */
#define MAX_CONTEXTS 64
static struct {
    struct ibv_context *ctx;
    struct ibv_context_ops ops;
} saved[MAX_CONTEXTS];
static int nsaved;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static struct ibv_context_ops *orig(struct ibv_context *ctx)
{
    /* Entries are only appended, under the lock, before the context is
     * handed out: a reader sees its own context's entry complete. */
    int n = __atomic_load_n(&nsaved, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (saved[i].ctx == ctx)
            return &saved[i].ops;
    fprintf(stderr, "verbs-count: a context it did not open\n");
    abort();
}

static int count_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    unsigned long n = 0;
    for (struct ibv_send_wr *w = wr; w; w = w->next)
        n++;
    atomic_fetch_add_explicit(&send_wrs, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&send_doorbells, 1, memory_order_relaxed);
    return orig(qp->context)->post_send(qp, wr, bad);
}

static int count_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    unsigned long n = 0;
    for (struct ibv_recv_wr *w = wr; w; w = w->next)
        n++;
    atomic_fetch_add_explicit(&recv_wrs, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&recv_doorbells, 1, memory_order_relaxed);
    return orig(qp->context)->post_recv(qp, wr, bad);
}

static int count_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    unsigned long n = 0;
    for (struct ibv_recv_wr *w = wr; w; w = w->next)
        n++;
    atomic_fetch_add_explicit(&recv_wrs, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&recv_doorbells, 1, memory_order_relaxed);
    return orig(srq->context)->post_srq_recv(srq, wr, bad);
}

static int count_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    int got = orig(cq->context)->poll_cq(cq, num, wc);
    atomic_fetch_add_explicit(&polls, 1, memory_order_relaxed);
    if (got > 0)
        atomic_fetch_add_explicit(&completions, (unsigned long)got, memory_order_relaxed);
    return got;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    static struct ibv_context *(*real)(struct ibv_device *);
    if (!real)
        real = (struct ibv_context * (*)(struct ibv_device *)) dlsym(RTLD_NEXT, "ibv_open_device");
    if (!real) {
        /* A program that loads libibverbs with dlopen (mdbus does, with
         * RTLD_LOCAL) hides it from RTLD_NEXT; librdmacm, its dependant,
         * still calls here. Take the function from the loaded library. */
        void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (lib)
            real = (struct ibv_context * (*)(struct ibv_device *)) dlsym(lib, "ibv_open_device");
    }
    if (!real) {
        fprintf(stderr, "verbs-count: ibv_open_device not found\n");
        abort();
    }
    struct ibv_context *ctx = real(device);
    if (!ctx)
        return ctx;
    pthread_mutex_lock(&lock);
    if (nsaved == MAX_CONTEXTS) {
        pthread_mutex_unlock(&lock);
        fprintf(stderr, "verbs-count: more than %d device contexts\n", MAX_CONTEXTS);
        abort();
    }
    saved[nsaved].ctx = ctx;
    saved[nsaved].ops = ctx->ops;
    __atomic_store_n(&nsaved, nsaved + 1, __ATOMIC_RELEASE);
    if (ctx->ops.post_send)
        ctx->ops.post_send = count_post_send;
    if (ctx->ops.post_recv)
        ctx->ops.post_recv = count_post_recv;
    if (ctx->ops.post_srq_recv)
        ctx->ops.post_srq_recv = count_post_srq_recv;
    if (ctx->ops.poll_cq)
        ctx->ops.poll_cq = count_poll_cq;
    pthread_mutex_unlock(&lock);
    return ctx;
}

/* 1 when the command line holds --spawned. */
static int spawned(void)
{
    char buf[8192];
    int fd = open("/proc/self/cmdline", O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    for (ssize_t i = 0; i < n;) {
        if (strcmp(buf + i, "--spawned") == 0)
            return 1;
        i += (ssize_t)strlen(buf + i) + 1;
    }
    return 0;
}

__attribute__((destructor)) static void report(void)
{
    const char *out = getenv("VERBS_COUNT_OUT");
    if (!out || !*out)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", out, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) {
        perror("verbs-count: writing its counts");
        return;
    }
    fprintf(f, "pid=%d spawned=%d send_wrs=%lu send_doorbells=%lu recv_wrs=%lu recv_doorbells=%lu completions=%lu polls=%lu\n",
            (int)getpid(), spawned(), atomic_load(&send_wrs), atomic_load(&send_doorbells),
            atomic_load(&recv_wrs), atomic_load(&recv_doorbells), atomic_load(&completions),
            atomic_load(&polls));
    fclose(f);
}
