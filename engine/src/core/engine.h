/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef FS_ENGINE_H
#define FS_ENGINE_H

#include "run.h"

struct fs_out;

int fs_run_select_backend(struct fs_run *r, struct fs_err *err);
int fs_run_validate(struct fs_run *r, struct fs_err *err);
int fs_run_server(struct fs_run *r, struct fs_err *err);
int fs_run_client(struct fs_run *r, struct fs_out *out, struct fs_err *err);

#endif
