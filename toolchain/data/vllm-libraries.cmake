# vllm-cpu-builder: how vLLM's own libraries compile: what of torch's headers, at which level.
#
# Passed by the plan as -DCMAKE_PROJECT_vllm_extensions_INCLUDE=<this file> (vLLM's top project
# is vllm_extensions), with any of:
# -DVCB_OPT_LEVEL=-O2: GCC's optimisation level of the libraries of the top folder, whatever the
#   build type: it takes the place of the -O in CMAKE_<C|CXX>_FLAGS_<build type> of that folder
#   only. oneDNN's libraries, in a subfolder that vLLM's CMake configures as Release, keep theirs.
# -DVCB_TORCH_LEAN=<folder>: the folder holding the toolkit's lean <torch/all.h> (the compile
#   step's copy of toolchain/data/torch-lean in the build folder) goes first on the include path
#   of every library of the top folder, so its units compile ATen and torch's library, utils and
#   version headers, not torch's whole C++ frontend. oneDNN's libraries, in a subfolder, do not
#   get it.
# -DVCB_PCH_TARGETS=_C,_C_AVX2,...: each listed library compiles <torch/all.h> once, not in each
#   of its units: precompiled with the library's own flags (a tier's ISA included), included
#   first by its units. A listed name that is no library compiled here (not defined, an alias,
#   imported or an interface) is passed over.
# All act at the end of the top folder, when the libraries exist (a folder's flags are read when
# the build files are written, after it). A status line says what each did, and build-wheel
# reads them (docs/benchmarks.md has the figures).
include_guard(GLOBAL)

function(_vcb_compiled target out)
  set(${out} FALSE PARENT_SCOPE)
  if(NOT TARGET ${target})
    return()
  endif()
  get_target_property(type ${target} TYPE)
  get_target_property(aliased ${target} ALIASED_TARGET)
  get_target_property(imported ${target} IMPORTED)
  if(aliased OR imported OR NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
    return()
  endif()
  set(${out} TRUE PARENT_SCOPE)
endfunction()

function(_vcb_opt_level)
  if(NOT VCB_OPT_LEVEL OR NOT CMAKE_BUILD_TYPE)  # no build type: no flags to change (setup.py
    return()                                      # always gives one)
  endif()
  string(TOUPPER "${CMAKE_BUILD_TYPE}" config)
  foreach(lang C CXX)
    set(name CMAKE_${lang}_FLAGS_${config})
    # CMake's own -O of the build type, or none (a type without flags of its own)
    string(REGEX REPLACE "(^| )-O[0-9sgz]?( |$)" " " flags " ${${name}} ")
    string(REGEX REPLACE " +" " " flags "${VCB_OPT_LEVEL} ${flags}")
    string(STRIP "${flags}" flags)
    set(${name} "${flags}" PARENT_SCOPE)
  endforeach()
  message(STATUS "vllm-cpu-builder: ${VCB_OPT_LEVEL} for vLLM's libraries: "
    "CMAKE_CXX_FLAGS_${config} ${flags}")
endfunction()

function(_vcb_torch_headers)
  if(VCB_TORCH_LEAN)
    get_property(targets DIRECTORY "${CMAKE_SOURCE_DIR}" PROPERTY BUILDSYSTEM_TARGETS)
    set(lean)
    foreach(target IN LISTS targets)
      _vcb_compiled(${target} compiled)
      if(compiled)
        target_include_directories(${target} BEFORE PRIVATE "${VCB_TORCH_LEAN}")
        list(APPEND lean ${target})
      endif()
    endforeach()
    string(REPLACE ";" "," lean "${lean}")
    message(STATUS "vllm-cpu-builder: lean <torch/all.h> for ${lean}")
  endif()
  if(VCB_PCH_TARGETS)
    string(REPLACE "," ";" listed "${VCB_PCH_TARGETS}")
    set(precompiled)
    foreach(target IN LISTS listed)
      _vcb_compiled(${target} compiled)
      if(compiled)
        target_precompile_headers(${target} PRIVATE <torch/all.h>)
        list(APPEND precompiled ${target})
      endif()
    endforeach()
    string(REPLACE ";" "," precompiled "${precompiled}")
    message(STATUS "vllm-cpu-builder: <torch/all.h> precompiled for ${precompiled}")
  endif()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _vcb_opt_level)
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _vcb_torch_headers)
