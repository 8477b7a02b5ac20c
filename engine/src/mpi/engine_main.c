/* The engine's ordinary main(), renamed so the MPI entry point can run it once MPI is up: the
 * MPI build then follows exactly the same client/server flows as every other backend. */
#define main fs_engine_main
#include "../core/main.c"
