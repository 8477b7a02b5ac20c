/* SPDX-License-Identifier: BSD-3-Clause */
/* fabscope-engine-mpi-<flavor>: started by mpirun/srun with 2 ranks. Rank 1 becomes the server
 * (the normal --control-fd flow on a socket it accepted), rank 0 the client (the normal --peer
 * flow); MPI carries only the control port between them, the data goes through the mpi
 * backend. Only rank 0 prints records. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <mpi.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../backends/mpi_coll.h"
#include "../core/entry.h"

struct rendezvous {
    int port;   /* 0 = rank 1 failed to listen */
    char host[MPI_MAX_PROCESSOR_NAME];
};

#define TAG_RENDEZVOUS 1
/* Rank 0's exit code once its engine is done: lets rank 1 stop waiting for a connection that
 * will never come (rank 0 refused its options before connecting). */
#define TAG_CLIENT_DONE 2
#define WAIT_SLICE_MS 50

/* Rank 1: listen where rank 0 can reach it (loopback when both share a node), accept one
 * connection, then run the engine as a server on it. */
static int run_server(char *argv0, int timeout_ms, int same_node)
{
    struct rendezvous rv = {0};
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(same_node ? INADDR_LOOPBACK : INADDR_ANY);
    socklen_t sl = sizeof sa;
    if (lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(lfd, 1) == 0 &&
        getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0)
        rv.port = ntohs(sa.sin_port);
    int hl = 0;
    MPI_Get_processor_name(rv.host, &hl);
    MPI_Send(&rv, (int)sizeof rv, MPI_BYTE, 0, TAG_RENDEZVOUS, MPI_COMM_WORLD);
    if (!rv.port) {
        perror("fabscope-engine-mpi rank 1: cannot listen for the control connection");
        return FS_EXIT_MEASURE;
    }
    /* Wait for rank 0's connection, or for rank 0 to finish without one (its engine refused
     * the options: that error is rank 0's to report, and rank 1 ends at once, not at the
     * timeout). */
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    for (int waited = 0;; waited += WAIT_SLICE_MS) {
        if (poll(&p, 1, WAIT_SLICE_MS) > 0)
            break;
        int done = 0;
        MPI_Iprobe(0, TAG_CLIENT_DONE, MPI_COMM_WORLD, &done, MPI_STATUS_IGNORE);
        if (done) {
            close(lfd);
            return FS_EXIT_OK;
        }
        if (waited >= timeout_ms) {
            fprintf(stderr, "fabscope-engine-mpi rank 1: rank 0 did not connect within %d ms\n",
                    timeout_ms);
            close(lfd);
            return FS_EXIT_PEER;
        }
    }
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    close(lfd);
    if (fd < 0) {
        perror("fabscope-engine-mpi rank 1: accept");
        return FS_EXIT_PEER;
    }
    char fdtxt[16], tmo[32];
    snprintf(fdtxt, sizeof fdtxt, "%d", fd);
    snprintf(tmo, sizeof tmo, "%g", timeout_ms / 1000.0);
    /* The server adopts every shared option from the client; only the timeout matters here. */
    char *sargv[] = {argv0, "--control-fd", fdtxt, "--timeout", tmo, NULL};
    return fs_engine_run(5, sargv);
}

static int run_client(int argc, char **argv, int same_node)
{
    struct rendezvous rv;
    MPI_Recv(&rv, (int)sizeof rv, MPI_BYTE, 1, TAG_RENDEZVOUS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (!rv.port)
        return FS_EXIT_MEASURE;
    char peer[MPI_MAX_PROCESSOR_NAME + 16];
    snprintf(peer, sizeof peer, "%s:%d", same_node ? "127.0.0.1" : rv.host, rv.port);
    char **cargv = calloc((size_t)argc + 5, sizeof *cargv);
    if (!cargv)
        return FS_EXIT_MEASURE;
    /* --backend mpi first: a --backend the user gave comes later and wins. */
    int n = 0;
    cargv[n++] = argv[0];
    cargv[n++] = "--backend";
    cargv[n++] = "mpi";
    for (int i = 1; i < argc; i++)
        cargv[n++] = argv[i];
    cargv[n++] = "--peer";
    cargv[n++] = peer;
    int rc = fs_engine_run(n, cargv);
    free(cargv);
    return rc;
}

/* MPI_Finalize is a wait like any other. MPICH 4.0's ch4:ucx finalize closes every UCX endpoint,
 * progresses until the closes complete, then enters a PMI barrier; a rank that got there first
 * stops progressing UCX, and its peer can spin in the close forever (pmodels/mpich#6596; seen
 * here in about one run in eight between two netns hosts). Every result has been printed and
 * both ranks met in MPI_Barrier by then, so past this deadline the rank says so and exits with
 * the code it would have returned. The deadline is the run's own --timeout (at least 3 s): a
 * fixed 3 s was too short for Open MPI's orderly shutdown between two emulated (TCG) guests, and
 * a rank that leaves without finalizing makes mpirun fail the job after its results were printed. */
#define FINALIZE_MIN_DEADLINE_S 3

struct finalize_watch {
    int rank;
    int exit_code;
    int deadline_s;
};

static void *finalize_watchdog(void *arg)
{
    const struct finalize_watch *watch = arg;
    struct timespec until = {.tv_sec = watch->deadline_s, .tv_nsec = 0};
    while (nanosleep(&until, &until) != 0)
        ;
    fprintf(stderr,
            "fabscope-engine-mpi: note: rank %d: MPI_Finalize did not return within %d s after the "
            "measurement ended (the MPI library's shutdown waited on its peer; MPICH 4.0 ch4:ucx is "
            "known to: pmodels/mpich#6596); the results printed are complete; exiting without it\n",
            watch->rank, watch->deadline_s);
    fflush(stderr);
    _exit(watch->exit_code);
}

static void arm_finalize_deadline(int rank, int exit_code, double timeout_s)
{
    static struct finalize_watch watch;
    pthread_t thread;
    watch.rank = rank;
    watch.exit_code = exit_code;
    watch.deadline_s = timeout_s > FINALIZE_MIN_DEADLINE_S ? (int)(timeout_s + 0.999)
                                                           : FINALIZE_MIN_DEADLINE_S;
    fflush(stdout);
    if (pthread_create(&thread, NULL, finalize_watchdog, &watch) == 0)
        pthread_detach(thread);
}

int main(int argc, char **argv)
{
    int provided = 0, rank = 0, size = 0;
    /* The options this wrapper needs before MPI_Init, through the engine's option table. A command
     * line that does not parse is left to rank 0's engine to refuse, once, after MPI_Init. */
    static struct fs_spec spec;
    struct fs_err err = {0};
    int parsed = fs_engine_parse(argc, argv, "mpi", &spec, &err) == 0;
    /* Checking options needs no MPI: a singleton MPI_Init would start Open MPI's orted (and
     * fail where it is not on PATH) only to be finalized again. */
    if (spec.validate_only)
        return fs_engine_run(argc, argv);
    /* Each rank checks this host's names (--device, --bind: the mpi backend's .check) before MPI
     * starts, since MPI_Init itself may fail on a device that is not there. Not for a singleton
     * running the plain flows by hand (--peer, --listen, --control-fd). */
    int by_hand = spec.peer[0] || spec.listen[0] || spec.control_fd >= 0;
    if (parsed && !by_hand && strcmp(spec.backend, "mpi") == 0) {
        int bad = fs_engine_check_host(argc, argv, "mpi");
        if (bad)
            return bad;
    }
    /* The launcher (srun, mpirun) forwards every rank's stdout in chunks, not lines: whatever
     * rank 1 or the MPI and UCX libraries print there (UCX logs to stdout) can land inside one of
     * rank 0's 8 KB record lines and damage it (seen under srun on a busy machine: the 1 MiB
     * record lost). So from MPI_Init on, stdout is stderr in every rank; rank 0 gets its own back
     * once it knows it is rank 0. */
    fflush(stdout);
    int records_fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (records_fd >= 0)
        dup2(STDERR_FILENO, STDOUT_FILENO);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    /* The mpi backend reads the library's control variables (MPI_T) to report its choices. */
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    fflush(stdout); /* what the libraries said while starting goes where stdout was: stderr */
    if (rank == 0 && records_fd >= 0) /* rank 0 (or a singleton) prints the records */
        dup2(records_fd, STDOUT_FILENO);
    if (records_fd >= 0)
        close(records_fd);
    /* A collective: every rank in it, no client and server (mpi_coll.c). */
    int collective = parsed && !by_hand && strcmp(spec.backend, "mpi") == 0 &&
                     fs_pattern_by_name(spec.pattern) >= 0 &&
                     FS_PAT_IS_COLLECTIVE(fs_pattern_by_name(spec.pattern));
    if (collective) {
        int rc = FS_EXIT_USAGE;
        if (size < 2) {
            fprintf(stderr, "fabscope-engine: --pattern %s needs at least 2 ranks, and this job has "
                            "%d: run it under a launcher (`fabscope run --backend mpi --pattern %s "
                            "--loopback --ppn 2`, or --hosts H1,H2,...)\n",
                    spec.pattern, size, spec.pattern);
        } else {
            rc = fs_mpi_collective_main(&spec, rank, size);
            MPI_Barrier(MPI_COMM_WORLD);
        }
        arm_finalize_deadline(rank, rank == 0 ? rc : 0, spec.timeout);
        MPI_T_finalize();
        MPI_Finalize();
        return rank == 0 ? rc : 0;
    }
    if (size == 1) {
        /* A singleton (started without a launcher): the plain engine flows, so a client can
         * still be pointed at a server by hand; the mpi backend itself needs 2 ranks. */
        int rc = fs_engine_run(argc, argv);
        MPI_T_finalize();
        MPI_Finalize();
        return rc;
    }
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "fabscope-engine-mpi: run with exactly 2 ranks (mpirun -np 2), "
                            "not %d\n", size);
        MPI_Finalize();
        return FS_EXIT_USAGE;
    }
    if (rank == 0 && (spec.peer[0] || spec.listen[0])) {
        fprintf(stderr, "fabscope-engine-mpi: --peer/--listen are set by the MPI launch itself; "
                        "drop them\n");
        MPI_Abort(MPI_COMM_WORLD, FS_EXIT_USAGE);
    }
    char me[MPI_MAX_PROCESSOR_NAME] = "", other[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    MPI_Get_processor_name(me, &len);
    MPI_Sendrecv(me, sizeof me, MPI_CHAR, 1 - rank, 0, other, sizeof other, MPI_CHAR, 1 - rank, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int same_node = strcmp(me, other) == 0;
    /* For the mpi backend's report (MPICH exposes no per-peer path, so locality decides it). */
    setenv("FABSCOPE_MPI_PEER_HOST", other, 1);
    int timeout_ms = (int)(spec.timeout * 1000);
    int rc = rank == 1 ? run_server(argv[0], timeout_ms, same_node)
                       : run_client(argc, argv, same_node);
    /* Both engines end within their deadlines (the control channel tells each side when the
     * other failed). Rank 0 then says it is done (rank 1 may still be waiting for its
     * connection), and both meet before MPI_Finalize. Rank 0's exit code is the job's: mpirun
     * reports the first non-zero status, and rank 1 returns 0 so that it is rank 0's. */
    if (rank == 0) {
        MPI_Send(&rc, 1, MPI_INT, 1, TAG_CLIENT_DONE, MPI_COMM_WORLD);
    } else {
        int client_rc = 0;
        MPI_Recv(&client_rc, 1, MPI_INT, 0, TAG_CLIENT_DONE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    arm_finalize_deadline(rank, rank == 0 ? rc : 0, spec.timeout);
    MPI_T_finalize();
    MPI_Finalize();
    return rank == 0 ? rc : 0;
}
