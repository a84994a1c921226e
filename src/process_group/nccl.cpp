// The NCCL backend: CUDA tensors on this rank's GPU, in CUDA builds of LibTorch only.
#include "ddp/error.h"

#include <c10/util/StringUtil.h>

#include "process_group/backends.h"

namespace ddp::backends {

Connected connect_nccl(const ConnectArgs& args) {
#if defined(USE_C10D_NCCL)
  const ProcessGroupOptions& o = args.options;
  if (!o.device().is_cuda()) {
    throw InvalidArgument(c10::str(
        "backend nccl moves GPU tensors only, but this rank's device (ProcessGroupOptions::device) "
        "is ",
        o.device().str(), "; give it a CUDA device, or use backend gloo"));
  }
  compat::set_current_cuda_device(o.device());  // NCCL's communicator and barrier use it
  args.rendezvous();
  return compat::make_nccl(args.store, args.rank, args.size, o.timeout());
#else
  (void)args;
  throw InvalidArgument("backend nccl: this LibTorch was built without CUDA/NCCL; use gloo");
#endif
}

}  // namespace ddp::backends
