/* SPDX-License-Identifier: BSD-3-Clause */
#include <string.h>

#include "check.h"
#include "options.h"
#include "spec.h"

int main(void)
{
    /* Values in messages: quoted, a newline visible, long ones cut with their length said. */
    char sv[FS_SHOWN_LEN];
    CHECK(strcmp(fs_shown("lo\n", sv, sizeof sv), "'lo\\n'") == 0);
    CHECK(strcmp(fs_shown("a'b\\\xff", sv, sizeof sv), "'a\\'b\\\\\\xff'") == 0);
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(strlen(fs_shown(big, sv, sizeof sv)) < 100 && strstr(sv, "... (4999 characters)"));
    uint64_t v;
    CHECK(fs_parse_size("8", &v) == 0 && v == 8);
    CHECK(fs_parse_size("4K", &v) == 0 && v == 4096);
    CHECK(fs_parse_size("8M", &v) == 0 && v == 8u << 20);
    CHECK(fs_parse_size("1G", &v) == 0 && v == 1u << 30);
    CHECK(fs_parse_size("4KiB", &v) == 0 && v == 4096);
    CHECK(fs_parse_size("-1", &v) == -1);
    CHECK(fs_parse_size("", &v) == -1);
    CHECK(fs_parse_size("12X", &v) == -1);
    CHECK(fs_parse_size("99999999999999999999", &v) == -1);

    struct fs_size_list l;
    char why[256];
    CHECK(fs_parse_size_list("2:8M", &l, why, sizeof why) == 0);
    CHECK(l.n == 23 && l.v[0] == 2 && l.v[22] == 8u << 20);
    CHECK(fs_parse_size_list("8,4K,1M", &l, why, sizeof why) == 0);
    CHECK(l.n == 3 && l.v[1] == 4096);
    CHECK(fs_parse_size_list("8:2", &l, why, sizeof why) == -1);
    CHECK(fs_parse_size_list("0:8", &l, why, sizeof why) == -1);
    CHECK(fs_parse_size_list("8,,x", &l, why, sizeof why) == -1);
    /* A range is the powers of two between its ends: other ends are refused, not rounded. */
    CHECK(fs_parse_size_list("3:100", &l, why, sizeof why) == -1 && strstr(why, "4:64") != NULL);
    CHECK(fs_parse_size_list("5:7", &l, why, sizeof why) == -1);
    CHECK(fs_parse_size_list("1:1", &l, why, sizeof why) == 0 && l.n == 1 && l.v[0] == 1);
    CHECK(fs_parse_size_list("8,,16", &l, why, sizeof why) == -1); /* an empty entry is a typo */
    CHECK(fs_parse_size_list("8,", &l, why, sizeof why) == -1);

    struct fs_spec spec;
    struct fs_err err = {0};
    struct fs_opt_set core = {"core", fs_core_options, &spec};
    CHECK(fs_opt_set_defaults(&core, &err) == 0);
    CHECK(spec.iters == 1000 && spec.tx_depth == 64 && strcmp(spec.pattern, "lat") == 0);
    CHECK(spec.sizes.n == 0); /* resolved per pattern later, documented in the help */

    const struct fs_option *o = fs_opt_find(&core, "tx-depth");
    CHECK(o && fs_opt_assign(&core, o, "0", &err) == -1 && err.code == FS_EXIT_USAGE);
    CHECK(strstr(err.msg, "out of range") != NULL);
    CHECK(spec.tx_depth == 64); /* a refused value leaves the setting alone */
    o = fs_opt_find(&core, "pattern");
    CHECK(fs_opt_assign(&core, o, "pingpong", &err) == -1 && strstr(err.msg, "lat, bw, bibw"));
    o = fs_opt_find(&core, "iters");
    CHECK(fs_opt_assign(&core, o, "-5", &err) == -1);
    CHECK(fs_opt_assign(&core, o, "12abc", &err) == -1);
    o = fs_opt_find(&core, "sizes");
    CHECK(fs_opt_assign(&core, o, "0", &err) == -1);
    CHECK(fs_opt_assign(&core, o, "1K,64K", &err) == 0 && spec.sizes.n == 2);

    char buf[256];
    CHECK(fs_opt_format(o, &spec, buf, sizeof buf) > 0 && strcmp(buf, "1K,64K") == 0);

    const struct fs_opt_set *sets[] = {&core};
    CHECK(strcmp(fs_opt_suggest(sets, 1, "sise") ? fs_opt_suggest(sets, 1, "sise") : "", "sizes") == 0);
    CHECK(fs_opt_suggest(sets, 1, "completely-different") == NULL);
    return CHECK_DONE();
}
