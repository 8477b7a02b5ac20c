/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's command line (entry.h): its options through the option table, its modes (--peer
 * client, --listen or --control-fd server, --options-json and the other listings) and its exit
 * code. fabscope-engine's main() and the MPI engines' run it. */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "entry.h"
#include "hex.h"
#include "inventory.h"
#include "output.h"

static void dump_options(void)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "fabscope.options/1");
    cJSON_AddStringToObject(root, "version", FS_TOOL_VERSION);
    cJSON_AddNumberToObject(root, "proto", FS_PROTO_VERSION);
    struct fs_spec spec;
    struct fs_opt_set core = {"core", fs_core_options, &spec};
    fs_opt_dump_json(&core, cJSON_AddArrayToObject(root, "core"));
    cJSON *ops = cJSON_AddArrayToObject(root, "ops");
    for (int i = 0; i < FS_OP_COUNT; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", fs_ops[i].name);
        cJSON_AddStringToObject(o, "summary", fs_ops[i].summary);
        cJSON_AddStringToObject(o, "lat_role",
                                fs_ops[i].lat_role == FS_ROLE_ACTIVE ? "active" : "passive");
        cJSON_AddStringToObject(o, "bw_role",
                                fs_ops[i].bw_role == FS_ROLE_ACTIVE ? "active" : "passive");
        cJSON_AddNumberToObject(o, "fixed_size", fs_ops[i].fixed_size);
        cJSON_AddItemToArray(ops, o);
    }
    cJSON *bes = cJSON_AddObjectToObject(root, "backends");
    size_t n;
    const struct fs_backend_ops *const *all = fs_backends(&n);
    for (size_t i = 0; i < n; i++) {
        struct fs_err err = {0};
        if (fs_backend_check(all[i], &err))
            continue;
        cJSON *b = cJSON_AddObjectToObject(bes, all[i]->name);
        cJSON_AddStringToObject(b, "summary", all[i]->summary);
        cJSON *bo = cJSON_AddArrayToObject(b, "ops");
        for (int k = 0; k < FS_OP_COUNT; k++)
            if (all[i]->ops & FS_BIT(k))
                cJSON_AddItemToArray(bo, cJSON_CreateString(fs_ops[k].name));
        cJSON *bp = cJSON_AddArrayToObject(b, "patterns");
        for (int k = 0; k < FS_PAT_COUNT; k++)
            if (all[i]->patterns & FS_BIT(k))
                cJSON_AddItemToArray(bp, cJSON_CreateString(fs_pattern_names[k]));
        void *tmp = all[i]->options_size ? calloc(1, all[i]->options_size) : NULL;
        struct fs_opt_set set = {all[i]->name, all[i]->options, tmp};
        fs_opt_dump_json(&set, cJSON_AddArrayToObject(b, "options"));
        free(tmp);
    }
    const struct fs_backend_known *k = fs_backends_known(&n);
    cJSON *kn = cJSON_AddArrayToObject(root, "known_backends");
    for (size_t i = 0; i < n; i++) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "name", k[i].name);
        cJSON_AddBoolToObject(b, "built", k[i].ops != NULL);
        cJSON_AddStringToObject(b, "package", k[i].package);
        cJSON_AddItemToArray(kn, b);
    }
    char *text = cJSON_Print(root);
    puts(text);
    cJSON_free(text);
    cJSON_Delete(root);
}

static void help(struct fs_run *r)
{
    printf("usage: fabscope-engine --peer HOST[:PORT] [options]     (client)\n"
           "       fabscope-engine --listen ADDR[:PORT] [options]   (server, one client)\n"
           "       fabscope-engine --options-json | --counters-json | --counters-serve | --inventory-json\n"
           "       fabscope-engine --list-backends\n\n"
           "Most users want the front end: `fabscope run --loopback` or `fabscope run --peer`.\n\n"
           "core options:\n");
    fs_opt_help(&r->core_set, stdout);
    size_t n;
    const struct fs_backend_ops *const *all = fs_backends(&n);
    for (size_t i = 0; i < n; i++) {
        if (!all[i]->options)
            continue;
        printf("\n%s options (with --backend %s):\n", all[i]->name, all[i]->name);
        struct fs_opt_set set = {all[i]->name, all[i]->options, NULL};
        fs_opt_help(&set, stdout);
    }
}

/* Two passes: the backend decides which option rows exist, so find it first. */
static int parse_args(struct fs_run *r, int argc, char **argv, struct fs_err *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--backend=", 10) == 0)
            snprintf(r->spec.backend, sizeof r->spec.backend, "%s", a + 10);
        else if (strcmp(a, "--backend") == 0 && i + 1 < argc)
            snprintf(r->spec.backend, sizeof r->spec.backend, "%s", argv[++i]);
    }
    const struct fs_backend_ops *bops = fs_backend_by_name(r->spec.backend);
    /* An unknown backend is the real mistake; its options would only add noise. */
    if (fs_run_select_backend(r, err))
        return -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            char sv[FS_SHOWN_LEN];
            return fs_fail(err, FS_EXIT_USAGE, "unexpected argument %s; options start with --",
                           fs_shown(a, sv, sizeof sv));
        }
        char name[96];
        const char *value = NULL;
        const char *eq = strchr(a + 2, '=');
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof name)
            return fs_fail(err, FS_EXIT_USAGE, "option '%.40s...' is too long", a);
        memcpy(name, a + 2, nl);
        name[nl] = '\0';
        const struct fs_opt_set *set = &r->core_set;
        const struct fs_option *o = fs_opt_find(set, name);
        if (!o && r->bopts) {
            set = &r->be_set;
            o = fs_opt_find(set, name);
        }
        if (!o) {
            size_t n;
            const struct fs_backend_ops *const *all = fs_backends(&n);
            for (size_t k = 0; k < n; k++) {
                struct fs_opt_set other = {all[k]->name, all[k]->options, NULL};
                if (all[k] != bops && fs_opt_find(&other, name))
                    return fs_fail(err, FS_EXIT_USAGE,
                                   "--%s belongs to backend %s, but --backend is %s", name,
                                   all[k]->name, r->spec.backend);
            }
            const struct fs_opt_set *sets[2] = {&r->core_set, &r->be_set};
            const char *hint = fs_opt_suggest(sets, r->bopts ? 2 : 1, name);
            return fs_fail(err, FS_EXIT_USAGE, "unknown option --%s%s%s%s; see --help", name,
                           hint ? " (did you mean --" : "", hint ? hint : "", hint ? "?)" : "");
        }
        if (eq)
            value = eq + 1;
        else if (o->type == FS_OPT_BOOL)
            value = "true";
        else if (i + 1 < argc)
            value = argv[++i];
        else
            return fs_fail(err, FS_EXIT_USAGE, "--%s needs a value", name);
        if (!value[0]) /* `--device ''` is a mistake (an unset variable), never "the default" */
            return fs_fail(err, FS_EXIT_USAGE,
                           "--%s: an empty value; give a value, or leave --%s out for its default",
                           name, name);
        if (fs_opt_assign(set, o, value, err))
            return -1;
    }
    return 0;
}

/* The session key from the front end: 64 hex digits on a pipe, read whole, then the pipe closed. */
static int read_session_key(int fd, uint8_t key[32], struct fs_err *err)
{
    char hex[65] = {0};
    size_t got = 0;
    while (got < 64) {
        ssize_t n = read(fd, hex + got, 64 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (got != 64 || fs_hex_decode_exact(hex, key, 32))
        return fs_fail(err, FS_EXIT_USAGE,
                       "--session-key-fd: expected 64 hex digits (the session key) on the "
                       "descriptor; this option is for `fabscope serve` and `fabscope run --peer`");
    return 0;
}

static int finish(struct fs_run *r, struct fs_out *out, struct fs_err *err, int rc)
{
    if (rc && err->code) {
        fprintf(stderr, "fabscope-engine: %s\n", err->msg);
        if (out)
            fs_out_error(out, err);
    }
    if (r->be && r->bops)
        r->bops->teardown(r->be);
    fs_ctl_close(&r->ctl);
    fs_samples_free(&r->samples);
    free(r->bopts);
    r->bopts = NULL;
    return rc ? (err->code ? err->code : FS_EXIT_MEASURE) : FS_EXIT_OK;
}

/* r at the option table's defaults (backend `backend` when not NULL), then argv parsed into it. */
static int parse_cmdline(struct fs_run *r, int argc, char **argv, const char *backend,
                         struct fs_err *err)
{
    r->ctl.fd = -1;
    r->core_set = (struct fs_opt_set){"core", fs_core_options, &r->spec};
    r->be_set = (struct fs_opt_set){"backend", NULL, NULL};
    if (fs_opt_set_defaults(&r->core_set, err))
        return -1;
    if (backend)
        snprintf(r->spec.backend, sizeof r->spec.backend, "%s", backend);
    return parse_args(r, argc, argv, err);
}

int fs_engine_parse(int argc, char **argv, const char *backend, struct fs_spec *spec,
                    struct fs_err *err)
{
    struct fs_run *r = calloc(1, sizeof *r); /* large (counter snapshots): off the stack */
    if (!r)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    int rc = parse_cmdline(r, argc, argv, backend, err);
    *spec = r->spec;
    struct fs_err quiet = {0}; /* the caller reports err, or not */
    finish(r, NULL, &quiet, 0);
    free(r);
    return rc;
}

int fs_engine_check_host(int argc, char **argv, const char *backend)
{
    struct fs_err err = {0};
    struct fs_run *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "fabscope-engine: out of memory\n");
        return FS_EXIT_MEASURE;
    }
    int rc = parse_cmdline(r, argc, argv, backend, &err);
    if (rc == 0 && r->bops->check && r->bops->check(&r->spec, r->bopts, &err)) {
        if (!err.code)
            err.code = FS_EXIT_USAGE;
        rc = -1;
    }
    struct fs_out out = {stdout, strcmp(r->spec.format, "text") == 0, 0};
    rc = finish(r, &out, &err, rc);
    fflush(stdout);
    free(r);
    return rc;
}

int fs_engine_run(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    static struct fs_run run; /* large (counter snapshots): keep it off the stack */
    struct fs_run *r = &run;
    struct fs_err err = {0};
    if (parse_cmdline(r, argc, argv, NULL, &err))
        return finish(r, NULL, &err, -1);
    if (r->spec.help) {
        help(r);
        return finish(r, NULL, &err, 0);
    }
    if (r->spec.options_json) {
        dump_options();
        return finish(r, NULL, &err, 0);
    }
    if (r->spec.counters_json) {
        cJSON *snap = fs_counters_dump_json();
        char *text = cJSON_PrintUnformatted(snap);
        if (text)
            puts(text);
        cJSON_free(text);
        cJSON_Delete(snap);
        return finish(r, NULL, &err, 0);
    }
    if (r->spec.counters_serve)
        return finish(r, NULL, &err, fs_counters_serve());
    if (r->spec.inventory_json)
        return finish(r, NULL, &err, fs_inventory_print());
    if (r->spec.list_backends) {
        size_t n;
        const struct fs_backend_ops *const *all = fs_backends(&n);
        for (size_t i = 0; i < n; i++)
            printf("%-8s %s\n", all[i]->name, all[i]->summary);
        return finish(r, NULL, &err, 0);
    }
    if (r->spec.validate_only) {
        /* No mode needed: `fabscope serve` asks whether the options it will pass are valid. */
        int rc = fs_run_select_backend(r, &err) || fs_run_validate(r, &err) ? -1 : 0;
        return finish(r, NULL, &err, rc);
    }
    int modes = !!r->spec.peer[0] + (r->spec.peer_fd >= 0) + !!r->spec.listen[0] +
                (r->spec.control_fd >= 0);
    if (modes != 1) {
        fs_fail(&err, FS_EXIT_USAGE,
                "say exactly one of --peer HOST[:PORT] or --peer-fd N (client), --listen "
                "ADDR[:PORT] or --control-fd N (server); see --help");
        return finish(r, NULL, &err, -1);
    }
    if (r->spec.peer_fd >= 0 && !r->spec.session_open) {
        /* The front end hands over a socket only after its hello and authentication. */
        fs_fail(&err, FS_EXIT_USAGE, "--peer-fd needs --session-open 1 (the front end did the hello)");
        return finish(r, NULL, &err, -1);
    }
    struct fs_out out = {stdout, strcmp(r->spec.format, "text") == 0, 0};
    /* A client's refusal is also a fabscope.error/1 record on stdout, as every later failure is,
     * so the front end reads one stream; a server's stdout carries only its listening event. */
    struct fs_out *client_out = (r->spec.peer[0] || r->spec.peer_fd >= 0) ? &out : NULL;
    r->backend_by_peer = !client_out;
    if (fs_run_select_backend(r, &err) || fs_run_validate(r, &err))
        return finish(r, client_out, &err, -1);
    fs_sysinfo_read(&r->si);
    /* The clock's rate and cost are measured on the CPU the engine will run on: the rate's
     * interval starts here and ends once the peer is connected (fs_run_client/fs_run_server);
     * a --clock tsc that this host cannot honour is refused now, before anything connects. */
    if (fs_clock_check(r->spec.clock, "", &err) ||
        fs_place(r->spec.cpu, r->spec.cpu_slot, r->spec.device, &r->si, &err) ||
        (r->spec.hold_cpu_latency && fs_hold_cpu_latency(&r->si, &err)))
        return finish(r, client_out, &err, -1);
    fs_clock_begin();
    int rc;
    int tmo = (int)(r->timeout_ns / 1000000);
    uint8_t skey[32];
    int keyed = 0;
    if (r->spec.session_key_fd >= 0) {
        if (!r->spec.session_open || (r->spec.peer_fd < 0 && r->spec.control_fd < 0)) {
            fs_fail(&err, FS_EXIT_USAGE,
                    "--session-key-fd applies to a session the front end opened (--peer-fd or "
                    "--control-fd, with --session-open 1)");
            return finish(r, client_out, &err, -1);
        }
        if (read_session_key((int)r->spec.session_key_fd, skey, &err))
            return finish(r, client_out, &err, -1);
        keyed = 1;
    }
    if (r->spec.peer[0]) {
        rc = fs_ctl_connect(r->spec.peer, tmo, &r->ctl, &err);
        if (rc == 0)
            rc = fs_run_client(r, &out, &err);
        return finish(r, &out, &err, rc);
    }
    if (r->spec.peer_fd >= 0) {
        char desc[300];
        if (fs_sock_peer_desc((int)r->spec.peer_fd, desc, sizeof desc)) {
            fs_fail(&err, FS_EXIT_USAGE, "--peer-fd %ld is not a connected socket",
                    r->spec.peer_fd);
            return finish(r, &out, &err, -1);
        }
        fs_ctl_init(&r->ctl, (int)r->spec.peer_fd, desc);
        if (keyed)
            fs_ctl_set_session_key(&r->ctl, skey, 1);
        rc = fs_run_client(r, &out, &err);
        return finish(r, &out, &err, rc);
    }
    if (r->spec.control_fd >= 0) {
        char local[64], peer[64], desc[300];
        fs_sock_addrs((int)r->spec.control_fd, local, sizeof local, peer, sizeof peer);
        snprintf(desc, sizeof desc, "client %s", peer);
        fs_ctl_init(&r->ctl, (int)r->spec.control_fd, desc);
        if (keyed)
            fs_ctl_set_session_key(&r->ctl, skey, 0);
    } else {
        int port = 0;
        int lfd = fs_ctl_listen(r->spec.listen, &port, &err);
        if (lfd < 0)
            return finish(r, NULL, &err, -1);
        /* The front end reads this line to learn the port when it asked for port 0. */
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "schema", "fabscope.event/1");
        cJSON_AddStringToObject(ev, "event", "listening");
        cJSON_AddNumberToObject(ev, "port", port);
        fs_out_event(&out, ev);
        cJSON_Delete(ev);
        rc = fs_ctl_accept(lfd, tmo, &r->ctl, &err);
        close(lfd);
        if (rc)
            return finish(r, NULL, &err, rc);
    }
    rc = fs_run_server(r, &err);
    return finish(r, NULL, &err, rc);
}
