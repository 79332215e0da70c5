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
#   imported or an interface) is passed over. A unit that does something of its own before it
#   includes torch's headers (a #define, #undef or #pragma, in its text or in a header of its
#   own it includes first), or that never includes them, keeps compiling them itself: torch's
#   headers forced first would see what it does differently (0.32's sgl-kernels/moe.cpp defines
#   CPU_CAPABILITY_AVX512, which torch's Half.h reads), and a unit without them would only pay
#   for loading the precompiled one. A status line names each such unit and why.
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

# What `file` does, following the headers of its own it includes, before it first includes one of
# torch's headers (<torch/...>, <ATen/...> or <c10/...>): "torch" when nothing but includes,
# conditionals, #pragma once and include guards come first; else the first #define, #undef or
# #pragma, or the quoted include not found (in the file's folder or `dirs`); "" at the end of the
# file without either. A header already read (recorded in the global property _VCB_SEEN) adds
# nothing.
function(_vcb_before_torch file dirs out)
  get_property(seen GLOBAL PROPERTY _VCB_SEEN)
  set(${out} "" PARENT_SCOPE)
  if(file IN_LIST seen)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY _VCB_SEEN "${file}")
  file(STRINGS "${file}" lines REGEX "^[ \t]*#")
  get_filename_component(here "${file}" DIRECTORY)
  file(RELATIVE_PATH shown "${CMAKE_SOURCE_DIR}" "${file}")
  set(guard)
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*<(torch|ATen|c10)/")
      set(${out} torch PARENT_SCOPE)
      return()
    elseif(line MATCHES "^[ \t]*#[ \t]*include[ \t]*([<\"])([^>\"]+)[>\"]")
      set(quoted "${CMAKE_MATCH_1}")
      set(name "${CMAKE_MATCH_2}")
      set(found)
      if(quoted STREQUAL "\"")
        set(look "${here}" ${dirs})
      else()
        set(look ${dirs})  # a system header (<omp.h>) is not the unit's own
      endif()
      foreach(dir IN LISTS look)
        if(EXISTS "${dir}/${name}" AND NOT IS_DIRECTORY "${dir}/${name}")
          get_filename_component(found "${dir}/${name}" REALPATH)
          break()
        endif()
      endforeach()
      if(found)
        _vcb_before_torch("${found}" "${dirs}" inner)
        if(inner)
          set(${out} "${inner}" PARENT_SCOPE)
          return()
        endif()
      elseif(quoted STREQUAL "\"")
        set(${out} "#include \"${name}\" (${shown}), not found" PARENT_SCOPE)
        return()
      endif()
    elseif(line MATCHES "^[ \t]*#[ \t]*ifndef[ \t]+([A-Za-z0-9_]+)")
      set(guard "${CMAKE_MATCH_1}")
      continue()
    elseif(line MATCHES "^[ \t]*#[ \t]*define[ \t]+([A-Za-z0-9_]+)" AND CMAKE_MATCH_1 STREQUAL guard)
      # an include guard
    elseif(line MATCHES "^[ \t]*#[ \t]*(define|undef|pragma)"
           AND NOT line MATCHES "^[ \t]*#[ \t]*pragma[ \t]+once")
      string(STRIP "${line}" line)
      set(${out} "${line} (${shown})" PARENT_SCOPE)
      return()
    endif()
    set(guard)
  endforeach()
endfunction()

# The units of `target` that keep compiling torch's headers themselves (_vcb_before_torch), with
# SKIP_PRECOMPILE_HEADERS set, each named in a status line.
function(_vcb_pch_exceptions target)
  get_target_property(sources ${target} SOURCES)
  get_target_property(folder ${target} SOURCE_DIR)
  get_target_property(listed ${target} INCLUDE_DIRECTORIES)
  set(dirs)
  foreach(dir IN LISTS listed)
    if(dir AND NOT dir MATCHES "\\$<")  # a generator expression is not a folder yet
      list(APPEND dirs "${dir}")
    endif()
  endforeach()
  foreach(source IN LISTS sources)
    if(source MATCHES "\\$<" OR NOT source MATCHES "\\.(cpp|cc|cxx|C)$")
      continue()
    endif()
    get_filename_component(path "${source}" ABSOLUTE BASE_DIR "${folder}")
    set_property(GLOBAL PROPERTY _VCB_SEEN "")
    _vcb_before_torch("${path}" "${dirs}" why)
    if(why STREQUAL "torch")
      continue()
    elseif(why STREQUAL "")
      set(why "it does not include torch's headers")
    endif()
    set_source_files_properties("${path}" TARGET_DIRECTORY ${target}
      PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    file(RELATIVE_PATH shown "${CMAKE_SOURCE_DIR}" "${path}")
    message(STATUS "vllm-cpu-builder: ${target}'s ${shown} compiles torch's headers itself: ${why}")
  endforeach()
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
        _vcb_pch_exceptions(${target})
        list(APPEND precompiled ${target})
      endif()
    endforeach()
    string(REPLACE ";" "," precompiled "${precompiled}")
    message(STATUS "vllm-cpu-builder: <torch/all.h> precompiled for ${precompiled}")
  endif()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _vcb_opt_level)
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _vcb_torch_headers)
