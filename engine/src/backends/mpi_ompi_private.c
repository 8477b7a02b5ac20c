/* SPDX-License-Identifier: BSD-3-Clause */
/* The mpi backend's reads of Open MPI's internal structures (mpi_ompi.h): the selected pml/mtl are
 * globals of the MCA framework, the peer's endpoint lists the btls ob1 uses for it, and the
 * progress engine is what MPI_Wait spins. Its headers are installed by libopenmpi-dev
 * (include/openmpi, found by engine/mpi.cmake) but are no interface: they change between series.
 *
 * Known: the Open MPI 4.1 series (built and tested with 4.1.4, Debian 12's). Built against another
 * series this file reads nothing, and neither does it when the library that runs is of another
 * series than the headers it was built with; the record then says why it names no selection. */
#include <stdio.h>

#include "mpi_ompi.h"

#if OMPI_MAJOR_VERSION == 4 && OMPI_MINOR_VERSION == 1
#define FS_OMPI_KNOWN 1
#include "ompi/communicator/communicator.h"
#include "ompi/mca/bml/bml.h"
#include "ompi/mca/mtl/base/base.h"
#include "ompi/mca/pml/base/base.h"
#include "ompi/proc/proc.h"
#include "ompi/request/request.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/base/mca_base_vari.h"
#include "opal/runtime/opal_progress.h"
#else
#define FS_OMPI_KNOWN 0
#endif

const char *fs_ompi_internals_unknown(void)
{
    static char why[300];
    static int decided;
    if (decided)
        return why[0] ? why : NULL;
    decided = 1;
#if FS_OMPI_KNOWN
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0, major = 0, minor = 0;
    MPI_Get_library_version(lib, &len);
    if (sscanf(lib, "Open MPI v%d.%d", &major, &minor) == 2 && major == OMPI_MAJOR_VERSION &&
        minor == OMPI_MINOR_VERSION)
        return NULL;
    snprintf(why, sizeof why,
             "not read: the engine was built with Open MPI %d.%d.%d's internal headers and runs "
             "with \"%.80s\"; rebuild the engine against the Open MPI that runs",
             OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION, lib);
#else
    snprintf(why, sizeof why,
             "not read: the engine was built with Open MPI %d.%d.%d, whose internal structures "
             "engine/src/backends/mpi_ompi_private.c does not know (it knows the 4.1 series)",
             OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
#endif
    return why;
}

#if FS_OMPI_KNOWN
const char *fs_ompi_pml(void)
{
    return mca_pml_base_selected_component.pmlm_version.mca_component_name;
}

const char *fs_ompi_mtl(void)
{
    return ompi_mtl_base_selected_component
               ? ompi_mtl_base_selected_component->mtl_version.mca_component_name
               : NULL;
}

static void btl_names(mca_bml_base_btl_array_t *a, cJSON *arr)
{
    size_t n = mca_bml_base_btl_array_get_size(a);
    for (size_t i = 0; i < n; i++) {
        mca_bml_base_btl_t *b = mca_bml_base_btl_array_get_index(a, i);
        if (b && b->btl && b->btl->btl_component)
            cJSON_AddItemToArray(
                arr, cJSON_CreateString(b->btl->btl_component->btl_version.mca_component_name));
    }
}

cJSON *fs_ompi_peer_btls(int peer)
{
    ompi_proc_t *p = ompi_comm_peer_lookup(MPI_COMM_WORLD, peer);
    mca_bml_base_endpoint_t *bep =
        p ? (mca_bml_base_endpoint_t *)p->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_BML] : NULL;
    if (!bep)
        return NULL;
    cJSON *btl = cJSON_CreateObject();
    btl_names(&bep->btl_eager, cJSON_AddArrayToObject(btl, "eager"));
    btl_names(&bep->btl_send, cJSON_AddArrayToObject(btl, "send"));
    btl_names(&bep->btl_rdma, cJSON_AddArrayToObject(btl, "rdma"));
    return btl;
}

void *fs_ompi_peer_pml_endpoint(int peer)
{
    ompi_proc_t *p = ompi_comm_peer_lookup(MPI_COMM_WORLD, peer);
    return p ? p->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_PML] : NULL;
}

int fs_ompi_var_source(const char *name, char *out, size_t len)
{
    int vari = -1;
    const mca_base_var_t *var = NULL;
    out[0] = '\0';
    if (mca_base_var_find_by_name(name, &vari) != OPAL_SUCCESS || vari < 0 ||
        mca_base_var_get(vari, &var) != OPAL_SUCCESS || !var)
        return -1;
    switch (var->mbv_source) {
    case MCA_BASE_VAR_SOURCE_DEFAULT:
        snprintf(out, len, "default");
        break;
    case MCA_BASE_VAR_SOURCE_COMMAND_LINE:
        snprintf(out, len, "command line (mpirun --mca %s)", name);
        break;
    case MCA_BASE_VAR_SOURCE_ENV:
        snprintf(out, len, "environment OMPI_MCA_%s", name);
        break;
    case MCA_BASE_VAR_SOURCE_FILE: {
        const mca_base_var_file_value_t *fv = var->mbv_file_value;
        if (fv && fv->mbvfv_file)
            snprintf(out, len, "%s:%d", fv->mbvfv_file, fv->mbvfv_lineno);
        else
            snprintf(out, len, "%s", var->mbv_source_file ? var->mbv_source_file : "a parameter file");
        break;
    }
    default:
        snprintf(out, len, "set by Open MPI at run time");
        break;
    }
    return 0;
}

void fs_ompi_progress(MPI_Request req, int passes)
{
    for (int pass = 0; pass < passes && req != MPI_REQUEST_NULL && !REQUEST_COMPLETE(req); pass++)
        opal_progress();
}
#else
int fs_ompi_var_source(const char *name, char *out, size_t len)
{
    (void)name;
    if (len)
        out[0] = '\0';
    return -1;
}
const char *fs_ompi_pml(void) { return NULL; }
const char *fs_ompi_mtl(void) { return NULL; }
cJSON *fs_ompi_peer_btls(int peer)
{
    (void)peer;
    return NULL;
}
void *fs_ompi_peer_pml_endpoint(int peer)
{
    (void)peer;
    return NULL;
}
void fs_ompi_progress(MPI_Request req, int passes)
{
    (void)req;
    (void)passes;
}
#endif
