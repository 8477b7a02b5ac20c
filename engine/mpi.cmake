# SPDX-License-Identifier: BSD-3-Clause
# MPI builds of the engine: fabscope-engine-mpi-openmpi and fabscope-engine-mpi-mpich, each built
# with its MPI's own compiler-wrapper flags (two MPIs in one CMake project cannot go through
# find_package(MPI)). Included from CMakeLists.txt after the fscore target is defined:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/mpi.cmake)
# Each flavour is built only where its wrapper (mpicc.openmpi / mpicc.mpich) exists.

# Splits a wrapper's flags into include dirs, link dirs, libraries and other options.
function(fs_mpi_flags wrapper compile_args link_args prefix)
  execute_process(COMMAND ${wrapper} ${compile_args} OUTPUT_VARIABLE cflags
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc1 ERROR_QUIET)
  execute_process(COMMAND ${wrapper} ${link_args} OUTPUT_VARIABLE lflags
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc2 ERROR_QUIET)
  if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0)
    set(${prefix}_OK FALSE PARENT_SCOPE)
    return()
  endif()
  separate_arguments(cl UNIX_COMMAND "${cflags} ${lflags}")
  set(incs "")
  set(ldirs "")
  set(libs "")
  set(lopts "")
  foreach(f IN LISTS cl)
    if(f MATCHES "^-I(.+)")
      list(APPEND incs "${CMAKE_MATCH_1}")
    elseif(f MATCHES "^-L(.+)")
      list(APPEND ldirs "${CMAKE_MATCH_1}")
    elseif(f MATCHES "^-l(.+)")
      list(APPEND libs "${CMAKE_MATCH_1}")
    elseif(f MATCHES "^-Wl," OR f STREQUAL "-pthread")
      list(APPEND lopts "${f}")
    endif()
    # The compiler name itself (mpich's -show starts with "gcc") and other flags are dropped.
  endforeach()
  list(REMOVE_DUPLICATES incs)
  list(REMOVE_DUPLICATES libs)
  set(${prefix}_OK TRUE PARENT_SCOPE)
  set(${prefix}_INCS "${incs}" PARENT_SCOPE)
  set(${prefix}_LDIRS "${ldirs}" PARENT_SCOPE)
  set(${prefix}_LIBS "${libs}" PARENT_SCOPE)
  set(${prefix}_LOPTS "${lopts}" PARENT_SCOPE)
endfunction()

set(FS_MPI_FLAVOURS "")
find_program(FS_MPICC_OPENMPI mpicc.openmpi)
find_program(FS_MPICC_MPICH mpicc.mpich)
if(FS_MPICC_OPENMPI)
  fs_mpi_flags(${FS_MPICC_OPENMPI} "-showme:compile" "-showme:link" OMPI)
  if(OMPI_OK)
    # The mpi backend reads Open MPI's MCA globals (selected pml/mtl, the peer's btls) from its
    # installed internal headers, which live in include/openmpi and need libopen-pal: only
    # src/backends/mpi_ompi_private.c includes them, and it says which Open MPI versions it knows.
    set(extra "")
    foreach(d IN LISTS OMPI_INCS)
      if(EXISTS "${d}/openmpi/ompi/mca/pml/base/base.h")
        list(APPEND extra "${d}/openmpi")
      endif()
    endforeach()
    list(APPEND OMPI_LIBS open-pal)
    list(APPEND FS_MPI_FLAVOURS openmpi)
    set(FS_MPI_openmpi_INCS "${OMPI_INCS}")
    set(FS_MPI_openmpi_LDIRS "${OMPI_LDIRS}")
    set(FS_MPI_openmpi_LIBS "${OMPI_LIBS}")
    set(FS_MPI_openmpi_LOPTS "${OMPI_LOPTS}")
    set(FS_MPI_openmpi_SRCS src/backends/mpi_ompi_private.c)
    # Only that file sees the internal headers (as system headers: not ours to keep -Wextra clean).
    set(private_opts "")
    foreach(d IN LISTS extra)
      list(APPEND private_opts "-isystem" "${d}")
    endforeach()
    set_source_files_properties(src/backends/mpi_ompi_private.c PROPERTIES
                                COMPILE_OPTIONS "${private_opts}")
  endif()
endif()
if(FS_MPICC_MPICH)
  fs_mpi_flags(${FS_MPICC_MPICH} "-compile-info" "-link-info" MPICH)
  if(MPICH_OK)
    list(APPEND FS_MPI_FLAVOURS mpich)
    set(FS_MPI_mpich_INCS "${MPICH_INCS}")
    set(FS_MPI_mpich_LDIRS "${MPICH_LDIRS}")
    set(FS_MPI_mpich_LIBS "${MPICH_LIBS}")
    set(FS_MPI_mpich_LOPTS "${MPICH_LOPTS}")
  endif()
endif()

# Whatever fscore is made of (core + backends), compiled again per flavour: registry.c must
# list the mpi backend (FS_HAVE_MPI), and that must not leak into the plain engine. Sources that
# need no FS_HAVE_MPI (fsproto, when the project has it) are linked as they are.
get_target_property(FS_MPI_CORE_SOURCES fscore SOURCES)
foreach(flavour IN LISTS FS_MPI_FLAVOURS)
  set(t fabscope-engine-mpi-${flavour})
  add_executable(${t} ${FS_MPI_CORE_SOURCES} src/backends/mpi.c src/backends/mpi_coll.c
                 ${FS_MPI_${flavour}_SRCS} src/mpi/main_mpi.c)
  target_include_directories(${t} PRIVATE src/core ${BACKEND_INCLUDES})
  # MPI's headers are not ours to keep -Wextra clean.
  target_include_directories(${t} SYSTEM PRIVATE ${FS_MPI_${flavour}_INCS})
  target_compile_definitions(${t} PRIVATE ${BACKEND_DEFS} FS_HAVE_MPI)
  target_link_directories(${t} PRIVATE ${FS_MPI_${flavour}_LDIRS})
  target_link_options(${t} PRIVATE ${FS_MPI_${flavour}_LOPTS})
  target_link_libraries(${t} PRIVATE $<TARGET_NAME_IF_EXISTS:fsproto> ${FS_MPI_${flavour}_LIBS}
                        PkgConfig::CJSON ${BACKEND_LIBS} m)
  install(TARGETS ${t} RUNTIME DESTINATION ${FS_BINDIR})
endforeach()
if(FS_MPI_FLAVOURS)
  message(STATUS "fabscope: MPI engines: ${FS_MPI_FLAVOURS}")
else()
  message(STATUS "fabscope: no mpicc.openmpi / mpicc.mpich: MPI engines not built "
                 "(apt-get install libopenmpi-dev and/or libmpich-dev)")
endif()
