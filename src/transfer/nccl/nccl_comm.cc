// One NCCL communicator per process, bootstrapped by the launcher's
// conventions (LaunchInfo). NCCL's environment is read by NCCL itself and
// never changed here: the multicast (NVLS) switches stay as the machine sets them.
#include <cuda_runtime.h>
#include <nccl.h>

#include "cuda/common/cuda_status.hpp"
#include "mla/transfer.hpp"
#include "transfer/nccl/nccl_status.hpp"

namespace mla {

Status nccl_comm_init(const LaunchInfo& who, const std::string& id_file, void** comm) {
  if (comm == nullptr) return detail::error(Errc::invalid_value, "comm: output pointer is null");
  int devices = 0;
  MLA_CUDA_TRY(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (who.local_rank < 0 || who.local_rank >= devices)
    return detail::error(Errc::invalid_device, "LOCAL_RANK = {} but this host has {} GPUs",
                         who.local_rank, devices);
  MLA_CUDA_TRY(cudaSetDevice(who.local_rank), "cudaSetDevice(LOCAL_RANK)");
  ncclUniqueId id{};
  if (who.rank == 0) MLA_NCCL_TRY(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (id_file.empty())
    MLA_TRY(exchange_bytes_tcp(who, &id, sizeof id));
  else
    MLA_TRY(exchange_bytes_file(who, id_file, &id, sizeof id));
  ncclComm_t c = nullptr;
  MLA_NCCL_TRY(ncclCommInitRank(&c, who.world_size, id, who.rank), "ncclCommInitRank");
  *comm = c;
  return Status::Ok();
}

Status nccl_comm_destroy(void* comm) {
  if (comm == nullptr) return Status::Ok();
  return transfer::nccl_status(ncclCommDestroy(static_cast<ncclComm_t>(comm)), "ncclCommDestroy");
}

}  // namespace mla
