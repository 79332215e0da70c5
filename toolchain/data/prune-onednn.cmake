# vllm-cpu-builder: leave out the oneDNN units a target's kernel libraries never link.
#
# Passed by the plan as -DCMAKE_PROJECT_oneDNN_INCLUDE=<this file> -DVCB_ONEDNN_SKIP=<list>, so
# CMake includes it right after oneDNN's project() call, before oneDNN defines its targets. The
# list (recipes/onednn-prune/, made by `python -m toolchain learn-prune`) has one
# "TARGET SOURCE" line per unit, SOURCE relative to the target's source folder. At the end of
# oneDNN's top folder, when every target exists, those sources are taken out of their targets.
# A listed unit that this oneDNN does not have stops the configure: the list was made for another
# oneDNN, and building with it could drop the wrong units.

file(STRINGS "${VCB_ONEDNN_SKIP}" _vcb_onednn_skip REGEX "^[^#]")

include("${CMAKE_CURRENT_LIST_DIR}/targets-below.cmake")

function(_vcb_prune_onednn)
  _vcb_targets_below("${CMAKE_CURRENT_SOURCE_DIR}" targets)
  set(left_out)
  foreach(target IN LISTS targets)
    get_target_property(sources ${target} SOURCES)
    get_target_property(folder ${target} SOURCE_DIR)
    if(NOT sources)
      continue()
    endif()
    set(kept)
    foreach(source IN LISTS sources)
      cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY "${folder}" OUTPUT_VARIABLE absolute)
      cmake_path(RELATIVE_PATH absolute BASE_DIRECTORY "${folder}" OUTPUT_VARIABLE relative)
      if("${target} ${relative}" IN_LIST _vcb_onednn_skip)
        list(APPEND left_out "${target} ${relative}")
      else()
        list(APPEND kept "${source}")
      endif()
    endforeach()
    set_property(TARGET ${target} PROPERTY SOURCES "${kept}")
  endforeach()
  set(missing ${_vcb_onednn_skip})
  list(REMOVE_ITEM missing ${left_out})
  if(missing)
    list(GET missing 0 first)
    list(LENGTH missing count)
    message(FATAL_ERROR "vllm-cpu-builder: ${VCB_ONEDNN_SKIP} lists ${count} unit(s) this oneDNN "
                        "does not build, e.g. '${first}': the list was made for another oneDNN")
  endif()
  list(LENGTH left_out count)
  message(STATUS "vllm-cpu-builder: left out ${count} oneDNN units that the kernels never link")
endfunction()

cmake_language(DEFER CALL _vcb_prune_onednn)
