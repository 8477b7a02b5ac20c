/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's command line: what fabscope-engine's main() runs, and what the MPI engines run once
 * MPI is up (engine/src/mpi/main_mpi.c), so both follow the same client/server flows. */
#ifndef FS_ENTRY_H
#define FS_ENTRY_H

#include "fs.h"
#include "spec.h"

/* Runs the engine on argv (argv[0] is the program's name) and returns its exit code (FS_EXIT_*). */
int fs_engine_run(int argc, char **argv);

/* A launcher wrapper's look at its command line before it starts anything (the MPI engines read
 * their --timeout and mode before MPI_Init), through the same option table: argv parsed into *spec,
 * with backend `backend` where argv names none. 0, or -1 with err set when argv does not parse
 * (*spec then holds the defaults and what parsed before the mistake). */
int fs_engine_parse(int argc, char **argv, const char *backend, struct fs_spec *spec,
                    struct fs_err *err);

/* This host's names (--device, --bind, ...) checked by the backend argv selects (its .check hook),
 * as the engine run checks them, without starting anything: each MPI rank checks its own host
 * before MPI_Init. 0, or the exit code after reporting the refusal as the engine reports errors
 * ("fabscope-engine: MESSAGE" on stderr, and a fabscope.error/1 record on stdout with --format
 * json). */
int fs_engine_check_host(int argc, char **argv, const char *backend);

#endif
