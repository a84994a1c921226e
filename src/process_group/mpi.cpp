// The MPI backend, in MPI builds of LibTorch only: MPI decides rank and size itself (mpirun).
#include "ddp/error.h"
#include "process_group/backends.h"

namespace ddp::backends {

Connected connect_mpi(const ConnectArgs& args) {
#if defined(USE_C10D_MPI)
  args.rendezvous();
  return compat::make_mpi();
#else
  (void)args;
  throw InvalidArgument("backend mpi: this LibTorch was built without MPI; use gloo");
#endif
}

}  // namespace ddp::backends
