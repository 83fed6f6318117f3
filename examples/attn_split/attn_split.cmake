# mla_attn_split: head split vs batch split of decode attention, one process
# per GPU (included by src/transfer/transfer_nccl.cmake when NCCL is found; it
# compiles on CI, runs on a machine with 2 or more GPUs: docs/multi-gpu.md).
add_executable(mla_attn_split ${CMAKE_SOURCE_DIR}/examples/attn_split/attn_split.cpp)
set_target_properties(mla_attn_split PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
# Public headers only (include/, through the mla target), plus examples/common.
target_include_directories(mla_attn_split PRIVATE ${CMAKE_SOURCE_DIR} ${MLA_NCCL_INCLUDE_DIR})
target_compile_options(mla_attn_split PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_link_libraries(mla_attn_split PRIVATE mla_transfer_nccl mla CUDA::cudart ${MLA_NCCL_LIBRARY}
                                             CLI11::CLI11 nlohmann_json::nlohmann_json fmt::fmt)
