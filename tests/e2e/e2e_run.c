// SPDX-License-Identifier: MIT
#include "e2e_run.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

const char *e2e_path(const char *var)
{
    const char *p = getenv(var);
    cr_assert(p && *p, "%s not set by the test harness (tests/e2e/meson.build)", var);
    return p;
}

// --- the child's environment ---------------------------------------------------------
// The parent's AOSHIM_*, SIM_* and PYTORCH_* variables are dropped: a
// developer's AOSHIM_OFFLOAD_LAYERS, SIM_D2H_GBPS or PYTORCH_ALLOC_CONF must
// not change what a test measures.
static void child_env(bool preload, const char *const *env)
{
    // SIM_DIR itself starts with SIM_: keep the harness paths before scrubbing.
    char *sim_dir = strdup(getenv("SIM_DIR")), *shim = getenv("AO_TEST_SHIM");
    shim = shim ? strdup(shim) : NULL;
    for (;;) {
        char *victim = NULL;
        for (char **e = environ; *e; e++)
            if (strncmp(*e, "AOSHIM_", 7) == 0 || strncmp(*e, "SIM_", 4) == 0 ||
                strncmp(*e, "LD_PRELOAD=", 11) == 0 || strncmp(*e, "PYTORCH_", 8) == 0) {
                victim = *e;
                break;
            }
        if (!victim) break;
        char name[256];
        size_t n = strcspn(victim, "=");
        if (n >= sizeof name) n = sizeof name - 1;
        memcpy(name, victim, n);
        name[n] = '\0';
        unsetenv(name);
    }
    setenv("LD_LIBRARY_PATH", sim_dir, 1);
    setenv("SIM_QUIET", "1", 1);
    if (preload && shim) setenv("LD_PRELOAD", shim, 1);
    for (; env && *env; env++) {
        const char *eq = strchr(*env, '=');
        if (!eq) {
            unsetenv(*env);
            continue;
        }
        char name[256];
        size_t n = (size_t)(eq - *env) < sizeof name - 1 ? (size_t)(eq - *env) : sizeof name - 1;
        memcpy(name, *env, n);
        name[n] = '\0';
        setenv(name, eq + 1, 1);
    }
}

// --- running ---------------------------------------------------------------------------
typedef struct sink_s {
    char *buf;
    size_t len, cap;
} sink_t;

static bool sink_read(int fd, sink_t *s)
{
    if (s->cap - s->len < 4096) {
        s->cap = s->cap ? 2 * s->cap : 65536;
        s->buf = realloc(s->buf, s->cap);
        cr_assert(s->buf);
    }
    ssize_t n = read(fd, s->buf + s->len, s->cap - s->len - 1);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) return false;
    s->len += (size_t)n;
    return true;
}

void e2e_run(e2e_result_t *r, bool preload, const char *const *env, const char *const *argv)
{
    e2e_run_ex(r, preload, env, argv, NULL, NULL);
}

void e2e_run_ex(e2e_result_t *r, bool preload, const char *const *env, const char *const *argv,
                void (*on_out)(const char *out, void *arg), void *arg)
{
    memset(r, 0, sizeof *r);
    e2e_path("SIM_DIR");
    if (preload) e2e_path("AO_TEST_SHIM");
    int po[2], pe[2];
    cr_assert_eq(pipe(po), 0);
    cr_assert_eq(pipe(pe), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
        child_env(preload, env);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    sink_t so = {0}, se = {0};
    struct pollfd fds[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            cr_assert_fail("poll: %s", strerror(errno));
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (!sink_read(fds[i].fd, i ? &se : &so)) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else if (i == 0 && on_out) {
                so.buf[so.len] = '\0';
                on_out(so.buf, arg);
            }
        }
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    // Empty outputs still get a buffer: tests compare them with "".
    if (!so.buf) so.buf = calloc(1, 1);
    if (!se.buf) se.buf = calloc(1, 1);
    so.buf[so.len] = '\0';
    se.buf[se.len] = '\0';
    r->out = so.buf;
    r->err = se.buf;

    // The machine-readable line is the last one that starts so.
    const char *line = NULL;
    for (const char *p = r->out; (p = strstr(p, "train_step status=")) != NULL; p++)
        if (p == r->out || p[-1] == '\n') line = p;
    if (!line) return;
    r->have_line = true;
    sscanf(line, "train_step status=%15s", r->ts_status);
    uint64_t v;
#define GET(key, field)                                                                            \
    if (e2e_kv(line, "train_step status=", key, &v)) r->field = v;
    GET("peak_device_bytes", peak)
    GET("alloc_peak_bytes", alloc_peak)
    GET("activation_bytes_per_layer", act_per_layer)
    GET("formula_bytes_per_layer", formula)
    GET("static_bytes", static_bytes)
    GET("temp_bytes_peak", temp_peak)
    GET("step_ns", step_ns)
    GET("races", races)
    GET("pool_slack_at_peak", pool_slack)
#undef GET
    const char *c = strstr(line, " checksum=");
    if (c) sscanf(c, " checksum=%39s", r->checksum);
}

void e2e_train(e2e_result_t *r, bool preload, const char *const *env, const char *args)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = e2e_path("TRAIN_STEP");
    char *copy = strdup(args ? args : "");
    e2e_split(copy, argv, n, 64);
    e2e_run(r, preload, env, argv);
    free(copy);
}

void e2e_free(e2e_result_t *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

// --- parsing ---------------------------------------------------------------------------
bool e2e_kv(const char *text, const char *prefix, const char *key, uint64_t *out)
{
    size_t pl = strlen(prefix), kl = strlen(key);
    for (const char *line = text; line && *line;) {
        const char *eol = strchr(line, '\n');
        if (strncmp(line, prefix, pl) == 0) {
            for (const char *p = line; p && (!eol || p < eol); p = strchr(p + 1, ' ')) {
                const char *w = *p == ' ' ? p + 1 : p;
                if (strncmp(w, key, kl) == 0 && w[kl] == '=') {
                    *out = strtoull(w + kl + 1, NULL, 10);
                    return true;
                }
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    return false;
}

const char *e2e_summary(const char *text, const char *label)
{
    char want[160];
    snprintf(want, sizeof want, "aoshim: %s ", label);
    for (const char *p = text; (p = strstr(p, want)) != NULL; p++) {
        if (p != text && p[-1] != '\n') continue;
        p += strlen(want);
        while (*p == ' ')
            p++;
        return p;
    }
    return NULL;
}

double e2e_bytes(const char *s)
{
    if (!s) return -1;
    char *end;
    double v = strtod(s, &end);
    while (*end == ' ')
        end++;
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    for (int u = 4; u >= 0; u--)
        if (strncmp(end, unit[u], strlen(unit[u])) == 0) {
            for (int i = 0; i < u; i++)
                v *= 1024;
            return v;
        }
    return v;
}

// --- scratch directories and files -------------------------------------------------------------
void e2e_make_dir(char *dir, size_t size, const char *name)
{
    snprintf(dir, size, "/tmp/aoshim-%s.XXXXXX", name);
    cr_assert(mkdtemp(dir), "mkdtemp");
}

void e2e_remove_dir(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)system(cmd);
}

char *e2e_slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t k = fread(s, 1, (size_t)n, f);
    s[k] = '\0';
    fclose(f);
    return s;
}

long long e2e_check_of(const char *out, const char *name)
{
    char want[128];
    snprintf(want, sizeof want, "check %s=", name);
    const char *p = strstr(out, want);
    cr_assert(p, "no '%s' in the program's output:\n%s", want, out);
    return atoll(p + strlen(want));
}

int e2e_split(char *args, const char **argv, int n, int max)
{
    for (char *save = NULL, *t = strtok_r(args, " ", &save); t && n < max - 1;
         t = strtok_r(NULL, " ", &save))
        argv[n++] = t;
    argv[n] = NULL;
    return n;
}
