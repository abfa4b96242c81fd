// The MPI transport: the ranks of an `mpirun` job as a Comm (docs/distributed.md). Built when
// CMake finds MPI (Debian libopenmpi-dev; CTRBOX_HAVE_MPI); without it a job is one rank.
#ifndef CTRBOX_DIST_MPI_COMM_H_
#define CTRBOX_DIST_MPI_COMM_H_

#include <memory>

#include "dist/comm.h"
#include "util/status.h"

namespace ctrbox {

// True when this process was started by mpirun
// (OpenMPI sets OMPI_COMM_WORLD_SIZE; PMIx launchers PMIX_RANK).
bool LaunchedByMpirun();

// Whether this build has the MPI transport.
bool HaveMpi();

// Initialises MPI (MPI_Init_thread; calls from one thread at a time) and returns
// MPI_COMM_WORLD as a Comm; MPI is finalised when it is destroyed. Its exchanges are
// non-blocking collectives polled until done, or until timeout_seconds pass without the other
// ranks (then NoAnswer). Fails without the MPI transport, or when MPI is already initialised.
StatusOr<std::unique_ptr<Comm>> OpenMpiWorld(double timeout_seconds = 600);

}  // namespace ctrbox

#endif  // CTRBOX_DIST_MPI_COMM_H_
