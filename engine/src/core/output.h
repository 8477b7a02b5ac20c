/* SPDX-License-Identifier: BSD-3-Clause */
/* Result records: one JSON object per size (schema fabscope.result/1), or a perftest-style text
 * table printed from the same object. */
#ifndef FS_OUTPUT_H
#define FS_OUTPUT_H

#include <stdio.h>

#include "run.h"

struct cJSON;

struct fs_out {
    FILE *f;
    int text;
    int header_done;
};

void fs_out_begin(struct fs_out *o, const struct fs_run *r);
int fs_out_record(struct fs_out *o, struct fs_run *r, uint64_t size, const struct fs_side_view *mine,
                  const struct fs_side_view *theirs, const struct fs_side_view *warm,
                  const struct cJSON *peer_msg, const struct cJSON *peer_transport,
                  struct fs_err *err);
/* JSON mode: an error object after whatever was measured, so a reader knows why it ended. */
void fs_out_error(struct fs_out *o, const struct fs_err *err);
void fs_out_event(struct fs_out *o, struct cJSON *event);

#endif
