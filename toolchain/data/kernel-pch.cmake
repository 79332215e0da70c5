# vllm-cpu-builder: each of vLLM's kernel libraries compiles torch's headers once, not per unit.
#
# Passed by the plan as -DCMAKE_PROJECT_vllm_extensions_INCLUDE=<this file>
# -DVCB_PCH_TARGETS=_C,_C_AVX2,... (vLLM's top project is vllm_extensions). Parsing
# <torch/all.h> is about 9 s of each kernel unit (docs/benchmarks.md). At the end of the top
# folder, when the targets exist, each listed library precompiles that header with its own flags
# (a tier's ISA included) and its units include the result first. A listed name that is no
# library compiled here (not defined, an alias, imported or an interface) is passed over; the
# status line names the libraries that do precompile it, and build-wheel reads that line.
include_guard(GLOBAL)

function(_vcb_precompile_torch)
  string(REPLACE "," ";" listed "${VCB_PCH_TARGETS}")
  set(precompiled)
  foreach(target IN LISTS listed)
    if(NOT TARGET ${target})
      continue()
    endif()
    get_target_property(type ${target} TYPE)
    get_target_property(aliased ${target} ALIASED_TARGET)
    get_target_property(imported ${target} IMPORTED)
    if(aliased OR imported OR type STREQUAL "INTERFACE_LIBRARY")
      continue()
    endif()
    target_precompile_headers(${target} PRIVATE <torch/all.h>)
    list(APPEND precompiled ${target})
  endforeach()
  string(REPLACE ";" "," precompiled "${precompiled}")
  message(STATUS "vllm-cpu-builder: <torch/all.h> precompiled for ${precompiled}")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _vcb_precompile_torch)
