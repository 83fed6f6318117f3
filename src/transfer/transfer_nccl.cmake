# libmla_transfer_nccl: the NCCL executor of mla/transfer.hpp, and the
# disaggregation example over it. Optional: built when CUDA and NCCL are found
# (NCCL ships with the CUDA toolkit here); CI without NCCL builds everything else.
if(MLA_HAS_CUDA)
  find_path(MLA_NCCL_INCLUDE_DIR nccl.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)
  find_library(MLA_NCCL_LIBRARY nccl
               HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                     $ENV{NCCL_HOME}/lib)
  if(MLA_NCCL_INCLUDE_DIR AND MLA_NCCL_LIBRARY)
    message(STATUS "mla: NCCL found (${MLA_NCCL_LIBRARY}): building mla_transfer_nccl")
    # .cc, not .cpp: the core library globs src/transfer/*.cpp recursively.
    file(GLOB MLA_TRANSFER_NCCL_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/transfer/nccl/*.cu
         ${CMAKE_SOURCE_DIR}/src/transfer/nccl/*.cc)
    add_library(mla_transfer_nccl SHARED ${MLA_TRANSFER_NCCL_SOURCES})
    target_include_directories(mla_transfer_nccl PUBLIC ${CMAKE_SOURCE_DIR}/include
                               PRIVATE ${CMAKE_SOURCE_DIR}/src ${MLA_NCCL_INCLUDE_DIR})
    target_compile_options(mla_transfer_nccl PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${MLA_CUDA_FLAGS}>
                           $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
    target_link_libraries(mla_transfer_nccl PUBLIC mla CUDA::cudart PRIVATE ${MLA_NCCL_LIBRARY})
    if(MLA_BUILD_TOOLS)  # the examples parse their options with CLI11
      include(${CMAKE_SOURCE_DIR}/examples/disagg/disagg.cmake OPTIONAL)
      include(${CMAKE_SOURCE_DIR}/examples/attn_split/attn_split.cmake OPTIONAL)
    endif()
  else()
    message(STATUS "mla: NCCL not found: mla_transfer_nccl, examples/disagg and examples/attn_split are not built")
  endif()
endif()
