/*
 * Ping-pong through the mdbus C API: two pinned threads, stream "ping" one
 * way and "pong" back, each message 32 bytes written with claim/commit and
 * read in place by a poll callback. Writes every round-trip time (ns, as
 * native-endian uint64) to OUT for the caller's histogram.
 *
 *   pingpong CONFIG.toml ITERS WARMUP OUT [CORE_A CORE_B]
 *
 * The Rust side of the comparison is capi/examples/pingpong_compare.rs,
 * which compiles and runs this program and the same loop on the Rust API.
 */
#define _GNU_SOURCE
#include <mdbus.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SIZE = 32 };

static mdbus_bus *bus;
static unsigned long long iters, warmup;
static int core_a = -1, core_b = -1;
static atomic_int ready;

static void die(const char *what, int rc) {
    fprintf(stderr, "pingpong: %s: %s (%s)\n", what, mdbus_last_error_message(), mdbus_error_name(rc));
    exit(1);
}

static void pin(int core) {
    if (core < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct got {
    uint64_t value;
    int seen;
};

static void on_event(void *ctx, const mdbus_event *ev) {
    struct got *g = ctx;
    if (ev->kind == MDBUS_EVENT_MESSAGE && ev->len == SIZE) {
        memcpy(&g->value, ev->payload, sizeof g->value);
        g->seen = 1;
    }
}

static void send_value(mdbus_publisher *p, uint64_t v) {
    uint8_t *buf;
    int rc = mdbus_publisher_claim(p, SIZE, &buf);
    if (rc != MDBUS_OK) die("claim", rc);
    memcpy(buf, &v, sizeof v);
    rc = mdbus_publisher_commit(p, NULL);
    if (rc != MDBUS_OK) die("commit", rc);
}

static uint64_t wait_value(mdbus_subscriber *s) {
    struct got g = {0, 0};
    while (!g.seen) {
        int rc = mdbus_subscriber_poll(s, on_event, &g);
        if (rc < 0) die("poll", rc);
    }
    return g.value;
}

static void *ponger(void *arg) {
    (void)arg;
    pin(core_b);
    mdbus_publisher *pong;
    mdbus_subscriber *ping;
    int rc = mdbus_publisher_open(bus, "pong", &pong);
    if (rc != MDBUS_OK) die("open pong", rc);
    while (!atomic_load(&ready)) {
    }
    rc = mdbus_subscriber_open(bus, "ping", &ping);
    if (rc != MDBUS_OK) die("open ping subscriber", rc);
    atomic_store(&ready, 2);
    for (unsigned long long i = 0; i < iters + warmup; i++) send_value(pong, wait_value(ping));
    mdbus_subscriber_close(ping);
    mdbus_publisher_close(pong);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 7) {
        fprintf(stderr, "usage: pingpong CONFIG.toml ITERS WARMUP OUT [CORE_A CORE_B]\n");
        return 2;
    }
    iters = strtoull(argv[2], NULL, 10);
    warmup = strtoull(argv[3], NULL, 10);
    if (argc == 7) {
        core_a = atoi(argv[5]);
        core_b = atoi(argv[6]);
    }
    int rc = mdbus_bus_open_file(argv[1], &bus);
    if (rc != MDBUS_OK) die("open bus", rc);
    uint64_t *rtt = malloc(iters * sizeof *rtt);
    if (!rtt) return 1;

    pthread_t t;
    pthread_create(&t, NULL, ponger, NULL);
    pin(core_a);
    mdbus_publisher *ping;
    mdbus_subscriber *pong;
    rc = mdbus_publisher_open(bus, "ping", &ping);
    if (rc != MDBUS_OK) die("open ping", rc);
    atomic_store(&ready, 1);
    while (atomic_load(&ready) != 2) {
    }
    rc = mdbus_subscriber_open(bus, "pong", &pong);
    if (rc != MDBUS_OK) die("open pong subscriber", rc);
    for (unsigned long long i = 0; i < iters + warmup; i++) {
        uint64_t t0 = now_ns();
        send_value(ping, i);
        uint64_t back = wait_value(pong);
        uint64_t t1 = now_ns();
        if (back != i) {
            fprintf(stderr, "pingpong: sent %llu, got %llu back\n", i, (unsigned long long)back);
            return 1;
        }
        if (i >= warmup) rtt[i - warmup] = t1 - t0;
    }
    pthread_join(t, NULL);
    mdbus_subscriber_close(pong);
    mdbus_publisher_close(ping);
    mdbus_bus_close(bus);
    FILE *out = fopen(argv[4], "wb");
    if (!out || fwrite(rtt, sizeof *rtt, iters, out) != iters || fclose(out) != 0) {
        perror("pingpong: write samples");
        return 1;
    }
    free(rtt);
    return 0;
}
