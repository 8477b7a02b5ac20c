/* SPDX-License-Identifier: BSD-3-Clause */
#include "options.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define FIELD(opt, base) ((char *)(base) + (opt)->offset)

const struct fs_option *fs_opt_find(const struct fs_opt_set *set, const char *name)
{
    for (const struct fs_option *o = set->rows; o && o->name; o++)
        if (strcmp(o->name, name) == 0)
            return o;
    return NULL;
}

/* Sizes use binary multiples: message sizes are powers of two in every peer tool. */
int fs_parse_size(const char *text, uint64_t *out)
{
    if (!text || !*text || !isdigit((unsigned char)text[0]))
        return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text)
        return -1;
    uint64_t mult = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': mult = 1ull << 10; end++; break;
    case 'M': mult = 1ull << 20; end++; break;
    case 'G': mult = 1ull << 30; end++; break;
    default: return -1;
    }
    if (*end == 'i' || *end == 'B') /* accept "4KiB"/"4KB" spelled out */
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end != '\0')
        return -1;
    if (v > UINT64_MAX / mult)
        return -1;
    *out = (uint64_t)v * mult;
    return 0;
}

int fs_parse_size_list(const char *text, struct fs_size_list *out, char *why, size_t why_len)
{
    out->n = 0;
    char buf[512];
    if (strlen(text) >= sizeof buf) {
        snprintf(why, why_len, "the list is longer than %zu characters", sizeof buf - 1);
        return -1;
    }
    strcpy(buf, text);
    const char *colon = strchr(buf, ':');
    if (colon) {
        /* "lo:hi": every power of two from lo to hi, as perftest -a and OSU sweep. */
        char *hi_text = (char *)colon + 1;
        buf[colon - buf] = '\0';
        uint64_t lo, hi;
        if (fs_parse_size(buf, &lo) || fs_parse_size(hi_text, &hi)) {
            snprintf(why, why_len, "a range is LO:HI with sizes like 2, 4K, 8M");
            return -1;
        }
        if (lo == 0 || hi < lo) {
            snprintf(why, why_len, "a range needs 0 < LO <= HI");
            return -1;
        }
        /* The range is the powers of two from LO to HI, as its help says; ends that are not
         * powers of two would make it something else (3:100 doubling 3, 6, 12...), so they are
         * refused with the nearest range that is, rather than rounded behind the user's back. */
        if ((lo & (lo - 1)) || (hi & (hi - 1))) {
            uint64_t up = 1, down = 1;
            while (up < lo && up <= UINT64_MAX / 2)
                up *= 2;
            while (down <= hi / 2)
                down *= 2;
            if (up >= lo && up <= down)
                snprintf(why, why_len,
                         "a range is every power of two from LO to HI, so both must be powers of "
                         "two (the nearest inside it: %llu:%llu); list other sizes with commas",
                         (unsigned long long)up, (unsigned long long)down);
            else
                snprintf(why, why_len,
                         "a range is every power of two from LO to HI, so both must be powers of "
                         "two (there is none between these); list sizes with commas");
            return -1;
        }
        for (uint64_t s = lo; s <= hi; s *= 2) {
            if (out->n == FS_MAX_SIZES) {
                snprintf(why, why_len, "more than %d sizes", FS_MAX_SIZES);
                return -1;
            }
            out->v[out->n++] = s;
            if (s > UINT64_MAX / 2)
                break;
        }
        return 0;
    }
    /* strtok would skip empty entries ("8,,16"); an empty entry is a typo, so it is refused. */
    for (char *tok = buf, *next; tok; tok = next) {
        char *comma = strchr(tok, ',');
        next = comma ? comma + 1 : NULL;
        if (comma)
            *comma = '\0';
        if (!*tok) {
            snprintf(why, why_len, "an empty entry in the list");
            return -1;
        }
        uint64_t s;
        if (fs_parse_size(tok, &s)) {
            snprintf(why, why_len, "'%s' is not a size (examples: 8, 4K, 1M, 2G)", tok);
            return -1;
        }
        if (out->n == FS_MAX_SIZES) {
            snprintf(why, why_len, "more than %d sizes", FS_MAX_SIZES);
            return -1;
        }
        out->v[out->n++] = s;
    }
    if (out->n == 0) {
        snprintf(why, why_len, "no size given");
        return -1;
    }
    return 0;
}

static void allowed_list(const struct fs_option *o, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const char *const *a = o->allowed; a && *a; a++)
        used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s",
                                 a == o->allowed ? "" : ", ", *a);
}

static int parse_bool(const char *v, int *out)
{
    static const char *const yes[] = {"1", "yes", "true", "on", NULL};
    static const char *const no[] = {"0", "no", "false", "off", NULL};
    for (int i = 0; yes[i]; i++)
        if (strcmp(v, yes[i]) == 0) return *out = 1, 0;
    for (int i = 0; no[i]; i++)
        if (strcmp(v, no[i]) == 0) return *out = 0, 0;
    return -1;
}

int fs_opt_assign(const struct fs_opt_set *set, const struct fs_option *o, const char *value,
                  struct fs_err *err)
{
    void *f = FIELD(o, set->base);
    char why[256], sv[FS_SHOWN_LEN];
    switch (o->type) {
    case FS_OPT_STR:
        if (strlen(value) >= o->size)
            return fs_fail(err, FS_EXIT_USAGE, "--%s: value longer than %zu characters", o->name,
                           o->size - 1);
        strcpy((char *)f, value);
        return 0;
    case FS_OPT_ENUM:
        for (const char *const *a = o->allowed; a && *a; a++)
            if (strcmp(*a, value) == 0) {
                strcpy((char *)f, value);
                return 0;
            }
        allowed_list(o, why, sizeof why);
        return fs_fail(err, FS_EXIT_USAGE, "--%s: %s is not one of the allowed values: %s",
                       o->name, fs_shown(value, sv, sizeof sv), why);
    case FS_OPT_INT: {
        errno = 0;
        char *end = NULL;
        long v = strtol(value, &end, 10);
        if (errno || end == value || *end)
            return fs_fail(err, FS_EXIT_USAGE, "--%s: %s is not a whole number", o->name, fs_shown(value, sv, sizeof sv));
        if ((double)v < o->min || (double)v > o->max)
            return fs_fail(err, FS_EXIT_USAGE, "--%s: %ld is out of range; allowed %.0f to %.0f",
                           o->name, v, o->min, o->max);
        *(long *)f = v;
        return 0;
    }
    case FS_OPT_SIZE: {
        uint64_t v;
        if (fs_parse_size(value, &v))
            return fs_fail(err, FS_EXIT_USAGE,
                           "--%s: %s is not a size (examples: 8, 4K, 1M, 2G)", o->name, fs_shown(value, sv, sizeof sv));
        if ((double)v < o->min || (double)v > o->max)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--%s: %llu bytes is out of range; allowed %.0f to %.0f bytes", o->name,
                           (unsigned long long)v, o->min, o->max);
        *(uint64_t *)f = v;
        return 0;
    }
    case FS_OPT_DOUBLE: {
        errno = 0;
        char *end = NULL;
        double v = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(v))
            return fs_fail(err, FS_EXIT_USAGE, "--%s: %s is not a number", o->name, fs_shown(value, sv, sizeof sv));
        if (v < o->min || v > o->max)
            return fs_fail(err, FS_EXIT_USAGE, "--%s: %g is out of range; allowed %g to %g",
                           o->name, v, o->min, o->max);
        *(double *)f = v;
        return 0;
    }
    case FS_OPT_BOOL:
        if (parse_bool(value, (int *)f))
            return fs_fail(err, FS_EXIT_USAGE, "--%s: %s is not yes/no/true/false/1/0", o->name,
                           fs_shown(value, sv, sizeof sv));
        return 0;
    case FS_OPT_SIZES: {
        struct fs_size_list *l = (struct fs_size_list *)f;
        if (fs_parse_size_list(value, l, why, sizeof why))
            return fs_fail(err, FS_EXIT_USAGE,
                           "--%s: %s: %s (forms: 2:8M for powers of two, or 8,4K,1M)", o->name,
                           fs_shown(value, sv, sizeof sv), why);
        for (size_t i = 0; i < l->n; i++)
            if ((double)l->v[i] < o->min || (double)l->v[i] > o->max)
                return fs_fail(err, FS_EXIT_USAGE,
                               "--%s: size %llu is out of range; allowed %.0f to %.0f bytes",
                               o->name, (unsigned long long)l->v[i], o->min, o->max);
        return 0;
    }
    }
    return fs_fail(err, FS_EXIT_USAGE, "--%s: unknown option type", o->name);
}

int fs_opt_set_defaults(const struct fs_opt_set *set, struct fs_err *err)
{
    for (const struct fs_option *o = set->rows; o && o->name; o++) {
        void *f = FIELD(o, set->base);
        if (o->type == FS_OPT_SIZES)
            ((struct fs_size_list *)f)->n = 0;
        if (o->def && *o->def) {
            if (fs_opt_assign(set, o, o->def, err))
                return -1;
        } else if (o->type == FS_OPT_STR || o->type == FS_OPT_ENUM) {
            ((char *)f)[0] = '\0';
        }
    }
    return 0;
}

static size_t format_size(uint64_t v, char *buf, size_t len)
{
    static const char suffix[] = {'G', 'M', 'K'};
    static const unsigned shift[] = {30, 20, 10};
    int n = 0;
    for (int i = 0; i < 3 && n == 0; i++)
        if (v && v % (1ull << shift[i]) == 0)
            n = snprintf(buf, len, "%llu%c", (unsigned long long)(v >> shift[i]), suffix[i]);
    if (n == 0)
        n = snprintf(buf, len, "%llu", (unsigned long long)v);
    return (size_t)n < len ? (size_t)n : len - 1;
}

int fs_opt_format(const struct fs_option *o, const void *base, char *buf, size_t len)
{
    const char *f = (const char *)base + o->offset;
    switch (o->type) {
    case FS_OPT_STR:
    case FS_OPT_ENUM: return snprintf(buf, len, "%s", f);
    case FS_OPT_INT: return snprintf(buf, len, "%ld", *(const long *)f);
    case FS_OPT_SIZE: return (int)format_size(*(const uint64_t *)f, buf, len);
    case FS_OPT_DOUBLE: return snprintf(buf, len, "%.17g", *(const double *)f);
    case FS_OPT_BOOL: return snprintf(buf, len, "%s", *(const int *)f ? "true" : "false");
    case FS_OPT_SIZES: {
        const struct fs_size_list *l = (const struct fs_size_list *)f;
        size_t used = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < l->n && used < len; i++) {
            if (i)
                used += (size_t)snprintf(buf + used, len - used, ",");
            if (used < len)
                used += format_size(l->v[i], buf + used, len - used);
        }
        return (int)used;
    }
    }
    return 0;
}

static const char *type_name(enum fs_opt_type t)
{
    static const char *const names[] = {"string", "enum", "int", "size", "double", "bool", "sizes"};
    return names[t];
}

static cJSON *typed_value(const struct fs_option *o, const void *base)
{
    const char *f = (const char *)base + o->offset;
    switch (o->type) {
    case FS_OPT_STR:
    case FS_OPT_ENUM: return cJSON_CreateString(f);
    case FS_OPT_INT: return cJSON_CreateNumber((double)*(const long *)f);
    case FS_OPT_SIZE: return cJSON_CreateNumber((double)*(const uint64_t *)f);
    case FS_OPT_DOUBLE: return cJSON_CreateNumber(*(const double *)f);
    case FS_OPT_BOOL: return cJSON_CreateBool(*(const int *)f);
    case FS_OPT_SIZES: {
        const struct fs_size_list *l = (const struct fs_size_list *)f;
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < l->n; i++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber((double)l->v[i]));
        return a;
    }
    }
    return cJSON_CreateNull();
}

void fs_opt_echo_json(const struct fs_opt_set *set, cJSON *obj)
{
    for (const struct fs_option *o = set->rows; o && o->name; o++)
        if (!(o->flags & FS_OPTF_NOECHO))
            cJSON_AddItemToObject(obj, o->name, typed_value(o, set->base));
}

void fs_opt_wire_json(const struct fs_opt_set *set, cJSON *obj)
{
    char buf[1024];
    for (const struct fs_option *o = set->rows; o && o->name; o++) {
        if (o->flags & (FS_OPTF_LOCAL | FS_OPTF_NOECHO))
            continue;
        fs_opt_format(o, set->base, buf, sizeof buf);
        cJSON_AddStringToObject(obj, o->name, buf);
    }
}

int fs_opt_apply_wire(const struct fs_opt_set *set, const cJSON *obj, struct fs_err *err)
{
    const cJSON *item;
    cJSON_ArrayForEach(item, obj) {
        const struct fs_option *o = item->string ? fs_opt_find(set, item->string) : NULL;
        if (!o || (o->flags & (FS_OPTF_LOCAL | FS_OPTF_NOECHO)))
            return fs_fail(err, FS_EXIT_PEER,
                           "the peer sent setting '%s', which this engine does not share "
                           "(%s options); are both hosts running the same fabscope version?",
                           item->string ? item->string : "?", set->scope);
        if (!cJSON_IsString(item))
            return fs_fail(err, FS_EXIT_PEER, "the peer sent setting '%s' as a non-string",
                           item->string);
        if (fs_opt_assign(set, o, item->valuestring, err))
            return -1;
    }
    return 0;
}

void fs_opt_dump_json(const struct fs_opt_set *set, cJSON *array)
{
    for (const struct fs_option *o = set->rows; o && o->name; o++) {
        if (o->flags & FS_OPTF_NOECHO)
            continue;
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "name", o->name);
        cJSON_AddStringToObject(row, "type", type_name(o->type));
        cJSON_AddStringToObject(row, "scope", set->scope);
        cJSON_AddStringToObject(row, "default", o->def ? o->def : "");
        if (o->type == FS_OPT_INT || o->type == FS_OPT_SIZE || o->type == FS_OPT_DOUBLE ||
            o->type == FS_OPT_SIZES) {
            cJSON_AddNumberToObject(row, "min", o->min);
            cJSON_AddNumberToObject(row, "max", o->max);
        }
        if (o->allowed) {
            cJSON *a = cJSON_AddArrayToObject(row, "allowed");
            for (const char *const *v = o->allowed; *v; v++)
                cJSON_AddItemToArray(a, cJSON_CreateString(*v));
        }
        cJSON_AddBoolToObject(row, "local", (o->flags & FS_OPTF_LOCAL) != 0);
        cJSON_AddBoolToObject(row, "process", (o->flags & FS_OPTF_PROCESS) != 0);
        cJSON_AddBoolToObject(row, "mode", (o->flags & FS_OPTF_MODE) != 0);
        cJSON_AddStringToObject(row, "help", o->help);
        cJSON_AddItemToArray(array, row);
    }
}

void fs_opt_help(const struct fs_opt_set *set, FILE *out)
{
    char allowed[512];
    for (const struct fs_option *o = set->rows; o && o->name; o++) {
        if (o->flags & FS_OPTF_NOECHO)
            continue;
        char left[64];
        snprintf(left, sizeof left, "--%s%s", o->name, o->type == FS_OPT_BOOL ? "" : " VALUE");
        fprintf(out, "  %-26s %s", left, o->help);
        if (o->allowed) {
            allowed_list(o, allowed, sizeof allowed);
            fprintf(out, " [%s]", allowed);
        }
        if (o->def && *o->def)
            fprintf(out, " (default %s)", o->def);
        fputc('\n', out);
    }
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = diag + cost;
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *fs_opt_suggest(const struct fs_opt_set *const *sets, size_t nsets, const char *name)
{
    const char *best = NULL;
    size_t best_d = 3; /* further than two edits is a different word */
    for (size_t s = 0; s < nsets; s++)
        for (const struct fs_option *o = sets[s]->rows; o && o->name; o++) {
            size_t d = edit_distance(name, o->name);
            if (d < best_d) {
                best_d = d;
                best = o->name;
            }
        }
    return best;
}

const char *fs_shown(const char *value, char *buf, size_t len)
{
    size_t n = strlen(value), o = 0;
    if (len == 0)
        return buf;
    buf[o++] = '\'';
    size_t i = 0;
    for (; i < n && i < FS_SHOWN_MAX && o + 6 < len; i++) {
        unsigned char ch = (unsigned char)value[i];
        const char *esc = ch == '\n' ? "\\n" : ch == '\t' ? "\\t" : ch == '\r' ? "\\r"
                        : ch == '\\' ? "\\\\" : ch == '\'' ? "\\'" : NULL;
        if (esc)
            o += (size_t)snprintf(buf + o, len - o, "%s", esc);
        else if (ch < 32 || ch >= 127)
            o += (size_t)snprintf(buf + o, len - o, "\\x%02x", ch);
        else
            buf[o++] = (char)ch;
    }
    if (o + 1 < len)
        buf[o++] = '\'';
    buf[o < len ? o : len - 1] = '\0';
    if (i < n)
        snprintf(buf + o, len - o, "... (%zu characters)", n);
    return buf;
}

int fs_fail(struct fs_err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    return -1;
}
