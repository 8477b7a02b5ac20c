/* SPDX-License-Identifier: BSD-3-Clause */
/* fabscope-engine: one binary, three modes. --peer (client), --listen or --control-fd (server),
 * --options-json (the option table for the front end). The command line is entry.c's. */
#include "entry.h"

int main(int argc, char **argv) { return fs_engine_run(argc, argv); }
